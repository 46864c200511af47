"""Monitoring section of the stack config (`rocm-stack:monitoring`): GPU alert thresholds, exporter, Prometheus/Grafana.

Metric and label names used downstream come from ROCm/device-metrics-exporter (see domain/alerts.py);
this file only holds the numbers and switches an operator tunes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from domain.gpus import MODELS, ModelName

from .base import ConfigModel, changed_fields, matching
from .bounds import MAX_FLOOR, MAX_ITEMS, MAX_WAIT_SECONDS
from .types import (
    DNS_LABEL,
    ChartRepository,
    Duration,
    HostPort,
    Labels,
    Port,
    RetentionSize,
    UnitDuration,
    Url,
    pinned_chart_version,
    duration_seconds,
)
from .docker import PinnedImage

Celsius = Annotated[float, Field(ge=30, le=125)]
Watts = Annotated[float, Field(gt=0, le=3000)]
Percent = Annotated[float, Field(gt=0, le=100)]
# Exclusive bounds: a VRAM fraction of 1 could never be exceeded, so the alert would be dead.
Fraction = Annotated[float, Field(gt=0, lt=1)]
# "At cap" means close to the limit; below half of it the alert would page on every normal run.
CapFraction = Annotated[float, Field(ge=0.5, le=1)]


class Thresholds(ConfigModel):
    """Effective alert thresholds; every field is set (model defaults merged with the stack's overrides)."""

    # Junction (hotspot) on MI3xx, edge on MI2xx: the sensor the exporter reports for the family.
    gpu_temperature_celsius: Celsius
    memory_temperature_celsius: Celsius
    # Board power limit (TBP) the "power at cap" alert compares against; lower it if `amd-smi set --power-cap` is used.
    # None only for a model without a published TBP (MI308X), where the stack must set it (see `problems`).
    power_cap_watts: Watts | None
    power_cap_fraction: CapFraction
    # GPU counted idle below this utilisation, alerting when that lasts `idle_for` while a workload holds the GPU.
    idle_utilization_percent: Percent
    idle_for: Duration
    # Without a scheduler label (plain Docker hosts) a workload is detected by the VRAM it holds.
    idle_vram_in_use_fraction: Fraction
    vram_full_fraction: Fraction
    # Window over which ECC counters must not rise (uncorrectable: not at all; correctable: at most this many).
    ecc_window: Duration
    ecc_correctable_max_increase: Annotated[int, Field(ge=0, le=MAX_FLOOR)]
    exporter_down_for: Duration
    # `for:` of the temperature, power and VRAM alerts: a spike shorter than this is not paged.
    sustained_for: Duration
    # Docker hosts (node-exporter, cAdvisor) and vLLM servers, fleet-wide.
    filesystem_free_fraction: Fraction
    container_restarts: Annotated[int, Field(ge=1, le=MAX_FLOOR)]
    container_restart_window: Duration
    vllm_waiting_requests: Annotated[int, Field(ge=0, le=MAX_FLOOR)]
    vllm_time_to_first_token_seconds: Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)]


class ThresholdOverrides(ConfigModel):
    """Overrides of every GPU model's defaults (same ranges as `Thresholds`)."""

    gpu_temperature_celsius: Celsius | None = None
    memory_temperature_celsius: Celsius | None = None
    power_cap_watts: Watts | None = None
    power_cap_fraction: CapFraction | None = None
    idle_utilization_percent: Percent | None = None
    idle_for: Duration | None = None
    idle_vram_in_use_fraction: Fraction | None = None
    vram_full_fraction: Fraction | None = None
    ecc_window: Duration | None = None
    ecc_correctable_max_increase: Annotated[int, Field(ge=0, le=MAX_FLOOR)] | None = None
    exporter_down_for: Duration | None = None
    sustained_for: Duration | None = None
    filesystem_free_fraction: Fraction | None = None
    container_restarts: Annotated[int, Field(ge=1, le=MAX_FLOOR)] | None = None
    container_restart_window: Duration | None = None
    vllm_waiting_requests: Annotated[int, Field(ge=0, le=MAX_FLOOR)] | None = None
    vllm_time_to_first_token_seconds: Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)] | None = None


class ModelThresholdOverrides(ConfigModel):
    """Overrides of one GPU model's board figures, over `thresholds` (the policy fields are fleet-wide)."""

    gpu_temperature_celsius: Celsius | None = None
    memory_temperature_celsius: Celsius | None = None
    power_cap_watts: Watts | None = None


_COMMON = dict(
    power_cap_fraction=0.95,
    idle_utilization_percent=5,
    idle_for="30m",
    idle_vram_in_use_fraction=0.05,
    vram_full_fraction=0.95,
    ecc_window="1h",
    ecc_correctable_max_increase=10,
    exporter_down_for="5m",
    sustained_for="5m",
    # Below 10% free a checkpoint write or a model download may be the one that fails.
    filesystem_free_fraction=0.1,
    # Restart policies retry at once: three starts in 15 minutes is a crash loop, not one fault recovered.
    container_restarts=3,
    container_restart_window="15m",
    vllm_waiting_requests=10,
    vllm_time_to_first_token_seconds=10,
)
# Temperatures and board power per model come from the model table (domain/gpus.py, with their sources); sites tune
# them via overrides.
MODEL_DEFAULTS: dict[str, Thresholds] = {
    name: Thresholds(
        gpu_temperature_celsius=model.gpu_temperature_celsius,
        memory_temperature_celsius=model.memory_temperature_celsius,
        power_cap_watts=model.power_cap_watts,
        **_COMMON,
    )
    for name, model in MODELS.items()
}

# Where only the fleet-wide thresholds matter (exporter and Kubernetes rules): hosts[].gpuModel's default.
DEFAULT_MODEL = "MI300X"

# The tag ROCm/device-metrics-exporter's own Helm chart ships (helm-charts/values.yaml `image.tag`, Chart.yaml
# appVersion v1.5.2 at the vendored commit).
DEFAULT_EXPORTER_IMAGE = "rocm/device-metrics-exporter:v1.5.2"


# kube-prometheus-stack (prometheus-community/helm-charts, tag kube-prometheus-stack-<version>). Its Prometheus
# Operator CRDs sit in the `crds` subchart's crds/ (charts/kube-prometheus-stack/charts/crds/crds/), which Helm
# installs but never upgrades (README.md L86 @ kube-prometheus-stack-88.5.3: "With Helm v3, CRDs created by this chart
# are not updated by default and should be manually updated"); the chart's own upgrade Job is "in preview, off by
# default and may change" (values.yaml L33-43). So the stack applies them itself, as JobSet's and LWS's, and the
# release skips them. The same ten files at every tag from 84.0.0 to 88.5.3 (their content changes, 87.4.0 and
# 88.0.0 for instance): a version of another major is refused until its files are checked.
KUBE_PROMETHEUS_STACK_CHART = "kube-prometheus-stack"
KUBE_PROMETHEUS_STACK_REPOSITORY = "https://prometheus-community.github.io/helm-charts"
KUBE_PROMETHEUS_STACK_CHART_VERSION = "88.5.3"
KUBE_PROMETHEUS_STACK_CRD_MAJORS = range(84, 89)
KUBE_PROMETHEUS_STACK_CRD_FILES = tuple(
    f"crd-{kind}.yaml"
    for kind in (
        "alertmanagerconfigs",
        "alertmanagers",
        "podmonitors",
        "probes",
        "prometheusagents",
        "prometheuses",
        "prometheusrules",
        "scrapeconfigs",
        "servicemonitors",
        "thanosrulers",
    )
)
KUBE_PROMETHEUS_STACK_CRD_URL = (
    "https://raw.githubusercontent.com/prometheus-community/helm-charts/kube-prometheus-stack-{version}/charts/"
    "kube-prometheus-stack/charts/crds/crds/{file}"
)


class KubePrometheusStackConfig(ConfigModel):
    # None means "by environment": installed in dev (a laptop cluster has no Prometheus), not in prod
    # (clusters usually run one already; set true to have the stack own it).
    install: bool | None = None
    chart_version: Annotated[str, pinned_chart_version("88.5.3")] = KUBE_PROMETHEUS_STACK_CHART_VERSION
    """The chart's version: one of majors 84 to 88, whose CRD files the stack knows (it applies them itself)."""
    repository: ChartRepository = KUBE_PROMETHEUS_STACK_REPOSITORY
    timeout_seconds: Annotated[int, Field(ge=60, le=3600)] = 900

    @field_validator("chart_version")
    @classmethod
    def _known_crds(cls, version: str) -> str:
        if int(version.split(".")[0]) not in KUBE_PROMETHEUS_STACK_CRD_MAJORS:
            first, last = KUBE_PROMETHEUS_STACK_CRD_MAJORS[0], KUBE_PROMETHEUS_STACK_CRD_MAJORS[-1]
            raise ValueError(
                f"the stack applies the chart's CRDs itself, from the files of versions {first}.x to {last}.x; another "
                "major may add or drop one: use one of those, or check its charts/crds/crds/ against "
                "schema/monitoring.py KUBE_PROMETHEUS_STACK_CRD_FILES and widen KUBE_PROMETHEUS_STACK_CRD_MAJORS"
            )
        return version

    def crd_urls(self) -> dict[str, str]:
        """CRD kind (plural) -> the URL of its file in this chart version."""
        return {
            file.removeprefix("crd-").removesuffix(".yaml"): KUBE_PROMETHEUS_STACK_CRD_URL.format(
                version=self.chart_version, file=file
            )
            for file in KUBE_PROMETHEUS_STACK_CRD_FILES
        }


# Host ports of the exporters every Docker host runs, and of the monitoring host's servers (each upstream's default
# listen port: node_exporter `--web.listen-address` :9100, cAdvisor `--port` 8080, Prometheus :9090, Alertmanager
# :9093, Grafana `http_port` 3000). components/monitoring re-exports them; the schema checks them against the
# partitions' published ports.
NODE_EXPORTER_PORT = 9100
CADVISOR_PORT = 8080
PROMETHEUS_PORT = 9090
ALERTMANAGER_PORT = 9093
GRAFANA_PORT = 3000
MONITORING_HOST_PORTS = {
    PROMETHEUS_PORT: "Prometheus",
    ALERTMANAGER_PORT: "Alertmanager",
    GRAFANA_PORT: "Grafana",
}
EXPORTER_PORTS = {NODE_EXPORTER_PORT: "node-exporter", CADVISOR_PORT: "cAdvisor"}


class Retention(ConfigModel):
    """How long, and up to what size, Prometheus keeps samples on the monitoring host; whichever is reached first."""

    time: Duration | None = "15d"
    """Samples older than this are deleted (Prometheus's own default: 15d). null: by size only."""
    size: RetentionSize | None = None
    """The blocks' total size at which the oldest are deleted (e.g. 200GiB): set it below the volume's free space.
    null: by time only."""

    @model_validator(mode="after")
    def _one_limit(self) -> Retention:
        if self.time is None and self.size is None:
            raise ValueError(
                "set time, size or both: without either Prometheus would keep samples until the disk fills"
            )
        return self

    def flags(self) -> list[str]:
        """Prometheus's command-line flags for this retention."""
        flags = []
        if self.time is not None:
            flags.append(f"--storage.tsdb.retention.time={self.time}")
        if self.size is not None:
            flags.append(f"--storage.tsdb.retention.size={int(self.size) // 1024**2}MB")
        return flags


# An address Go's net/mail reads as one (Alertmanager parses `to` with mail.ParseAddressList when it sends, so another
# fails every notification): RFC 5322 section 3.4.1 addr-spec of dot-atoms, atext of section 3.2.3.
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
Email = Annotated[
    str, matching(rf"{_ATOM}(\.{_ATOM})*@{_ATOM}(\.{_ATOM})*", "an e-mail address such as gpu-team@example.com")
]
# Alertmanager's receiver names are free text; here they are DNS labels, as they also name the routes.
ReceiverName = Annotated[str, matching(DNS_LABEL, "lowercase letters, digits and '-', at most 63 characters")]


class WebhookReceiver(ConfigModel):
    """Alertmanager POSTs each notification as JSON to this URL (its `webhook_configs`)."""

    url: Url


class EmailReceiver(ConfigModel):
    """Alertmanager mails each notification (its `email_configs`), through an SMTP relay that takes it without a login."""

    to: Annotated[list[Email], Field(min_length=1, max_length=MAX_ITEMS)]
    from_: Email = Field(alias="from")
    smarthost: HostPort
    """The SMTP relay, host:port."""
    require_tls: bool = True
    """STARTTLS required (Alertmanager's default)."""


class Receiver(ConfigModel):
    """One destination of the alerts: exactly one of `webhook` or `email`."""

    name: ReceiverName
    webhook: WebhookReceiver | None = None
    email: EmailReceiver | None = None
    severities: Annotated[list[Literal["critical", "warning", "info"]], Field(max_length=MAX_ITEMS)] = []
    """Only alerts of these severities (the rules' `severity` label); empty: every alert."""

    @model_validator(mode="after")
    def _one_kind(self) -> Receiver:
        if (self.webhook is None) == (self.email is None):
            raise ValueError(f"receiver '{self.name}' needs exactly one of webhook: {{url: ...}} or email: {{...}}")
        return self

    def destination(self) -> str:
        kinds = f" ({'/'.join(self.severities)} only)" if self.severities else ""
        if self.webhook is not None:
            return f"{self.name}: webhook {self.webhook.url}{kinds}"
        assert self.email is not None
        return f"{self.name}: email to {', '.join(self.email.to)} via {self.email.smarthost}{kinds}"


class MonitoringConfig(ConfigModel):
    enabled: bool = True
    # The rules cover every GPU model, each host's GPUs by their `gpu_model` label (domain/alerts.py MODEL_LABEL):
    # `thresholds` tunes them all, `modelThresholds.<model>` one model's board figures.
    thresholds: ThresholdOverrides = ThresholdOverrides()
    model_thresholds: Annotated[dict[ModelName, ModelThresholdOverrides], Field(max_length=MAX_ITEMS)] = {}
    # Always pinned, in every environment: the metric set (and so the alerts) changes between exporter releases.
    exporter_image: PinnedImage = DEFAULT_EXPORTER_IMAGE
    # Upstream's ServerPort default; on Docker hosts this is the published host port.
    exporter_port: Port = 5000
    scrape_interval: UnitDuration = "30s"
    kube_prometheus_stack: KubePrometheusStackConfig = KubePrometheusStackConfig()
    grafana_dashboard: bool = True
    # Labels the cluster's Prometheus selects ServiceMonitors/PrometheusRules by (kube-prometheus-stack: `release`).
    prometheus_selector_labels: Labels = {"release": "kube-prometheus-stack"}
    host: str | bool | None = None
    """The Docker host (a name in `hosts`) that runs Prometheus, Alertmanager and Grafana for the Docker hosts
    (docs/monitoring.md, "The monitoring host"). true: the first host of `hosts`; false: none. Unset: the first
    host in prod when the stack declares its `hosts` (or `hostGroups`) and no `kubernetes` layer, none otherwise. Moving it starts an empty history."""
    retention: Retention = Retention()
    """How long Prometheus on the monitoring host keeps samples."""
    receivers: Annotated[list[Receiver], Field(max_length=MAX_ITEMS)] = []
    """Where the monitoring host's Alertmanager sends alerts: every receiver gets every alert of its
    `severities`. None: alerts go nowhere (only Alertmanager's own page lists them); the outputs say so."""

    @model_validator(mode="before")
    @classmethod
    def _no_single_model(cls, data: object) -> object:
        # One `gpuModel` for the whole fleet could not monitor mixed fleets; say what replaced it.
        if isinstance(data, dict) and ("gpuModel" in data or "gpu_model" in data):
            raise ValueError(
                "gpuModel is no longer used: the alert rules cover every GPU model, each host's GPUs by their "
                "hosts[].gpuModel (Kubernetes: the node's amd.com/gpu.device-id label); remove it and tune one "
                "model with modelThresholds.<model> (e.g. modelThresholds: {MI250: {powerCapWatts: 450}})"
            )
        return data

    def effective_thresholds(self, model: str = DEFAULT_MODEL) -> Thresholds:
        """`model`'s thresholds: its defaults, then `thresholds`, then `modelThresholds.<model>`. The fleet-wide
        fields (durations, fractions) are the same for every model, so any model gives them."""
        overrides = self.model_thresholds.get(model, ModelThresholdOverrides())  # type: ignore[call-overload]
        return Thresholds(
            **{
                **MODEL_DEFAULTS[model].model_dump(),
                **self.thresholds.model_dump(exclude_none=True),
                **overrides.model_dump(exclude_none=True),
            }
        )

    def monitoring_host(self, environment: str, has_kubernetes: bool, hosts: Sequence[str]) -> str | None:
        """The Docker host that runs the monitoring servers, or None. The default is the first host of `hosts`:
        hosts are added at the end, so it does not move when the fleet grows."""
        if not self.enabled or self.host is False or not hosts:
            return None
        if isinstance(self.host, str):
            return self.host
        if self.host is True or (environment == "prod" and not has_kubernetes):
            return hosts[0]
        return None

    def installs_kube_prometheus_stack(self, environment: str) -> bool:
        install = self.kube_prometheus_stack.install
        return environment == "dev" if install is None else install


def host_problems(cfg: MonitoringConfig, hosts: Sequence[str]) -> Iterable[tuple[str, str]]:
    """`monitoring.host` names a Docker host of the stack; receiver names are unique."""
    if isinstance(cfg.host, str) and cfg.host not in hosts:
        known = f"one of {sorted(hosts)}" if hosts else "none: the stack declares no Docker host"
        yield (
            "monitoring.host",
            f"'{cfg.host}' is not a host of rocm-stack:hosts ({known}); name one of them, or set false for no "
            "monitoring host",
        )
    seen: set[str] = set()
    for index, receiver in enumerate(cfg.receivers):
        if receiver.name in seen:
            yield f"monitoring.receivers[{index}].name", f"'{receiver.name}' is already a receiver's name; rename one"
        seen.add(receiver.name)


def effect_problems(
    cfg: MonitoringConfig, environment: str, has_kubernetes: bool, hosts: Sequence[str]
) -> Iterable[tuple[str, str]]:
    """Settings that would do nothing in this stack, each with the line that makes it take effect."""
    where = f"monitoring.host: {hosts[0]}" if hosts else "a Docker host in rocm-stack:hosts, and monitoring.host"
    if not cfg.enabled and cfg.host not in (None, False):
        yield "monitoring.host", "does nothing while monitoring.enabled is false; remove it, or set enabled: true"
    elif cfg.host is True and not hosts:
        yield (
            "monitoring.host",
            "true names the first Docker host, but the stack declares none (rocm-stack:hosts); remove it, or declare "
            "the host that should run Prometheus, Alertmanager and Grafana",
        )
    elif cfg.monitoring_host(environment, has_kubernetes, hosts) is None:
        # What only the monitoring host's servers read: its Alertmanager's receivers, its Prometheus's retention.
        unread = (["receivers"] if cfg.receivers else []) + [
            f"retention.{to_camel(field)}" for field in sorted(changed_fields(cfg.retention))
        ]
        for key in unread:
            yield (
                f"monitoring.{key}",
                f"does nothing: this stack runs no monitoring host, whose Alertmanager and Prometheus read it; set "
                f"{where}, or remove it",
            )
    kps = cfg.kube_prometheus_stack
    if kps.install and not has_kubernetes:
        yield (
            "monitoring.kubePrometheusStack.install",
            "true does nothing without a Kubernetes layer (rocm-stack:kubernetes); remove it, or add the cluster",
        )
    elif not (has_kubernetes and cfg.installs_kube_prometheus_stack(environment)):
        why = (
            "installs no kube-prometheus-stack" if has_kubernetes else "has no Kubernetes layer (rocm-stack:kubernetes)"
        )
        fix = "set monitoring.kubePrometheusStack.install: true" if has_kubernetes else "add the cluster"
        for field in sorted(changed_fields(kps) - {"install"}):
            yield (
                f"monitoring.kubePrometheusStack.{to_camel(field)}",
                f"does nothing: this stack {why}; {fix}, or remove it",
            )


def problems(cfg: MonitoringConfig, host_gpu_models: Iterable[tuple[str, str]] = ()) -> Iterable[tuple[str, str]]:
    """Cross-field checks; `host_gpu_models` is (host name, hosts[].gpuModel) for the Docker hosts."""
    host_gpu_models = list(host_gpu_models)
    yield from host_problems(cfg, [host for host, _ in host_gpu_models])
    thresholds = cfg.effective_thresholds()
    scrape = duration_seconds(cfg.scrape_interval)
    # increase(), changes(), rate() and deriv() need two samples inside their window (sustainedFor is the vLLM
    # rules' window), `up == 0` two failed scrapes to not flap.
    for key in ("ecc_window", "exporter_down_for", "container_restart_window", "sustained_for"):
        if duration_seconds(getattr(thresholds, key)) < 2 * scrape:
            yield (
                f"monitoring.thresholds.{to_camel(key)}",
                (
                    f"{getattr(thresholds, key)} is shorter than two scrape intervals "
                    f"(scrapeInterval {cfg.scrape_interval}); use at least {2 * scrape:g}s"
                ),
            )
    # A model in the fleet without a board power would go without the power-at-cap alert.
    uncapped: dict[str, str] = {}
    for host, model in host_gpu_models:
        if model in MODELS and cfg.effective_thresholds(model).power_cap_watts is None:
            uncapped.setdefault(model, host)
    for model, host in uncapped.items():
        yield (
            f"monitoring.modelThresholds.{model}.powerCapWatts",
            (
                f"host '{host}' has {model} GPUs, for which AMD publishes no board power (TBP), so the power-at-cap "
                "alert has no default; set it to the board's power cap (SOCKET_POWER in `amd-smi static --limit`)"
            ),
        )
