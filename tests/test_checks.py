"""The checks that gate Docker partitions: a preflight per host, a GPU check per partition, awaited vLLM servers.

What the Docker provider does with the one-shot containers (pulumi_docker 5.2.0 = terraform-provider-docker v4.5.0,
internal/provider/resource_docker_container_funcs.go @ 5074970c, resourceDockerContainerCreate):
- `attach`: after start, `client.ContainerWait(ctx, retContainer.ID, container.WaitConditionNotRunning)`, so the
  create returns only once the container has exited; with `logs`, `d.Set("container_logs", b.String())`. It never
  looks at the exit code: a failing check is still "created".
- then resourceDockerContainerRead: `if !container.State.Running { d.Set("exit_code", container.State.ExitCode)`,
  and with `must_run` true it would flip it to false to force an update ("Container %s is stopped but must_run is
  configured as true"): hence must_run false for a container meant to exit.
- `wait`: polls ContainerInspect every second until `State.Health.Status == types.Healthy`; after `wait_timeout`
  seconds the create fails with "container failed to be in healthy state"; without a healthcheck it fails at once
  ("you have supplied a 'wait' argument, but the container does not have a healthcheck defined").
So a check's verdict is the stack's own (components/docker/checks.py `verdict`): the mock engine returns the exit
code and output the provider would store (tools/synth.py `run_results`), and these tests fail one.
"""

from __future__ import annotations

import json

import pytest

from conftest import (
    CONTAINER,
    check_containers,
    env_of,
    gpu_containers,
    health_checks,
    one_shot_containers,
    stack_file,
    synth_with,
)
from test_impact import by_name as impacts_of, report_of
from tools.synth import ProgramRefused, synthesize

P = "rocm-stack:"
# shmSize is the workload's own (training.shmSize); with ipcMode host the container uses the host's /dev/shm anyway.
ACCESS = ("devices", "groupAdds", "ipcMode", "cpuSet", "capabilities", "securityOpts")


def by_name(plan):
    return {c["name"]: c for c in plan.of_type(CONTAINER)}


def test_prod_has_a_preflight_per_host_and_a_gpu_check_per_partition(prod_plan):
    checks = {c["name"]: c for c in check_containers(prod_plan)}
    hosts = [f"gpu-node-{i}" for i in range(1, 5)]
    assert sorted(checks) == sorted(
        [f"{h}-preflight" for h in hosts] + [f"{h}-{p}-gpucheck" for h in hosts for p in ("serve-b", "train-a")]
    )
    # The only other one-shot containers: the health check of each Docker vLLM server (gpu-node-3/4's serve-b).
    health = [f"gpu-node-{i}-serve-b-health" for i in (3, 4)]
    assert sorted(c["name"] for c in health_checks(prod_plan)) == health
    assert sorted(c["name"] for c in one_shot_containers(prod_plan)) == sorted([*checks, *health])
    for check in checks.values():
        i = check["inputs"]
        assert (i["attach"], i["logs"], i["mustRun"], i["restart"]) == (True, True, False, "no")
        assert i["envs"][-1] == "PYTHONPATH=/opt/rocm-stack"
    preflight = checks["gpu-node-1-preflight"]["inputs"]
    # Then the volume of the host's check programs, which it fills (tests/test_check_programs.py).
    assert preflight["volumes"][:2] == [
        {"hostPath": "/proc", "containerPath": "/host/proc", "readOnly": True},
        {"hostPath": "/sys", "containerPath": "/host/sys", "readOnly": True},
    ]
    assert preflight["command"][:3] == ["python3", "-m", "programs.preflight"]
    assert preflight["command"][preflight["command"].index("--expect-gpus") + 1] == "8"
    assert preflight["command"][-2:] == ["--rocm", "7.0"]
    assert "devices" not in preflight  # /proc and /sys are enough: it never opens a GPU


def test_each_check_has_exactly_its_partitions_device_access_and_environment(prod_plan):
    containers = by_name(prod_plan)
    for partition in gpu_containers(prod_plan):
        check = containers[f"{partition['name']}-gpucheck"]["inputs"]
        assert {k: check.get(k) for k in ACCESS} == {k: partition["inputs"].get(k) for k in ACCESS}
        # The same GPUs selected, if the partition selects any by variable (vLLM reads CUDA_VISIBLE_DEVICES, torch
        # HIP_VISIBLE_DEVICES; under render-node isolation neither is set).
        assert visible(containers[f"{partition['name']}-gpucheck"]) == visible(partition)


def visible(container):
    return {v for k, v in env_of(container).items() if k.endswith("_VISIBLE_DEVICES")}


def test_partitions_wait_for_their_preflight_and_their_check(prod_plan):
    urns = {c["name"]: c["urn"] for c in prod_plan.of_type(CONTAINER)}
    for partition in gpu_containers(prod_plan):
        host = partition["name"].rsplit("-", 2)[0]
        assert {urns[f"{host}-preflight"], urns[f"{partition['name']}-gpucheck"]} <= set(partition["depends_on"])
        check = by_name(prod_plan)[f"{partition['name']}-gpucheck"]
        assert urns[f"{host}-preflight"] in check["depends_on"]


def test_prod_enforces_the_published_mi300x_floors_and_dev_only_count_and_correctness(prod_plan, dev_plan):
    command = by_name(prod_plan)["gpu-node-1-train-a-gpucheck"]["inputs"]["command"]
    assert command[command.index("--expect-gpus") + 1] == "4"
    # AMD CVS preflight_config.json: gemm_tflops_min 600 (MI300X), rccl_gbs_min 100 (schema/checks.py cites it).
    assert command[command.index("--min-tflops") + 1] == "600"
    assert command[command.index("--min-busbw") + 1] == "100"
    dev = by_name(dev_plan)["workstation-train-gpucheck"]["inputs"]["command"]
    assert "--min-tflops" not in dev and "--min-busbw" not in dev
    assert dev[dev.index("--expect-gpus") + 1] == "1"


def test_floors_come_from_config_per_gpu_model():
    plan = synth_with("prod", checks={"floors": {"MI300X": {"minTflops": 650}}})
    command = by_name(plan)["gpu-node-1-train-a-gpucheck"]["inputs"]["command"]
    assert command[command.index("--min-tflops") + 1] == "650" and "--min-busbw" not in command


def test_dev_can_switch_the_checks_off():
    plan = synth_with("dev", checks={"enable": False})
    assert check_containers(plan) == []
    # The vLLM server's health check stays: it is the server's own wait, kept by every `pulumi up` (test_vllm_health).
    assert [c["name"] for c in one_shot_containers(plan)] == ["workstation-serve-health"]
    assert all(not any("gpucheck" in d or "preflight" in d for d in c["depends_on"]) for c in gpu_containers(plan))


def test_a_failed_gpu_check_stops_the_partitions_workload_with_its_findings():
    report = {
        "schema": "gpucheck/1",
        "verdict": "fail",
        "failures": ["expected 4 GPU(s), saw 3 visible ([0] AMD Instinct MI300X, ...)"],
    }
    with pytest.raises(ProgramRefused) as refused:
        synthesize("prod", run_results={"gpu-node-3-serve-b-gpucheck": (1, json.dumps(report) + "\n")})
    assert "partition gpu-node-3/serve-b: GPU check failed (exit code 1)" in str(refused.value)
    assert "expected 4 GPU(s), saw 3 visible" in str(refused.value)


def test_a_failed_preflight_fails_prod_and_warns_in_dev():
    report = {
        "schema": "preflight/1",
        "verdict": "fail",
        "findings": [
            {"check": "numa_balancing", "seen": "kernel.numa_balancing = 1", "expected": "0", "fix": "sysctl -w ..."}
        ],
    }
    logs = json.dumps(report) + "\n"
    with pytest.raises(ProgramRefused) as refused:
        synthesize("prod", run_results={"gpu-node-2-preflight": (1, logs)})
    assert "host gpu-node-2: preflight failed" in str(refused.value)
    assert "numa_balancing: kernel.numa_balancing = 1 (expected 0); fix: sysctl -w ..." in str(refused.value)
    plan = synthesize("dev", run_results={"workstation-preflight": (1, logs)})
    assert {c["name"] for c in gpu_containers(plan)} == {"workstation-train", "workstation-serve"}


def test_a_check_reruns_when_its_partition_changes_and_only_then(prod_plan):
    def check_names(plan):
        return {c["name"]: c["inputs"]["name"] for c in check_containers(plan)}

    before = check_names(prod_plan)
    config = stack_file("prod")
    config[P + "hosts"][0]["containers"][0]["cpuset"] = "0-15"  # gpu-node-1/train-a; the provider updates cpuset
    after = check_names(synthesize("prod", config))
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"gpu-node-1-train-a-gpucheck"}


def test_docker_vllm_is_awaited_healthy_for_its_startup_timeout(prod_plan):
    servers = [c for c in gpu_containers(prod_plan) if c["name"].endswith("serve-b") and "healthcheck" in c["inputs"]]
    assert len(servers) == 2
    for server in servers:
        i = server["inputs"]
        # wait needs a healthcheck (the provider errors without one); 1800 s startup + one 30 s interval + 10 s probe.
        assert i["wait"] is True and i["healthcheck"]["startPeriod"] == "30m0s"  # Go's form of 1800 s
        assert i["waitTimeout"] == 1800 + 30 + 10


def test_each_preflight_checks_that_dockerds_stop_fits_the_longest_grace_of_its_host(prod_plan):
    """programs/preflight.py docker_stop: systemd must give dockerd the host's longest stop grace + 5 s; it reads
    docker.service and systemd's configuration from the host's /etc and /lib/systemd, and dockerd's daemon.json
    (live-restore), all read-only (issue 35 item 6)."""
    graces = {}
    for check in check_containers(prod_plan):
        inputs = check["inputs"]
        if not inputs["name"].startswith("preflight-"):
            continue
        command = inputs["command"]
        graces[command[command.index("--host") + 1]] = int(command[command.index("--stop-grace") + 1])
        mounts = {v["hostPath"]: (v["containerPath"], v.get("readOnly")) for v in inputs["volumes"] if "hostPath" in v}
        for path in ("/proc", "/sys", "/etc/systemd", "/usr/lib/systemd", "/lib/systemd"):
            assert mounts[path] == (f"/host{path}", True), (inputs["name"], path)
    # Training (300 s) on gpu-node-1/2, vLLM (120 s) beside a shell (30 s) on gpu-node-3/4.
    assert graces == {"gpu-node-1": 300, "gpu-node-2": 300, "gpu-node-3": 120, "gpu-node-4": 120}


def test_day2_the_stop_check_reruns_each_preflight_and_touches_nothing_else(prod_plan):
    """The first `pulumi up` with it: each host's preflight has a new command (a new name: a new check container,
    created before the old one is deleted), which runs again; the partitions depend on its verdict only, so none is
    replaced. In prod a host whose docker.service lacks the drop-in fails there (docs/operations.md)."""
    head = json.loads(json.dumps(prod_plan.to_json()))
    base = json.loads(json.dumps(head))
    for resource in base["resources"]:
        command = resource["inputs"].get("command") or []
        if resource["type"] == CONTAINER and "--stop-grace" in command:
            at = command.index("--stop-grace")
            del command[at : at + 2]
            resource["inputs"]["volumes"] = [
                v
                for v in resource["inputs"]["volumes"]
                if v.get("hostPath") not in ("/etc/systemd", "/usr/lib/systemd", "/lib/systemd")
            ]
    impacts = impacts_of(report_of(base, head))
    assert {name for _, name in impacts} == {f"gpu-node-{n}-preflight" for n in range(1, 5)}
    assert all(i.runs_check and not i.stops_container for i in impacts.values())
