"""The AMD GPU Operator Helm release and the one DeviceConfig this stack owns."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.helm import v3 as helm_v3
from pulumi_kubernetes.meta import v1 as meta_v1

from schema.kubernetes import GPU_OPERATOR_CHART, DeviceConfigSettings, GpuOperatorConfig
from components.k8s.helm import pinned_release

DEVICE_CONFIG_API_VERSION = "amd.com/v1alpha1"
DEVICE_CONFIG_KIND = "DeviceConfig"


def chart_values(config: GpuOperatorConfig) -> dict[str, Any]:
    """Values of gpu-operator-charts (keys as in its values.yaml)."""
    return {
        "node-feature-discovery": {"enabled": config.node_feature_discovery},
        "kmm": {"enabled": config.kmm},
        # The chart's default DeviceConfig would compete with the stack's own: never install or patch it.
        "crds": {"defaultCR": {"install": False, "upgrade": False}},
    }


def device_config_spec(settings: DeviceConfigSettings, environment: str,
                       service_monitor: dict[str, Any] | None = None) -> dict[str, Any]:
    """`spec` of the DeviceConfig (field names of the amd.com/v1alpha1 CRD).

    `service_monitor` replaces the configured `metricsExporter.prometheus.serviceMonitor` when the stack's
    monitoring owns the scrape (its labels and relabelings are what the alert rules select on)."""
    driver = settings.driver
    spec_driver: dict[str, Any] = {
        "enable": driver.enable,
        "blacklist": driver.blacklist,
        # The policy's config fields carry the CRD's names, so its camelCase dump is the CRD object.
        "upgradePolicy": driver.effective_upgrade_policy(environment).model_dump(by_alias=True),
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
    if plugin.node_labeller_arguments:
        device_plugin["nodeLabellerArguments"] = list(plugin.node_labeller_arguments)

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
    }
    if exporter.node_port is not None:
        metrics_exporter["nodePort"] = exporter.node_port

    return {
        "selector": dict(settings.selector),
        "driver": spec_driver,
        "devicePlugin": device_plugin,
        "metricsExporter": metrics_exporter,
        "testRunner": {"enable": settings.test_runner.enable, "image": settings.test_runner.image},
    }


@dataclass(frozen=True)
class GpuOperatorArgs:
    config: GpuOperatorConfig
    environment: str
    provider: Provider
    # The owned namespace's name output (so the release waits for it), else a built-in namespace's name.
    namespace: pulumi.Input[str]
    # The cert-manager release when the stack installs it: the operator's webhooks need its CRDs first.
    cert_manager: pulumi.Resource | None = None
    # The DeviceConfig's serviceMonitor when the stack's monitoring defines it (see device_config_spec).
    service_monitor: dict[str, Any] | None = None


class GpuOperator(pulumi.ComponentResource):
    release: helm_v3.Release
    device_config: CustomResource

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:GpuOperator", name, None, opts)
        config = args.config
        self.release = pinned_release(
            name, release_name=config.release_name, chart=GPU_OPERATOR_CHART, version=config.chart_version,
            repository=config.repository, namespace=args.namespace, values=chart_values(config),
            timeout_seconds=config.timeout_seconds, environment=args.environment, parent=self,
            provider=args.provider, depends_on=[args.cert_manager] if args.cert_manager is not None else None,
        )
        settings = config.device_config
        # After the release: the chart installs the DeviceConfig CRD and the controller that reconciles it.
        self.device_config = CustomResource(
            f"{name}-{settings.name}",
            api_version=DEVICE_CONFIG_API_VERSION,
            kind=DEVICE_CONFIG_KIND,
            metadata=meta_v1.ObjectMetaArgs(name=settings.name, namespace=args.namespace),
            spec=device_config_spec(settings, args.environment, args.service_monitor),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.release]),
        )
        self.register_outputs({
            "release": self.release.name,
            "version": self.release.version,
            "deviceConfig": settings.name,
        })
