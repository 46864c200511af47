"""`rocm-stack verify --kubernetes` (tools/verify_k8s.py): the GPU check again on the cluster's GPU nodes.

No API server runs here. The objects verify creates are validated as the API server's schema would
(kubernetes_validate, strict, Kubernetes 1.30); the control flow runs against a fake of the `kubernetes` client's
CoreV1Api, method for method, returning the client's own model classes; connection and kubeconfig errors run
through the real client. The Kubernetes behaviour the fake plays is upstream's (each test cites what it plays):
- an unschedulable pod stays Pending with condition PodScheduled=False, reason "Unschedulable" (k8s.io/api core/v1
  types.go `PodReasonUnschedulable = "Unschedulable"`), message from the scheduler's NodeResourcesFit plugin
  "Insufficient amd.com/gpu" (kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go);
- a pod past activeDeadlineSeconds is Failed, reason "DeadlineExceeded" (pkg/kubelet/active_deadline.go);
- a node whose device plugin is gone keeps the resource at capacity 0 (pkg/kubelet/nodestatus/setters.go:
  "Set the capacity of the removed resource to 0 instead of removing the resource from the node status").
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from conftest import stack_file
from k8s_validation import validate_object
from schema import decode, load
from schema.gpu_nodes import FLEET, gpu_node_groups
from schema.kubernetes import PARTITION_PROFILE_LABEL
from schema.stackfile import as_program_config
from tools import verify_k8s
from tools.cli import run as cli_run

P = "rocm-stack:"
NS = "kube-amd-gpu"  # prod: operator mode, the operator's namespace
GPU_LABELS = {"feature.node.kubernetes.io/amd-gpu": "true"}  # the DeviceConfig's default selector
PASSED = {"schema": "gpucheck/1", "verdict": "pass", "failures": []}


def config_of(stack: str = "prod", edit: Any = None):
    config = stack_file(stack)
    if edit:
        edit(config)
    values, secret_keys = as_program_config(config)
    return load(stack, {k: decode(v) for k, v in values.items()}, secret_keys, place_unlocked=True)


def node(
    name: str,
    gpus: int = 8,
    allocatable: int | None = None,
    labels: dict[str, str] | None = None,
    resource="amd.com/gpu",
):
    status = (
        {}
        if gpus is None
        else {
            "capacity": {resource: str(gpus)},
            "allocatable": {resource: str(gpus if allocatable is None else allocatable)},
        }
    )
    return k8s.V1Node.from_dict(
        {"metadata": {"name": name, "labels": {**GPU_LABELS, **(labels or {})}}, "status": status}
    )


def pending(reason: str | None = None) -> dict[str, Any]:
    if reason is None:
        return {"phase": "Pending"}
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": "0/5 nodes are available: 1 Insufficient amd.com/gpu, 4 node(s) didn't match Pod's node affinity/selector.",
            }
        ],
    }


SCHEDULED = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
PULLING = {
    **SCHEDULED,
    "containerStatuses": [
        {
            "name": "gpucheck",
            "image": "x",
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}},
        }
    ],
}
RUNNING = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}


def exited(code: int) -> dict[str, Any]:
    return {
        "phase": "Succeeded" if code == 0 else "Failed",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {
                "name": "gpucheck",
                "image": "x",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": code}},
            }
        ],
    }


DEADLINE = {
    "phase": "Failed",
    "reason": "DeadlineExceeded",
    "message": "Pod was active on the node longer than the specified deadline",
}


# Each CoreV1Api method the fake offers (verify calls no other: the fake has no other) -> the RBAC permission it
# takes: (namespaced, resource, verb). The client's `read_*` is the API's `get`.
PERMISSIONS = {
    "list_node": (False, "nodes", "list"),
    "read_node": (False, "nodes", "get"),
    "list_pod_for_all_namespaces": (False, "pods", "list"),
    "create_namespaced_config_map": (True, "configmaps", "create"),
    "delete_namespaced_config_map": (True, "configmaps", "delete"),
    "create_namespaced_pod": (True, "pods", "create"),
    "list_namespaced_pod": (True, "pods", "list"),
    "delete_namespaced_pod": (True, "pods", "delete"),
    "read_namespaced_pod_log": (True, "pods/log", "get"),
}


class FakeCoreV1Api:
    """The CoreV1Api methods verify calls, over a cluster of `nodes`. Each node's check pod goes through its
    `script` of pod statuses, one per poll (list_namespaced_pod); the last one stays."""

    def __getattribute__(self, name: str) -> Any:
        if name in PERMISSIONS:
            object.__getattribute__(self, "called").add(name)
        return object.__getattribute__(self, name)

    def __init__(self, nodes, scripts=None, logs=None, workloads=(), fail=None):
        self.nodes = {n.metadata.name: n for n in nodes}
        self.scripts = scripts or {}
        self.logs = logs or {}
        self.workloads = list(workloads)
        self.fail = fail or {}
        self.pods: dict[str, k8s.V1Pod] = {}
        self.config_maps: dict[str, k8s.V1ConfigMap] = {}
        self.deleted: list[str] = []
        self.polls = 0
        self.called: set[str] = set()

    def _maybe_fail(self, method: str) -> None:
        error = self.fail.get(method)
        if error is not None and (not isinstance(error, tuple) or self.polls >= error[1]):
            raise error[0] if isinstance(error, tuple) else error

    def list_node(self, label_selector=None, _request_timeout=None):
        self._maybe_fail("list_node")
        wanted = dict(pair.split("=") for pair in label_selector.split(",")) if label_selector else {}
        return k8s.V1NodeList(
            items=[n for n in self.nodes.values() if all(n.metadata.labels.get(k) == v for k, v in wanted.items())]
        )

    def read_node(self, name, _request_timeout=None):
        if name not in self.nodes:
            raise ApiException(status=404, reason="Not Found")
        return self.nodes[name]

    def create_namespaced_config_map(self, namespace, body, _request_timeout=None):
        assert namespace == NS == body.metadata.namespace
        self.config_maps[body.metadata.name] = body
        return body

    def create_namespaced_pod(self, namespace, body, _request_timeout=None):
        self._maybe_fail("create_namespaced_pod")
        assert namespace == NS == body.metadata.namespace
        self.pods[body.metadata.name] = body
        return body

    def node_of(self, pod: k8s.V1Pod) -> str:
        (term,) = (
            pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        )
        return term.match_fields[0].values[0]

    def list_namespaced_pod(self, namespace, label_selector=None, _request_timeout=None):
        self._maybe_fail("list_namespaced_pod")
        key, value = label_selector.split("=")
        items = []
        for body in self.pods.values():
            if body.metadata.labels.get(key) != value:
                continue
            script = self.scripts.get(self.node_of(body), [exited(0)])
            status = script[min(self.polls, len(script) - 1)]
            items.append(k8s.V1Pod(metadata=body.metadata, spec=body.spec, status=k8s.V1PodStatus.from_dict(status)))
        self.polls += 1
        return k8s.V1PodList(items=items)

    def list_pod_for_all_namespaces(self, field_selector=None, _request_timeout=None):
        self._maybe_fail("list_pod_for_all_namespaces")
        # The selector verify sends (spec.nodeName and status.phase are selectable pod fields:
        # kubernetes pkg/registry/core/pod/strategy.go ToSelectableFields).
        node_name = field_selector.split(",")[0].removeprefix("spec.nodeName=")
        assert field_selector.endswith(",status.phase!=Succeeded,status.phase!=Failed")
        return k8s.V1PodList(items=[p for p in self.workloads if p.spec.node_name == node_name])

    def read_namespaced_pod_log(self, name, namespace, container=None, tail_lines=None, _request_timeout=None):
        return self.logs.get(self.node_of(self.pods[name]), "")

    def delete_namespaced_pod(self, name, namespace, _request_timeout=None):
        self._maybe_fail("delete_namespaced_pod")
        del self.pods[name]
        self.deleted.append(f"pod/{name}")

    def delete_namespaced_config_map(self, name, namespace, _request_timeout=None):
        del self.config_maps[name]
        self.deleted.append(f"configmap/{name}")


def workload(node_name: str, gpus: int, init_gpus: int = 0) -> k8s.V1Pod:
    def container(name, count):
        return {"name": name, "image": "w", "resources": {"limits": {"amd.com/gpu": str(count)}}}

    spec = {"nodeName": node_name, "containers": [container("main", gpus)]}
    if init_gpus:
        spec["initContainers"] = [container("init", init_gpus)]
    return k8s.V1Pod.from_dict({"metadata": {"name": f"train-{node_name}", "namespace": "ml"}, "spec": spec})


class Clock:
    """Monotonic time that moves only when verify sleeps between polls."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run_verify(api, cfg=None, node=None, schedule_wait_s=60):
    clock = Clock()
    lines: list[str] = []
    rows = verify_k8s.verify(
        cfg or config_of(), api, lines.append, node, clock=clock, sleep=clock.sleep, schedule_wait_s=schedule_wait_s
    )
    return rows, lines, clock


def fleet(count=4, **kwargs):
    return [node(f"gpu-{i}", **kwargs) for i in range(1, count + 1)]


# --- what is checked where (schema/gpu_nodes.py) ---


def test_prod_checks_its_gpu_fleet_with_the_operators_selector_and_the_gpu_taints_tolerated():
    (group,) = gpu_node_groups(config_of())
    assert (group.name, group.resource_name, group.nodes, group.gpus_per_node) == (FLEET, "amd.com/gpu", 4, 8)
    assert group.node_selector == GPU_LABELS and group.without_label is None
    assert group.tolerations == (
        {"key": "amd.com/gpu", "operator": "Equal", "value": "present", "effect": "PreferNoSchedule"},
    )


def test_partition_profiles_are_groups_of_their_own_and_gpufleet_leaves_their_nodes_to_them():
    def profiles(config):
        device_plugin = {"resourceNamingStrategy": "mixed"}
        config[P + "kubernetes"]["gpuOperator"]["deviceConfig"]["devicePlugin"] = device_plugin
        config[P + "kubernetes"]["partitionProfiles"] = {
            "cpx-nps4": {
                "gpuModel": "MI300X",
                "computePartition": "CPX",
                "memoryPartition": "NPS4",
                "gpus": 8,
                "nodes": 2,
            }
        }

    fleet_group, profile = gpu_node_groups(config_of(edit=profiles))
    assert fleet_group.without_label == PARTITION_PROFILE_LABEL
    assert not fleet_group.selects({**GPU_LABELS, PARTITION_PROFILE_LABEL: "cpx-nps4"})
    assert profile.selects({**GPU_LABELS, PARTITION_PROFILE_LABEL: "cpx-nps4"})
    # mixed naming: amd.com/<compute>_<memory> (ROCm/k8s-device-plugin internal/pkg/amdgpu/amdgpu.go L173 @ v1.31.0.9);
    # MI300X CPX: 8 XCDs per GPU, 64 logical GPUs on the node; no published floor for a CPX share.
    assert (profile.resource_name, profile.gpus_per_node, profile.floors.min_tflops) == ("amd.com/cpx_nps4", 64, None)


# --- the objects verify creates ---


def test_the_check_pod_and_its_configmap_are_valid_core_v1_objects():
    cfg = config_of()
    (group,) = gpu_node_groups(cfg)
    target = verify_k8s.Target("gpu-1", group, allocatable=8, expect=8)
    serialize = k8s.ApiClient().sanitize_for_serialization
    pod = serialize(verify_k8s.pod("abc123", 0, NS, target, "rocm/pytorch:x", cfg.checks.timeout_seconds))
    config_map = serialize(
        verify_k8s.config_map("abc123", NS, {"__init__.py": "", "gpucheck.py": "x", "train.py": "y"})
    )
    validate_object(pod)  # kubernetes_validate, strict: unknown fields fail
    validate_object(config_map)
    assert sorted(config_map["data"]) == ["__init__.py", "gpucheck.py"]
    spec = pod["spec"]
    # Pinned by node name through the scheduler (which checks resources and taints): `metadata.name` is the one
    # field matchFields accepts (kubernetes pkg/apis/core/validation nodeFieldSelectorValidators).
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
    assert "nodeName" not in spec
    assert (spec["restartPolicy"], spec["activeDeadlineSeconds"]) == ("Never", 900 + 900)
    assert spec["tolerations"] == [
        {"key": "amd.com/gpu", "operator": "Equal", "value": "present", "effect": "PreferNoSchedule"}
    ]
    (container,) = spec["containers"]
    # Extended resources: requests must equal limits (kubernetes.io/docs/tasks/configure-pod-container/
    # extended-resource/ "requests and limits must be equal"); all of the node's GPUs.
    assert container["resources"]["limits"] == {"amd.com/gpu": "8"}
    assert container["resources"]["requests"]["amd.com/gpu"] == "8"
    assert container["command"][:6] == ["python3", "-m", "programs.gpucheck", "--expect-gpus", "8", "--json"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["programs"] == "/opt/rocm-stack/programs"
    (programs,) = [v for v in spec["volumes"] if v["name"] == "programs"]
    assert programs["configMap"]["name"] == config_map["metadata"]["name"]


def test_the_pods_command_runs_gpucheck_from_the_configmap_mount_and_its_finding_reaches_the_table(tmp_path):
    """The container as the kubelet would start it, here: the ConfigMap's files at the volume's mountPath, the pod's
    env and command (its python3 is this interpreter), run from an empty directory so nothing but the mounted files
    can be imported. This machine's CPU-only torch sees no GPU: gpucheck fails on the count, as on a node whose GPUs
    are not visible, and that finding is what the table shows."""
    import os
    import subprocess
    import sys

    from components.workloads.training import program_files

    cfg = config_of()
    (group,) = gpu_node_groups(cfg)
    serialize = k8s.ApiClient().sanitize_for_serialization
    target = verify_k8s.Target("gpu-1", group, allocatable=8, expect=8)
    pod = serialize(verify_k8s.pod("abc123", 0, NS, target, "rocm/pytorch:x", cfg.checks.timeout_seconds))
    config_map = serialize(verify_k8s.config_map("abc123", NS, program_files()))
    (container,) = pod["spec"]["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "programs"]
    root = tmp_path / "root"
    for name, text in config_map["data"].items():
        path = root / mount["mountPath"].lstrip("/") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = {e["name"]: str(root / e["value"].lstrip("/")) for e in container["env"]}  # PYTHONPATH
    (tmp_path / "work").mkdir()
    assert container["command"][0] == "python3"
    result = subprocess.run(
        [sys.executable, *container["command"][1:]],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path / "work",
        env={"PATH": os.environ["PATH"], "PYTHONWARNINGS": "ignore", **env},
    )
    assert result.returncode == 1, result.stderr

    api = FakeCoreV1Api(
        fleet(4), scripts={"gpu-1": [RUNNING, exited(result.returncode)]}, logs={"gpu-1": result.stdout}
    )
    rows, _, _ = run_verify(api)
    (row,) = [r for r in rows if r.host == "gpu-1"]
    assert row.verdict == "fail"
    assert row.details.startswith("exit 1\n  - expected 8 GPU(s), saw 0 visible")


# --- the run ---


def test_every_node_passes_with_a_progress_line_per_state_and_nothing_left_behind():
    api = FakeCoreV1Api(
        fleet(),
        scripts={n: [pending(), SCHEDULED, PULLING, RUNNING, exited(0)] for n in ("gpu-1", "gpu-2", "gpu-3", "gpu-4")},
    )
    rows, lines, _ = run_verify(api)
    assert [(r.host, r.verdict) for r in rows] == [(f"gpu-{i}", "pass") for i in range(1, 5)]
    assert lines[0] == f"checking 4 GPU node(s) in namespace {NS}"
    assert [line for line in lines if line.startswith("[1/4]")] == [
        "[1/4] gpu-1 (gpuFleet): scheduled",
        "[1/4] gpu-1 (gpuFleet): scheduled (ContainerCreating)",
        "[1/4] gpu-1 (gpuFleet): running",
        "[1/4] gpu-1 (gpuFleet): passed",
    ]
    assert api.pods == {} and api.config_maps == {}
    assert verify_k8s.exit_code(rows) == 0


def test_a_failed_check_shows_gpuchecks_findings_and_exits_1():
    report = {**PASSED, "verdict": "fail", "failures": ["expected 8 GPU(s), saw 7 visible"]}
    api = FakeCoreV1Api(
        fleet(), scripts={"gpu-3": [RUNNING, exited(1)]}, logs={"gpu-3": "noise\n" + json.dumps(report)}
    )
    rows, lines, _ = run_verify(api)
    (failed,) = [r for r in rows if r.verdict == "fail"]
    assert failed.host == "gpu-3"
    assert failed.details == "exit 1\n  - expected 8 GPU(s), saw 7 visible"
    assert "[3/4] gpu-3 (gpuFleet): failed" in lines
    assert verify_k8s.exit_code(rows) == 1
    assert "NODE" in verify_k8s.table(rows, "NODE").splitlines()[0]


def test_a_node_whose_gpus_are_held_is_busy_after_the_scheduling_wait_and_nothing_is_evicted():
    api = FakeCoreV1Api(
        fleet(4),
        scripts={"gpu-2": [pending("Unschedulable")]},
        workloads=[workload("gpu-2", 2, init_gpus=4), workload("gpu-1", 0)],
    )
    rows, lines, clock = run_verify(api, schedule_wait_s=10)
    # A pod's effective request is the higher of its app containers' sum and its largest init container's
    # (kubernetes.io/docs/concepts/workloads/pods/init-containers/ "Resource sharing within containers"): 4 here.
    assert "[2/4] gpu-2 (gpuFleet): busy (4 of 8 GPUs held)" in lines
    assert [(r.host, r.verdict) for r in rows] == [
        ("gpu-1", "pass"),
        ("gpu-2", "busy"),
        ("gpu-3", "pass"),
        ("gpu-4", "pass"),
    ]
    assert 10 <= clock.now <= 14  # judged after the wait, not at the deadline
    # Only verify's own objects were deleted; the workloads were never touched.
    assert all(d.startswith(("pod/rocm-stack-verify-", "configmap/rocm-stack-verify-")) for d in api.deleted)
    assert verify_k8s.exit_code(rows) == 3


def test_an_unschedulable_node_with_no_gpus_held_fails_with_the_schedulers_message():
    api = FakeCoreV1Api(fleet(4), scripts={"gpu-4": [pending("Unschedulable")]})
    rows, lines, _ = run_verify(api, schedule_wait_s=10)
    (row,) = [r for r in rows if r.host == "gpu-4"]
    assert row.verdict == "fail" and row.details.startswith("unschedulable: 0/5 nodes are available: 1 Insufficient")


def test_a_check_past_its_active_deadline_fails_as_timed_out():
    api = FakeCoreV1Api(fleet(4), scripts={"gpu-1": [SCHEDULED, PULLING, DEADLINE]})
    rows, _, _ = run_verify(api)
    (row,) = [r for r in rows if r.host == "gpu-1"]
    assert row.verdict == "fail"
    assert row.details == "timed out: activeDeadlineSeconds 1800 passed (last state: scheduled (ContainerCreating))"


def test_a_pod_that_never_reaches_a_verdict_is_given_up_after_the_deadline_and_removed():
    api = FakeCoreV1Api(fleet(4), scripts={"gpu-2": [RUNNING]})
    rows, lines, clock = run_verify(api, schedule_wait_s=10)
    (row,) = [r for r in rows if r.host == "gpu-2"]
    assert row.verdict == "fail" and row.details.startswith("timed out: no verdict after")
    assert 10 + 1800 + 60 < clock.now < 10 + 1800 + 60 + 5
    assert api.pods == {} and api.config_maps == {}


def test_nodes_without_gpus_and_missing_nodes_are_failures_before_any_pod_runs():
    nodes = [
        node("gpu-1"),
        node("gpu-2", gpus=0),  # device plugin gone: capacity stays, at 0
        node("gpu-3", allocatable=0),
        node("cpu-1", gpus=None),  # matches the selector, never advertised GPUs: no GPU node
    ]
    rows, lines, _ = run_verify(FakeCoreV1Api(nodes))
    verdicts = {r.host: (r.verdict, r.details) for r in rows}
    assert verdicts["gpu-1"][0] == "pass" and "cpu-1" not in verdicts
    assert verdicts["gpu-2"] == (
        "fail",
        "offers no amd.com/gpu (capacity 0, allocatable 0): its device plugin is gone or every GPU is unhealthy",
    )
    assert verdicts["gpu-3"][0] == "fail"
    assert verdicts["(gpuFleet)"] == ("fail", "found 3 of the 4 nodes gpuFleet declares")
    assert lines[0] == f"checking 1 GPU node(s) in namespace {NS}"


def test_node_option_checks_that_node_only():
    api = FakeCoreV1Api(fleet(4))
    created = []
    original = api.create_namespaced_pod
    api.create_namespaced_pod = lambda ns, body, _request_timeout=None: created.append(body) or original(ns, body)
    rows, _, _ = run_verify(api, node="gpu-3")
    assert [(r.host, r.verdict) for r in rows] == [("gpu-3", "pass")]  # no missing-node row for one node
    (pod,) = created
    assert api.node_of(pod) == "gpu-3"


def test_fewer_allocatable_than_capacity_requests_what_is_there_and_expects_all():
    api = FakeCoreV1Api([node("gpu-1", gpus=8, allocatable=7)])
    created = []
    original = api.create_namespaced_pod
    api.create_namespaced_pod = lambda ns, body, _request_timeout=None: created.append(body) or original(ns, body)
    run_verify(api, node="gpu-1")
    (container,) = created[0].spec.containers
    assert container.resources.limits == {"amd.com/gpu": "7"}
    assert container.command[3:5] == ["--expect-gpus", "8"]  # gpuFleet.gpusPerNode: gpucheck fails on the count


# --- the command: refusals, errors, Ctrl-C ---


def run_main(api=None, *args, connect=None, **options):
    clock = Clock()
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = verify_k8s.main(
            options.pop("stack", "prod"),
            options.pop("node", None),
            None,
            None,
            10,
            options.pop("as_json", False),
            connect_api=connect or (lambda kubeconfig, context: api),
            clock=clock,
            sleep=options.pop("sleep", clock.sleep),
        )
    return code, out.getvalue(), err.getvalue()


def test_main_prints_the_table_and_exits_by_the_worst_verdict():
    code, out, err = run_main(FakeCoreV1Api(fleet(4), scripts={"gpu-1": [exited(1)]}))
    assert code == 1
    assert out.splitlines()[0].split() == ["NODE", "CHECK", "VERDICT", "DETAILS"]
    assert "gpu-1  gpuFleet  FAIL     exit 1" in out


def test_the_fleet_table_gives_each_node_its_gpus_image_state_check_and_tflops_against_the_floor():
    """One row per node after the checks: GPUs allocatable of expected, the image the kubelet ran (imageID: the
    digest it pulled), the node's Ready condition and cordon, gpucheck's verdict and its slowest GPU's TFLOP/s
    against MI300X's floor (600), and the restarts of the GPU pods on the node (containerStatuses restartCount)."""
    digest = "sha256:" + "ab" * 32
    nodes = fleet(4)
    for n in nodes:
        n.status.conditions = [k8s.V1NodeCondition(type="Ready", status="True")]
    nodes[1].status.conditions = [k8s.V1NodeCondition(type="Ready", status="False")]
    nodes[1].spec = k8s.V1NodeSpec(unschedulable=True)
    nodes[3].status.allocatable = {"amd.com/gpu": "7"}

    def done(code: int) -> dict[str, Any]:
        status = exited(code)
        status["containerStatuses"][0]["imageID"] = f"docker.io/rocm/pytorch@{digest}"
        return status

    fast = {**PASSED, "matmul": [{"rank": 0, "tflops": 640.5}, {"rank": 1, "tflops": 612.25}]}
    slow = {
        **PASSED,
        "verdict": "fail",
        "failures": ["rank 1: bf16 matmul result wrong"],
        "matmul": [{"rank": 0, "tflops": 650.0}, {"rank": 1, "tflops": 300.0}],
    }
    restarted = workload("gpu-1", 8)
    restarted.status = k8s.V1PodStatus(
        phase="Running",
        container_statuses=[k8s.V1ContainerStatus(name="main", image="w", image_id="", ready=True, restart_count=3)],
    )
    logs = {"gpu-1": json.dumps(fast), "gpu-2": json.dumps(fast), "gpu-3": json.dumps(slow), "gpu-4": json.dumps(fast)}

    def api() -> FakeCoreV1Api:
        scripts = {n: [done(1 if n == "gpu-3" else 0)] for n in logs}
        return FakeCoreV1Api(nodes, scripts=scripts, logs=logs, workloads=[restarted])

    code, out, _ = run_main(api())
    assert code == 1
    lines = out.split("\nFleet\n")[1].splitlines()
    rows = [[c.strip() for c in line.strip().split("  ") if c.strip()] for line in lines[3:] if line.strip()]
    short = digest[:19]
    assert rows == [
        ["gpu-1", "gpuFleet", "8 of 8", short, "Ready", "PASS", "612.2 (no floor)", "3"],
        ["gpu-2", "gpuFleet", "8 of 8", short, "NotReady, cordoned", "PASS", "612.2 (no floor)", "0"],
        ["gpu-3", "gpuFleet", "8 of 8", short, "Ready", "FAIL", "300 (no floor)", "0"],
        ["gpu-4", "gpuFleet", "7 of 8", short, "Ready", "PASS", "612.2 (no floor)", "0"],
    ], out
    code, out, _ = run_main(api(), as_json=True)
    fleet_json = json.loads(out)["fleet"]
    assert [(f["host"], f["tflops"], f["floor"], f["image"], f["restarts"]) for f in fleet_json][:3] == [
        ("gpu-1", 612.25, None, digest, 3),
        ("gpu-2", 612.25, None, digest, 0),
        ("gpu-3", 300.0, None, digest, 0),
    ]


def test_a_node_refused_before_any_pod_is_a_fleet_row_with_its_reason():
    rows = run_verify(FakeCoreV1Api([node("gpu-1", allocatable=0)]))[0]
    empty, missing = rows.fleet
    assert (empty.host, empty.check) == ("gpu-1", "fail") and empty.state.startswith("offers no amd.com/gpu")
    assert (missing.host, missing.state) == ("(gpuFleet)", "found 1 of the 4 nodes gpuFleet declares")


def test_an_api_error_mid_run_is_one_line_exit_2_and_everything_created_is_deleted():
    forbidden = ApiException(status=403, reason="Forbidden")
    forbidden.body = json.dumps({"message": 'pods is forbidden: User "ops" cannot list resource "pods"'})
    api = FakeCoreV1Api(fleet(4), fail={"list_namespaced_pod": (forbidden, 0)})
    code, out, err = run_main(api)
    assert code == 2 and out == ""
    assert err.splitlines()[-1].startswith(
        'Kubernetes API 403: pods is forbidden: User "ops" cannot list resource "pods" (verify needs RBAC'
    )
    assert "Traceback" not in err
    assert api.pods == {} and api.config_maps == {}
    assert len([d for d in api.deleted if d.startswith("pod/")]) == 4


def test_ctrl_c_deletes_the_pods_and_the_configmap():
    api = FakeCoreV1Api(fleet(4), scripts={n: [RUNNING] for n in ("gpu-1", "gpu-2", "gpu-3", "gpu-4")})

    def interrupt(seconds):
        raise KeyboardInterrupt

    code, _, err = run_main(api, sleep=interrupt)
    assert code == 130 and api.pods == {} and api.config_maps == {}
    assert err.splitlines()[-1] == "interrupted: the check pods and their ConfigMap were deleted"


def test_a_failed_cleanup_names_what_is_left_and_the_command_to_remove_it():
    api = FakeCoreV1Api(
        fleet(
            1,
        ),
        fail={"delete_namespaced_pod": ApiException(status=500, reason="boom")},
    )

    lines: list[str] = []
    with pytest.raises(ApiException):
        verify_k8s.verify(config_of(), api, lines.append, clock=Clock(), sleep=lambda s: None)
    assert lines[-1].startswith("could not delete pod/rocm-stack-verify-")
    assert "kubectl delete pod,configmap -n kube-amd-gpu -l rocm-stack/verify-run=" in lines[-1]


def test_an_unknown_node_is_refused_in_one_line():
    code, out, err = run_main(FakeCoreV1Api(fleet(4)), node="gpu-9")
    assert (code, out, err) == (2, "", "node 'gpu-9' not found in the cluster\n")


def test_a_node_that_is_no_gpu_node_is_refused():
    api = FakeCoreV1Api(fleet(4))
    api.nodes["cpu-1"] = k8s.V1Node.from_dict({"metadata": {"name": "cpu-1", "labels": {}}})
    code, _, err = run_main(api, node="cpu-1")
    assert code == 2
    assert (
        err
        == "node 'cpu-1' is not one of the stack's GPU nodes (they carry the labels feature.node.kubernetes.io/amd-gpu=true)\n"
    )
    api.nodes["cpu-2"] = node("cpu-2", gpus=None)  # the selector's labels, but no GPU resource ever
    code, _, err = run_main(api, node="cpu-2")
    assert (code, err) == (2, "node 'cpu-2' has never advertised amd.com/gpu: it is no GPU node\n")


def test_a_stack_without_kubernetes_is_refused_before_any_connection(monkeypatch):
    config = stack_file("dev")
    del config[P + "kubernetes"]
    for workload_key in ("training", "inference"):
        for item in config[P + workload_key]:
            item.pop("kubernetes")
    monkeypatch.setattr("tools.synth.stack_config", lambda stack: config)

    def never(kubeconfig, context):
        raise AssertionError("connected")

    code, _, err = run_main(connect=never, stack="dev")
    assert (code, err) == (2, verify_k8s.NO_KUBERNETES + "\n")


# --- the real client: kubeconfig and connection errors ---


@pytest.fixture
def kubeconfig(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: gpu-prod, context: {cluster: c, user: u}}]\ncurrent-context: gpu-prod\n"
    )
    return path


def test_an_unreachable_api_server_is_one_line_and_exit_2_through_the_cli(kubeconfig, capsys):
    code = cli_run(["verify", "--stack", "prod", "--kubernetes", "--kubeconfig", str(kubeconfig)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("cannot reach the Kubernetes API: ") and "Connection refused" in err
    assert len(err.splitlines()) == 1


def test_a_context_missing_from_the_kubeconfig_is_one_line_and_exit_2(kubeconfig, capsys):
    code = cli_run(["verify", "--stack", "prod", "--kubernetes", "--kubeconfig", str(kubeconfig), "--context", "nope"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "nope" in err


def test_the_rbac_of_the_docs_is_valid_and_grants_every_call_verify_makes():
    # Runs that make every call: a busy node (the count of held GPUs), a failed one (its logs), --node.
    busy_and_failed = FakeCoreV1Api(
        fleet(4),
        scripts={"gpu-1": [pending("Unschedulable")], "gpu-2": [exited(1)]},
        workloads=[workload("gpu-1", 8)],
    )
    one_node = FakeCoreV1Api(fleet(4))
    run_verify(busy_and_failed, schedule_wait_s=10)
    run_verify(one_node, node="gpu-3")
    called = busy_and_failed.called | one_node.called
    from pathlib import Path

    import yaml

    text = (Path(__file__).parents[1] / "docs" / "operations.md").read_text()
    block = text.split("### Verify on Kubernetes", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    role, cluster_role = yaml.safe_load_all(block)
    for obj in (role, cluster_role):
        validate_object(obj)
    assert role["metadata"]["namespace"] == NS

    def granted(obj, resource, verb):
        return any("" in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in obj["rules"])

    assert called == set(PERMISSIONS)
    for method, (namespaced, resource, verb) in PERMISSIONS.items():
        assert granted(role if namespaced else cluster_role, resource, verb), method
