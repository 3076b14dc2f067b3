"""Tests judged by the real kube-apiserver + etcd of the test suite (tests/controlplane)."""
