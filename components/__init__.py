"""rocm-stack ComponentResources, one sub-package per type-token module: docker, k8s, monitoring, workloads."""
