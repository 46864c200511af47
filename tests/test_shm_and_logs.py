"""Issue 21 defects 4 and 5: each partition's own /dev/shm, one model cache per vLLM server, rotated logs and
memory limits, each against its upstream fact. The real daemon proves them in e2e/test_e2e_render_nodes.py (a file
in one partition's /dev/shm absent in the other, each /dev/shm of its size, the training under private IPC) and
e2e/deployment.py (every container as HOST.sh created it reads back, through the provider's Read, as declared).

Upstream facts:
  * moby v20.10.24 daemon/container_operations_unix.go L117-121 (setupIpcDirs): `--ipc=host` uses the host's
    /dev/shm; daemon/oci_linux.go L552-559 sizes only a container's own /dev/shm mount, so ShmSize is ignored there.
    L74: a `private` namespace cannot be joined (`--ipc container:<it>`: "non-shareable IPC"); `shareable` can.
  * PyTorch README, "Using pre-built images": "you should increase shared memory size either with `--ipc=host` or
    `--shm-size` command line options to `nvidia-docker run`" (either one; pytorch/pytorch README.md).
  * docs.docker.com/engine/logging/drivers/json-file: `max-size` "Defaults to -1 (unlimited)", `max-file` "Only
    effective when max-size is also set"; the default driver keeps everything.
  * terraform-provider-docker v4.5.0 (pulumi-docker 5.2.0): resource_docker_container.go L842-861 `memory` and
    `memory_swap` in MB, neither Computed; L886-898 `log_driver` (Computed) and `log_opts`; L1111 `ipc_mode`
    (Computed, ForceNew); no `pids_limit` anywhere in the resource. Read (resource_docker_container_funcs.go):
    L932 memory = HostConfig.Memory/1024/1024, L940-944 memory_swap likewise (as is when <= 0), L951 log_driver =
    LogConfig.Type, L952 log_opts only when declared, L973 ipc_mode = HostConfig.IpcMode.
  * moby v20.10.24 daemon/daemon_unix.go L343-346: with a memory limit and no swap limit the daemon stores
    MemorySwap = 2 x Memory; L353-360 and daemon/config/config_unix.go L16: an unset IpcMode becomes the daemon's
    default-ipc-mode, "private" unless configured.
"""

from __future__ import annotations

import copy

import inspect

import pulumi_docker as docker
import pytest

from conftest import (
    CONTAINER,
    check_containers,
    committed_plan,
    gpu_containers,
    partition_of,
    refusal,
    stack_file,
    stack_without_kubernetes,
)
import rules
from policy.rocm_policy import offline
from schema import load
from components.docker.daemon import PROBE_MEMORY_MIB
from tools.synth import docker_create_args, synthesize

P = "rocm-stack:"
MIB = 1024**2


def host(containers, **extra):
    return {"name": "box", "gpus": 2, "containers": containers, **extra}


TWO = [{"name": "a", "gpus": [0]}, {"name": "b", "gpus": [1]}]


def containers_of(plan, box: str) -> dict[str, dict]:
    """Every container declared on host `box` (partitions and their checks, the preflight), by Docker name."""
    (provider,) = [r["urn"] for r in plan.of_type("pulumi:providers:docker") if r["name"] == box]
    return {c["inputs"]["name"]: c["inputs"] for c in plan.of_type(CONTAINER) if c["provider"] == provider}


# --- 4. IPC -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("plan_name", ["dev_plan", "prod_plan"])
def test_partitions_beside_others_get_their_own_ipc_namespace_with_their_shm_size(plan_name, request):
    """Both committed stacks run two partitions per host: host IPC would give both the host's /dev/shm (one reads
    what the other writes there) and ignore their shmSize. Each partition and its GPU check: `private`."""
    plan = request.getfixturevalue(plan_name)
    partitions = gpu_containers(plan) + [c for c in check_containers(plan) if partition_of(c)]
    assert partitions
    for c in partitions:
        assert (c["inputs"]["ipcMode"], c["inputs"]["shmSize"] >= 1024) == ("private", True), c["name"]
        # HOST.sh passes it on: the daemon sizes the partition's own /dev/shm (e2e proves it).
        args = docker_create_args(c["inputs"], {})
        assert "--ipc=private" in args and f"--shm-size={c['inputs']['shmSize']}m" in args


def test_a_hosts_only_partition_keeps_the_hosts_ipc_and_ipc_can_be_chosen():
    config = stack_without_kubernetes("dev")
    config[P + "hosts"] = [host([{"name": "solo"}])]
    (solo,) = gpu_containers(synthesize("dev", config))
    assert solo["inputs"]["ipcMode"] == "host"  # a workstation as before: no replacement (ipc_mode is ForceNew)
    config[P + "hosts"] = [host([{"name": "solo", "ipc": "private"}])]
    (solo,) = gpu_containers(synthesize("dev", config))
    assert solo["inputs"]["ipcMode"] == "private"
    # A developer's choice on a workstation with two partitions (one user): dev keeps it.
    config[P + "hosts"] = [host([{**TWO[0], "ipc": "host"}, TWO[1]])]
    modes = {c["name"]: c["inputs"]["ipcMode"] for c in gpu_containers(synthesize("dev", config))}
    assert modes == {"box-a": "host", "box-b": "private"}


def test_prod_refuses_host_ipc_beside_other_partitions_and_the_pack_too():
    """One rule (rules/containers.py ipc_problems) for the config loader and the policy pack."""
    prod = stack_file("prod")
    prod[P + "hosts"][0]["containers"][1]["ipc"] = "host"
    message = refusal("prod", prod)
    assert (
        f"{P}hosts[0].containers[1].ipc: partition 'serve-b' uses the host's IPC namespace (ipc: host) beside 1 other "
        "partition(s): they would share the host's /dev/shm; prod gives each partition its own (ipc: private, "
        "sized by shmSize)"
    ) in message
    resources = copy.deepcopy(committed_plan("prod").resources)  # changed below
    for r in resources:
        if r["type"] == CONTAINER and (partition_of(r) or "").startswith("gpu-node-2/"):
            r["inputs"]["ipcMode"] = "host"
    with offline.stack_environment("prod"):
        violations = [v.message for v in offline.check(resources) if v.policy == "gpu-partitions-isolated"]
    assert violations == [
        f"host 'gpu-node-2': partition '{name}' uses the host's IPC namespace (ipc: host) beside 1 other "
        "partition(s): they would share the host's /dev/shm; prod gives each partition its own (ipc: private, "
        "sized by shmSize) (rule gpu-partitions-isolated)"
        for name in ("serve-b", "train-a")
    ]
    # The same containers on a dev stack (its URNs name the stack too: a prod URN is judged as prod).
    for r in resources:
        r["urn"] = r["urn"].replace("urn:pulumi:prod::", "urn:pulumi:dev::", 1)
    with offline.stack_environment("dev"):
        assert [v for v in offline.check(resources) if v.policy == "gpu-partitions-isolated"] == []
    assert rules.ipc_problems({"solo": "host"}, prod=True) == []


def test_an_unknown_ipc_value_is_refused_naming_the_key():
    problems = refusal("dev", {P + "hosts": [host([{**TWO[0], "ipc": "shareable"}, TWO[1]])]})
    assert f"{P}hosts[0].containers[0].ipc: expected 'private' or 'host'" in problems


def test_each_vllm_server_of_a_host_has_its_own_model_cache():
    """One writable cache shared by a host's servers would let one alter the weights another loads."""
    config = stack_without_kubernetes("dev")
    config[P + "hosts"] = [host(TWO)]
    config[P + "inference"] = [
        {
            "name": name,
            "model": "Qwen/Qwen2.5-0.5B-Instruct",
            "docker": {"partitions": [f"box/{p}"], "publishedPort": port},
        }
        for name, p, port in (("chat", "a", 8000), ("code", "b", 8001))
    ]
    plan = synthesize("dev", config)
    caches = {
        c["name"]: [v["hostPath"] for v in c["inputs"]["volumes"] if v["containerPath"] == "/root/.cache/huggingface"]
        for c in gpu_containers(plan)
    }
    assert caches == {"box-a": ["/var/lib/rocm-stack/huggingface/a"], "box-b": ["/var/lib/rocm-stack/huggingface/b"]}


# --- 5. logs and limits -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("plan_name", ["dev_plan", "prod_plan"])
def test_every_container_on_a_gpu_host_rotates_its_log(plan_name, request):
    """json-file's default max-size is unlimited: each container (partitions, workloads, checks, preflight) gets
    max-size and max-file, and the driver they belong to by name (the daemon's default may be another)."""
    plan = request.getfixturevalue(plan_name)
    hosts = [r["name"] for r in plan.of_type("pulumi:providers:docker")]
    containers = [c for h in hosts for c in containers_of(plan, h).values()]
    assert len(containers) >= 5
    for i in containers:
        assert (i["logDriver"], i["logOpts"]) == ("json-file", {"max-file": "5", "max-size": "100m"}), i["name"]
        args = docker_create_args(i, {})
        assert args[args.index("--log-driver=json-file") + 1 :][:2] == [
            "--log-opt=max-file=5",
            "--log-opt=max-size=100m",
        ]


def test_log_rotation_and_memory_come_from_the_config():
    config = stack_file("dev")
    config.pop(P + "kubernetes")
    for workload in ("training", "inference"):
        config[P + workload][0].pop("kubernetes")
    config[P + "hosts"][0]["logs"] = {"maxSize": "20MiB", "maxFile": 2}
    config[P + "hosts"][0]["containers"][0]["memory"] = "48GiB"
    plan = synthesize("dev", config)
    for name, i in containers_of(plan, "workstation").items():
        assert i["logOpts"] == {"max-file": "2", "max-size": "20m"}, name
        # The partition `train` and its GPU check: 48 GiB in the provider's MiB, no swap (memory_swap = memory),
        # which is also what the provider reads back (without it the daemon stores 2 x memory: a perpetual diff).
        # The monitoring exporters have fixed limits of their own (components/monitoring/docker_host.py).
        limits = (i.get("memory"), i.get("memorySwap"))
        expected = {"rocm-stack-node-exporter": 128, "rocm-stack-cadvisor": 512}.get(name)
        if name.startswith("preflight-"):  # its probe of the daemon (components/docker/daemon.py)
            expected = PROBE_MEMORY_MIB
        if name == "train" or name.startswith("gpucheck-train-"):
            expected = 49152
        assert limits == (expected, expected), name
    train = containers_of(plan, "workstation")["train"]
    assert {"--memory=49152m", "--memory-swap=49152m"} <= set(docker_create_args(train, {}))


@pytest.mark.parametrize(
    ("key", "value", "explanation"),
    [
        ("containers[0].memory", "4MiB", "must be at least 6MiB (got 4MiB)"),
        ("containers[0].memory", "1500KiB", "must be at least 6MiB"),
        ("containers[0].memory", "6.5MiB", "must be a whole number of MiB (got 6656KiB), e.g. 7MiB"),
        ("containers[0].memory", 64, "64 without a unit is 64 bytes"),
        ("logs.maxSize", "512KiB", "must be at least 1MiB"),
        ("logs.maxFile", 0, "must be at least 1"),
    ],
)
def test_bad_limits_are_refused_naming_the_key(key, value, explanation):
    box = host([{"name": "solo"}])
    section, _, field = key.rpartition(".")
    target = box["containers"][0] if section == "containers[0]" else box.setdefault(section, {})
    target[field] = value
    with pytest.raises(Exception) as error:
        load("dev", {P + "hosts": [box]})
    assert any(str(p).startswith(f"{P}hosts[0].{key}: ") and explanation in str(p) for p in error.value.problems), [
        str(p) for p in error.value.problems
    ]


def test_a_memory_limit_must_leave_room_beside_the_partitions_shm():
    """tmpfs pages are charged to the memory cgroup of the process that writes them (Linux
    Documentation/admin-guide/cgroup-v2.rst, "Memory Ownership": "A memory area is charged to the cgroup which
    instantiated it"; shmem/tmpfs pages included)."""
    box = host([{"name": "solo", "memory": "8GiB"}])
    assert (
        f"{P}hosts[0].containers[0].memory: 8GiB leaves no room beside the partition's /dev/shm of 16GiB (its "
        "shmSize), whose pages count against the limit: raise memory or lower shmSize"
    ) in refusal("dev", {P + "hosts": [box]})
    config = stack_without_kubernetes("dev")
    config[P + "hosts"] = [box]
    config[P + "training"] = [{"name": "t", "shmSize": "8GiB", "docker": {"partitions": ["box/solo"]}}]
    assert "(shmSize of training 't')" in refusal("dev", config)
    config[P + "training"][0]["shmSize"] = "4GiB"
    assert synthesize("dev", config)


def test_no_pids_limit_is_offered_because_the_provider_has_none():
    """terraform-provider-docker v4.5.0 has no `pids_limit` (nor does pulumi-docker 5.2.0's Container): a config key
    could not reach the daemon. When a provider release adds it, this fails: offer the key then."""
    assert not [p for p in inspect.signature(docker.Container._internal_init).parameters if "pids" in p]
