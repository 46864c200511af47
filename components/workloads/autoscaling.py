"""The KEDA ScaledObject of an autoscaled vLLM Deployment (`inference[].kubernetes.autoscaling`).

KEDA's `prometheus` scaler runs `query` against `serverAddress` (GET <serverAddress>/api/v1/query?query=...,
pkg/scalers/prometheus_scaler.go ExecutePromQuery @ v2.20.2) and must get one sample: more than one element is an
error (L273-274), so the query sums the workload's series. It gives the HPA it creates an External metric with an
AverageValue target of `threshold` (metricType's default, pkg/scalers/scaler.go GetMetricTargetType L95-104), and
the HPA asks for ceil(sum / threshold) replicas (kubernetes pkg/controller/podautoscaler/replica_calculator.go
GetExternalPerPodMetricReplicas), unless that is within its 10 % tolerance of the current count.

The series are those the stack's ServiceMonitor (components/monitoring, `rocm-vllm`) scrapes from the workload's
Service: prometheus-operator labels each target with the Service's `namespace` and `service` (and `pod`,
`container`, `endpoint`; pkg/prometheus/promcfg.go generateServiceMonitorConfig L2134-2149 @ 6adcebc5), so
`namespace` + `service` select exactly this workload's replicas. vLLM's gauge `vllm:num_requests_waiting` has one
series per engine (labels model_name, engine: vllm/v1/metrics/loggers.py of vLLM 0.11.2, the pinned image's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.core import v1 as core_v1
from pulumi_kubernetes.meta import v1 as meta_v1

from schema.autoscaling import KEDA_API_VERSION, InferenceAutoscaling

QUEUE_METRIC = "vllm:num_requests_waiting"
TRIGGER_NAME = "vllm-queue"
# How often KEDA checks the trigger on its own (activation; the production stack's example uses 15, KEDA's default
# is 30: apis/keda/v1alpha1/withtriggers_types.go L51). The replica count itself is the HPA's, which asks KEDA's
# metrics server every sync period (kube-controller-manager --horizontal-pod-autoscaler-sync-period, 15 s).
POLLING_SECONDS = 15
# After the stabilization window, one replica leaves per minute at most: a replica that leaves takes minutes to load
# its model again should the queue come back.
SCALE_DOWN_PODS, SCALE_DOWN_PERIOD_SECONDS = 1, 60


# A stopping vLLM pod (scale-down, rolling update, drain) first lets the Service forget it: the EndpointSlice controller
# marks it terminating and kube-proxy stops sending it new connections, while requests already routed to it arrive
# and are counted with the rest.
DRAIN_SETTLE_SECONDS = 5
# What the drain leaves of the pod's grace for vLLM's exit after SIGTERM.
EXIT_MARGIN_SECONDS = 10
# vLLM 0.11.2 cancels its server task on SIGTERM (vllm/entrypoints/launcher.py serve_http L84-95: `signal_handler`
# -> `server_task.cancel()`, "prevents the uvicorn signal handler to exit early"): requests in flight are cut, it does
# not drain. So its preStop hook waits, before the kubelet sends SIGTERM, until vLLM's own gauges show no request
# running or waiting (or the grace less EXIT_MARGIN_SECONDS is spent, or vLLM no longer answers). /metrics needs no
# key (vLLM's key guards /v1 paths only). The kubelet counts the hook against terminationGracePeriodSeconds (core/v1
# Lifecycle.preStop: "The Pod's termination grace period countdown begins before the PreStop hook is executed").
DRAIN_SCRIPT = """\
import time, urllib.request
end = time.monotonic() + {seconds}
time.sleep({settle})
while time.monotonic() < end:
    try:
        text = urllib.request.urlopen("http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        break
    busy = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("vllm:num_requests_running{{", "vllm:num_requests_waiting{{"))
    )
    if not busy:
        break
    time.sleep(1)
"""


def drain_hook(port: int, grace_seconds: int) -> core_v1.LifecycleArgs:
    """The vLLM container's preStop: wait for its requests to finish (DRAIN_SCRIPT), within the grace."""
    script = DRAIN_SCRIPT.format(port=port, settle=DRAIN_SETTLE_SECONDS, seconds=grace_seconds - EXIT_MARGIN_SECONDS)
    return core_v1.LifecycleArgs(
        pre_stop=core_v1.LifecycleHandlerArgs(exec_=core_v1.ExecActionArgs(command=["python3", "-c", script]))
    )


def proxy_drain_hook(vllm_port: int) -> core_v1.LifecycleArgs:
    """The nginx sidecar's preStop: it gets SIGTERM (nginx's fast shutdown, which drops connections) only once vLLM,
    which its requests go to, stops answering, i.e. after vLLM drained and exited; the alpine image's busybox sh and
    wget (no -T: not every busybox build has it; a hung vLLM holds the hook until the grace ends, as it should)."""
    wait = f"while wget -q -O /dev/null http://127.0.0.1:{vllm_port}/health; do sleep 1; done"
    return core_v1.LifecycleArgs(
        pre_stop=core_v1.LifecycleHandlerArgs(exec_=core_v1.ExecActionArgs(command=["/bin/sh", "-c", wait]))
    )


def queue_query(namespace: str, service: str) -> str:
    """The PromQL the ScaledObject carries: the requests waiting in all of the workload's replicas."""
    return f'sum({QUEUE_METRIC}{{namespace="{namespace}",service="{service}"}})'


@dataclass(frozen=True)
class AutoscalerArgs:
    scaling: InferenceAutoscaling
    environment: str
    prometheus_url: str
    """The Prometheus KEDA queries (kubernetes.keda.prometheusUrl, or kube-prometheus-stack's Service)."""
    keda_ready: Sequence[pulumi.Resource] = ()
    """The KEDA release (its CRDs and webhook) when the stack installs it."""


def scaled_object(
    name: str,
    args: AutoscalerArgs,
    target: Mapping[str, str],
    service: pulumi.Input[str],
    namespace: pulumi.Input[str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> CustomResource:
    """The ScaledObject scaling `target` (a scaleTargetRef: the Deployment, or a multi-node server's
    LeaderWorkerSet) on the queue of Service `service`'s pods.

    Scale-down: KEDA's `cooldownPeriod` applies only to scaling to zero or to idleReplicaCount
    (pkg/scaling/executor/scale_scaledobjects.go L98-101 @ v2.20.2), which minReplicas >= 1 excludes; between
    minReplicas and maxReplicas the HPA scales, so its scaleDown behavior is what is set. `ignoreNullValues: false`:
    an empty result (no replica scraped, Prometheus lost the targets) is an error, on which the HPA keeps its
    count (L93), instead of the scaler's default reading it as 0 (prometheus_scaler.go L267-272), which would
    scale a loaded server down."""
    scaling = args.scaling
    query = pulumi.Output.all(namespace, service).apply(lambda ns_svc: queue_query(ns_svc[0], ns_svc[1]))
    return CustomResource(
        f"{name}-scaler",
        api_version=KEDA_API_VERSION,
        kind="ScaledObject",
        metadata=meta_v1.ObjectMetaArgs(name=name, namespace=namespace, labels=dict(labels)),
        spec={
            "scaleTargetRef": dict(target),
            "minReplicaCount": scaling.effective_min_replicas(args.environment),
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": POLLING_SECONDS,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleDown": {
                            "stabilizationWindowSeconds": scaling.scale_down_stabilization_seconds,
                            "policies": [
                                {"type": "Pods", "value": SCALE_DOWN_PODS, "periodSeconds": SCALE_DOWN_PERIOD_SECONDS}
                            ],
                        }
                    }
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "name": TRIGGER_NAME,
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": args.prometheus_url,
                        "query": query,
                        "threshold": str(scaling.target_queue_length),
                        "ignoreNullValues": "false",
                    },
                }
            ],
        },
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(args.keda_ready) or None)),
    )
