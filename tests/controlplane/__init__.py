"""The test suite's real control plane: kube-apiserver and etcd built from pinned Go modules (hack/controlplane)."""
