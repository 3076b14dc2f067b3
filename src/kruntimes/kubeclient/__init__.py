"""The generic Kubernetes client machinery: it imports nothing of the scheduler."""
