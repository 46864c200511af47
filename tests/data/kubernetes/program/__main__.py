"""Test stand-in for the Kubernetes wiring of the real __main__.py, run by components.synth.synthesize.

tests/test_kubernetes.py uses the real project as soon as StackConfig has its `kubernetes` field;
this program (and that fallback) can then be deleted.
"""
from types import SimpleNamespace

import pulumi

from components.config.kubernetes import KubernetesConfig, problems
from components.kubernetes import build_kubernetes

config = pulumi.Config("rocm-stack")
environment = config.require("environment")
kubernetes = KubernetesConfig.model_validate(config.require_object("kubernetes"))
found = list(problems(SimpleNamespace(environment=environment, kubernetes=kubernetes)))
if found:
    raise pulumi.RunError("\n".join(f"rocm-stack:{path}: {message}" for path, message in found))
layer = build_kubernetes(kubernetes, environment)
pulumi.export("gpuResourceName", layer.gpu_resource_name)
pulumi.export("kubernetesNamespaces", sorted(layer.namespaces))
