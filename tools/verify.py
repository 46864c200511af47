"""Day-2 check of a deployed stack: run its host preflight and its GPU check per partition again, now.

    rocm-stack verify --stack prod             (make verify STACK=prod)
    rocm-stack verify --stack prod --kubernetes [--node NAME]   (the GPU nodes of its cluster: tools/verify_k8s.py)

The checks are the ones `pulumi up` runs (components/docker/checks.py): verify synthesizes the stack (tools.synth,
the real program under the mock engine) and runs each check container it declares, with the same image, command,
environment, devices, groups, cpuset and labels, through the `docker` SDK on the host's own Docker endpoint
(the stack's unix://, tcp:// or ssh:// address; ssh through the system `ssh` client with the host's `sshOpts`, as
the Docker provider does: tools/docker_endpoint.py). Hosts are checked in parallel, each with its own time limits:
connecting (--connect-timeout) and each Docker API call (--call-timeout; a check's wait: its own --timeout + 300 s).
Each run is a fresh container named `<check>-verify`, removed afterwards; the deployed ones are left alone. A check
whose environment holds a Pulumi secret (which synth does not see) runs with the environment of its deployed
container on the host.
Each created container's log configuration is compared with the declared one (`log_config_drift`): a host where the
daemon adds log options fails, since the provider would replace every container on every deploy.

Prints a progress line per host on stderr, then a table: host, check (preflight, partition or log-opts), verdict,
details; and ends with the fleet table, a row per host and partition: GPUs, the deployed container's image digest,
state and restarts (`docker inspect`), the GPU check just run and its slowest GPU's TFLOP/s against its floor.
A host that cannot be reached is one ERROR row (check `-`) saying why, in one line, in both. `--json` prints both
as JSON instead.
Exit codes: 0 all passed (dev preflight findings are warnings), 1 a check failed, 2 the stack was refused, a host
could not be reached or a check could not be run (ERROR rows), or a usage error.
"""

from __future__ import annotations

import argparse
import io
import sys
from contextlib import AbstractContextManager
import tarfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.output import exit_codes
from components.docker.checks import CHECK_LABEL, VERDICT_LABEL, check_report, summary
from domain.gpus import gpu_ranges
from rules import PARTITION_LABEL
from schema import ConfigError, StackConfig
from schema.stackfile import StackFileError
from tools.docker_endpoint import CALL_TIMEOUT_S, CONNECT_TIMEOUT_S, Endpoint, Unreachable, connect
from tools.synth import SECRET, Plan, ProgramRefused, synthesize, upload_text
from tools.verify_common import SCHEDULE_WAIT_S, FleetRow, Results, Row, fleet_table, report_json, stack_settings, table
import docker  # type: ignore[import-untyped]  # docker 7.2.0 ships no type information

CONTAINER = "docker:index/container:Container"
# A check's own --timeout (gpucheck) plus the container's start and the program's import.
RUN_TIMEOUT_MARGIN_S = 300
# Hosts checked at once: each holds one ssh (or socket) connection at a time, and its checks run one after another.
PARALLEL_HOSTS = 8


def _labels(inputs: Mapping[str, Any]) -> dict[str, str]:
    return {label["label"]: label["value"] for label in inputs.get("labels", [])}


@dataclass(frozen=True)
class HostChecks:
    endpoint: str  # the provider's `host`
    ssh_opts: tuple[str, ...]  # the provider's `sshOpts`
    checks: list[dict[str, Any]]  # the inputs of its check containers, preflight first
    # Partition label (`host/container`) -> the Docker name and image reference of its deployed container.
    partitions: dict[str, tuple[str, str]] = field(default_factory=dict)


def checks_by_host(plan: Plan) -> dict[str, HostChecks]:
    """Host name -> its Docker endpoint and checks."""
    providers = {r["urn"]: r for r in plan.of_type("pulumi:providers:docker")}
    images = {
        plan.mock_outputs[r["urn"]]["imageId"]: r["inputs"]["name"]
        for r in plan.of_type("docker:index/remoteImage:RemoteImage")
    }
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    partitions: dict[str, dict[str, tuple[str, str]]] = defaultdict(dict)
    for resource in plan.of_type(CONTAINER):
        inputs = resource["inputs"]
        labels = _labels(inputs)
        image = images.get(inputs["image"], inputs["image"])
        if CHECK_LABEL in labels:
            found[resource["provider"]].append({**inputs, "image": image})
        elif PARTITION_LABEL in labels:
            partitions[resource["provider"]][labels[PARTITION_LABEL]] = (inputs["name"], image)
    return {
        providers[urn]["name"]: HostChecks(
            providers[urn]["inputs"].get("host", "unix:///var/run/docker.sock"),
            tuple(providers[urn]["inputs"].get("sshOpts", ())),
            sorted(checks, key=lambda c: _labels(c)[CHECK_LABEL] != "preflight"),
            dict(sorted(partitions[urn].items())),
        )
        for urn, checks in sorted(found.items(), key=lambda item: providers[item[0]]["name"])
    }


def create_kwargs(
    inputs: Mapping[str, Any], device_root: Path, environment: Sequence[str] | None = None
) -> dict[str, Any]:
    """The plan's container inputs as docker SDK `containers.create` arguments (Docker Engine API HostConfig);
    `environment` replaces the plan's `envs` (where those are a secret synth does not see)."""

    def host_path(path: str) -> str:
        return str(device_root / path.lstrip("/")) if path.startswith("/dev/") else path

    kwargs: dict[str, Any] = {
        "image": inputs["image"],
        "command": inputs.get("command"),
        "name": f"{inputs['name']}-verify",
        "environment": inputs.get("envs", []) if environment is None else environment,
        "labels": _labels(inputs),
        "devices": [
            f"{host_path(d['hostPath'])}:{d.get('containerPath') or d['hostPath']}:{d.get('permissions') or 'rwm'}"
            for d in inputs.get("devices", [])
        ],
        "group_add": inputs.get("groupAdds"),
        "ipc_mode": inputs.get("ipcMode"),
        "cpuset_cpus": inputs.get("cpuSet"),
        "log_config": docker.types.LogConfig(type=inputs["logDriver"], config=inputs["logOpts"]),
        "cap_add": inputs.get("capabilities", {}).get("adds"),
        "security_opt": inputs.get("securityOpts"),
        # A host path or a named volume (the host's check programs, components/docker/checks.py).
        "volumes": {
            v.get("hostPath") or v["volumeName"]: {
                "bind": v["containerPath"],
                "mode": "ro" if v.get("readOnly") else "rw",
            }
            for v in inputs.get("volumes", [])
        },
    }
    if "shmSize" in inputs:
        kwargs["shm_size"] = f"{inputs['shmSize']}m"  # the provider's shmSize is MiB
    if inputs.get("deviceRequests"):
        kwargs["device_requests"] = [
            docker.types.DeviceRequest(driver=r.get("driver", ""), device_ids=r.get("deviceIds", []))
            for r in inputs["deviceRequests"]
        ]
    return {k: v for k, v in kwargs.items() if v not in (None, [], {})}


def uploads_tar(inputs: Mapping[str, Any]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for upload in inputs.get("uploads", []):
            data = (upload_text(upload) or "").encode()
            info = tarfile.TarInfo(upload["file"].lstrip("/"))
            info.size, info.mode, info.mtime = len(data), int(upload.get("permissions") or "0644", 8), int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def log_config_drift(inputs: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, str]:
    """Log option (or `log-driver`) -> the value dockerd stored (HostConfig.LogConfig), where it differs from the
    declared `logDriver`/`logOpts`. When the driver is the daemon's default, dockerd adds each daemon.json `log-opts`
    key the container lacks (moby v20.10.24 daemon/logs.go L186-192 mergeAndVerifyLogConfig, called at create by
    daemon/create.go L170; the same in docker-v29.7.2 daemon/logs.go L179-185, create.go L207), and the provider
    reads the map back as stored (terraform-provider-docker v4.5.0 resource_docker_container_funcs.go L952,
    L983-989): log_opts being ForceNew (resource_docker_container.go L894-899), that is a replacement per deploy."""
    declared = {"log-driver": inputs["logDriver"], **inputs["logOpts"]}
    actual = {"log-driver": stored["Type"], **(stored["Config"] or {})}
    return {
        k: actual.get(k, "(none)") for k in sorted(declared.keys() | actual.keys()) if declared.get(k) != actual.get(k)
    }


def log_finding(drift: Mapping[str, str]) -> str:
    found = " ".join(f"{k}={v}" for k, v in drift.items())
    return (
        f"dockerd stores log options other than declared: {found} (/etc/docker/daemon.json `log-opts`): "
        "log_opts is ForceNew, so every `pulumi up` replaces every container of this host\n"
        "fix: remove these keys from `log-opts` in /etc/docker/daemon.json and restart dockerd "
        "(the next `pulumi up` replaces the containers once more)"
    )


class CannotRun(Exception):
    """A check that cannot be run as declared: one sentence for its row."""


def deployed_environment(client: Any, inputs: Mapping[str, Any]) -> list[str] | None:
    """The check's environment: the plan's, or where that is a Pulumi secret (synth shows "[secret]" for the whole
    list: components/docker/environment.py container_envs), the one of the check container `pulumi up` left on the
    host (restart "no", never removed), read back with `docker inspect` (Config.Env)."""
    if inputs.get("envs") != SECRET:
        return None

    try:
        return list(client.containers.get(inputs["name"]).attrs["Config"]["Env"] or [])
    except docker.errors.NotFound:
        raise CannotRun(
            f"its environment holds a Pulumi secret, which synth does not see, and its deployed container "
            f"{inputs['name']} is not on the host to read it from: run `pulumi up` first"
        ) from None


def run_check(
    client: Any, inputs: Mapping[str, Any], timeout_s: float, device_root: Path
) -> tuple[int, str, dict[str, str]]:
    """Create, upload, start, wait, read the logs, remove: what the provider's attach does, with a fresh name.
    Returns the exit code, the output and the container's `log_config_drift`."""
    hidden = sorted(k for k, v in inputs.items() if v == SECRET and k != "envs")
    if hidden:
        raise CannotRun(f"its {', '.join(hidden)} hold a Pulumi secret, which synth does not see")
    kwargs = create_kwargs(inputs, device_root, deployed_environment(client, inputs))
    stale = client.containers.list(all=True, filters={"name": f"^/{kwargs['name']}$"})
    for old in stale:
        old.remove(force=True)
    container = client.containers.create(**kwargs)  # inspected after the create: attrs hold what dockerd stored
    try:
        drift = log_config_drift(inputs, container.attrs["HostConfig"]["LogConfig"])
        if inputs.get("uploads"):
            container.put_archive("/", uploads_tar(inputs))
        container.start()
        code = container.wait(timeout=timeout_s)["StatusCode"]
        return code, container.logs(stdout=True, stderr=True).decode(errors="replace"), drift
    finally:
        container.remove(force=True)


def _timeout(inputs: Mapping[str, Any]) -> float:
    command = inputs.get("command", [])
    own = float(command[command.index("--timeout") + 1]) if "--timeout" in command else 0
    return own + RUN_TIMEOUT_MARGIN_S


Connect = Callable[[str, Sequence[str]], AbstractContextManager[Endpoint]]


def _floor(inputs: Mapping[str, Any]) -> float | None:
    command = inputs.get("command", [])
    return float(command[command.index("--min-tflops") + 1]) if "--min-tflops" in command else None


def _slowest(report: Mapping[str, Any] | None) -> float | None:
    rates = [row["tflops"] for row in (report or {}).get("matmul") or [] if "tflops" in row]
    return min(rates) if rates else None


def _expected_gpus(inputs: Mapping[str, Any]) -> str:
    command = inputs.get("command", [])
    return f"{command[command.index('--expect-gpus') + 1]} GPU(s)" if "--expect-gpus" in command else "?"


def deployed(client: Any, name: str, declared: str) -> tuple[str, str, int | None]:
    """(image digest, state, restarts) of the deployed container `name`, as `docker inspect` shows it: the image's
    repository digest (RepoDigests) where it has one, else its id; the state with the health check's verdict and the
    exit code of a stopped container; RestartCount (Docker's restarts under the restart policy)."""

    try:
        attrs = client.containers.get(name).attrs
    except docker.errors.NotFound:
        return "-", "absent", None
    state = attrs["State"]
    text = state["Status"]
    if state.get("Health"):
        text += f" ({state['Health']['Status']})"
    if state["Status"] == "exited":
        text += f" ({state['ExitCode']})"
    try:
        digests = client.images.get(attrs["Image"]).attrs.get("RepoDigests") or []
    except docker.errors.NotFound:
        digests = []
    pinned = declared.partition("@")[2]
    matching = [d.partition("@")[2] for d in digests if d.partition("@")[2] == pinned]
    image = (matching or [d.partition("@")[2] for d in digests] or [attrs["Image"]])[0]
    if pinned and image != pinned:
        text += f"; image is not the declared {pinned[:19]}"
    return image, text, attrs.get("RestartCount")


def verify_host(
    host: str, checks: HostChecks, connect_to: Connect, device_root: Path, gpus: Mapping[str, str] | None = None
) -> tuple[list[Row], list[FleetRow]]:
    """One host's rows: one ERROR row when it cannot be reached, else a row per check (and `log-opts`); and its
    fleet rows: one per partition (one `-` row when it cannot be reached)."""
    rows: list[Row] = []
    fleet: list[FleetRow] = []
    gpus = gpus or {}
    try:
        with connect_to(checks.endpoint, checks.ssh_opts) as endpoint:
            drift: dict[str, str] = {}
            ran: dict[str, tuple[Row | None, dict[str, Any] | None, Mapping[str, Any]]] = {}
            silent: str | None = None  # the daemon stopped answering: its containers are not inspected either
            for inputs in checks.checks:
                labels = _labels(inputs)
                name = "preflight" if labels[CHECK_LABEL] == "preflight" else labels.get(PARTITION_LABEL, "?")
                timeout = _timeout(inputs)
                try:
                    code, logs, container_drift = run_check(endpoint.client, inputs, timeout, device_root)
                except CannotRun as refused:
                    rows.append(Row(host, name, "error", str(refused)))
                    ran[name] = (rows[-1], None, inputs)
                    continue
                except Exception as error:  # one check's failure is its row; the host's other checks still run
                    said = endpoint.explain(error, endpoint.client.api.timeout)
                    rows.append(Row(host, name, "error", said))
                    ran[name] = (rows[-1], None, inputs)
                    silent = said if said.startswith("no answer within") else silent
                    continue
                verdict = "pass" if code == 0 else ("warn" if labels.get(VERDICT_LABEL) == "warn" else "fail")
                rows.append(Row(host, name, verdict, "" if code == 0 else f"exit {code}\n{summary(logs)}"))
                ran[name] = (rows[-1], check_report(logs), inputs)
                drift.update(container_drift)
            # Every container of a host declares the same log options (hosts[].logs): one row for the host.
            if drift:
                rows.append(Row(host, "log-opts", "fail", log_finding(drift)))
            for partition, (container, image) in checks.partitions.items():
                row, report, check = ran.get(partition) or (None, None, {})
                try:
                    if silent:
                        raise CannotRun(f"not inspected: {silent}")
                    digest, state, restarts = deployed(endpoint.client, container, image)
                except CannotRun as skipped:
                    digest, state, restarts = "-", str(skipped), None
                except Exception as error:  # the inspect of one container; the others are still shown
                    digest, state, restarts = "-", endpoint.explain(error, endpoint.client.api.timeout), None
                fleet.append(
                    FleetRow(
                        host,
                        partition.partition("/")[2] or partition,
                        gpus.get(partition) or _expected_gpus(check),
                        digest,
                        state,
                        row.verdict if row is not None else "-",
                        _slowest(report),
                        _floor(check),
                        restarts,
                    )
                )
    except Unreachable as unreachable:
        rows.append(Row(host, "-", "error", str(unreachable)))
        fleet.append(FleetRow(host, "-", "-", "-", f"unreachable: {unreachable}", "error", None, None, None))
    return rows, fleet


def verify(
    plan: Plan,
    connect_to: Connect,
    progress: Callable[[str], None],
    device_root: Path = Path("/"),
    gpus: Mapping[str, str] | None = None,
) -> Results:
    """Every host's rows, in host order; the hosts are checked in parallel (each its own connection). `gpus`: the
    GPUs of each partition (`host/container`) as the fleet table shows them (default: the count its check expects)."""
    hosts = checks_by_host(plan)

    def one(number: int, host: str, checks: HostChecks) -> tuple[list[Row], list[FleetRow]]:
        progress(f"[{number}/{len(hosts)}] {host} ({checks.endpoint}): {len(checks.checks)} check(s) ...")
        began = time.monotonic()
        rows, fleet = verify_host(host, checks, connect_to, device_root, gpus)
        outcome = "unreachable" if rows and rows[0].check == "-" else "done"
        progress(f"[{number}/{len(hosts)}] {host}: {outcome} in {time.monotonic() - began:.1f}s")
        return rows, fleet

    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL_HOSTS, len(hosts)))) as pool:
        futures = [pool.submit(one, n, host, checks) for n, (host, checks) in enumerate(hosts.items(), 1)]
        done = [future.result() for future in futures]
    return Results([r for rows, _ in done for r in rows], [f for _, fleet in done for f in fleet])


def partition_gpus(cfg: StackConfig) -> dict[str, str]:
    """`host/container` -> its GPUs (`0-3`), as the fleet table shows them."""
    return {f"{h.name}/{c.name}": gpu_ranges(c.gpus) for h in cfg.hosts for c in h.containers if c.gpus}


def docker_connect(connect_timeout: float = CONNECT_TIMEOUT_S, call_timeout: float = CALL_TIMEOUT_S) -> Connect:
    def connect_to(endpoint: str, ssh_opts: Sequence[str]) -> AbstractContextManager[Endpoint]:
        return connect(endpoint, ssh_opts, connect_timeout, call_timeout)

    return connect_to


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rocm-stack verify", description=__doc__.split("\n\n")[0], epilog=exit_codes(__doc__)
    )
    parser.add_argument("--stack", required=True, help="stack name: reads stacks/Pulumi.STACK.yaml")
    k8s = parser.add_argument_group("Kubernetes (tools/verify_k8s.py)")
    k8s.add_argument("--kubernetes", action="store_true", help="check the GPU nodes of the stack's cluster instead")
    k8s.add_argument("--node", help="only this node (its name)")
    k8s.add_argument("--kubeconfig", help="default: kubernetes.provider.kubeconfig, else $KUBECONFIG, ~/.kube/config")
    k8s.add_argument("--context", help="default: kubernetes.provider.context, else the current context")
    k8s.add_argument(
        "--schedule-wait",
        type=float,
        default=SCHEDULE_WAIT_S,
        metavar="SECONDS",
        help="how long a node's check may wait for its GPUs before the node counts as busy (default %(default)s)",
    )
    for flag, default, what in (
        ("--connect-timeout", CONNECT_TIMEOUT_S, "how long connecting to a host's Docker endpoint may take"),
        ("--call-timeout", CALL_TIMEOUT_S, "how long any other Docker API call may take (a check's wait excepted)"),
    ):
        parser.add_argument(flag, type=float, default=default, metavar="SECONDS", help=f"{what} (default %(default)s)")
    parser.add_argument(
        "--json", action="store_true", help="print the checks and the fleet as JSON (for scripts) instead of tables"
    )
    args = parser.parse_args(argv)
    if args.kubernetes:
        # Here, not at the top: the Kubernetes client adds 90-160 ms to every `rocm-stack verify` (python -X importtime).
        from tools import verify_k8s

        return verify_k8s.main(args.stack, args.node, args.kubeconfig, args.context, args.schedule_wait, args.json)
    if args.node or args.kubeconfig or args.context:
        parser.error("--node, --kubeconfig and --context go with --kubernetes")
    try:
        plan = synthesize(args.stack)
        gpus = partition_gpus(stack_settings(args.stack))
    except (ProgramRefused, ConfigError, StackFileError, FileNotFoundError) as refused:
        print(refused, file=sys.stderr)
        return 2
    if not checks_by_host(plan):
        print(f"stack '{args.stack}' declares no checks (rocm-stack:checks.enable is off)", file=sys.stderr)
        return 2
    rows = verify(
        plan,
        docker_connect(args.connect_timeout, args.call_timeout),
        lambda line: print(line, file=sys.stderr, flush=True),
        gpus=gpus,
    )
    print(report_json(rows, rows.fleet) if args.json else f"{table(rows)}\n\n{fleet_table(rows.fleet)}")
    if any(r.verdict == "error" for r in rows):
        return 2
    return 1 if any(r.verdict == "fail" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
