"""The Kubernetes provider every GPU-layer object is declared through, and the namespaces the stack owns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.core import v1 as core_v1
from pulumi_kubernetes.meta import v1 as meta_v1

from schema.kubernetes import KubernetesConfig


# Pod Security Admission's namespace labels (https://kubernetes.io/docs/concepts/security/pod-security-admission/).
PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
PSA_ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"


@dataclass(frozen=True)
class ClusterArgs:
    config: KubernetesConfig
    environment: str
    pod_security: Mapping[str, str] = field(default_factory=dict)
    """Owned namespace -> the Pod Security level it enforces (schema.derived.namespace_pod_security); others
    baseline."""


class Cluster(pulumi.ComponentResource):
    """`namespaces` maps each owned namespace's name to its resource; depend on it (or use its
    `metadata.name` output) so objects are created after, and deleted before, their namespace."""

    provider: Provider
    namespaces: dict[str, core_v1.Namespace]

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:Cluster", name, None, opts)
        provider = args.config.provider
        # Both None: the provider falls back to $KUBECONFIG / ~/.kube/config and its current context (dev).
        self.provider = Provider(
            name,
            kubeconfig=provider.kubeconfig,
            context=provider.context,
            # A ConfigMap's data change is then a patch in place rather than a delete and re-create (pulumi-kubernetes
            # provider/pkg/provider/diff.go L32-34; stable since 4.24.0, CHANGELOG): what the controllers watching the
            # fixed-name ones expect (DCM's config, Grafana's dashboard). ConfigMaps declared `immutable` (named
            # after their content) are still replaced ("The `immutable` field is now respected", CHANGELOG 4.18.0).
            # Set explicitly: unset, the SDK would read PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE from the environment.
            enable_config_map_mutable=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Deleting a namespace deletes everything in it: prod refuses to do that without an explicit unprotect.
        owned = pulumi.ResourceOptions(parent=self, provider=self.provider, protect=args.environment == "prod")
        self.namespaces = {
            namespace: core_v1.Namespace(
                f"{name}-{namespace}",
                metadata=meta_v1.ObjectMetaArgs(
                    name=namespace,
                    labels={
                        "app.kubernetes.io/managed-by": "rocm-stack",
                        # The level its pods need, whatever the cluster's default (often baseline, which rejects
                        # the GPU pods' SYS_NICE). A label change is an update in place.
                        PSA_ENFORCE: args.pod_security.get(namespace, "baseline"),
                        PSA_ENFORCE_VERSION: "latest",
                    },
                ),
                opts=owned,
            )
            for namespace in args.config.owned_namespaces()
        }
        self.register_outputs({"namespaces": {n: ns.metadata.name for n, ns in self.namespaces.items()}})

    def namespace_name(self, namespace: str) -> pulumi.Input[str]:
        """Where to put an object: the owned namespace's name output (so the object waits for it), else the
        plain name of a namespace the stack does not own (a built-in one such as kube-system)."""
        owned = self.namespaces.get(namespace)
        return owned.metadata.name if owned is not None else namespace

    def existing_namespace(self, check: str, namespace: str) -> pulumi.Input[str]:
        """A namespace the stack neither creates nor finds built in, read before anything is put in it: a missing one
        fails the read with the engine's "resource '<namespace>' does not exist" (pulumi/pulumi
        pkg/resource/deploy/step.go ReadStep.Apply), printed under the resource name `check`, which says the fix."""
        read = core_v1.Namespace.get(check, namespace, opts=pulumi.ResourceOptions(parent=self, provider=self.provider))
        return read.id.apply(lambda _: namespace)  # the name, carrying the dependency on the read
