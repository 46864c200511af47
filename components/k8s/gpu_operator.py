"""The AMD GPU Operator Helm release and the one DeviceConfig this stack owns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.apiextensions import v1 as apiextensions_v1
from pulumi_kubernetes.core import v1 as core_v1
from pulumi_kubernetes.helm import v3 as helm_v3
from pulumi_kubernetes.meta import v1 as meta_v1

from schema.kubernetes import (
    CONFIG_MANAGER_FILE,
    DEVICE_PLUGIN_DEFAULT_NAMING,
    GPU_OPERATOR_CHART,
    NFD_WORKER_DEFAULT_TOLERATIONS,
    DeviceConfigSettings,
    GpuOperatorConfig,
)
from components import supply
from components.k8s.helm import pinned_release

DEVICE_CONFIG_API_VERSION = "amd.com/v1alpha1"
DEVICE_CONFIG_KIND = "DeviceConfig"
DRIVER_IMAGE_PATH = "spec.driver.image"
# The operator creates the DeviceConfig's ServiceMonitor before the test runner and the Device Config Manager, and
# returns on its error (internal/controllers/device_config_reconciler.go L345-357, L1483-1498 @ v1.5.1): without
# this Prometheus Operator CRD, partitioning never starts.
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
# The deploy-time check reads the CRD; a missing one fails the read with the engine's "resource
# 'servicemonitors.monitoring.coreos.com' does not exist" (pulumi/pulumi pkg/resource/deploy/step.go ReadStep.Apply
# L1366-1368), printed under this resource name, which says the fix.
SERVICE_MONITOR_CRD_CHECK = (
    f"{SERVICE_MONITOR_CRD} (the DeviceConfig's ServiceMonitor needs it: install the Prometheus Operator CRDs, "
    "or set monitoring.kubePrometheusStack.install: true)"
)


def chart_values(config: GpuOperatorConfig, tolerations: list[dict[str, str]]) -> dict[str, Any]:
    """Values of gpu-operator-charts (keys as in its values.yaml); `tolerations`: those of the GPU node taints."""
    nfd = config.node_feature_discovery
    kmm = config.kmm
    return {
        "node-feature-discovery": {
            "enabled": nfd,
            # Helm replaces lists: the chart's own defaults are repeated before ours.
            "worker": {"tolerations": [*NFD_WORKER_DEFAULT_TOLERATIONS, *tolerations]},
        },
        # The rule is a NodeFeatureRule, whose CRD comes with the NFD subchart (templates/gpu-nfd-default-rule.yaml).
        "installdefaultNFDRule": nfd if config.install_default_nfd_rule is None else config.install_default_nfd_rule,
        # AMD's install doc pairs `kmm.enabled=false` with `kmm.watch=false` unless the cluster has its own KMM.
        "kmm": {"enabled": kmm, "watch": kmm if config.kmm_watch is None else config.kmm_watch},
        "remediation": config.remediation.chart_values(),
        # The chart's default DeviceConfig would compete with the stack's own: never install or patch it.
        "crds": {"defaultCR": {"install": False, "upgrade": False}},
    }


def asks_for_service_monitor(spec: dict[str, Any]) -> bool:
    """The operator creates a ServiceMonitor for this DeviceConfig spec (internal/utils.go L402-410
    IsPrometheusServiceMonitorEnable, reached only with metricsExporter.enable: reconciler L1442-1445 @ v1.5.1)."""
    exporter = spec.get("metricsExporter", {})
    return bool(exporter.get("enable") and exporter.get("prometheus", {}).get("serviceMonitor", {}).get("enable"))


def device_config_spec(
    settings: DeviceConfigSettings,
    environment: str,
    service_monitor: dict[str, Any] | None = None,
    tolerations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """`spec` of the DeviceConfig (field names of the amd.com/v1alpha1 CRD).

    `service_monitor` replaces the configured `metricsExporter.prometheus.serviceMonitor` when the stack's
    monitoring owns the scrape (its labels and relabelings are what the alert rules select on).
    `tolerations` (of the GPU node taints) go to every operand: the operator sets the device plugin's and the
    labeller's to nil when the field is empty (internal/plugin/plugin.go L272-276 @ v1.5.1)."""
    tolerations = list(tolerations or [])
    on_tainted_nodes = {"tolerations": tolerations} if tolerations else {}
    driver = settings.driver
    spec_driver: dict[str, Any] = {
        "enable": driver.enable,
        "blacklist": driver.blacklist,
        # The policy's config fields carry the CRD's names, so its camelCase dump is the CRD object.
        "upgradePolicy": driver.effective_upgrade_policy(environment).model_dump(by_alias=True),
        **on_tainted_nodes,
    }
    if driver.version is not None:
        spec_driver["version"] = driver.version
    if driver.image is not None:
        spec_driver["image"] = driver.image

    plugin = settings.device_plugin
    device_plugin: dict[str, Any] = {
        "enableDevicePlugin": plugin.enable,
        "devicePluginImage": plugin.image,
        "enableNodeLabeller": plugin.node_labeller,
        "nodeLabellerImage": plugin.node_labeller_image,
    }
    if plugin.resource_naming_strategy != DEVICE_PLUGIN_DEFAULT_NAMING:
        # The operator appends each entry as ` -<key>=<value>` to the plugin's command (internal/plugin/plugin.go
        # L108-127 @ v1.5.1).
        device_plugin["devicePluginArguments"] = {"resource_naming_strategy": plugin.resource_naming_strategy}
    if plugin.node_labeller_arguments:
        device_plugin["nodeLabellerArguments"] = list(plugin.node_labeller_arguments)
    if tolerations:
        device_plugin["devicePluginTolerations"] = tolerations
        device_plugin["nodeLabellerTolerations"] = tolerations

    exporter = settings.metrics_exporter
    if service_monitor is None:
        service_monitor = {
            "enable": exporter.service_monitor.enable,
            "interval": exporter.service_monitor.interval,
        }
        if exporter.service_monitor.labels:
            service_monitor["labels"] = dict(exporter.service_monitor.labels)
    metrics_exporter: dict[str, Any] = {
        "enable": exporter.enable,
        "image": exporter.image,
        "port": exporter.port,
        "serviceType": exporter.service_type,
        "prometheus": {"serviceMonitor": service_monitor},
        **on_tainted_nodes,
    }
    if exporter.node_port is not None:
        metrics_exporter["nodePort"] = exporter.node_port

    spec = {
        "selector": dict(settings.selector),
        "driver": spec_driver,
        "devicePlugin": device_plugin,
        "metricsExporter": metrics_exporter,
        "testRunner": {"enable": settings.test_runner.enable, "image": settings.test_runner.image, **on_tainted_nodes},
        # The chart default is `amd-gpu-operator-utils:latest`: pinned to the operator's release instead.
        "commonConfig": {"utilsContainer": {"image": settings.utils_image}},
    }
    manager = settings.config_manager
    if manager.enable:
        spec["configManager"] = {
            "enable": True,
            "image": manager.image,
            # A named ConfigMap is mounted as is; without one the operator creates `default-dcm-config` with its own
            # profiles (gpu-operator v1.5.1 docs/dcm/device-config-manager-configmap.md L9-11).
            "config": {"name": manager.config_map_name},
            "upgradePolicy": manager.upgrade_policy.model_dump(by_alias=True),
            # DCM tolerates the partitioning taint `amd-dcm` itself (internal/configmanager/configmanager.go L187-193).
            **({"configManagerTolerations": tolerations} if tolerations else {}),
            **({"selector": dict(manager.selector)} if manager.selector else {}),
        }
    return supply.chart_values(device_config_images(settings), spec)


# The operands' init container (busybox:1.36 by default: internal/plugin/plugin.go L57, nodelabeller.go L59,
# metricsexporter.go L58, testrunner.go L56, configmanager.go L64 @ v1.5.1), set in the DeviceConfig only with a mirror.
OPERAND_INIT_IMAGE = "busybox:1.36"


def device_config_images(settings: DeviceConfigSettings) -> list[supply.ChartImage]:
    """The images the DeviceConfig names (and the operands' init image, the operator's default): each in the mirror
    when the stack has one. Not the driver image: its repository is where KMM pushes the driver images it builds and
    the nodes pull them from (unset: the in-cluster `image-registry:5000`, internal/kmmmodule/kmmmodule.go L73), the
    cluster's own, which the config names inside the mirror's registry (schema/mirror.py problems) and changing it
    replaces the DeviceConfig. An in-cluster build takes its base image from the mirror's docker.io
    (`imageBuild.baseImageRegistry`, kmmmodule.go L330-333)."""
    plugin, exporter, manager = settings.device_plugin, settings.metrics_exporter, settings.config_manager
    operands: list[tuple[str, str, bool]] = [
        ("devicePlugin.devicePluginImage", plugin.image, plugin.enable),
        ("devicePlugin.nodeLabellerImage", plugin.node_labeller_image, plugin.node_labeller),
        ("metricsExporter.image", exporter.image, exporter.enable),
        ("testRunner.image", settings.test_runner.image, settings.test_runner.enable),
        ("commonConfig.utilsContainer.image", settings.utils_image, True),
        ("commonConfig.initContainerImage", OPERAND_INIT_IMAGE, True),
    ]
    if manager.enable:
        operands.append(("configManager.image", manager.image, True))
    images = [supply.ChartImage(path, "image", ref, (ref,) if used else ()) for path, ref, used in operands]
    if settings.driver.enable:
        images.append(supply.ChartImage("driver.imageBuild.baseImageRegistry", "registry", "docker.io"))
    return images


def config_manager_data(dcm_config: dict[str, object]) -> dict[str, str]:
    """The DCM ConfigMap's data: config.json, the one file DCM reads."""
    return {CONFIG_MANAGER_FILE: json.dumps(dcm_config, indent=2, sort_keys=True) + "\n"}


@dataclass(frozen=True)
class GpuOperatorArgs:
    config: GpuOperatorConfig
    environment: str
    provider: Provider
    namespace: pulumi.Input[str]
    """The owned namespace's name output (so the release waits for it), else a built-in namespace's name."""
    cert_manager: pulumi.Resource | None = None
    """The cert-manager release when the stack installs it: the operator's webhooks need its CRDs first."""
    service_monitor: dict[str, Any] | None = None
    """The DeviceConfig's serviceMonitor when the stack's monitoring defines it (see device_config_spec)."""
    tolerations: list[dict[str, str]] = field(default_factory=list)
    """Tolerations of the GPU nodes' taints (KubernetesConfig.gpu_tolerations())."""
    dcm_config: dict[str, object] = field(default_factory=dict)
    """DCM's config.json (KubernetesConfig.dcm_config()), for the ConfigMap of an enabled configManager."""
    prometheus_operator: Sequence[pulumi.Resource] = ()
    """What brings the ServiceMonitor CRD when the stack installs it (the kube-prometheus-stack release); empty: the
    cluster must have it, which a DeviceConfig asking for a ServiceMonitor checks at deploy time."""


class GpuOperator(pulumi.ComponentResource):
    release: helm_v3.Release
    device_config: CustomResource
    config_manager_map: core_v1.ConfigMap | None = None
    service_monitor_crd: apiextensions_v1.CustomResourceDefinition | None = None
    """The deploy-time read of the cluster's ServiceMonitor CRD, when the DeviceConfig needs it and the stack does
    not bring it."""

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:GpuOperator", name, None, opts)
        config = args.config
        self.release = pinned_release(
            name,
            release_name=config.release_name,
            chart=GPU_OPERATOR_CHART,
            version=config.chart_version,
            repository=config.repository,
            namespace=args.namespace,
            values=chart_values(config, args.tolerations),
            timeout_seconds=config.timeout_seconds,
            environment=args.environment,
            parent=self,
            provider=args.provider,
            depends_on=[args.cert_manager] if args.cert_manager is not None else None,
            # Never atomic: Helm uninstalls a failed atomic first install, running the chart's post-delete hook,
            # which deletes the NFD, KMM and Argo CRDs cluster-wide (templates/post-delete-hook.yaml,
            # ROCm/gpu-operator#324; helm pkg/action/install.go failRelease).
            atomic=False,
            images=supply.gpu_operator_images(
                kmm=config.kmm, nfd=config.node_feature_discovery, remediation=config.remediation.enabled
            ),
        )
        settings = config.device_config
        depends_on: list[pulumi.Resource] = [self.release]
        if settings.config_manager.enable:
            # DCM's pod does not start without its ConfigMap (docs/dcm/device-config-manager.md L55); DCM watches it
            # and reapplies profiles when it changes (device-config-manager-configmap.md L3): a profile edit patches
            # it in place (the provider's enableConfigMapMutable, components/k8s/cluster.py), never deletes it.
            self.config_manager_map = core_v1.ConfigMap(
                f"{name}-dcm-config",
                metadata=meta_v1.ObjectMetaArgs(name=settings.config_manager.config_map_name, namespace=args.namespace),
                data=config_manager_data(args.dcm_config),
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
            )
            depends_on.append(self.config_manager_map)
        spec = device_config_spec(settings, args.environment, args.service_monitor, args.tolerations)
        depends_on += args.prometheus_operator
        if asks_for_service_monitor(spec) and not args.prometheus_operator:
            self.service_monitor_crd = apiextensions_v1.CustomResourceDefinition.get(
                SERVICE_MONITOR_CRD_CHECK,
                SERVICE_MONITOR_CRD,
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
            )
            depends_on.append(self.service_monitor_crd)
        # After the release: the chart installs the DeviceConfig CRD and the controller that reconciles it.
        # Deleting it removes the driver, device plugin and labeller from every selected node: protected in
        # prod. A rename (a new metadata.name) deletes the old one first: the operator refuses a second
        # DeviceConfig selecting the same nodes ("node %s already assigned to DeviceConfig %s",
        # internal/controllers/device_config_reconciler.go L259-271, L1629-1640 @ v1.5.1), and the provider
        # creates-before-deleting a renamed object (provider.go L1645-1660 @ v4.32.0).
        # The resource name does not follow metadata.name, so a rename is a replacement (where deleteBeforeReplace
        # applies) rather than an unrelated create and delete; the alias keeps stacks deployed under the old name.
        self.device_config = CustomResource(
            f"{name}-device-config",
            api_version=DEVICE_CONFIG_API_VERSION,
            kind=DEVICE_CONFIG_KIND,
            metadata=meta_v1.ObjectMetaArgs(name=settings.name, namespace=args.namespace),
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=depends_on,
                protect=args.environment == "prod",
                delete_before_replace=True,
                # "Updating the driver image repository is not supported. Please delete the existing DeviceConfig
                # and create a new one" (gpu-operator v1.5.1 docs/drivers/installation.md L120): a replacement.
                replace_on_changes=[DRIVER_IMAGE_PATH],
                aliases=[pulumi.Alias(name=f"{name}-{settings.name}")],
            ),
        )
        self.register_outputs(
            {
                "release": self.release.name,
                "version": self.release.version,
                "deviceConfig": settings.name,
            }
        )
