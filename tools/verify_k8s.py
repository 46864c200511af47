"""`rocm-stack verify --stack S --kubernetes [--node NAME]`: run the GPU check (programs/gpucheck.py) again, now, on
every GPU node of the stack's cluster (or one), through the kubeconfig, with the official `kubernetes` client.

The nodes: those the device plugin runs on, grouped as schema.gpu_nodes defines (gpuFleet, partition profiles). On
each, one pod in the GPU layer's namespace, bound to that node by a required node affinity on its name (the
scheduler still checks resources and taints), requesting all the GPUs the node offers as the group's resource, with
the GPU nodes' tolerations, the check programs from a ConfigMap, restartPolicy Never and an activeDeadlineSeconds.
A node whose GPUs are held by running pods cannot take the check without stopping them: after a short scheduling wait
it is reported `busy (N of M GPUs held)` and its pod removed; nothing is ever evicted. Every pod and the ConfigMap are
deleted at the end, on an error and on Ctrl-C.

Upstream facts this relies on:
- nodeAffinity `matchFields` accepts the one field `metadata.name` (kubernetes pkg/apis/core/validation
  `nodeFieldSelectorValidators`), which is how the DaemonSet controller pins its pods to a node too;
- an unschedulable pod stays Pending with condition PodScheduled=False, reason `Unschedulable` (k8s.io/api core/v1
  types.go `PodReasonUnschedulable`);
- a pod past activeDeadlineSeconds is failed by the kubelet with reason `DeadlineExceeded`
  (pkg/kubelet/active_deadline.go);
- pods can be listed by the field selectors `spec.nodeName` and `status.phase` (pkg/registry/core/pod/strategy.go
  `ToSelectableFields`): what the GPUs held on a node are counted from;
- a node whose device plugin is gone keeps the resource in its capacity at 0 ("Set the capacity of the removed
  resource to 0 instead of removing the resource from the node status", pkg/kubelet/nodestatus/setters.go).

Exit status: 0 every node passed; 1 a node failed (or fewer nodes than declared were found); 3 none failed but some
were busy (not checked); 2 refused (no kubernetes section, unknown node, kubeconfig or API unusable); 130 Ctrl-C.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from components.docker.checks import GPU_CHECK_PROGRAMS, PROGRAM_PARENT, check_report, gpucheck_command, summary
from schema import ConfigError, StackConfig
from schema.gpu_nodes import CHECK_IMAGE_KEY, GpuNodeGroup, gpu_namespace, gpu_node_groups, gpu_node_selector
from schema.kubernetes import PARTITION_PROFILE_LABEL
from schema.types import quantity_value
from tools.verify_common import (
    SCHEDULE_WAIT_S,
    FleetRow,
    Results,
    Row,
    fleet_table,
    report_json,
    stack_settings,
    table,
)
from kubernetes import config as kubeconfig_loader
from kubernetes.config.config_exception import ConfigException
from components.workloads import training
from schema.stackfile import StackFileError

APP = "rocm-stack-verify"
RUN_LABEL = "rocm-stack/verify-run"
# Image pull (the ROCm PyTorch images are tens of GB) and the program's start, on top of gpucheck's own --timeout.
START_ALLOWANCE_S = 900
# After the pod's deadline: the kubelet's own reaction time before verify gives up on a node.
GRACE_S = 60
POLL_S = 2.0
REQUEST_TIMEOUT_S = 30
# Beside the GPUs: gpucheck runs one torch process per GPU, each with a bf16 8192^3 product.
CPU, MEMORY = "4", "16Gi"
SHM = "16Gi"
UNSCHEDULABLE = "Unschedulable"  # core/v1 PodReasonUnschedulable
DEADLINE_EXCEEDED = "DeadlineExceeded"  # kubelet active_deadline.go


NO_KUBERNETES = "the stack declares no rocm-stack:kubernetes section: nothing to verify on Kubernetes"


class Refused(Exception):
    """Bad input or an unusable API: one line, exit 2."""


@dataclass(frozen=True)
class Target:
    node: str
    group: GpuNodeGroup
    allocatable: int
    """GPUs the node offers as the group's resource: what its pod requests."""
    expect: int
    """GPUs the check expects: declared per node, else the node's capacity."""
    state: str = "Ready"
    """The node's Ready condition (`Ready`, `NotReady`, `Unknown`), `cordoned` added when it is unschedulable."""


@dataclass
class NodeRun:
    target: Target
    pod: str
    created: float
    state: str = "created"
    verdict: str | None = None  # pass | fail | busy
    details: str = ""
    report: dict[str, Any] | None = None  # gpucheck's JSON report
    image: str = "-"  # the image the check ran, as the kubelet reports it (imageID: the digest it pulled)


def connect(kubeconfig: str | None, context: str | None) -> Any:
    """A CoreV1Api for the kubeconfig (None: $KUBECONFIG, else ~/.kube/config) and context (None: the current one)."""

    configuration = k8s.Configuration()
    try:
        kubeconfig_loader.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    except (ConfigException, OSError) as error:
        raise Refused(f"kubeconfig {kubeconfig or '(default)'}: {error}") from None
    configuration.retries = 1
    return k8s.CoreV1Api(k8s.ApiClient(configuration))


def api_error(error: Exception) -> str:
    if isinstance(error, ApiException):
        reason = error.reason or ""
        try:
            reason = json.loads(error.body or "{}").get("message") or reason
        except ValueError:
            pass
        hint = (
            " (verify needs RBAC to list nodes and pods and to create and delete pods and configmaps: "
            "docs/operations.md)"
            if error.status == 403
            else ""
        )
        return f"Kubernetes API {error.status}: {reason}{hint}"
    # urllib3's MaxRetryError says which request failed; its `reason` is the cause (refused, timed out, TLS).
    return f"cannot reach the Kubernetes API: {getattr(error, 'reason', None) or error}"


def quantity(value: str | None) -> int:
    """A count of an extended resource, an integer quantity in the API server's canonical form ("8", or "1k" for
    1000: apimachinery writes the largest suffix that loses nothing), read by the stack's one quantity reader."""
    try:
        return int(quantity_value(value or "0"))
    except ValueError:
        return 0


def targets(api: Any, cfg: StackConfig, node: str | None) -> tuple[list[Target], list[Row]]:
    """The nodes to check, and rows for what is wrong before any pod runs: a node offering none of its GPUs, a node
    of an undeclared partition profile, fewer nodes than declared. A node the device plugin's selector matches that
    never advertised the resource is no GPU node (the standalone plugin's default selector is only
    kubernetes.io/arch=amd64)."""
    assert cfg.kubernetes is not None
    groups = gpu_node_groups(cfg)
    selector = gpu_node_selector(cfg.kubernetes)
    wanted = ",".join(f"{k}={v}" for k, v in selector.items())
    if node is not None:
        try:
            nodes = [api.read_node(node, _request_timeout=REQUEST_TIMEOUT_S)]
        except ApiException as error:
            if error.status == 404:
                raise Refused(f"node '{node}' not found in the cluster") from None
            raise
        labels = nodes[0].metadata.labels or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            raise Refused(f"node '{node}' is not one of the stack's GPU nodes (they carry the labels {wanted})")
    else:
        nodes = api.list_node(label_selector=wanted, _request_timeout=REQUEST_TIMEOUT_S).items
    found: list[Target] = []
    rows: list[Row] = []
    counts = {g.name: 0 for g in groups}
    for item in sorted(nodes, key=lambda n: str(n.metadata.name)):
        name, labels = str(item.metadata.name), item.metadata.labels or {}
        group = next((g for g in groups if g.selects(labels)), None)
        if group is None:  # gpuFleet leaves every profile-labelled node to its profile
            profile = labels.get(PARTITION_PROFILE_LABEL)
            rows.append(
                Row(name, "-", "fail", f"its partition profile '{profile}' is not in kubernetes.partitionProfiles")
            )
            continue
        capacity = (item.status.capacity if item.status else None) or {}
        if group.resource_name not in capacity:
            if node is not None:
                raise Refused(f"node '{node}' has never advertised {group.resource_name}: it is no GPU node")
            continue
        counts[group.name] += 1
        allocatable = quantity(((item.status.allocatable if item.status else None) or {}).get(group.resource_name))
        if allocatable == 0:
            rows.append(
                Row(
                    name,
                    group.name,
                    "fail",
                    f"offers no {group.resource_name} (capacity {capacity[group.resource_name]}, allocatable 0): "
                    "its device plugin is gone or every GPU is unhealthy",
                )
            )
            continue
        expect = group.gpus_per_node or quantity(capacity[group.resource_name])
        found.append(Target(name, group, allocatable, expect, node_state(item)))
    if node is None:
        rows += [
            Row(f"({g.name})", g.name, "fail", f"found {counts[g.name]} of the {g.nodes} nodes {g.key} declares")
            for g in groups
            if g.nodes and counts[g.name] < g.nodes
        ]
    return found, rows


def node_state(item: Any) -> str:
    """The node's Ready condition as `kubectl get nodes` shows it (`Ready`, `NotReady`, `Unknown`: k8s.io/api core/v1
    NodeReady, status True/False/Unknown) and `cordoned` when spec.unschedulable is set."""
    ready = _condition(item, "Ready")
    state = {"True": "Ready", "False": "NotReady"}.get(ready.status if ready else "", "Unknown")
    return state + (", cordoned" if item.spec is not None and item.spec.unschedulable else "")


def node_restarts(api: Any, node: str, resource: str, run: str) -> int:
    """Container restarts of the GPU pods on `node` that have not finished (ours excluded): containerStatuses
    restartCount, what `kubectl get pods` shows as RESTARTS."""
    items = api.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed",
        _request_timeout=REQUEST_TIMEOUT_S,
    ).items
    return sum(
        status.restart_count or 0
        for p in items
        if (p.metadata.labels or {}).get(RUN_LABEL) != run and pod_gpus(p, resource)
        for status in (p.status.container_statuses or [] if p.status else [])
    )


def config_map(run: str, namespace: str, files: Mapping[str, str]) -> k8s.V1ConfigMap:
    return k8s.V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=k8s.V1ObjectMeta(name=object_name(run), namespace=namespace, labels=labels(run)),
        data={name: files[name] for name in GPU_CHECK_PROGRAMS},
        immutable=True,
    )


def object_name(run: str, index: int | None = None) -> str:
    """`rocm-stack-verify-<run>` for the ConfigMap, `-<index>` added for each node's pod."""
    return f"{APP}-{run}" if index is None else f"{APP}-{run}-{index}"


def labels(run: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/managed-by": "rocm-stack", RUN_LABEL: run}


def active_deadline(timeout_seconds: int) -> int:
    return timeout_seconds + START_ALLOWANCE_S


def pod(run: str, index: int, namespace: str, target: Target, image: str, timeout_seconds: int) -> k8s.V1Pod:
    group = target.group
    gpus = str(target.allocatable)
    return k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=k8s.V1ObjectMeta(name=object_name(run, index), namespace=namespace, labels=labels(run)),
        spec=k8s.V1PodSpec(
            restart_policy="Never",
            active_deadline_seconds=active_deadline(timeout_seconds),
            enable_service_links=False,
            affinity=k8s.V1Affinity(
                node_affinity=k8s.V1NodeAffinity(
                    required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                        node_selector_terms=[
                            k8s.V1NodeSelectorTerm(
                                match_fields=[
                                    k8s.V1NodeSelectorRequirement(
                                        key="metadata.name", operator="In", values=[target.node]
                                    )
                                ]
                            )
                        ]
                    )
                )
            ),
            tolerations=[
                k8s.V1Toleration(
                    key=t.get("key"), operator=t.get("operator"), value=t.get("value"), effect=t.get("effect")
                )
                for t in group.tolerations
            ]
            or None,
            containers=[
                k8s.V1Container(
                    name="gpucheck",
                    image=image,
                    command=gpucheck_command(target.expect, group.floors, timeout_seconds),
                    env=[k8s.V1EnvVar(name="PYTHONPATH", value=PROGRAM_PARENT)],
                    resources=k8s.V1ResourceRequirements(
                        limits={group.resource_name: gpus},
                        requests={group.resource_name: gpus, "cpu": CPU, "memory": MEMORY},
                    ),
                    volume_mounts=[
                        k8s.V1VolumeMount(name="programs", mount_path=f"{PROGRAM_PARENT}/programs", read_only=True),
                        k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm"),
                    ],
                )
            ],
            volumes=[
                k8s.V1Volume(name="programs", config_map=k8s.V1ConfigMapVolumeSource(name=object_name(run))),
                k8s.V1Volume(name="dshm", empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit=SHM)),
            ],
        ),
    )


def pod_gpus(item: Any, resource: str) -> int:
    """GPUs a pod holds: its containers' sum, or its largest init container when more (how the scheduler counts a
    pod's request); an extended resource's request defaults to its limit."""

    def of(containers: Iterable[Any] | None) -> list[int]:
        counts = []
        for container in containers or []:
            resources = container.resources
            held = (
                (resources.requests or {}).get(resource) or (resources.limits or {}).get(resource)
                if resources
                else None
            )
            counts.append(quantity(held))
        return counts

    return max(sum(of(item.spec.containers)), max(of(item.spec.init_containers), default=0))


def held_gpus(api: Any, node: str, resource: str, run: str) -> int:
    """GPUs of `resource` held by the pods bound to `node` that have not finished (ours excluded)."""
    items = api.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed",
        _request_timeout=REQUEST_TIMEOUT_S,
    ).items
    return sum(pod_gpus(p, resource) for p in items if (p.metadata.labels or {}).get(RUN_LABEL) != run)


def _condition(item: Any, kind: str) -> Any:
    return next((c for c in (item.status.conditions or []) if c.type == kind), None) if item.status else None


def _waiting(item: Any) -> str | None:
    for status in (item.status.container_statuses or []) if item.status else []:
        if status.state and status.state.waiting and status.state.waiting.reason:
            return str(status.state.waiting.reason)
    return None


def _exit_code(item: Any) -> int | None:
    for status in (item.status.container_statuses or []) if item.status else []:
        if status.state and status.state.terminated:
            return int(status.state.terminated.exit_code)
    return None


class Verify:
    """The runs of one `verify --kubernetes`: create, follow, judge, clean up."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        progress: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        schedule_wait_s: float = SCHEDULE_WAIT_S,
    ):
        self.api, self.namespace, self.progress = api, namespace, progress
        self.clock, self.sleep, self.schedule_wait_s = clock, sleep, schedule_wait_s
        self.run = secrets.token_hex(3)
        self.config_map: str | None = None
        self.live: list[str] = []

    def say(self, number: int, total: int, run: NodeRun, state: str) -> None:
        run.state = state
        self.progress(f"[{number}/{total}] {run.target.node} ({run.target.group.name}): {state}")

    def check(self, found: Sequence[Target], cfg: StackConfig, files: Mapping[str, str]) -> Results:
        timeout = cfg.checks.timeout_seconds
        for target in found:
            if target.group.image is None:
                raise Refused(
                    f"images.{CHECK_IMAGE_KEY} has no reference for the GPUs of {target.group.key} "
                    f"(node {target.node}): make it one reference for every family"
                )
        try:
            body = config_map(self.run, self.namespace, files)
            self.api.create_namespaced_config_map(self.namespace, body, _request_timeout=REQUEST_TIMEOUT_S)
            self.config_map = object_name(self.run)
            runs: list[NodeRun] = []
            for index, target in enumerate(found):
                spec = pod(self.run, index, self.namespace, target, str(target.group.image), timeout)
                self.api.create_namespaced_pod(self.namespace, spec, _request_timeout=REQUEST_TIMEOUT_S)
                self.live.append(object_name(self.run, index))
                runs.append(NodeRun(target, object_name(self.run, index), self.clock()))
            self.follow(runs, active_deadline(timeout))
            rows = [Row(r.target.node, r.target.group.name, r.verdict or "fail", r.details) for r in runs]
            return Results(rows, [self.fleet_row(r) for r in runs])
        finally:
            self.clean_up()

    def fleet_row(self, run: NodeRun) -> FleetRow:
        target = run.target
        rates = [row["tflops"] for row in (run.report or {}).get("matmul") or [] if "tflops" in row]
        try:
            restarts: int | None = node_restarts(self.api, target.node, target.group.resource_name, self.run)
        except (ApiException, HTTPError):
            restarts = None
        return FleetRow(
            target.node,
            target.group.name,
            f"{target.allocatable} of {target.expect}",
            run.image.rpartition("@")[2] or "-",
            target.state,
            run.verdict or "fail",
            min(rates) if rates else None,
            target.group.floors.min_tflops,  # what the pod's gpucheck --min-tflops is (pod() above)
            restarts,
        )

    def follow(self, runs: list[NodeRun], deadline_s: int) -> None:
        total = len(runs)
        open_runs = dict(enumerate(runs, 1))
        while open_runs:
            pods = {
                p.metadata.name: p
                for p in self.api.list_namespaced_pod(
                    self.namespace, label_selector=f"{RUN_LABEL}={self.run}", _request_timeout=REQUEST_TIMEOUT_S
                ).items
            }
            for number, run in list(open_runs.items()):
                self.observe(number, total, run, pods.get(run.pod), deadline_s)
                if run.verdict is not None:
                    del open_runs[number]
                    self.remove(run.pod)
            if open_runs:
                self.sleep(POLL_S)

    def observe(self, number: int, total: int, run: NodeRun, item: Any, deadline_s: int) -> None:
        now = self.clock()
        target = run.target
        if item is None:
            run.verdict, run.details = "fail", "its check pod disappeared (deleted or evicted by someone else)"
            self.say(number, total, run, "failed")
            return
        phase = item.status.phase if item.status else None
        scheduled = _condition(item, "PodScheduled")
        if phase in ("Succeeded", "Failed"):
            run.image = next((str(c.image_id) for c in item.status.container_statuses or [] if c.image_id), "-")
        if phase == "Succeeded":
            run.verdict = "pass"
            run.report = check_report(self.logs(run.pod))
            self.say(number, total, run, "passed")
        elif phase == "Failed":
            run.verdict = "fail"
            if item.status.reason == DEADLINE_EXCEEDED:
                run.details = f"timed out: activeDeadlineSeconds {deadline_s} passed (last state: {run.state})"
            else:
                code = _exit_code(item)
                logs = self.logs(run.pod)
                run.report = check_report(logs)
                cause = f"exit {code}" if code is not None else f"{item.status.reason}: {item.status.message}"
                run.details = f"{cause}\n{summary(logs)}"
            self.say(number, total, run, "failed")
        elif phase == "Running":
            if run.state != "running":
                self.say(number, total, run, "running")
        elif scheduled is not None and scheduled.status == "True":
            state = f"scheduled ({waiting})" if (waiting := _waiting(item)) else "scheduled"
            if run.state != state:
                self.say(number, total, run, state)
        elif now - run.created >= self.schedule_wait_s and scheduled is not None and scheduled.reason == UNSCHEDULABLE:
            held = held_gpus(self.api, target.node, target.group.resource_name, self.run)
            if held:
                run.verdict = "busy"
                run.details = (
                    f"{held} of {target.allocatable} {target.group.resource_name} held by other pods; not checked "
                    f"(nothing is evicted): {scheduled.message}"
                )
                self.say(number, total, run, f"busy ({held} of {target.allocatable} GPUs held)")
            else:
                run.verdict, run.details = "fail", f"unschedulable: {scheduled.message}"
                self.say(number, total, run, "failed (unschedulable)")
            return
        if run.verdict is None and now - run.created > self.schedule_wait_s + deadline_s + GRACE_S:
            run.verdict = "fail"
            run.details = f"timed out: no verdict after {now - run.created:.0f}s (last state: {run.state})"
            self.say(number, total, run, "failed (timed out)")

    def logs(self, name: str) -> str | None:
        try:
            return str(
                self.api.read_namespaced_pod_log(
                    name, self.namespace, container="gpucheck", tail_lines=200, _request_timeout=REQUEST_TIMEOUT_S
                )
            )
        except (ApiException, HTTPError) as error:
            return f"(logs unavailable: {api_error(error)})"

    def remove(self, name: str) -> None:
        self.api.delete_namespaced_pod(name, self.namespace, _request_timeout=REQUEST_TIMEOUT_S)
        self.live.remove(name)

    def clean_up(self) -> None:
        """Delete what is left, on every way out; a deletion that fails is named, with the command to finish it."""
        failed = []
        for name in list(self.live):
            try:
                self.remove(name)
            except (ApiException, HTTPError):
                failed.append(f"pod/{name}")
        if self.config_map is not None:
            try:
                self.api.delete_namespaced_config_map(
                    self.config_map, self.namespace, _request_timeout=REQUEST_TIMEOUT_S
                )
                self.config_map = None
            except (ApiException, HTTPError):
                failed.append(f"configmap/{self.config_map}")
        if failed:
            self.progress(
                f"could not delete {' '.join(failed)}: run `kubectl delete pod,configmap -n {self.namespace} "
                f"-l {RUN_LABEL}={self.run}`"
            )


def verify(
    cfg: StackConfig,
    api: Any,
    progress: Callable[[str], None],
    node: str | None = None,
    files: Mapping[str, str] | None = None,
    **options: Any,
) -> Results:
    """Rows per node (and for what is missing), with the fleet rows; raises Refused on bad input, ApiException/HTTPError
    on API trouble."""
    if cfg.kubernetes is None:
        raise Refused(NO_KUBERNETES)
    if files is None:
        files = training.program_files()
    namespace = gpu_namespace(cfg.kubernetes)
    found, rows = targets(api, cfg, node)
    # A node refused before any pod ran is a fleet row too, its reason as its state.
    early = [FleetRow(r.host, r.check, "-", "-", r.details, r.verdict, None, None, None) for r in rows]
    if not found:
        if not rows:
            raise Refused(f"no GPU nodes found (labels {gpu_node_selector(cfg.kubernetes)}) in the cluster")
        return Results(rows, early)
    progress(f"checking {len(found)} GPU node(s) in namespace {namespace}")
    checked = Verify(api, namespace, progress, **options).check(found, cfg, files)
    return Results(rows + checked, early + checked.fleet)


def exit_code(rows: Sequence[Row]) -> int:
    if any(r.verdict == "fail" for r in rows):
        return 1
    return 3 if any(r.verdict == "busy" for r in rows) else 0


def main(
    stack: str,
    node: str | None,
    kubeconfig: str | None,
    context: str | None,
    schedule_wait_s: float,
    as_json: bool = False,
    connect_api: Callable[[str | None, str | None], Any] = connect,
    **options: Any,
) -> int:
    """The command: its table on stdout, progress and refusals on stderr; returns the exit status. `options` go to
    Verify (tests pass a clock)."""

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        # Partition placement is the Docker hosts' business: an unlocked one does not matter here.
        cfg = stack_settings(stack)
        if cfg.kubernetes is None:
            raise Refused(NO_KUBERNETES)
        provider = cfg.kubernetes.provider
        api = connect_api(kubeconfig or provider.kubeconfig, context or provider.context)
        rows = verify(cfg, api, say, node, schedule_wait_s=schedule_wait_s, **options)
    except (StackFileError, ConfigError, FileNotFoundError, Refused) as refused:
        say(str(refused))
        return 2
    except (ApiException, HTTPError) as error:
        say(api_error(error))
        return 2
    except KeyboardInterrupt:
        say("interrupted: the check pods and their ConfigMap were deleted")
        return 130
    print(report_json(rows, rows.fleet) if as_json else f"{table(rows, 'NODE')}\n\n{fleet_table(rows.fleet, 'NODE')}")
    return exit_code(rows)
