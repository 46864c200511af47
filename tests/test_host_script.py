"""docker/HOST.sh and the plan agree flag by flag (offline; tests/e2e runs the script on a real daemon).

The script is run with a `docker` on PATH that records each call (and the tar piped to `docker cp -`);
each `docker create` is parsed with the docker CLI's flag names and compared with the container's inputs.
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import shlex
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import CONTAINER, REMOTE_IMAGE, check_containers
from tools.synth import SECRET, Plan, docker_scripts, mock_id, upload_text

# A shell script, not Python: it runs once per docker call. Arguments are separated by \\037 (never in the
# plan's values), one call per line; the tar piped to `docker cp -` is kept as LOG.<call number>.tar; a
# container awaited healthy (`docker inspect`) is healthy at once, unless DOCKER_HEALTH says otherwise; the
# attached run (`start --attach`) of the container named DOCKER_FAILS exits 1, that of DOCKER_HANGS never ends;
# with DOCKER_PULL_HANGS no image is there and every `docker pull` never ends; `version` and `info` print
# DOCKER_VERSIONS (client and daemon) and DOCKER_CDI_SPEC_DIRS, by default a Docker 28.2 with CDI on.
RECORDER = r"""#!/bin/sh
log=$DOCKER_CALLS
n=$(wc -l < "$log")
if [ "$1" = cp ] && [ "$2" = - ]; then cat > "$log.$n.tar"; fi
if [ "$1" = inspect ]; then echo "${DOCKER_HEALTH:-healthy}"; fi
if [ "$1" = version ]; then echo "${DOCKER_VERSIONS:-28.2.2 28.2.2}"; fi
if [ "$1" = info ]; then echo "${DOCKER_CDI_SPEC_DIRS:-[\"/etc/cdi\",\"/var/run/cdi\"]}"; fi
if [ "$1" = logs ]; then echo "the server's last words"; fi
for arg in "$@"; do printf '%s\037' "$arg"; done >> "$log"
echo >> "$log"
if [ "$1 $2 $3" = "start --attach ${DOCKER_FAILS:-}" ]; then exit 1; fi
if [ "$1 $2 $3" = "start --attach ${DOCKER_HANGS:-}" ]; then exec sleep 600; fi
if [ -n "${DOCKER_PULL_HANGS:-}" ]; then case "$1 $2" in "image inspect") exit 1;; pull*) exec sleep 600;; esac; fi
"""


# Every container input, and where the comparison below checks it; an input missing here fails the test.
COMPARED = {
    "entrypoints",
    "networksAdvanced",
    "networkMode",
    "readOnly",
    "init",
    "name",
    "image",
    "command",
    "hostname",
    "user",
    "devices",
    "deviceRequests",
    "groupAdds",
    "ipcMode",
    "pidMode",
    "shmSize",
    "memory",
    "memorySwap",
    "logDriver",
    "logOpts",
    "cpuSet",
    "capabilities",
    "securityOpts",
    "envs",
    "ports",
    "volumes",
    "restart",
    "maxRetryCount",
    "healthcheck",
    "uploads",
    "mustRun",
    "start",
    "labels",
    "attach",
    "logs",
    "wait",
    "waitTimeout",
    "stopSignal",
    "stopTimeout",
    # No docker flag: the provider's delete stops with it (ContainerStop timeout); `docker stop` uses stopTimeout.
    "destroyGraceSeconds",
}


def _create_parser() -> argparse.ArgumentParser:
    """`docker create`'s flags as docker/cli names them (cli/command/container/opts.go)."""
    parser = argparse.ArgumentParser(prog="docker create", exit_on_error=False, allow_abbrev=False)
    for flag in (
        "--name",
        "--hostname",
        "--user",
        "--ipc",
        "--pid",
        "--shm-size",
        "--memory",
        "--memory-swap",
        "--log-driver",
        "--cpuset-cpus",
        "--restart",
        "--health-cmd",
        "--health-interval",
        "--health-timeout",
        "--health-retries",
        "--health-start-period",
        "--stop-signal",
        "--stop-timeout",
        "--network",
        "--entrypoint",
    ):
        parser.add_argument(flag)
    for flag in (
        "--label",
        "--device",
        "--group-add",
        "--cap-add",
        "--cap-drop",
        "--security-opt",
        "--env",
        "--publish",
        "--volume",
        "--log-opt",
    ):
        parser.add_argument(flag, action="append", default=[])
    parser.add_argument("--no-healthcheck", action="store_true")
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument("--init", action="store_true")
    parser.add_argument("image")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    return parser


def run_recorded(
    script: str, tmp_path: Path, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Runs `script` with the recording `docker`; each call is {"argv": [...]} (+ "stdin": the piped tar)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    recorder = bin_dir / "docker"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    log = tmp_path / "calls"
    log.write_text("")
    (tmp_path / "host.sh").write_text(script)
    result = subprocess.run(
        ["sh", str(tmp_path / "host.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DOCKER_CALLS": str(log), **env},
    )
    calls = []
    for n, line in enumerate(log.read_text().splitlines()):
        call: dict[str, Any] = {"argv": line.split("\037")[:-1]}
        piped = Path(f"{log}.{n}.tar")
        if piped.exists():
            call["stdin"] = piped.read_bytes()
            piped.unlink()
        calls.append(call)
    return result, calls


def _expected_flags(i: dict[str, Any], image: str) -> dict[str, Any]:
    """What each input becomes on the docker CLI, per the provider's mapping to the Docker API
    (terraform-provider-docker internal/provider/resource_docker_container_funcs.go, _structures.go)."""
    check = i.get("healthcheck", {})
    return {
        "name": i["name"],
        "hostname": i.get("hostname"),
        "user": i.get("user"),  # Config.User (funcs.go L96-97, read back L851), --user
        "label": [f"{label['label']}={label['value']}" for label in i.get("labels", [])],
        "image": image,
        # Config.Entrypoint (funcs.go L92-93): the CLI's --entrypoint takes one word, the rest goes before Cmd.
        "entrypoint": (i.get("entrypoints") or [None])[0],
        "command": [*i.get("entrypoints", [])[1:], *i.get("command", [])],
        # networks_advanced: connected by name after create (funcs.go L463-500), the CLI's --network; network_mode:
        # HostConfig.NetworkMode (funcs.go L398), the same flag.
        "network": (i.get("networksAdvanced") or [{}])[0].get("name") or i.get("networkMode"),
        "read_only": bool(i.get("readOnly")),  # HostConfig.ReadonlyRootfs (funcs.go L260), --read-only
        "init": bool(i.get("init")),  # HostConfig.Init (funcs.go L447-448), --init
        "device": [
            f"{d['hostPath']}:{d.get('containerPath') or d['hostPath']}:{d.get('permissions') or 'rwm'}"
            for d in i.get("devices", [])
        ]
        # The CLI makes its qualified CDI names one request {Driver: "cdi", DeviceIDs} (docker/cli v25.0.0
        # cli/command/container/opts.go L473-481, L594-598); measured in tests/e2e/test_e2e_cdi.py.
        + [device_id for r in i.get("deviceRequests", []) if r["driver"] == "cdi" for device_id in r["deviceIds"]],
        "group_add": i.get("groupAdds", []),
        "ipc": i.get("ipcMode"),
        "pid": i.get("pidMode"),
        "shm_size": f"{i['shmSize']}m" if "shmSize" in i else None,  # MiB in the provider, `m` in the CLI
        # memory and memory_swap in MiB in the provider, `m` in the CLI; log options as key=value each.
        "memory": f"{i['memory']}m" if "memory" in i else None,
        "memory_swap": f"{i['memorySwap']}m" if "memorySwap" in i else None,
        "log_driver": i.get("logDriver"),
        "log_opt": sorted(f"{k}={v}" for k, v in i.get("logOpts", {}).items()),
        "cpuset_cpus": i.get("cpuSet"),
        "cap_add": i.get("capabilities", {}).get("adds", []),
        "cap_drop": i.get("capabilities", {}).get("drops", []),
        "security_opt": i.get("securityOpts", []),
        "env": i.get("envs", []),
        # ip defaults to 0.0.0.0 and protocol to tcp; no external port is a random one (empty host port).
        "publish": [
            f"{p.get('ip') or '0.0.0.0'}:{p.get('external', '')}:{p['internal']}/{p.get('protocol', 'tcp')}"
            for p in i.get("ports", [])
        ],
        # A named volume's bind is `volume_name:container_path`, a host path's `host_path:container_path`
        # (resource_docker_container_structures.go volumeSetToDockerVolumes L289-329).
        "volume": [
            f"{v.get('hostPath') or v['volumeName']}:{v['containerPath']}{':ro' if v.get('readOnly') else ''}"
            for v in i.get("volumes", [])
        ],
        "restart": i.get("restart", "no")
        + (f":{i['maxRetryCount']}" if i.get("restart") == "on-failure" and i.get("maxRetryCount") else ""),
        # --health-cmd is a shell command (docker/cli stores ["CMD-SHELL", cmd]); compared as the argv a shell
        # splits it into, which for the plan's exec form ["CMD", *argv] must be that argv.
        "health_cmd": _health_argv(check),
        "health_interval": check.get("interval"),
        "health_timeout": check.get("timeout"),
        "health_retries": str(check["retries"]) if "retries" in check else None,
        "health_start_period": check.get("startPeriod"),
        "no_healthcheck": check.get("tests") == ["NONE"],
        # container.Config.StopSignal / StopTimeout (funcs.go L54-76), docker/cli's --stop-signal / --stop-timeout
        "stop_signal": i.get("stopSignal"),
        "stop_timeout": str(i["stopTimeout"]) if "stopTimeout" in i else None,
    }


def _health_argv(check: dict[str, Any]) -> list[str] | None:
    kind, *args = check.get("tests", ["NONE"])
    return None if kind == "NONE" else args if kind == "CMD" else shlex.split(args[0])


def _parsed_flags(argv: list[str]) -> dict[str, Any]:
    flags = vars(_create_parser().parse_args(argv))
    if flags["health_cmd"] is not None:
        flags["health_cmd"] = shlex.split(flags["health_cmd"])
    return flags


def _hosts(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    providers = {r["urn"]: r["name"] for r in plan.of_type("pulumi:providers:docker")}
    by_host: dict[str, list[dict[str, Any]]] = {name: [] for name in providers.values()}
    for container in plan.of_type(CONTAINER):
        by_host[providers[container["provider"]]].append(container["inputs"])
    return by_host


@pytest.mark.parametrize("stack", ["dev", "prod", "cdi"])
def test_host_script_creates_uploads_and_starts_what_the_plan_declares(stack, request, tmp_path):
    plan: Plan = request.getfixturevalue(f"{stack}_plan")
    images = {plan.mock_outputs[r["urn"]]["imageId"]: r["inputs"]["name"] for r in plan.of_type(REMOTE_IMAGE)}
    names = {mock_id(r["name"]): r["inputs"]["name"] for r in plan.of_type(CONTAINER)}
    for host, containers in _hosts(plan).items():
        script = docker_scripts(plan)[host]
        creates = {
            a[1].removeprefix("--name="): a[1:]
            for a in (
                shlex.split(line)[3:]
                for line in script.splitlines()
                if line.startswith('by "$deadline" docker create ')  # within its deadline: below
            )
        }
        assert sorted(creates) == sorted(c["name"] for c in containers), host
        for inputs in containers:
            assert set(inputs) <= COMPARED, f"{host}/{inputs['name']}: inputs not compared: {set(inputs) - COMPARED}"
            expected = _expected_flags(inputs, images[inputs["image"]])
            for flag in ("pid", "network"):  # container:<the mock's id of a container resource>: by its name
                mode, _, ref = (expected[flag] or "").partition(":")
                if ref:
                    expected[flag] = f"{mode}:{names[ref]}"
            if inputs.get("envs") == SECRET:
                expected["env"] = []  # not in the script, which then refuses to run (next test)
            assert _parsed_flags(creates[inputs["name"]]) == expected, f"{host}/{inputs['name']}"
        if any(SECRET in (c.get("envs"), c.get("uploads")) for c in containers):
            continue
        result, calls = run_recorded(script, tmp_path)
        assert result.returncode == 0, result.stderr
        argvs = [c["argv"] for c in calls]
        for inputs in containers:
            name = inputs["name"]
            # Created, then its files copied in, then started: the provider's order.
            order = [argvs.index(["create", *creates[name]])]
            uploads = [c for c in calls if c["argv"] == ["cp", "-", f"{name}:/"]]
            if inputs.get("uploads"):
                (upload,) = uploads
                order.append(calls.index(upload))
                archive = tarfile.open(fileobj=io.BytesIO(upload["stdin"]))
                # The provider's tar entry per upload: the file's path, its content, its `permissions`, else mode 0644
                # (0744 executable).
                assert {
                    m.name: (archive.extractfile(m).read().decode(), m.mode, m.uid) for m in archive.getmembers()
                } == {
                    u["file"].lstrip("/"): (
                        upload_text(u),
                        int(u["permissions"], 8) if u.get("permissions") else 0o744 if u.get("executable") else 0o644,
                        0,
                    )
                    for u in inputs["uploads"]
                }
            else:
                assert not uploads
            # A named volume is looked up (and created when missing) before the container that mounts it.
            volumes = [v["volumeName"] for v in inputs.get("volumes", []) if v.get("volumeName")]
            assert all(argvs.index(["volume", "inspect", v]) < order[0] for v in volumes), f"{host}/{name}"
            if inputs.get("start", True):
                order.append(argvs.index(["start", *(["--attach"] if inputs.get("attach") else []), name]))
            assert order == sorted(order), f"{host}/{name}: {order}"
            # A named volume it mounts is there before it is created (the provider creates the Volume resource it
            # depends on first).
            for volume in (v["volumeName"] for v in inputs.get("volumes", []) if "volumeName" in v):
                assert argvs.index(["volume", "inspect", volume]) < order[0], f"{host}/{name}: {volume}"


def test_host_script_pulls_only_a_missing_image(dev_plan: Plan, tmp_path):
    """The provider pulls an image only when the daemon does not have it (resource_docker_image_funcs.go
    findImage: local images first, then pullImage): the recorder's `image inspect` succeeds, so no pull."""
    result, calls = run_recorded(docker_scripts(dev_plan)["workstation"], tmp_path)
    assert result.returncode == 0
    argvs = [c["argv"] for c in calls]
    assert not [a for a in argvs if a[0] == "pull"]
    assert sorted(a[2] for a in argvs if a[:2] == ["image", "inspect"]) == sorted(
        r["inputs"]["name"] for r in dev_plan.of_type(REMOTE_IMAGE)
    )


def _with_inputs(plan: Plan, name: str, **inputs: Any) -> Plan:
    changed = copy.deepcopy(plan)
    (container,) = [c for c in changed.of_type(CONTAINER) if c["inputs"]["name"] == name]
    container["inputs"].update(inputs)
    return changed


def test_a_container_with_a_secret_stops_the_script_before_any_docker_call(dev_plan: Plan, tmp_path):
    script = docker_scripts(_with_inputs(dev_plan, "serve", envs=SECRET))["workstation"]
    result, calls = run_recorded(script, tmp_path)
    assert result.returncode == 1 and calls == []
    assert "serve" in result.stderr and "pulumi up" in result.stderr


def test_an_input_the_script_cannot_render_stops_synth(dev_plan: Plan):
    with pytest.raises(ValueError, match="privileged.*'serve'"):
        docker_scripts(_with_inputs(dev_plan, "serve", privileged=True))


def _created(calls: list[dict[str, Any]]) -> list[str]:
    return [c["argv"][1].removeprefix("--name=") for c in calls if c["argv"][0] == "create"]


def _check_names(plan: Plan) -> dict[str, str]:
    """Resource name -> Docker name of the dev stack's one-shot checks."""
    return {c["name"]: c["inputs"]["name"] for c in check_containers(plan)}


def test_a_container_is_created_after_the_checks_it_waits_for(dev_plan: Plan, tmp_path):
    """`pulumi up` creates a resource only after those it depends on (the workloads' depends_on on their checks)."""
    result, calls = run_recorded(docker_scripts(dev_plan)["workstation"], tmp_path)
    assert result.returncode == 0, result.stderr
    created = _created(calls)
    names = {c["urn"]: c["inputs"]["name"] for c in dev_plan.of_type(CONTAINER)}
    waits = 0
    for container in dev_plan.of_type(CONTAINER):
        for dependency in (names[urn] for urn in container["depends_on"] if urn in names):
            assert created.index(dependency) < created.index(container["inputs"]["name"]), (
                dependency,
                container["name"],
            )
            waits += 1
    assert waits >= 4, "dev: each partition's workload waits for the preflight and its GPU check"


def test_a_failed_gpu_check_leaves_its_partition_uncreated_and_the_script_failing(dev_plan: Plan, tmp_path):
    """As `pulumi up` stops at the check's verdict (components/docker/checks.py), the script never creates what
    waits for a failed check, says which check, goes on with the other partition, and exits 1."""
    check = _check_names(dev_plan)["workstation-train-gpucheck"]
    result, calls = run_recorded(docker_scripts(dev_plan)["workstation"], tmp_path, DOCKER_FAILS=check)
    assert result.returncode == 1
    created = _created(calls)
    assert "train" not in created and "serve" in created
    assert f"train: not created: {check}, which it waits for, failed" in result.stderr
    assert result.stderr.strip().endswith(f"failed: {check} train")


def test_a_failed_preflight_is_a_warning_in_dev(dev_plan: Plan, tmp_path):
    """The dev preflight's verdict is a warning (label rocm-stack.verdict=warn): everything is still created."""
    preflight = _check_names(dev_plan)["workstation-preflight"]
    result, calls = run_recorded(docker_scripts(dev_plan)["workstation"], tmp_path, DOCKER_FAILS=preflight)
    assert result.returncode == 0, result.stderr
    assert f"warning: {preflight} failed" in result.stderr
    assert {"train", "serve"} <= set(_created(calls))


def test_a_server_never_healthy_fails_the_script_with_its_last_log_lines(dev_plan: Plan, tmp_path):
    """The provider's `wait` gives up after waitTimeout with only "container failed to be in healthy state"
    (terraform-provider-docker v4.5.0 internal/provider/resource_docker_container_funcs.go L590-622,
    errContainerFailedToBeInHealthyState): the script says the same and adds the container's last log lines."""
    plan = _with_inputs(dev_plan, "serve", waitTimeout=1)
    result, calls = run_recorded(docker_scripts(plan)["workstation"], tmp_path, DOCKER_HEALTH="starting")
    assert result.returncode == 1
    assert "serve: not healthy after 1s; its last 20 log lines:\nthe server's last words" in result.stderr
    assert ["logs", "--tail", "20", "serve"] in [c["argv"] for c in calls]


@pytest.mark.parametrize(
    "env, why",
    [
        ({"DOCKER_VERSIONS": "28.2.2 24.0.7"}, "need docker >= 25.0 (client and daemon); this one is 28.2.2 24.0.7"),
        ({"DOCKER_VERSIONS": "20.10.24 28.2.2"}, "need docker >= 25.0 (client and daemon); this one is 20.10.24"),
        ({"DOCKER_CDI_SPEC_DIRS": "null"}, "need the daemon's CDI feature"),
        ({"DOCKER_CDI_SPEC_DIRS": "[]"}, "need the daemon's CDI feature"),
    ],
)
def test_cdi_devices_stop_the_script_on_a_docker_without_cdi(cdi_plan: Plan, tmp_path, env, why):
    """A CLI before 25.0 takes `--device amd.com/gpu=0` for a host path, and a daemon without the CDI feature
    registers no "cdi" driver ("could not select device driver", measured in tests/e2e/test_e2e_cdi.py) and
    reports no CDISpecDirs (moby v25.0.0 cmd/dockerd/daemon.go L639-641): nothing is pulled or created."""
    result, calls = run_recorded(docker_scripts(cdi_plan)["workstation"], tmp_path, **env)
    assert result.returncode == 1
    assert f"the CDI devices amd.com/gpu=N (gpuAccess cdi) {why}" in result.stderr
    assert [c["argv"][0] for c in calls] in (["version"], ["version", "info"])
    if "CDI_SPEC" in next(iter(env)):
        assert '"features": {"cdi": true} in /etc/docker/daemon.json' in result.stderr


def test_hosts_without_cdi_devices_do_not_ask_the_daemon(dev_plan: Plan, tmp_path):
    result, calls = run_recorded(docker_scripts(dev_plan)["workstation"], tmp_path, DOCKER_VERSIONS="20.10.24 20.10.24")
    assert result.returncode == 0 and not [c for c in calls if c["argv"][0] in ("version", "info")]


def _with_deadline(plan: Plan, kind: str, name: str, seconds: int) -> Plan:
    changed = copy.deepcopy(plan)
    (resource,) = [r for r in changed.of_type(kind) if r["name"] == name]
    resource["custom_timeouts"]["create"] = f"{seconds}s"
    return changed


@pytest.mark.slow
def test_a_hung_check_is_cut_at_its_deadline_and_its_partition_not_created(dev_plan: Plan, tmp_path):
    """The provider's create of an attached check waits for it to exit with no bound but the create timeout
    (resource_docker_container_funcs.go L628-671: ContainerWait under the create's context): the script gives the
    check the plan's `custom_timeouts.create` (shortened here to 3 s) and treats it as failed after that."""
    checks = _check_names(dev_plan)
    check = checks["workstation-train-gpucheck"]
    plan = _with_deadline(dev_plan, CONTAINER, "workstation-train-gpucheck", 3)
    started = time.monotonic()
    result, calls = run_recorded(docker_scripts(plan)["workstation"], tmp_path, DOCKER_HANGS=check)
    assert 2 <= time.monotonic() - started < 30  # whole seconds: the deadline is an epoch second (date +%s)
    assert result.returncode == 1
    assert f"{check}: cut at its deadline of 3 s" in result.stderr
    assert f"train: not created: {check}, which it waits for, failed" in result.stderr
    assert "train" not in _created(calls) and "serve" in _created(calls)


@pytest.mark.slow
def test_a_hung_pull_is_cut_at_the_images_deadline(dev_plan: Plan, tmp_path):
    """A RemoteImage's create pulls (resource_docker_image_funcs.go L34-56) under its create timeout."""
    (image,) = [r for r in dev_plan.of_type(REMOTE_IMAGE) if r["name"] == "workstation-amd-device-metrics-exporter"]
    plan = dev_plan
    for other in dev_plan.of_type(REMOTE_IMAGE):
        plan = _with_deadline(plan, REMOTE_IMAGE, other["name"], 2)
    result, _ = run_recorded(docker_scripts(plan)["workstation"], tmp_path, DOCKER_PULL_HANGS="1")
    assert result.returncode == 1
    assert f"{image['inputs']['name']}: cut at its deadline of 2 s" in result.stderr


def test_a_keyed_vllm_joins_its_proxys_network_namespace_by_name_in_the_script():
    """The plan names the proxy's container ID (`container:<ID>`, as dockerd stores it); HOST.sh has no ID before it
    runs, so it names the proxy's container, which Docker resolves to the same namespace."""
    from conftest import stack_file
    from tools.synth import docker_create_args, synthesize

    plan = synthesize("dev", stack_file("dev"), secrets={"rocm-stack:vllmApiKey": "k3y"})
    (proxy_,) = (c for c in plan.of_type(CONTAINER) if c["inputs"].get("entrypoints", [None])[0] == "nginx")
    (vllm,) = (
        c["inputs"]
        for c in plan.of_type(CONTAINER)
        if c["inputs"].get("networkMode") == f"container:{mock_id(proxy_['name'])}"
    )
    joined = f"--network=container:{proxy_['inputs']['name']}"
    assert joined in docker_create_args(vllm, {mock_id(proxy_["name"]): proxy_["inputs"]["name"]})
    assert joined in docker_scripts(plan)["workstation"]
