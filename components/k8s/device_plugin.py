"""The standalone ROCm/k8s-device-plugin and its node labeller, for clusters without the GPU Operator.

Objects follow upstream's k8s-ds-amdgpu-dp.yaml and k8s-ds-amdgpu-labeller.yaml field for field; the
differences are pinned images (upstream says `latest`), the configurable namespace/node selector, and no
`metadata.namespace` on the cluster-scoped ClusterRoleBinding (upstream sets one; the API ignores it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.apps import v1 as apps_v1
from pulumi_kubernetes.core import v1 as core_v1
from pulumi_kubernetes.meta import v1 as meta_v1
from pulumi_kubernetes.rbac import v1 as rbac_v1


from schema.kubernetes import DEVICE_PLUGIN_DEFAULT_NAMING, NodeLabellerConfig, StandaloneDevicePluginConfig
from components import supply
from .tolerations import toleration_args

# Upstream's object names, so that a kubectl-applied install can be taken over with `pulumi import` (docs/kubernetes.md):
# the provider does not adopt it by itself, its create answers AlreadyExists ("When a resource already exists in the
# cluster, the API server now returns an AlreadyExists error instead of silently updating the existing object",
# pulumi-kubernetes CHANGELOG 4.29.0, #2926; the stack pins the SDK 4.34.2).
DEVICE_PLUGIN_DAEMONSET = "amdgpu-device-plugin-daemonset"
LABELLER_DAEMONSET = "amdgpu-labeller-daemonset"
LABELLER_SERVICE_ACCOUNT = "node-labeller-sa"
LABELLER_CLUSTER_ROLE = "cr-node-labeller"
LABELLER_CLUSTER_ROLE_BINDING = "labeller"
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
# The image's own command line: a CMD, no ENTRYPOINT (ROCm/k8s-device-plugin Dockerfile L33 @ v1.31.0.9). A flag
# needs the whole line as the container's `command` ("The command and arguments that you define in the
# configuration file override the default command and arguments provided by the container image",
# kubernetes.io/docs/tasks/inject-data-application/define-command-argument-container/).
DEVICE_PLUGIN_COMMAND = ("./k8s-device-plugin", "-logtostderr=true", "-stderrthreshold=INFO", "-v=5")


def device_plugin_command(config: StandaloneDevicePluginConfig) -> list[str] | None:
    """The container's command: the image's own unless the naming strategy differs from the plugin's default."""
    if config.resource_naming_strategy == DEVICE_PLUGIN_DEFAULT_NAMING:
        return None
    return [*DEVICE_PLUGIN_COMMAND, f"-resource_naming_strategy={config.resource_naming_strategy}"]


_CRITICAL_ADDONS_TOLERATION = core_v1.TolerationArgs(key="CriticalAddonsOnly", operator="Exists")
# Privileged for /dev and /sys, yet no capabilities (upstream's choice).
_PRIVILEGED_NO_CAPS = core_v1.SecurityContextArgs(privileged=True, capabilities=core_v1.CapabilitiesArgs(drop=["ALL"]))


@dataclass(frozen=True)
class DevicePluginArgs:
    config: StandaloneDevicePluginConfig
    provider: Provider
    namespace: pulumi.Input[str]
    """The namespace's name output when the stack owns it, else the plain name (kube-system)."""
    tolerations: Sequence[Mapping[str, str]] = ()
    """Tolerations of the GPU nodes' taints (KubernetesConfig.gpu_tolerations()), after upstream's own."""


def _host_path_volume(name: str, path: str, type_: str | None = None) -> core_v1.VolumeArgs:
    return core_v1.VolumeArgs(name=name, host_path=core_v1.HostPathVolumeSourceArgs(path=path, type=type_))


class DevicePlugin(pulumi.ComponentResource):
    daemon_set: apps_v1.DaemonSet
    labeller: apps_v1.DaemonSet | None

    def __init__(self, name: str, args: DevicePluginArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:DevicePlugin", name, None, opts)
        config = args.config
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        # Upstream tolerates CriticalAddonsOnly only: a tainted GPU node would never run the plugin.
        tolerations = [_CRITICAL_ADDONS_TOLERATION, *toleration_args(args.tolerations)]
        labels = {"name": "amdgpu-dp-ds"}
        self.daemon_set = apps_v1.DaemonSet(
            f"{name}-daemonset",
            metadata=meta_v1.ObjectMetaArgs(name=DEVICE_PLUGIN_DAEMONSET, namespace=args.namespace),
            spec=apps_v1.DaemonSetSpecArgs(
                selector=meta_v1.LabelSelectorArgs(match_labels=labels),
                template=core_v1.PodTemplateSpecArgs(
                    metadata=meta_v1.ObjectMetaArgs(labels=labels),
                    spec=core_v1.PodSpecArgs(
                        restart_policy="Always",
                        node_selector=dict(config.node_selector),
                        priority_class_name="system-node-critical",
                        tolerations=tolerations,
                        containers=[
                            core_v1.ContainerArgs(
                                image=supply.image(config.image),
                                name="amdgpu-dp-cntr",
                                command=device_plugin_command(config),
                                security_context=_PRIVILEGED_NO_CAPS,
                                volume_mounts=[
                                    core_v1.VolumeMountArgs(name="dp", mount_path=KUBELET_DEVICE_PLUGINS),
                                    core_v1.VolumeMountArgs(name="sys", mount_path="/sys"),
                                ],
                            )
                        ],
                        volumes=[_host_path_volume("dp", KUBELET_DEVICE_PLUGINS), _host_path_volume("sys", "/sys")],
                    ),
                ),
            ),
            opts=child,
        )
        self.labeller = (
            self._labeller(name, config.node_labeller, config.node_selector, args.namespace, tolerations, child)
            if config.node_labeller.enable
            else None
        )
        self.register_outputs(
            {
                "daemonSet": self.daemon_set.metadata.name,
                "labeller": self.labeller.metadata.name if self.labeller is not None else None,
            }
        )

    def _labeller(
        self,
        name: str,
        config: NodeLabellerConfig,
        node_selector: dict[str, str],
        namespace: pulumi.Input[str],
        tolerations: list[core_v1.TolerationArgs],
        child: pulumi.ResourceOptions,
    ) -> apps_v1.DaemonSet:
        service_account = core_v1.ServiceAccount(
            f"{name}-labeller-sa",
            metadata=meta_v1.ObjectMetaArgs(name=LABELLER_SERVICE_ACCOUNT, namespace=namespace),
            opts=child,
        )
        role = rbac_v1.ClusterRole(
            f"{name}-labeller-role",
            metadata=meta_v1.ObjectMetaArgs(name=LABELLER_CLUSTER_ROLE),
            # The labeller only reads nodes and writes their labels.
            rules=[
                rbac_v1.PolicyRuleArgs(api_groups=[""], resources=["nodes"], verbs=["watch", "get", "list", "update"])
            ],
            opts=child,
        )
        binding = rbac_v1.ClusterRoleBinding(
            f"{name}-labeller-binding",
            metadata=meta_v1.ObjectMetaArgs(name=LABELLER_CLUSTER_ROLE_BINDING),
            role_ref=rbac_v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role.metadata.name
            ),
            subjects=[
                rbac_v1.SubjectArgs(kind="ServiceAccount", name=service_account.metadata.name, namespace=namespace)
            ],
            opts=child,
        )
        labels = {"name": "amdgpu-lr-ds"}
        return apps_v1.DaemonSet(
            f"{name}-labeller",
            metadata=meta_v1.ObjectMetaArgs(name=LABELLER_DAEMONSET, namespace=namespace),
            spec=apps_v1.DaemonSetSpecArgs(
                selector=meta_v1.LabelSelectorArgs(match_labels=labels),
                template=core_v1.PodTemplateSpecArgs(
                    metadata=meta_v1.ObjectMetaArgs(labels=labels),
                    spec=core_v1.PodSpecArgs(
                        service_account_name=service_account.metadata.name,
                        node_selector=dict(node_selector),
                        priority_class_name="system-node-critical",
                        tolerations=tolerations,
                        containers=[
                            core_v1.ContainerArgs(
                                image=supply.image(config.image),
                                name="amdgpu-lr-cntr",
                                image_pull_policy="Always",
                                working_dir="/root",
                                command=["./k8s-node-labeller"],
                                args=[f"-{label}" for label in config.labels],
                                env=[
                                    core_v1.EnvVarArgs(
                                        name="DS_NODE_NAME",
                                        value_from=core_v1.EnvVarSourceArgs(
                                            field_ref=core_v1.ObjectFieldSelectorArgs(field_path="spec.nodeName")
                                        ),
                                    )
                                ],
                                security_context=_PRIVILEGED_NO_CAPS,
                                volume_mounts=[
                                    core_v1.VolumeMountArgs(name="sys", mount_path="/sys", read_only=True),
                                    core_v1.VolumeMountArgs(name="dev", mount_path="/dev"),
                                ],
                            )
                        ],
                        volumes=[
                            _host_path_volume("sys", "/sys", "Directory"),
                            _host_path_volume("dev", "/dev", "Directory"),
                        ],
                    ),
                ),
            ),
            # The RBAC must exist before the labeller first patches a node.
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[binding])),
        )
