"""`inference[].kubernetes.autoscaling` (a KEDA ScaledObject on vLLM's queue) and `kubernetes.keda` (the pinned KEDA
chart that runs it). docs/workloads.md "Inference that scales" explains the choice of KEDA and the numbers.

KEDA (kedacore/keda v2.20.2) is what the vLLM production stack documents for queue-based autoscaling (its
helm/templates/scaledobject-vllm.yaml and docs use_cases/autoscaling-keda.rst: a `prometheus` trigger on
`vllm:num_requests_waiting`): it queries Prometheus itself and owns the HPA it creates, so no prometheus-adapter
and no custom-metrics APIService are needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Protocol

from pydantic import Field

from .base import ConfigModel, by_environment, environment_default, shown_default
from .bounds import MAX_FLOOR, MAX_PODS, MAX_WAIT_SECONDS
from .types import Name, Url, pinned_chart_version

# `helm repo add kedacore https://kedacore.github.io/charts` + `helm install keda kedacore/keda --namespace keda`
# (the production stack's autoscaling-keda.rst step 3; kedacore/charts keda/Chart.yaml `version: 2.20.2`,
# `appVersion: 2.20.2`: the chart's images default to its appVersion, so the chart version pins them).
KEDA_REPOSITORY = "https://kedacore.github.io/charts"
KEDA_CHART = "keda"
KEDA_CHART_VERSION = "2.20.2"
KEDA_API_VERSION = "keda.sh/v1alpha1"
# The chart's ScaledObject CRD bounds the HPA's stabilizationWindowSeconds to 0..3600 (keda/templates/crds/
# crd-scaledobjects.yaml @ v2.20.2, `maximum: 3600`, `minimum: 0`; the HPA's own API allows the same hour).
MAX_STABILIZATION_SECONDS = 3600
# A stopping vLLM replica's grace (`inference[].kubernetes.terminationGracePeriodSeconds`): an hour outlasts any one
# request; more is a typo that would hold a node drain or a rollout for as long.
MAX_DRAIN_SECONDS = 3600


class KedaConfig(ConfigModel):
    """KEDA, installed when an inference workload autoscales."""

    install: bool | None = Field(None, json_schema_extra=shown_default("while an inference workload autoscales"))
    """True: always, also with no workload autoscaling (keep it so while turning autoscaling off in prod, where the
    release is protected); false: the cluster already runs KEDA (keda.sh/v1alpha1 ScaledObject)."""

    def installed(self, autoscaled: bool) -> bool:
        return autoscaled if self.install is None else self.install

    namespace: Name = "keda"
    """Created by Helm when missing (an existing one is fine)."""
    chart_version: Annotated[str, pinned_chart_version("2.20.2")] = KEDA_CHART_VERSION
    """Version of the chart `keda` of https://kedacore.github.io/charts (its images are the same version)."""
    timeout_seconds: int = Field(600, gt=0, le=MAX_WAIT_SECONDS)
    prometheus_url: Url | None = None
    """The cluster Prometheus's address KEDA queries (`serverAddress`). Unset: the Prometheus of the
    kube-prometheus-stack the stack installs (`monitoring.kubePrometheusStack.install`); required otherwise."""


class InferenceAutoscaling(ConfigModel):
    """A KEDA ScaledObject on the Deployment: replicas follow the requests waiting in vLLM's queues."""

    min_replicas: int | None = Field(None, ge=1, le=MAX_PODS, json_schema_extra=by_environment(dev=1, prod=2))
    """Replicas kept however idle (at least 1: without a pod there is no queue to read, and a model takes minutes
    to load). The Deployment is created with this many."""
    max_replicas: int = Field(ge=1, le=MAX_PODS)
    """Most replicas a burst scales to."""
    target_queue_length: int = Field(5, ge=1, le=MAX_FLOOR)
    """Waiting requests per replica the autoscaler aims at (`vllm:num_requests_waiting` summed over the replicas,
    divided by this, rounded up, is the replica count it asks for)."""
    scale_down_stabilization_seconds: int = Field(300, ge=0, le=MAX_STABILIZATION_SECONDS)
    """How long the queue must stay low before replicas are removed (the HPA's scale-down stabilization window:
    it takes the highest count asked for in that window); then at most one replica per minute goes."""

    def effective_min_replicas(self, environment: str) -> int:
        if self.min_replicas is not None:
            return self.min_replicas
        replicas: int = environment_default(InferenceAutoscaling, "min_replicas", environment)
        return replicas


class Scaled(Protocol):
    """What the check reads of a workload's `inference[i].kubernetes` (schema.workloads.InferenceKubernetes)."""

    @property
    def replicas(self) -> int | None: ...

    @property
    def autoscaling(self) -> InferenceAutoscaling | None: ...


def autoscaling_problems(cfg: Any, k8s: Scaled, at: str) -> Iterable[tuple[str, str]]:
    """`cfg`: the stack (schema.workloads.StackWithWorkloads); `at`: the workload's `inference[i].kubernetes`."""
    scaling = k8s.autoscaling
    if scaling is None:
        return
    if k8s.replicas is not None:
        yield (
            f"{at}.replicas",
            "the autoscaler sets the replica count (between autoscaling.minReplicas and maxReplicas): remove replicas",
        )
    fewest = scaling.effective_min_replicas(cfg.environment)
    if fewest > scaling.max_replicas:
        shown = "" if scaling.min_replicas is not None else f" ({cfg.environment}'s default)"
        yield (
            f"{at}.autoscaling.minReplicas",
            f"{fewest}{shown} exceeds maxReplicas {scaling.max_replicas}: lower minReplicas or raise maxReplicas",
        )


def stack_autoscaling_problems(cfg: Any) -> Iterable[tuple[str, str]]:
    """What every autoscaled workload needs once: vLLM scraped by the cluster's Prometheus, and its address."""
    if cfg.kubernetes is None or not any(i.kubernetes and i.kubernetes.autoscaling for i in cfg.inference):
        return
    if not cfg.monitoring.enabled:
        yield (
            "monitoring.enabled",
            "inference autoscaling reads vLLM's queue from the cluster's Prometheus, which scrapes vLLM through the "
            "stack's ServiceMonitor: enable monitoring, or remove `autoscaling`",
        )
    elif cfg.kubernetes.keda.prometheus_url is None and not cfg.monitoring.installs_kube_prometheus_stack(
        cfg.environment
    ):
        yield (
            "kubernetes.keda.prometheusUrl",
            f"inference autoscaling queries the cluster's Prometheus, and {cfg.environment} does not install "
            "kube-prometheus-stack (monitoring.kubePrometheusStack.install): set the address of the Prometheus that "
            "scrapes the cluster, e.g. http://kube-prometheus-stack-prometheus.monitoring.svc:9090",
        )
