"""`rocm-stack:kubernetes`: the Kubernetes GPU layer. Absent section = no Kubernetes layer.

Two ways to expose `amd.com/gpu` to the scheduler:
- `operator` (default): cert-manager + the AMD GPU Operator Helm chart + one `DeviceConfig` owned by this stack;
- `device-plugin`: the standalone ROCm/k8s-device-plugin DaemonSet (+ node labeller), no operator.

Every DeviceConfig field below maps 1:1 to a field of the `amd.com/v1alpha1` CRD shipped with
gpu-operator-charts v1.5.1 (tests validate the rendered object against that CRD strictly).

Why one file: the `rocm-stack:kubernetes` section is one model tree (GPU Operator, device plugin, partition
profiles, taints, queues) whose cross-field checks read all of it.
"""

import re
from collections import Counter
from collections.abc import Iterable
from typing import Annotated, Literal, Protocol

from pydantic import AfterValidator, Field, PlainValidator, field_validator

from domain.gpus import MAX_GPUS_PER_HOST, MODELS, ComputePartition, MemoryPartition, ModelName
from rules import helm_repository_problem
from rules.kubernetes import PROD_EXPOSURE
from schema.base import ConfigModel, matching
from schema.bounds import MAX_ITEMS, MAX_NODES, MAX_WAIT_SECONDS
from schema.types import (
    ChartRepository,
    GpuIndex,
    LabelKey,
    Labels,
    LabelValue,
    Name,
    Port,
    TaintEffect,
    UnitDuration,
    pinned_chart_version,
)
from schema.monitoring import DEFAULT_EXPORTER_IMAGE, MonitoringConfig
from schema.docker import image_pin_problem
from schema.queues import QueuesConfig
from schema.autoscaling import KedaConfig

CERT_MANAGER_REPOSITORY = "https://charts.jetstack.io"
# A supported line: "All cert-manager releases are supported at least until the release of a second subsequent
# version" (https://cert-manager.io/docs/releases/, table row `1.21 | Jul 08, 2026 | Release of 1.23`); 1.19 is
# EOL since 1.21 shipped (cert-manager/testing#1218) and 1.20 ends with 1.22. v1.21.1 is the docs'
# `cert_manager_latest_version` (website content/docs/variables.json, Aug 2026). 1.21 needs Kubernetes 1.33-1.36.
# (The GPU Operator install guide still shows v1.15.1, long out of support.)
CERT_MANAGER_CHART_VERSION = "v1.21.1"
# cert-manager renamed the chart value `installCRDs` to `crds.enabled` in v1.15.0.
CERT_MANAGER_CRDS_ENABLED_SINCE = (1, 15, 0)

GPU_OPERATOR_REPOSITORY = "https://rocm.github.io/gpu-operator"
GPU_OPERATOR_CHART = "gpu-operator-charts"
GPU_OPERATOR_CHART_VERSION = "v1.5.1"

# Tags of the released amd-gpu Helm chart 0.21.0 (appVersion 1.31.0.9) of ROCm/k8s-device-plugin.
DEVICE_PLUGIN_IMAGE = "docker.io/rocm/k8s-device-plugin:1.31.0.9"
NODE_LABELLER_IMAGE = "docker.io/rocm/k8s-device-plugin:labeller-1.31.0.9"
# The exporter the Docker hosts run too, so one set of alert rules (validated against v1.5.x metric names)
# fits both; gpu-operator v1.5.1's own example pins v1.4.1.
METRICS_EXPORTER_IMAGE = f"docker.io/{DEFAULT_EXPORTER_IMAGE}"
# The operator release's own test runner: gpu-operator v1.5.1 docs/autoremediation/auto-remediation.md L254
# "If unspecified, the default image is `docker.io/rocm/test-runner:v1.5.1`" (its example/ still shows v1.4.1).
TEST_RUNNER_IMAGE = "docker.io/rocm/test-runner:v1.5.1"
# The chart's DeviceConfig default is `docker.io/rocm/amd-gpu-operator-utils:latest` (values.yaml L118); the
# operator's Makefile @ v1.5.1 builds it as $(DOCKER_REGISTRY)/amd-gpu-operator-utils:$(UTILS_IMAGE_TAG), released
# with the operator's own tag (PROJECT_VERSION v1.5.1). It runs the driver-upgrade steps (upgrademgr.go L66).
UTILS_IMAGE = "docker.io/rocm/amd-gpu-operator-utils:v1.5.1"

GPU_RESOURCE_NAME = "amd.com/gpu"
# The device plugin registers its resources under this prefix (ROCm/k8s-device-plugin internal/pkg/plugin/plugin.go
# L407 `return "amd.com"` @ v1.31.0.9).
GPU_RESOURCE_PREFIX = "amd.com/"

# How the device plugin names what it advertises (`-resource_naming_strategy`, cmd/k8s-device-plugin/main.go L110
# @ v1.31.0.9, default "single"): `single` puts every GPU and partition under amd.com/gpu (a node whose GPUs are in
# different modes is refused: main.go L79-82); `mixed` names each by its mode, "<compute>_<memory>" lowercased
# (internal/pkg/amdgpu/amdgpu.go L173, L180, L278), e.g. amd.com/cpx_nps4: 64 on an 8-GPU CPX/NPS4 node, while GPUs
# without partition support (MI210) stay amd.com/gpu (gpu-operator v1.5.1 docs/device_plugin/device-plugin.md
# L85-135).
ResourceNamingStrategy = Literal["single", "mixed"]
DEVICE_PLUGIN_DEFAULT_NAMING: ResourceNamingStrategy = "single"

# The Device Config Manager (DCM), the operator's GPU partitioning operand: the operator's own default image
# (gpu-operator v1.5.1 internal/configmanager/configmanager.go L61 `defaultConfigManagerImage`).
CONFIG_MANAGER_IMAGE = "docker.io/rocm/device-config-manager:v1.5.1"
# DCM applies the profile a node's label names (ROCm/device-config-manager pkg/config_manager/globals/constants.go
# L27 `LabelKey`; gpu-operator v1.5.1 docs/dcm/applying-partition-profiles.rst L229
# `kubectl label node [nodename] dcm.amd.com/gpu-config-profile=cpx-profile --overwrite`).
PARTITION_PROFILE_LABEL = "dcm.amd.com/gpu-config-profile"
# DCM reads /etc/config-manager/config.json (constants.go L23 `JsonFilePath`), where the operator mounts the
# DeviceConfig's `configManager.config` ConfigMap (configmanager.go L75 `DefaultDCMConfigMountPath`).
CONFIG_MANAGER_FILE = "config.json"
# The taint that evicts workloads before DCM repartitions a node; DCM tolerates it, the other operands must not
# (applying-partition-profiles.rst L7-12, L202-210 `kubectl taint nodes [nodename] amd-dcm=up:NoExecute`).
PARTITIONING_TAINT_KEY = "amd-dcm"

# The scheduler filters out a node whose NoSchedule or NoExecute taint a pod does not tolerate; PreferNoSchedule only
# lowers the node's score (kubernetes pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go Filter, with
# plugins/helper/taint.go DoNotScheduleTaintsFilterFunc "only interested in NoSchedule and NoExecute taints").
SCHEDULER_FILTERED_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
# The operator's driver-upgrade reboot pod tolerates only the operator's own cordon taint and is placed through the
# scheduler (nodeSelector kubernetes.io/hostname, no nodeName): gpu-operator v1.5.1
# internal/controllers/upgrademgr.go getRebootPod L1301-1354. On a node with another NoSchedule/NoExecute taint it
# stays Pending: the operator waits 300 x 2 s for the node to go NotReady (handleNodeReboot L1190-1222), then finds
# it Ready, deletes the pod and carries on without the reboot (deleteRebootPod L1237-1298).
REBOOT_POD_TOLERATED_TAINT_KEY = "amd-gpu-driver-upgrade"

# The NFD worker's default tolerations in gpu-operator-charts v1.5.1 values.yaml L10-17. Helm replaces lists
# ("Scalar values and arrays are replaced, maps are merged": helm pkg/chartutil/coalesce.go CoalesceValues),
# so setting `node-feature-discovery.worker.tolerations` must repeat them.
NFD_WORKER_DEFAULT_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "amd-dcm", "operator": "Equal", "value": "up", "effect": "NoExecute"},
    {"key": "amd-gpu-unhealthy", "operator": "Exists", "effect": "NoSchedule"},
)

# JobSet (kubernetes-sigs/jobset v0.12.0): gang-started multi-node training. Install command of its docs
# (site/content/en/docs/installation/_index.md L57): `helm install jobset oci://registry.k8s.io/jobset/charts/jobset
# --version 0.12.0 --create-namespace --namespace=jobset-system`. The chart's values say `tag: main` (staging);
# the release packaging rewrites it to registry.k8s.io/jobset/jobset:v0.12.0 (hack/helm-chart-package.sh L48):
# pinned here explicitly so a mirrored chart cannot drift.
JOBSET_CHART = "oci://registry.k8s.io/jobset/charts/jobset"
JOBSET_CHART_VERSION = "0.12.0"
JOBSET_IMAGE_REPOSITORY = "registry.k8s.io/jobset/jobset"
# The chart keeps its CRD in crds/, which Helm installs but never upgrades ("There is no support at this time for
# upgrading or deleting CRDs using Helm": https://helm.sh/docs/chart_best_practices/custom_resource_definitions/),
# and has no value that moves it to templates/ (charts/jobset/values.yaml @ v0.12.0). So the stack declares the CRD
# itself, from the file the chart of that version carries: chart <v> is charts/jobset at tag v<v>
# (hack/helm-chart-package.sh L42, L50), whose crds/ file is config/components/crd/bases' (Makefile L112).
JOBSET_CRD = "jobsets.jobset.x-k8s.io"
JOBSET_CRD_URL = "https://raw.githubusercontent.com/kubernetes-sigs/jobset/v{version}/charts/jobset/crds/jobset.x-k8s.io_jobsets.yaml"

# LeaderWorkerSet (kubernetes-sigs/lws v0.10.0): multi-node vLLM replicas, a leader pod and its workers created,
# restarted and rolled as one group. Install command of its docs (site/content/en/docs/installation/_index.md L59-65
# @ v0.10.0): `helm install lws oci://registry.k8s.io/lws/charts/lws --version=0.10.0 --namespace lws-system
# --create-namespace`. The chart's values say `tag: main` (staging); the release packaging rewrites them to
# registry.k8s.io/lws/lws:<tag> (hack/push-chart.sh L34-49): pinned here explicitly, as for JobSet.
LWS_CHART = "oci://registry.k8s.io/lws/charts/lws"
LWS_CHART_VERSION = "0.10.0"
LWS_IMAGE_REPOSITORY = "registry.k8s.io/lws/lws"
# Since chart 0.8.0 its CRDs are in crds/, which Helm never upgrades (charts/lws/README.md "Upgrading the chart" @
# v0.10.0: "Apply the CRDs explicitly before upgrading"): the stack declares every one itself. The manager always
# runs the DisaggregatedSet controller too (cmd/main.go L207-214 @ v0.10.0), which needs its CRDs. The files of
# charts/lws/crds/ at each tag the stack knows: 0.9.0 added DisaggregatedSet, 0.10.0 its role scaler.
LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
_LWS, _DS = "leaderworkerset.x-k8s.io_leaderworkersets.yaml", "disaggregatedset.x-k8s.io_disaggregatedsets.yaml"
LWS_CRD_FILES_BY_VERSION = {
    "0.8.0": (_LWS,),
    "0.9.0": (_LWS, _DS),
    "0.10.0": (_LWS, _DS, "disaggregatedset.x-k8s.io_disaggregatedsetrolescalers.yaml"),
}
LWS_CRD_FILES = LWS_CRD_FILES_BY_VERSION[LWS_CHART_VERSION]
LWS_CRD_URL = "https://raw.githubusercontent.com/kubernetes-sigs/lws/v{version}/charts/lws/crds/{file}"
# The release's namespace (created by Helm when missing): fixed, the CRD file names the webhook Service there
# (charts/lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml `namespace: lws-system` @ v0.10.0).
LWS_NAMESPACE = "lws-system"

# Namespaces Kubernetes itself creates: the stack may deploy into them but never owns (creates/protects) them.
BUILTIN_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})

# Image reference pattern of the DeviceConfig CRD (devicePluginImage, metricsExporter.image, ...).
_IMAGE_PATTERN = (
    r"^([a-z0-9]+(?:[._-][a-z0-9]+)*(:[0-9]+)?)(/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[a-z0-9._-]+)?(?:@[a-zA-Z0-9]+:[a-f0-9]+)?$"
)
Image = Annotated[str, matching(_IMAGE_PATTERN, "an image reference such as docker.io/rocm/k8s-device-plugin:1.31.0.9")]
# The CRD's driver.image pattern without its optional tag and digest: the operator appends its own tag
# (<distro>-<release>-<kernel>-<driver version>), so a configured tag would make an invalid reference.
_DRIVER_REPOSITORY_PATTERN = r"([a-z0-9]+(?:[._-][a-z0-9]+)*(:[0-9]+)?)(/[$a-zA-Z0-9_]+(?:[._-][$a-zA-Z0-9_]+)*)*"


def _driver_repository(value: str) -> str:
    if not re.fullmatch(_DRIVER_REPOSITORY_PATTERN, value):
        raise ValueError(
            f"'{value}' is not an image repository without tag or digest (the operator tags the "
            "driver image itself), e.g. registry.example.com/amd/amdgpu-driver"
        )
    return value


DriverRepository = Annotated[str, AfterValidator(_driver_repository)]
# A namespace is a DNS label (RFC 1123): the same rule as the host and container names.
NamespaceName = Name
ObjectName = Annotated[
    str,
    matching(
        r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
        "lowercase letters, digits, '-' and '.', at most 253 characters",
    ),
]
ChartVersion = Annotated[str, pinned_chart_version("v1.5.1")]
# Labels the node labeller can publish (gpu-operator values.yaml: defaults + the partitioning ones).
NodeLabel = Literal[
    "vram",
    "cu-count",
    "simd-count",
    "device-id",
    "family",
    "product-name",
    "driver-version",
    "compute-memory-partition",
    "compute-partitioning-supported",
    "memory-partitioning-supported",
]

NodeLabels = Annotated[list[NodeLabel], Field(max_length=MAX_ITEMS)]


def _node_count(value: object) -> int | str:
    """Kubernetes int-or-string: a node count or a percentage of the nodes."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_NODES:
        return value
    if isinstance(value, str) and re.fullmatch(r"(100|[1-9]?[0-9])%", value):
        return value
    raise ValueError(
        f'expected a node count from 0 to {MAX_NODES} (e.g. 1) or a percentage of the nodes from "0%" to "100%"'
    )


NodeCount = Annotated[int | str, PlainValidator(_node_count, json_schema_input_type=int | str)]
# A profile name is the value of the node label that selects it, and a label value "must be 63 characters or less"
# (kubernetes.io/docs/concepts/overview/working-with-objects/labels/).
ProfileName = Annotated[
    str,
    matching(
        r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?",
        "lowercase letters, digits and '-', at most 63 characters, starting and "
        "ending with a letter or digit, e.g. cpx-nps4",
    ),
]


def parse_chart_version(version: str) -> tuple[int, int, int]:
    """Major, minor and patch of an exact version (ChartVersion): a pre-release or build part left out."""
    major, minor, patch = re.split(r"[.+-]", version.removeprefix("v"))[:3]
    return int(major), int(minor), int(patch)


class ProviderConfig(ConfigModel):
    # Path to a kubeconfig file; None: $KUBECONFIG, else ~/.kube/config.
    kubeconfig: str | None = None
    # None: the kubeconfig's current context (dev only: prod must name its cluster explicitly).
    context: str | None = None


class GpuNodeTaint(ConfigModel):
    """A taint the cluster's GPU nodes carry (`kubectl taint nodes N amd.com/gpu=present:NoSchedule`)."""

    key: LabelKey
    """The taint's key, e.g. `amd.com/gpu`."""
    value: LabelValue | None = None
    """The taint's value; unset: a taint without value (tolerated with operator Exists)."""
    effect: TaintEffect
    """The taint's effect."""

    def toleration(self) -> dict[str, str]:
        """The core/v1 Toleration (camelCase, as chart values and the DeviceConfig CRD spell it)."""
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


def gpu_node_tolerations(taints: Iterable[GpuNodeTaint]) -> list[dict[str, str]]:
    return [taint.toleration() for taint in taints]


class CertManagerConfig(ConfigModel):
    # False: the cluster already runs cert-manager (the GPU Operator only needs its CRDs and webhook).
    install: bool = True
    # Created by Helm when missing and left alone when it exists (never owned: see CertManager).
    namespace: NamespaceName = "cert-manager"
    repository: ChartRepository = CERT_MANAGER_REPOSITORY
    chart_version: ChartVersion = CERT_MANAGER_CHART_VERSION
    timeout_seconds: int = Field(600, gt=0, le=MAX_WAIT_SECONDS)

    def crd_values(self) -> dict[str, object]:
        if parse_chart_version(self.chart_version) >= CERT_MANAGER_CRDS_ENABLED_SINCE:
            return {"crds": {"enabled": True}}
        return {"installCRDs": True}


class NodeDrainPolicy(ConfigModel):
    force: bool = False
    # 0 waits forever (CRD semantics).
    timeout_seconds: int = Field(300, ge=0, le=MAX_WAIT_SECONDS)
    # -1: each pod's own terminationGracePeriodSeconds.
    grace_period_seconds: int = Field(-1, ge=-1, le=MAX_WAIT_SECONDS)
    ignore_daemon_sets: bool = True


class PodDeletionPolicy(ConfigModel):
    force: bool = False
    timeout_seconds: int = Field(300, ge=0, le=MAX_WAIT_SECONDS)
    grace_period_seconds: int = Field(-1, ge=-1, le=MAX_WAIT_SECONDS)


class DriverUpgradePolicy(ConfigModel):
    """Field defaults are the prod-safe ones: one node at a time, drained (no force), rebooted."""

    enable: bool = True
    # 0 = no limit (all nodes at once), per the CRD.
    max_parallel_upgrades: int = Field(1, ge=0, le=MAX_NODES)
    # Upgrades stop once this many nodes (or this share of them) failed to upgrade.
    max_unavailable_nodes: NodeCount = 1
    reboot_required: bool = True
    node_drain_policy: NodeDrainPolicy = NodeDrainPolicy()
    pod_deletion_policy: PodDeletionPolicy = PodDeletionPolicy()


# Used when a dev stack leaves `upgradePolicy` out: a one-node dev cluster has nothing to keep serving.
DEV_UPGRADE_POLICY = DriverUpgradePolicy(
    max_parallel_upgrades=0,
    max_unavailable_nodes="100%",
    reboot_required=False,
    node_drain_policy=NodeDrainPolicy(force=True, timeout_seconds=60),
    pod_deletion_policy=PodDeletionPolicy(force=True, timeout_seconds=60),
)


class DriverConfig(ConfigModel):
    # False: use the host's inbox / pre-installed amdgpu driver; True: the operator installs it through KMM.
    enable: bool = False
    # Out-of-tree amdgpu driver version, e.g. "30.20.1" (required in prod when enable is true).
    version: str | None = None
    # Blacklist the inbox amdgpu module (needed for the out-of-tree driver; applies after a node reboot).
    blacklist: bool = False
    # Driver image repository WITHOUT tag: the operator manages the tag.
    image: DriverRepository | None = None
    # None: prod-safe defaults (DriverUpgradePolicy()) in prod, DEV_UPGRADE_POLICY in dev.
    upgrade_policy: DriverUpgradePolicy | None = None

    def effective_upgrade_policy(self, environment: str) -> DriverUpgradePolicy:
        if self.upgrade_policy is not None:
            return self.upgrade_policy
        return DEV_UPGRADE_POLICY if environment == "dev" else DriverUpgradePolicy()


class OperatorDevicePluginConfig(ConfigModel):
    enable: bool = True
    image: Image = DEVICE_PLUGIN_IMAGE
    resource_naming_strategy: ResourceNamingStrategy = DEVICE_PLUGIN_DEFAULT_NAMING
    """`single`: every GPU and partition is `amd.com/gpu`; `mixed`: partitions are named by their mode
    (`amd.com/cpx_nps4`, ...), see `kubernetes.partitionProfiles` (DeviceConfig devicePlugin.devicePluginArguments)."""
    node_labeller: bool = True
    node_labeller_image: Image = NODE_LABELLER_IMAGE
    # Labels on top of the labeller's defaults (DeviceConfig devicePlugin.nodeLabellerArguments).
    node_labeller_arguments: NodeLabels = []


class ServiceMonitorConfig(ConfigModel):
    # Needs the Prometheus Operator CRDs in the cluster.
    enable: bool = False
    interval: UnitDuration = "30s"
    # Labels a Prometheus serviceMonitorSelector matches on.
    labels: Labels = {}


class MetricsExporterConfig(ConfigModel):
    enable: bool = True
    image: Image = METRICS_EXPORTER_IMAGE
    port: Port = 5000
    service_type: Literal["ClusterIP", "NodePort"] = "ClusterIP"
    # Only with serviceType NodePort; None lets Kubernetes pick one.
    node_port: int | None = Field(None, ge=30000, le=32767)
    service_monitor: ServiceMonitorConfig = ServiceMonitorConfig()


class GpuTestRunnerConfig(ConfigModel):
    enable: bool = False
    image: Image = TEST_RUNNER_IMAGE


class RemediationConfig(ConfigModel):
    """The chart's Auto Node Remediation (an Argo Workflows controller, its CRDs and `argo-*` ClusterRoles).

    Off by default (the chart defaults it on): its post-delete hook deletes the Argo CRDs cluster-wide
    (ROCm/gpu-operator#324), and the Argo CRDs are a separate chart dependency gated by
    `remediation.installCRDs` alone (Chart.yaml @ v1.5.1, `condition: remediation.installCRDs`)."""

    enabled: bool = False
    """Chart `remediation.enabled`: install the remediation workflow controller (Argo)."""
    install_crds: bool | None = None
    """Chart `remediation.installCRDs` (the Argo CRDs); unset: follows `enabled`."""

    def chart_values(self) -> dict[str, bool]:
        install_crds = self.enabled if self.install_crds is None else self.install_crds
        return {"enabled": self.enabled, "installCRDs": install_crds}


class ConfigManagerUpgradePolicy(ConfigModel):
    upgrade_strategy: Literal["RollingUpdate", "OnDelete"] = "RollingUpdate"
    """How the DCM DaemonSet's pods are replaced when it changes."""
    max_unavailable: int = Field(1, ge=1, le=MAX_NODES)
    """DCM pods down at once during a RollingUpdate."""


class ConfigManagerConfig(ConfigModel):
    """The Device Config Manager (DeviceConfig `configManager`): partitions each node's GPUs by the profile of
    `kubernetes.partitionProfiles` its label `dcm.amd.com/gpu-config-profile` names (docs/kubernetes.md)."""

    enable: bool = False
    """Deploy DCM on the selected nodes, reading a ConfigMap the stack builds from `kubernetes.partitionProfiles`."""
    image: Image = CONFIG_MANAGER_IMAGE
    config_map_name: ObjectName = "rocm-stack-dcm-config"
    """The ConfigMap (in the operator's namespace) holding DCM's config.json."""
    selector: Labels = {}
    """Nodes DCM runs on; empty: the DeviceConfig's selector."""
    upgrade_policy: ConfigManagerUpgradePolicy = ConfigManagerUpgradePolicy()


class DeviceConfigSettings(ConfigModel):
    # metadata.name of the DeviceConfig; the operator prefixes its operand pods with it.
    name: ObjectName = "gpu-operator"
    # Nodes this DeviceConfig manages (the label comes from the chart's default NFD rule).
    selector: Labels = {"feature.node.kubernetes.io/amd-gpu": "true"}
    driver: DriverConfig = DriverConfig()
    device_plugin: OperatorDevicePluginConfig = OperatorDevicePluginConfig()
    metrics_exporter: MetricsExporterConfig = MetricsExporterConfig()
    test_runner: GpuTestRunnerConfig = GpuTestRunnerConfig()
    config_manager: ConfigManagerConfig = ConfigManagerConfig()
    """GPU partitioning on the nodes (the Device Config Manager); off by default."""
    utils_image: Image = UTILS_IMAGE
    """`commonConfig.utilsContainer.image`: runs the operator's driver-upgrade and remediation steps (the chart
    default is `latest`)."""


class GpuOperatorConfig(ConfigModel):
    namespace: NamespaceName = "kube-amd-gpu"
    release_name: NamespaceName = "amd-gpu-operator"
    repository: ChartRepository = GPU_OPERATOR_REPOSITORY
    # The DeviceConfig is validated against this version's CRD: change both together.
    chart_version: ChartVersion = GPU_OPERATOR_CHART_VERSION
    node_feature_discovery: bool = True
    install_default_nfd_rule: bool | None = None
    """Chart `installdefaultNFDRule` (a NodeFeatureRule, whose CRD comes with the NFD subchart); unset: follows
    `nodeFeatureDiscovery`. True with NFD off only when the cluster runs its own NFD."""
    kmm: bool = True
    kmm_watch: bool | None = None
    """Chart `kmm.watch` (the operator watches KMM Modules); unset: follows `kmm`. True with `kmm` false: the
    cluster's own KMM (AMD's install doc: `--set kmm.enabled=false --set kmm.watch=true`)."""
    remediation: RemediationConfig = RemediationConfig()
    """Auto Node Remediation; off by default (the chart defaults it on)."""
    timeout_seconds: int = Field(900, gt=0, le=MAX_WAIT_SECONDS)
    device_config: DeviceConfigSettings = DeviceConfigSettings()


class NodeLabellerConfig(ConfigModel):
    enable: bool = True
    image: Image = NODE_LABELLER_IMAGE
    # Passed as `-<label>` flags, the reference manifest's set by default.
    labels: NodeLabels = ["vram", "cu-count", "simd-count", "device-id", "family", "product-name"]


class StandaloneDevicePluginConfig(ConfigModel):
    # The reference manifests deploy into kube-system; any other namespace is created and owned by the stack.
    namespace: NamespaceName = "kube-system"
    image: Image = DEVICE_PLUGIN_IMAGE
    resource_naming_strategy: ResourceNamingStrategy = DEVICE_PLUGIN_DEFAULT_NAMING
    """`single`: every GPU and partition is `amd.com/gpu`; `mixed`: partitions are named by their mode
    (`amd.com/cpx_nps4`, ...), see `kubernetes.partitionProfiles` (the plugin's -resource_naming_strategy flag)."""
    node_selector: Labels = {"kubernetes.io/arch": "amd64"}
    node_labeller: NodeLabellerConfig = NodeLabellerConfig()


class JobSetConfig(ConfigModel):
    """The JobSet controller, needed by multi-node Kubernetes training (installed only when one exists)."""

    install: bool = True
    """False: the cluster already runs JobSet (jobset.x-k8s.io/v1alpha2)."""
    namespace: NamespaceName = "jobset-system"
    """Created by Helm when missing (an existing one is fine)."""
    chart_version: Annotated[str, pinned_chart_version("0.10.1")] = JOBSET_CHART_VERSION
    """Version of the chart oci://registry.k8s.io/jobset/charts/jobset (its image is pinned to the same)."""
    timeout_seconds: int = Field(600, gt=0, le=MAX_WAIT_SECONDS)

    @property
    def crd_url(self) -> str:
        """The JobSet CRD of this chart version (JOBSET_CRD_URL)."""
        return JOBSET_CRD_URL.format(version=self.chart_version)

    def chart_values(self) -> dict[str, object]:
        return {
            "image": {
                "repository": JOBSET_IMAGE_REPOSITORY,
                "tag": f"v{self.chart_version}",
                "pullPolicy": "IfNotPresent",
            }
        }


class LeaderWorkerSetConfig(ConfigModel):
    """The LeaderWorkerSet controller, needed by multi-node inference (installed only when one exists)."""

    install: bool = True
    """False: the cluster already runs LeaderWorkerSet (leaderworkerset.x-k8s.io/v1)."""
    chart_version: Annotated[str, pinned_chart_version("0.10.0")] = LWS_CHART_VERSION
    """Version of the chart oci://registry.k8s.io/lws/charts/lws (its image is pinned to the same): one whose CRD
    files the stack knows (0.8.0, 0.9.0, 0.10.0)."""
    timeout_seconds: int = Field(600, gt=0, le=MAX_WAIT_SECONDS)

    @field_validator("chart_version")
    @classmethod
    def _known_crds(cls, version: str) -> str:
        if version not in LWS_CRD_FILES_BY_VERSION:
            known = ", ".join(LWS_CRD_FILES_BY_VERSION)
            raise ValueError(
                f"the stack applies the CRDs of the LeaderWorkerSet charts it knows ({known}): another version's "
                "crds/ may differ (0.9.0 and 0.10.0 each added one); use one of those, or list its files in "
                "schema/kubernetes.py LWS_CRD_FILES_BY_VERSION"
            )
        return version

    def crd_urls(self) -> dict[str, str]:
        """CRD file name -> its URL in this chart version (LWS_CRD_URL)."""
        files = LWS_CRD_FILES_BY_VERSION[self.chart_version]
        return {file: LWS_CRD_URL.format(version=self.chart_version, file=file) for file in files}

    def chart_values(self) -> dict[str, object]:
        return {
            "image": {
                "manager": {
                    "repository": LWS_IMAGE_REPOSITORY,
                    "tag": f"v{self.chart_version}",
                    "pullPolicy": "IfNotPresent",
                }
            }
        }


class PartitionProfile(ConfigModel):
    """A Device Config Manager profile (`gpu-config-profiles.<name>` of its config.json): the GPUs of a node in one
    compute and memory partition mode. A node takes it once labelled `dcm.amd.com/gpu-config-profile=<name>`."""

    gpu_model: ModelName
    """The GPU model of the nodes that take this profile: the mode must be one it supports."""
    compute_partition: ComputePartition
    """SPX, DPX, QPX or CPX: 1, 2, 4 or one logical GPU per compute die (XCD) of each physical GPU."""
    memory_partition: MemoryPartition
    """NPS1, NPS2 or NPS4: how each GPU's memory is split."""
    gpus: int = Field(ge=1, le=16)
    """Physical GPUs of a node put in this mode (DCM `numGPUsAssigned`); with `skippedGpus`, all the node's GPUs."""
    skipped_gpus: Annotated[list[GpuIndex], Field(max_length=MAX_GPUS_PER_HOST)] = []
    """GPU ids (0-based) DCM leaves as they are (DCM `skippedGPUs.ids`)."""
    nodes: int = Field(0, ge=0, le=MAX_NODES)
    """GPU nodes labelled with this profile: their partitions count towards what Kubernetes workloads can
    request (the fleet check)."""

    @property
    def logical_gpus_per_node(self) -> int:
        """GPUs the device plugin advertises per node (the skipped GPUs' own modes are not known)."""
        return self.gpus * MODELS[self.gpu_model].logical_per_gpu(self.compute_partition)

    def resource_name(self, naming: ResourceNamingStrategy) -> str:
        if naming == "single":
            return GPU_RESOURCE_NAME
        return f"{GPU_RESOURCE_PREFIX}{self.compute_partition.lower()}_{self.memory_partition.lower()}"

    def dcm_profile(self) -> dict[str, object]:
        """The profile as DCM's config.json spells it (gpu-operator v1.5.1 docs/dcm/device-config-manager-configmap.md
        L28-62; device-config-manager gen/partition/partition.pb.go json tags)."""
        return {
            "skippedGPUs": {"ids": list(self.skipped_gpus)},
            "profiles": [
                {
                    "computePartition": self.compute_partition,
                    "memoryPartition": self.memory_partition,
                    "numGPUsAssigned": self.gpus,
                }
            ],
        }


class KubernetesConfig(ConfigModel):
    provider: ProviderConfig = ProviderConfig()
    mode: Literal["operator", "device-plugin"] = "operator"
    # Extra namespaces the stack owns (e.g. for workloads and monitoring), created beside the GPU layer's own.
    namespaces: Annotated[list[NamespaceName], Field(max_length=MAX_ITEMS)] = []
    gpu_node_taints: Annotated[list[GpuNodeTaint], Field(max_length=MAX_ITEMS)] = []
    """Taints of the GPU nodes: every GPU-stack DaemonSet (NFD worker, device plugin, labeller, exporter, driver,
    test runner) tolerates them; the operator sets none unless given (ROCm/gpu-operator#25, #149)."""
    cert_manager: CertManagerConfig = CertManagerConfig()
    gpu_operator: GpuOperatorConfig = GpuOperatorConfig()
    device_plugin: StandaloneDevicePluginConfig = StandaloneDevicePluginConfig()
    job_set: JobSetConfig = JobSetConfig()
    """The JobSet controller multi-node training needs; installed only when such a training exists."""
    keda: KedaConfig = KedaConfig()
    """KEDA, installed when an inference workload autoscales (`inference[].kubernetes.autoscaling`)."""
    leader_worker_set: LeaderWorkerSetConfig = LeaderWorkerSetConfig()
    """The LeaderWorkerSet controller multi-node inference needs; installed only when such an inference exists."""
    queues: QueuesConfig | None = None
    """GPU quotas through Kueue (docs/workloads.md, Queues and quotas): ResourceFlavors per GPU family, ClusterQueues
    with quotas and cohorts, LocalQueues per namespace, PriorityClasses for training and serving."""
    partition_profiles: Annotated[dict[ProfileName, PartitionProfile], Field(max_length=MAX_ITEMS)] = {}
    """GPU partition modes of the GPU nodes by profile name (docs/kubernetes.md): the Device Config Manager applies
    them (`gpuOperator.deviceConfig.configManager`), or they describe nodes partitioned outside the stack; with
    `resourceNamingStrategy: mixed` workloads request them as `amd.com/<compute>_<memory>`."""

    @field_validator("gpu_node_taints")
    @classmethod
    def _one_taint_per_key_and_effect(cls, taints: list[GpuNodeTaint]) -> list[GpuNodeTaint]:
        seen = Counter((taint.key, taint.effect) for taint in taints)
        for (key, effect), count in seen.items():
            if count > 1:
                raise ValueError(
                    f"{key}:{effect} is given twice; Kubernetes keeps one taint per key and effect (validateNodeTaints)"
                )
        return taints

    @property
    def resource_naming_strategy(self) -> ResourceNamingStrategy:
        if self.mode == "operator":
            return self.gpu_operator.device_config.device_plugin.resource_naming_strategy
        return self.device_plugin.resource_naming_strategy

    @property
    def naming_key(self) -> str:
        """The key path of the naming strategy in force."""
        if self.mode == "operator":
            return "kubernetes.gpuOperator.deviceConfig.devicePlugin.resourceNamingStrategy"
        return "kubernetes.devicePlugin.resourceNamingStrategy"

    def partition_resources(self) -> dict[str, list[str]]:
        """Resource name -> the profiles whose nodes advertise it, under this stack's naming strategy."""
        resources: dict[str, list[str]] = {}
        for name, profile in self.partition_profiles.items():
            resources.setdefault(profile.resource_name(self.resource_naming_strategy), []).append(name)
        return resources

    @property
    def config_manager_enabled(self) -> bool:
        return self.mode == "operator" and self.gpu_operator.device_config.config_manager.enable

    def dcm_config(self) -> dict[str, object]:
        """DCM's config.json: every profile, by name."""
        return {
            "gpu-config-profiles": {
                name: profile.dcm_profile() for name, profile in sorted(self.partition_profiles.items())
            }
        }

    def gpu_tolerations(self) -> list[dict[str, str]]:
        return gpu_node_tolerations(self.gpu_node_taints)

    @property
    def gpu_layer_namespace(self) -> str:
        """Where the GPU layer's privileged pods run: the operator's namespace, or the standalone device plugin's."""
        return self.gpu_operator.namespace if self.mode == "operator" else self.device_plugin.namespace

    def owned_namespaces(self) -> list[str]:
        """Namespaces this stack creates (and protects in prod), in a stable order, without duplicates.
        cert-manager's and JobSet's are Helm's (`createNamespace`), so an existing one is no error."""
        own: list[str] = [self.gpu_layer_namespace]
        # Built-in namespaces are deployed into, never created (and, in prod, protected) by the stack.
        own = [namespace for namespace in own if namespace not in BUILTIN_NAMESPACES]
        own.extend(self.namespaces)
        return list(dict.fromkeys(own))


class _StackWithKubernetes(Protocol):
    """What the checks read of StackConfig (read-only: the config is frozen; schema/__init__.py imports this module)."""

    @property
    def environment(self) -> str: ...

    @property
    def kubernetes(self) -> KubernetesConfig | None: ...

    @property
    def monitoring(self) -> MonitoringConfig: ...


def problems(cfg: _StackWithKubernetes) -> Iterable[tuple[str, str]]:
    """Cross-field checks of `kubernetes` (key paths relative to `rocm-stack:`)."""
    k8s = cfg.kubernetes
    if k8s is None:
        return
    prod = cfg.environment == "prod"

    if prod and not k8s.provider.context:
        yield (
            "kubernetes.provider.context",
            "prod must name its kubeconfig context explicitly (the current context may point anywhere)",
        )

    for index, namespace in enumerate(k8s.namespaces):
        if namespace in BUILTIN_NAMESPACES:
            yield (
                f"kubernetes.namespaces[{index}]",
                f"'{namespace}' is created by Kubernetes itself; the stack cannot own it, remove it",
            )
        elif namespace in k8s.namespaces[:index]:
            yield f"kubernetes.namespaces[{index}]", f"'{namespace}' is listed twice"

    yield from _partition_problems(k8s)
    yield from _reboot_problems(k8s, cfg.environment)
    yield from _queue_problems(k8s)
    if prod:
        repositories = [("kubernetes.gpuOperator.repository", k8s.gpu_operator.repository)]
        if k8s.cert_manager.install:
            repositories.append(("kubernetes.certManager.repository", k8s.cert_manager.repository))
        if cfg.monitoring.installs_kube_prometheus_stack(cfg.environment):
            repositories.append(
                ("monitoring.kubePrometheusStack.repository", cfg.monitoring.kube_prometheus_stack.repository)
            )
        yield from (
            (path, PROD_EXPOSURE.refusal(problem))
            for path, url in repositories
            if (problem := helm_repository_problem(url))
        )

    images: list[tuple[str, str]] = []
    if k8s.mode == "operator":
        yield from _operator_problems(k8s.gpu_operator, cfg.environment, cfg.monitoring.enabled)
        device_config = k8s.gpu_operator.device_config
        path = "kubernetes.gpuOperator.deviceConfig"
        images += [
            (f"{path}.devicePlugin.image", device_config.device_plugin.image),
            (f"{path}.devicePlugin.nodeLabellerImage", device_config.device_plugin.node_labeller_image),
            (f"{path}.metricsExporter.image", device_config.metrics_exporter.image),
            (f"{path}.testRunner.image", device_config.test_runner.image),
        ]
        if device_config.config_manager.enable:
            images.append((f"{path}.configManager.image", device_config.config_manager.image))
    else:
        plugin = k8s.device_plugin
        images += [
            ("kubernetes.devicePlugin.image", plugin.image),
            ("kubernetes.devicePlugin.nodeLabeller.image", plugin.node_labeller.image),
        ]
    if prod:
        for path, image in images:
            if (problem := image_pin_problem(image)) is not None:
                yield path, problem


def _queue_problems(k8s: KubernetesConfig) -> Iterable[tuple[str, str]]:
    queues = k8s.queues
    if queues is None:
        return
    for name, flavor in sorted(queues.flavors.items()):
        profile = flavor.partition_profile
        if profile is not None and profile not in k8s.partition_profiles:
            yield (
                f"kubernetes.queues.flavors.{name}.partitionProfile",
                f"no partition profile '{profile}' in kubernetes.partitionProfiles: no node carries its label",
            )
    for index, local in enumerate(queues.local_queues):
        if local.namespace not in BUILTIN_NAMESPACES and local.namespace not in k8s.owned_namespaces():
            yield (
                f"kubernetes.queues.localQueues[{index}].namespace",
                f"namespace '{local.namespace}' is not created by this stack; add it to `kubernetes.namespaces`",
            )


def _operator_problems(operator: GpuOperatorConfig, environment: str, monitored: bool) -> Iterable[tuple[str, str]]:
    device_config = operator.device_config
    path = "kubernetes.gpuOperator.deviceConfig"
    driver = device_config.driver
    if driver.enable and not driver.blacklist:
        yield (
            f"{path}.driver.blacklist",
            "must be true when driver.enable is true: the inbox amdgpu module has to be blacklisted "
            "for the operator's out-of-tree driver to load",
        )
    if driver.blacklist and not driver.enable:
        yield (
            f"{path}.driver.blacklist",
            "must be false while driver.enable is false: blacklisting the inbox amdgpu module with no "
            "operator-managed driver leaves the nodes without a GPU driver",
        )
    if driver.blacklist and not device_config.device_plugin.node_labeller:
        yield (
            f"{path}.devicePlugin.nodeLabeller",
            "must be true when driver.blacklist is true: the node labeller writes the blacklist on the nodes",
        )
    if driver.enable and driver.version is None and environment == "prod":
        yield f"{path}.driver.version", 'pin the out-of-tree driver version (e.g. "30.20.1") in prod'

    policy = driver.effective_upgrade_policy(environment)
    upgrade_path = f"{path}.driver.upgradePolicy"
    if policy.enable:
        if policy.max_unavailable_nodes in (0, "0%"):
            yield (
                f"{upgrade_path}.maxUnavailableNodes",
                'must allow at least one node (e.g. 1 or "25%") while upgrades are enabled, '
                "otherwise no driver upgrade can ever start; set upgradePolicy.enable false to stop upgrades",
            )
        if environment == "prod" and policy.max_parallel_upgrades == 0:
            yield (
                f"{upgrade_path}.maxParallelUpgrades",
                "0 upgrades every node at once; prod needs a bound (1 = one node at a time)",
            )
        if environment == "prod" and driver.enable and policy.node_drain_policy.force:
            yield (
                f"{upgrade_path}.nodeDrainPolicy.force",
                "must be false in prod: a forced drain deletes pods that no controller recreates",
            )
    elif environment == "prod" and driver.enable:
        yield (
            f"{upgrade_path}.enable",
            "must be true in prod while the operator manages the driver: upgrades then cordon and drain "
            "one node at a time instead of replacing the driver under running workloads",
        )

    exporter = device_config.metrics_exporter
    if exporter.node_port is not None and exporter.service_type != "NodePort":
        yield f"{path}.metricsExporter.nodePort", "only valid with serviceType NodePort"
    if monitored and not exporter.enable:
        # Monitoring enables the DeviceConfig's ServiceMonitor and deploys rules that page when it has no target.
        yield (
            f"{path}.metricsExporter.enable",
            "must be true while rocm-stack:monitoring is enabled: its ServiceMonitor and alert rules scrape "
            "this exporter; set monitoring.enabled false to run without it",
        )
    if exporter.service_monitor.enable and not exporter.enable:
        yield f"{path}.metricsExporter.serviceMonitor.enable", "needs metricsExporter.enable: true"


def _reboot_problems(k8s: KubernetesConfig, environment: str) -> Iterable[tuple[str, str]]:
    """A driver upgrade with rebootRequired needs the operator's reboot pod to schedule on the GPU nodes."""
    if k8s.mode != "operator":
        return
    driver = k8s.gpu_operator.device_config.driver
    policy = driver.effective_upgrade_policy(environment)
    if not (driver.enable and policy.enable and policy.reboot_required):
        return
    for index, taint in enumerate(k8s.gpu_node_taints):
        if taint.effect in SCHEDULER_FILTERED_TAINT_EFFECTS and taint.key != REBOOT_POD_TOLERATED_TAINT_KEY:
            yield (
                f"kubernetes.gpuNodeTaints[{index}].effect",
                f"{taint.effect} keeps the GPU Operator's driver-upgrade reboot pod off the node (it tolerates only "
                f"the operator's own '{REBOOT_POD_TOLERATED_TAINT_KEY}' taint and goes through the scheduler), so "
                "upgradePolicy.rebootRequired never reboots it: taint the GPU nodes PreferNoSchedule instead, or set "
                "kubernetes.gpuOperator.deviceConfig.driver.upgradePolicy.rebootRequired false "
                "(docs/kubernetes.md, Safe driver upgrades)",
            )


def _partition_problems(k8s: KubernetesConfig) -> Iterable[tuple[str, str]]:
    for name, profile in k8s.partition_profiles.items():
        at = f"kubernetes.partitionProfiles.{name}"
        model = MODELS[profile.gpu_model]
        wanted = f"{profile.compute_partition}/{profile.memory_partition}"
        if not model.modes:
            yield f"{at}.gpuModel", f"{model.name} GPUs have no partition modes; remove the profile"
        elif model.mode(profile.compute_partition, profile.memory_partition) is None:
            supported = ", ".join(str(mode) for mode in model.modes)
            key = (
                "memoryPartition"
                if any(m.compute == profile.compute_partition for m in model.modes)
                else "computePartition"
            )
            yield f"{at}.{key}", f"{model.name} does not support {wanted}; it supports {supported}"
        elif profile.logical_gpus_per_node > MAX_GPUS_PER_HOST:
            yield (
                f"{at}.gpus",
                f"{profile.gpus} {model.name} GPUs in {profile.compute_partition} make "
                f"{profile.logical_gpus_per_node} GPUs on a node, more than the "
                f"{MAX_GPUS_PER_HOST} a node can show",
            )
        # DCM refuses a profile unless numGPUsAssigned plus the skipped ids make the node's GPU count and every id is
        # below it (device-config-manager pkg/config_manager/configmanager.go L288-316 validateProfile; gpu-operator
        # v1.5.1 docs/dcm/device-config-manager-configmap.md L123-130).
        total = profile.gpus + len(profile.skipped_gpus)
        for index, gpu in enumerate(profile.skipped_gpus):
            if gpu >= total:
                yield (
                    f"{at}.skippedGpus[{index}]",
                    f"GPU id {gpu} is not on a node of {total} GPUs (gpus {profile.gpus} + "
                    f"{len(profile.skipped_gpus)} skipped); ids run from 0 to {total - 1}",
                )
            elif gpu in profile.skipped_gpus[:index]:
                yield f"{at}.skippedGpus[{index}]", f"GPU id {gpu} is listed twice"

    if not k8s.config_manager_enabled:
        return
    path = "kubernetes.gpuOperator.deviceConfig.configManager"
    if not k8s.partition_profiles:
        yield (
            f"{path}.enable",
            "the Device Config Manager applies the profiles of kubernetes.partitionProfiles: declare at least one "
            "(e.g. {cpx-nps4: {gpuModel: MI300X, computePartition: CPX, memoryPartition: NPS4, gpus: 8}})",
        )
    for index, taint in enumerate(k8s.gpu_node_taints):
        if taint.key == PARTITIONING_TAINT_KEY:
            yield (
                f"kubernetes.gpuNodeTaints[{index}]",
                f"'{PARTITIONING_TAINT_KEY}' is the taint that evicts GPU pods while DCM repartitions a node; the "
                "device plugin, labeller and exporter must not tolerate it (they restart to see the new "
                "partitions): taint the node with it only while partitioning, and remove it here",
            )
