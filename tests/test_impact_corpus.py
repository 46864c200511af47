"""An independent corpus of Docker day-2 changes a fleet meets, checked against `rocm-stack diff` (tools/impact.py).

Each row of CHANGES is one change to a committed stack, run through the real program before and after; its
expectation (what `pulumi up` does to the named resources, and exactly which running containers stop) is written
from the providers' own rules, each row with its upstream source, never from the preview's output. PLAN_ROWS are
generated from terraform-provider-docker's schema table (components/docker/provider_schema.py, checked against the
upstream source by tests/test_impact_rules.py): the inputs whose removal, empty value or default the provider's
diff does not see. Upstream versions: terraform-provider-docker ("TFD") v4.5.0, what pulumi-docker 5.2.0 bridges
(pulumi-terraform-bridge v3.137.0, terraform-plugin-sdk v2.40.1), pulumi/pulumi v3.259.0.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from components.docker.provider_schema import CONTAINER, DOCKER_CONTAINER, EMPTY_IS_UNCHANGED, NETWORK, REMOTE_IMAGE
from components.docker.provider_schema import VOLUME
from conftest import DOCKER_PROVIDER, stack_file, synthesized
from test_impact import report_of
from tools.impact import ImpactReport
from tools.impact_rules import Action

P = "rocm-stack:"
C = "TFD internal/provider/resource_docker_container.go"
FUNCS = "TFD internal/provider/resource_docker_container_funcs.go"
SDK = "terraform-plugin-sdk v2.40.1 helper/schema/schema.go"
DELETE_FIRST = "pulumi-docker provider/resources.go L114 (docker_container `DeleteBeforeReplace: true`)"
URN_DELETES = "pulumi/pulumi pkg/resource/deploy/step_generator.go GenerateDeletes L2326 (an unregistered URN)"
REPLACE_ON_CHANGES = "pulumi/pulumi step_generator.go applyReplaceOnChanges L3122-3213 (on the provider's diff)"
TYPES = {"c": CONTAINER, "i": REMOTE_IMAGE, "n": NETWORK, "v": VOLUME, "p": DOCKER_PROVIDER}
D, R, U, X, N = Action.DELETE, Action.DELETE_REPLACE, Action.UPDATE, Action.REPLACE, Action.CREATE


@dataclass(frozen=True)
class Change:
    id: str
    change: Callable[[dict[str, Any]], None]
    expect: dict[str, Action]  # "c:gpu-node-3-train-a" (c container, i image, n network, v volume, p provider)
    stops: frozenset[str]  # the running containers stopped, exactly
    source: str
    steps: list[list[str]] | None = None  # a vLLM workload's roll, when it has one
    stack: str = "prod"
    untouched: tuple[str, ...] = ()  # resources the change must leave alone
    before: Callable[[dict[str, Any]], None] | None = None  # the base stack's own change, if any


def _host(config: dict[str, Any], index: int) -> dict[str, Any]:
    host: dict[str, Any] = config[P + "hosts"][index]
    return host


def _shell(config: dict[str, Any]) -> dict[str, Any]:
    """gpu-node-3's `train-a`: a plain shell partition (no workload) beside the vLLM server `serve-b`."""
    shell: dict[str, Any] = _host(config, 2)["containers"][0]
    return shell


def _set(**keys: Any) -> Callable[[dict[str, Any]], None]:
    return lambda config: _shell(config).update(keys)


def _remove_host(config: dict[str, Any]) -> None:
    config[P + "hosts"].pop(3)
    config[P + "inference"][0]["docker"]["partitions"] = ["gpu-node-3/serve-b"]


def _leave_vllm(config: dict[str, Any]) -> None:
    config[P + "inference"][0]["docker"]["partitions"] = ["gpu-node-3/serve-b"]


def _images(**images: str) -> Callable[[dict[str, Any]], None]:
    return lambda config: config.setdefault(P + "images", {}).update(images)


def _ports(*ports: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda config: _shell(config).update(ports=list(ports))


SHELL = "gpu-node-3-train-a"
VLLM = ["gpu-node-3/serve-b", "gpu-node-4/serve-b"]
NODE_4 = {
    f"gpu-node-4-{n}"
    for n in ("amd-device-metrics-exporter", "cadvisor", "node-exporter", "serve-b", "serve-b-proxy", "train-a")
}
NODE_3_RUNNING = {n.replace("-4-", "-3-") for n in NODE_4}
PORT_A, PORT_B = {"internal": 8888, "external": 18888}, {"internal": 9999, "external": 19999}
PYTORCH = "rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.9.0"

CHANGES = [
    Change(
        "host-removed",
        _remove_host,
        {"c:gpu-node-4-train-a": D, "c:gpu-node-4-serve-b": D, "n:gpu-node-4-serve-b-vllm": D, "p:gpu-node-4": D},
        frozenset(NODE_4),
        f"{URN_DELETES}; {FUNCS} resourceDockerContainerDelete L1079-1098; the monitoring host's scrape targets are "
        f"an upload of the one-shot prometheus-files container ({C} L987 `upload` ForceNew; it has exited: "
        "restart `no`), replaced without stopping anything",
        untouched=("c:gpu-node-3-serve-b",),
    ),
    Change(
        "host-added",
        lambda c: c[P + "hosts"].append({"name": "ws-2", "docker": {"host": "ssh://me@ws-2"}, "gpus": 1}),
        {"p:ws-2": N, "c:ws-2-rocm-dev": N, "i:ws-2-pytorch": N},
        frozenset(),
        "pulumi/pulumi urn.go NewURN: new URNs are creates; no input of another resource changes",
        stack="dev",
        untouched=("c:workstation-train", "c:workstation-serve"),
    ),
    Change("hosts-reordered", lambda c: c[P + "hosts"].reverse(), {}, frozenset(), "pulumi/pulumi urn.go NewURN"),
    Change(
        "partitions-reordered",
        lambda c: _host(c, 2)["containers"].reverse(),
        {},
        frozenset(),
        "pulumi/pulumi urn.go NewURN (a partition's URN is its host and name; the placement lock keeps its GPUs)",
    ),
    Change("env-added", _set(env={"FOO": "1"}), {f"c:{SHELL}": R}, frozenset({SHELL}), f"{C} L590; {DELETE_FIRST}"),
    Change(
        "volume-added",
        _set(volumes=[{"hostPath": "/data", "containerPath": "/data"}]),
        {f"c:{SHELL}": R},
        frozenset({SHELL}),
        f"{C} L434 (`volumes` ForceNew set of blocks); {DELETE_FIRST}",
    ),
    Change(
        "volume-read-only",
        _set(volumes=[{"hostPath": "/data", "containerPath": "/data", "readOnly": True}]),
        {f"c:{SHELL}": R},
        frozenset({SHELL}),
        f"{C} L466 (`volumes.read_only` ForceNew); {DELETE_FIRST}",
    ),
    Change(
        "port-published",
        _set(ports=[{"internal": 8888, "external": 18888}]),
        {f"c:{SHELL}": R},
        frozenset({SHELL}),
        f"{C} L487 (`ports` ForceNew), L1193-1196 (a new length is never suppressed); {DELETE_FIRST}",
    ),
    Change(
        "restart-policy",
        _set(restart="always"),
        {f"c:{SHELL}": U},
        frozenset(),
        f"{C} L230 (`restart` not ForceNew); {FUNCS} L1053-1068 (ContainerUpdate with the new RestartPolicy)",
    ),
    Change("shm-size", _set(shmSize="32GiB"), {f"c:{SHELL}": R}, frozenset({SHELL}), f"{C} L863; {DELETE_FIRST}"),
    Change(
        "memory-limit-added",
        _set(memory="256GiB"),
        {f"c:{SHELL}": R},
        frozenset({SHELL}),
        f"{C} L842 (`memory` not ForceNew: a diff) and the stack's replaceOnChanges on it: {REPLACE_ON_CHANGES}",
    ),
    Change(
        "cpuset-changed",
        _set(cpuset="96-191"),
        {f"c:{SHELL}": R},
        frozenset({SHELL}),
        f"{C} L879 (`cpu_set`, a diff) and replaceOnChanges: {REPLACE_ON_CHANGES}",
    ),
    Change(
        "stop-grace",
        _set(stopGraceSeconds=60),
        {f"c:{SHELL}": R},
        frozenset({SHELL}),
        f"{C} L321 (`stop_timeout` ForceNew); {DELETE_FIRST}",
    ),
    Change(
        "shell-command",
        _set(command=["sleep", "1d"]),
        {f"c:{SHELL}": R},
        frozenset({SHELL}),
        f"{C} L163 (`command` ForceNew list); {DELETE_FIRST}",
    ),
    Change(
        "shell-image",
        _set(image="vllm"),
        {f"c:{SHELL}": R, "i:gpu-node-3-pytorch": D},
        frozenset({SHELL}),
        f"{C} L141 (`image` ForceNew); {URN_DELETES} (no partition of the host uses pytorch any more)",
    ),
    Change(
        "log-max-size",
        lambda c: _host(c, 2).update(logs={"maxSize": "200MiB"}),
        {f"c:{name}": R for name in NODE_3_RUNNING},
        frozenset(NODE_3_RUNNING),
        f"{C} L894 (`log_opts` ForceNew map: {SDK} diffMap L1463, each key finalized with the map's schema)",
        steps=[["gpu-node-3/serve-b"]],
        untouched=("c:gpu-node-4-serve-b",),
    ),
    Change(
        "log-max-file",
        lambda c: _host(c, 2).update(logs={"maxFile": 3}),
        {f"c:{name}": R for name in NODE_3_RUNNING},
        frozenset(NODE_3_RUNNING),
        f"{C} L894 (`log_opts` ForceNew map)",
        steps=[["gpu-node-3/serve-b"]],
    ),
    Change(
        "ssh-options",
        lambda c: _host(c, 2)["docker"].update(sshOpts=["-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=9"]),
        {"p:gpu-node-3": U},
        frozenset(),
        "pulumi-terraform-bridge pkg/tfbridge/provider.go configDiffer.DiffConfig (no ForcesProviderReplace in "
        "pulumi-docker provider/resources.go L94-107)",
    ),
    Change(
        "endpoint-moved",
        lambda c: _host(c, 2)["docker"].update(host="ssh://deploy@10.0.0.3"),
        {"p:gpu-node-3": U},
        frozenset(),
        "configDiffer.DiffConfig as above; the scrape targets' upload replaces the exited one-shot files container",
        untouched=(f"c:{SHELL}", "c:gpu-node-3-serve-b"),
    ),
    Change(
        "monitoring-off",
        lambda c: c.pop(P + "monitoring"),
        {
            "c:gpu-node-1-prometheus": D,
            "c:gpu-node-1-grafana": D,
            "c:gpu-node-1-alertmanager": D,
            "v:gpu-node-1-prometheus-data": D,
        },
        frozenset({"gpu-node-1-prometheus", "gpu-node-1-grafana", "gpu-node-1-alertmanager"}),
        f"{URN_DELETES}; the data volumes' retainOnDelete: step.go DeleteStep.Apply L661-662; the files and token "
        "containers are one-shot (restart `no`), exited before",
    ),
    Change(
        "max-unavailable",
        lambda c: c[P + "inference"][0]["docker"].update(maxUnavailable=2),
        {},
        frozenset(),
        "dependsOn is the engine's bookkeeping, no provider call (step_generator.go L3284-3291 @ 1b59498)",
    ),
    Change(
        "model-changed",
        lambda c: c[P + "inference"][0].update(model="meta-llama/Llama-3.1-70B-Instruct"),
        {"c:gpu-node-3-serve-b": R, "c:gpu-node-4-serve-b": R},
        frozenset({"gpu-node-3-serve-b", "gpu-node-4-serve-b"}),
        f"{C} L163 (`command` ForceNew); the roll: SDK resource.py prepare_resource awaits each dependsOn URN",
        steps=[[VLLM[0]], [VLLM[1]]],
        untouched=("c:gpu-node-3-serve-b-proxy",),
    ),
    Change(
        "training-steps",
        lambda c: c[P + "training"][0].update(steps=200000),
        {"c:gpu-node-1-train-a": R, "c:gpu-node-2-train-a": R},
        frozenset({"gpu-node-1-train-a", "gpu-node-2-train-a"}),
        f"{C} L590 (`env` ForceNew: TRAIN_STEPS); {DELETE_FIRST}",
    ),
    Change(
        "device-group",
        lambda c: _host(c, 2).update(deviceGroups=[44]),
        {f"c:{SHELL}": R, "c:gpu-node-3-serve-b": R},
        frozenset({SHELL, "gpu-node-3-serve-b"}),
        f"{C} L1118 (`group_add` ForceNew set)",
        steps=[["gpu-node-3/serve-b"]],
    ),
    Change(
        "pytorch-bump",
        _images(pytorch=PYTORCH),
        {"i:gpu-node-3-pytorch": X, **{f"c:gpu-node-{n}-train-a": R for n in (1, 2, 3, 4)}},
        frozenset(f"gpu-node-{n}-train-a" for n in (1, 2, 3, 4)),
        "TFD resource_docker_image.go L36 (`name` ForceNew; no DeleteBeforeReplace for docker_image: create "
        f"first); the new image id is unknown in the preview and {C} L141 `image` is ForceNew ({SDK} finalizeDiff "
        "L575: RequiresNew on NewComputed)",
    ),
    Change(
        "vllm-bump",
        _images(vllm="rocm/vllm:rocm7.0.0_vllm_0.11.3_20260101"),
        {"c:gpu-node-3-serve-b": R, "c:gpu-node-1-serve-b": R},
        frozenset(f"gpu-node-{n}-serve-b" for n in (1, 2, 3, 4)),
        f"{C} L141 via the replaced image's unknown id (finalizeDiff L575); the roll: dependsOn order",
        steps=[[VLLM[0]], [VLLM[1]]],
        untouched=("c:gpu-node-3-serve-b-proxy",),
    ),
    Change(
        "checks-off",
        lambda c: c.update({P + "checks": {"enable": False}}),
        {"c:gpu-node-3-train-a-gpucheck": D, "c:gpu-node-3-preflight": D},
        frozenset(),
        f"{URN_DELETES} (attached one-shot containers, exited); the partitions only lose dependsOn edges",
        untouched=(f"c:{SHELL}",),
    ),
    Change(
        "partition-leaves-vllm",
        _leave_vllm,
        {"c:gpu-node-4-serve-b": R, "c:gpu-node-4-serve-b-proxy": D, "n:gpu-node-4-serve-b-vllm": D},
        frozenset({"gpu-node-4-serve-b", "gpu-node-4-serve-b-proxy", "gpu-node-4-node-exporter"}),
        f"same URN, new role: {C} L141/L163 ForceNew, {DELETE_FIRST}; the proxy and network no longer registered: "
        f"{URN_DELETES}; node-exporter's volumes (L434) drop the vLLM textfile mount",
    ),
    Change(
        "partition-removed",
        lambda c: _host(c, 0)["containers"].pop(1),
        {"c:gpu-node-1-serve-b": D, "c:gpu-node-1-train-a": R, "i:gpu-node-1-vllm": D},
        frozenset({"gpu-node-1-serve-b", "gpu-node-1-train-a"}),
        f"{URN_DELETES}; the last partition takes the host's IPC namespace: {C} L1111 (`ipc_mode` ForceNew)",
    ),
    Change(
        "gpu-model",
        lambda c: _host(c, 2).update(gpuModel="MI325X"),
        {"c:gpu-node-3-preflight": R},
        frozenset(),
        f"{C} L163 (the preflight's `command` names the model: ForceNew); it and the files writer are one-shot",
        untouched=(f"c:{SHELL}", "c:gpu-node-3-serve-b"),
    ),
    Change(
        "security-hardened",
        lambda c: c.update({P + "security": {"profile": "hardened"}}),
        {"c:workstation-train": R, "c:workstation-serve": R},
        frozenset({"workstation-train", "workstation-serve"}),
        f"{C} L262 (`capabilities` ForceNew block), L291 (`security_opts` ForceNew set); {DELETE_FIRST}",
        stack="dev",
    ),
    Change(
        "startup-timeout",
        lambda c: c[P + "inference"][0].update(startupTimeoutSeconds=1500),
        {"c:gpu-node-3-serve-b": U, "c:gpu-node-3-serve-b-health": R},
        frozenset(),
        f"{C} L86 `wait_timeout`, L1045-1091 healthcheck: not ForceNew, and the update applies neither ({FUNCS} "
        "L1016-1019); the health check's `command` (L163) carries the wait: it runs again",
    ),
    Change(
        "ports-reordered",
        _ports(PORT_B, PORT_A),
        {},
        frozenset(),
        f"{C} L534, L1192-1247 (`ports` DiffSuppressFunc: each old port found by internal port, same external)",
        before=_ports(PORT_A, PORT_B),
    ),
]


def _key(key: str) -> tuple[str, str]:
    kind, name = key.split(":", 1)
    return TYPES[kind], name


def _report(row: Change) -> ImpactReport:
    """The preview of one row: its stacks synthesized when its test runs, so no test carries the others' synths."""
    base = stack_file(row.stack)
    if row.before is not None:
        row.before(base)
    head = copy.deepcopy(base)
    row.change(head)
    return report_of(synthesized(row.stack, base), synthesized(row.stack, head))


@pytest.mark.parametrize("row", CHANGES, ids=[row.id for row in CHANGES])
def test_the_preview_agrees_with_the_providers_rules(row: Change) -> None:
    report = _report(row)
    impacts = {(i.type, i.name): i for i in report.impacts}
    assert all(i.action is not None for i in report.impacts), "a change no rule covers"
    for key, action in row.expect.items():
        assert key_action(impacts, key) is action, f"{key}: {row.source}"
    for key in row.untouched:
        assert _key(key) not in impacts, f"{key}: {row.source}"
    assert {i.name for i in report.containers_stopped} == row.stops, row.source
    if row.steps is not None:
        (roll,) = [r for r in report.rolls if not r.if_rotated]
        assert roll.steps == row.steps
    if not row.expect:
        assert report.impacts == [], row.source


def key_action(impacts: dict[tuple[str, str], Any], key: str) -> Action | None:
    impact = impacts.get(_key(key))
    return impact.action if impact is not None else None


def test_reordering_publications_of_one_port_is_a_replacement():
    """TFD's `ports` DiffSuppressFunc (L1192-1247) is no set: each old port is compared with the first new port of
    the same internal port and protocol, so one port published on two addresses in the other order differs."""
    base = _plan({"ports": [_port(8000, 8000, "127.0.0.1"), _port(8000, 8001, "10.0.0.1")]})
    head = _plan({"ports": [_port(8000, 8001, "10.0.0.1"), _port(8000, 8000, "127.0.0.1")]})
    (impact,) = report_of(base, head).impacts
    assert impact.action is Action.DELETE_REPLACE


def _port(internal: int, external: int, ip: str) -> dict[str, Any]:
    return {"internal": internal, "external": external, "ip": ip, "protocol": "tcp"}


def _plan(inputs: dict[str, Any]) -> dict[str, Any]:
    return {
        "stack": "prod",
        "resources": [
            {
                "type": CONTAINER,
                "name": "c",
                "urn": f"urn:pulumi:prod::rocm-stack::{CONTAINER}::c",
                "provider": "urn:pulumi:prod::rocm-stack::pulumi:providers:docker::h",
                "inputs": {"name": "c", "image": "sha256:1", **inputs},
                # Every input: replaceOnChanges acts only where the provider's diff sees a change.
                "replace_on_changes": sorted(p for p in DOCKER_CONTAINER if "." not in p),
            }
        ],
    }


# --- generated from the schema table: what the provider's diff does not see ---------------------------------------

SAMPLES: dict[str, Any] = {"value": "x", "set": ["x"], "list": ["x"], "map": {"k": "x"}}


def _sample(path: str) -> Any:
    attribute = DOCKER_CONTAINER[path]
    if attribute.kind in ("set of blocks", "list of blocks"):
        fields = [p for p in DOCKER_CONTAINER if p.startswith(path + ".") and p.count(".") == 1]
        block = {p.split(".")[1]: "x" for p in fields if DOCKER_CONTAINER[p].kind == "value"}
        return [block] if attribute.kind == "set of blocks" else block
    return SAMPLES[attribute.kind]


COMPUTED = sorted(p for p, a in DOCKER_CONTAINER.items() if "." not in p and a.computed)


@pytest.mark.parametrize("path", COMPUTED)
def test_removing_an_optional_computed_input_is_no_change(path):
    """An Optional+Computed attribute left out of the config keeps the state's value: no diff (sdk schema.go
    diffString L1750 `removed && schema.Computed`, diffList L1351, diffSet L1592); replaceOnChanges acts on the
    provider's diff only (step_generator.go applyReplaceOnChanges L3126: DiffNone returns as it is)."""
    report = report_of(_plan({path: _sample(path)}), _plan({}))
    assert report.impacts == []


DEFAULTED = sorted(p for p, a in DOCKER_CONTAINER.items() if "." not in p and a.default is not None)


@pytest.mark.parametrize("path", DEFAULTED)
def test_declaring_an_inputs_default_is_no_change(path):
    """An input left out is read as its schema Default (sdk field_reader_config.go L230 readPrimitive), so declaring
    that value, or leaving it out again, is no diff (schema.go diffString L1733 `os == ns`)."""
    default = DOCKER_CONTAINER[path].default
    assert report_of(_plan({}), _plan({path: default})).impacts == []
    assert report_of(_plan({path: default}), _plan({})).impacts == []


@pytest.mark.parametrize("path", sorted(EMPTY_IS_UNCHANGED[CONTAINER]))
def test_an_empty_user_or_working_dir_is_no_change(path):
    """`user` and `working_dir` have a DiffSuppressFunc that reads a new "" as the old value (L187-192, L248-254):
    removing them, or setting them empty, is no diff although both are ForceNew."""
    assert report_of(_plan({path: "1000"}), _plan({})).impacts == []
    assert report_of(_plan({path: "1000"}), _plan({path: ""})).impacts == []
    (impact,) = report_of(_plan({path: "1000"}), _plan({path: "1001"})).impacts
    assert impact.action is Action.DELETE_REPLACE


def test_nested_defaults_are_no_change():
    """A block's attribute left out is its Default too: a device's permissions "rwm" (L687), a port's ip and
    protocol (L512, L528)."""
    before = _plan({"devices": [{"hostPath": "/dev/kfd"}], "ports": [{"internal": 80, "external": 80}]})
    after = _plan(
        {
            "devices": [{"hostPath": "/dev/kfd", "permissions": "rwm"}],
            "ports": [{"internal": 80, "external": 80, "ip": "0.0.0.0", "protocol": "tcp"}],
        }
    )
    assert report_of(before, after).impacts == []
    changed = copy.deepcopy(after)
    changed["resources"][0]["inputs"]["devices"][0]["permissions"] = "r"
    (impact,) = report_of(before, changed).impacts
    assert impact.action is Action.DELETE_REPLACE
