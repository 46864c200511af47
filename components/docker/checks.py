"""One-shot check containers that gate a Docker GPU host's partitions: the host preflight (programs/preflight.py)
and the GPU check of each partition (programs/gpucheck.py), run with exactly the partition's device access.

How a failed check fails `pulumi up` (pulumi_docker 5.2.0 = terraform-provider-docker v4.5.0,
internal/provider/resource_docker_container_funcs.go @ 5074970c): with `attach` the provider's create waits for the
container to stop (`client.ContainerWait(..., container.WaitConditionNotRunning)`) and keeps its output when `logs`
is set (`d.Set("container_logs", ...)`), then reads the container, which sets `exit_code` for a stopped one; a
non-zero exit does not fail the create. `must_run` false keeps the provider from treating the exited container as
drift (Read: "If must_run is configured as true but container is stopped, set it to false in state"). So the stack
judges `exit_code` itself (`verdict`): the partition's container depends on an Output that raises on a failed
check, so it is never created and `pulumi up` stops with the check's own findings. The verdict is stored with the
check in the state: a failed check keeps failing every `pulumi up` until it is run again (a new check container:
`pulumi up --replace <its URN>`, or any change to the partition, which renames it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_docker as docker

from rules import CHECK_LABEL
from schema.checks import ChecksConfig, GpuFloors
from schema.docker import ContainerConfig, HostConfig

from .daemon import PROBE_MEMORY_MIB, read_back_findings
from .deadlines import create_timeouts
from .environment import container_envs
from .logs import log_args
from .programs import program_digest, program_uploads
from schema.project import PROGRAMS

PROGRAM_SOURCE = PROGRAMS
# The image contract of programs/: a directory on PYTHONPATH holding the `programs` package.
PROGRAM_PARENT = "/opt/rocm-stack"
PROGRAM_MOUNT = f"{PROGRAM_PARENT}/programs"
# The host's volume of the check programs: this prefix, then their version.
PROGRAMS_VOLUME = "rocm-stack-check-programs-"
# What programs/gpucheck.py needs of programs/ (the standard library and torch otherwise), on Docker and Kubernetes.
GPU_CHECK_PROGRAMS = ("__init__.py", "gpucheck.py")
CHECK_PROGRAMS = (*GPU_CHECK_PROGRAMS, "preflight.py")
# Where the preflight sees the host's /proc and /sys (read-only), as node-exporter's docs mount them, and systemd's
# unit files and configuration (programs/preflight.py docker_stop). Not /etc/docker (the policy pack refuses it: it
# can hold dockerd's TLS keys): live-restore is read from dockerd's command line there.
HOST_ROOT = "/host"
HOST_PATHS = ("/proc", "/sys", "/etc/systemd", "/usr/lib/systemd", "/lib/systemd")
LOG_LINES_SHOWN = 20
# Labels of a check container: which check (tools/verify.py finds them by it), and whether its failure stops what
# depends on it ("fail") or is only reported ("warn": the preflight in dev).
VERDICT_LABEL = "rocm-stack.verdict"


def check_labels(kind: str, strict: bool) -> list[docker.ContainerLabelArgs]:
    labels = {CHECK_LABEL: kind, VERDICT_LABEL: "fail" if strict else "warn"}
    return [docker.ContainerLabelArgs(label=k, value=v) for k, v in labels.items()]


def check_programs_digest() -> str:
    """The version of the check programs: in the name of each host's volume of them."""
    return program_digest({name: (PROGRAM_SOURCE / name).read_text() for name in CHECK_PROGRAMS})[:12]


def check_programs_volume(host: str, opts: pulumi.ResourceOptions) -> docker.Volume:
    """The check programs shipped to a host once: the preflight copies them into this volume (its uploads) and
    every GPU check of the host mounts it read-only, so the state holds them per host by reference (programs.py),
    not per check by content. Named after their version: a new version is a new volume (`name` is ForceNew,
    terraform-provider-docker v4.5.0 internal/provider/resource_docker_volume.go L41-46), which every check
    mounts (`volumes` ForceNew, resource_docker_container.go L434-466): all the host's checks run again, and the
    old volume is deleted after them."""
    return docker.Volume(f"{host}-check-programs", name=f"{PROGRAMS_VOLUME}{check_programs_digest()}", opts=opts)


def programs_mount(volume: docker.Volume, writable: bool) -> docker.ContainerVolumeArgs:
    return docker.ContainerVolumeArgs(volume_name=volume.name, container_path=PROGRAM_MOUNT, read_only=not writable)


def content_hash(*parts: Any) -> str:
    """A short digest of what a check depends on; in the check's Docker name, so any change replaces (re-runs) it."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode())
    digest.update(check_programs_digest().encode())
    return digest.hexdigest()[:10]


def gpucheck_command(gpus: int, floors: GpuFloors, timeout_seconds: int) -> list[str]:
    command = [
        "python3",
        "-m",
        "programs.gpucheck",
        "--expect-gpus",
        str(gpus),
        "--json",
        "--timeout",
        str(timeout_seconds),
    ]
    if floors.min_tflops is not None:
        command += ["--min-tflops", f"{floors.min_tflops:g}"]
    if floors.min_busbw is not None and gpus > 1:
        command += ["--min-busbw", f"{floors.min_busbw:g}"]
    return command


def preflight_command(host: HostConfig, rocm: Sequence[str], stop_grace_seconds: int) -> list[str]:
    command = [
        "python3",
        "-m",
        "programs.preflight",
        "--root",
        HOST_ROOT,
        "--host",
        host.name,
        "--expect-gpus",
        str(host.logical_gpus),
        "--gpu-model",
        host.gpu_model,
        "--stop-grace",
        str(stop_grace_seconds),
        "--json",
    ]
    for release in sorted(set(rocm)):
        command += ["--rocm", release]
    return command


def check_report(logs: str | None) -> dict[str, Any] | None:
    """The JSON object a check program printed last (`--json`), if any."""
    for line in reversed((logs or "").strip().splitlines()):
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict):
            return report
    return None


def summary(logs: str | None) -> str:
    """What the program reported: the failures of its JSON object, else the last lines it printed."""
    report = check_report(logs)
    if report is not None:
        items = report.get("failures") or [
            f"{f['check']}: {f['seen']} (expected {f['expected']}); fix: {f['fix']}" for f in report.get("findings", [])
        ]
        if items:
            return "\n".join(f"  - {item}" for item in items)
    lines = (logs or "").strip().splitlines()
    return "\n".join(f"  | {line}" for line in lines[-LOG_LINES_SHOWN:]) or "  (no output)"


def verdict(
    check: docker.Container, what: str, strict: bool, daemon_inputs: Mapping[str, Any] | None = None
) -> pulumi.Output[docker.Container]:
    """The check container once it has passed. A failure raises (strict) or is a warning; either names `what`.
    `daemon_inputs` (the preflight's): what it was given that the daemon may change (components/docker/daemon.py);
    a daemon that changed it back fails the host whatever `strict` says, since every `pulumi up` would then replace
    or update every container of the host."""

    def judge(result: list[Any]) -> docker.Container:
        code, logs, log_opts, memory, memory_swap = result
        stored = {"logOpts": log_opts, "memory": memory, "memorySwap": memory_swap}
        changed = read_back_findings(daemon_inputs, stored) if daemon_inputs is not None else []
        if changed:
            raise pulumi.RunError(
                f"{what}: the Docker daemon changes what the provider reads back:\n"
                + "\n".join(f"  - {finding}" for finding in changed)
            )
        if code == 0:
            return check
        # No exit code: the container never ran to its end (its start failed; the provider's error said why).
        ended = f"exit code {code}" if code is not None else "it did not run to its end"
        message = f"{what} failed ({ended}):\n{summary(logs)}"
        if strict:
            raise pulumi.RunError(message)
        pulumi.log.warn(message, resource=check)
        return check

    return pulumi.Output.all(
        check.exit_code, check.container_logs, check.log_opts, check.memory, check.memory_swap
    ).apply(judge)


def found_running(container: docker.Container, what: str) -> pulumi.Output[bool]:
    """True unless the provider found `container`, a long-running one declared `must_run: false`, stopped; then
    `pulumi up` and `pulumi preview` fail naming `what`, the exit code and the fix. terraform-provider-docker v4.5.0
    Read sets `exit_code` only for a container that is not running (resource_docker_container_funcs.go L815-816, its
    one `d.Set("exit_code", ...)`) and leaves a `must_run: false` one alone (L819-823: neither started nor replaced,
    L998-1013), so a server stopped by hand or whose restart failed (Docker then gives up: moby daemon/monitor.go
    v20.10.24 L84-90, v28.5.2 L141-152: `SetStopped` once the restart's start fails) would stay down behind a `pulumi up` that
    succeeds. Read runs at the refresh that every `pulumi up` and `pulumi preview` of this project does first
    (Pulumi.yaml `refresh: always`); it never clears `exit_code` (a container running again is not `d.Set`), so
    the record stays until the container is replaced."""

    def judge(result: list[Any]) -> bool:
        code, name, urn = result
        if code is None:
            return True
        raise pulumi.RunError(
            f"{what}: its container {name} is not running (exit code {code}, read by the refresh): stopped by hand, "
            f"or Docker's restart failed (`docker inspect -f '{{{{.State.Error}}}}' {name}`; `docker logs {name}` "
            "shows why it stopped), and `pulumi up` does not start it (must_run false). To serve again: "
            f"`pulumi up --replace '{urn}'` (recreates it and re-runs its health check; until then every `pulumi up` "
            "fails here, also after a `docker start`: the state keeps the exit code the refresh read)"
        )

    return pulumi.Output.all(container.exit_code, container.name, container.urn).apply(judge)


@dataclass(frozen=True)
class HostChecksArgs:
    """What GpuHost needs to declare the checks of a host."""

    config: ChecksConfig
    environment: str
    host: HostConfig
    """The whole host: every partition, whether a workload runs in it or its own shell does."""
    partition_images: Mapping[str, str]
    """Partition name -> key of `rocm-stack:images` that its container runs (the workload's image when claimed)."""
    image_rocm: Mapping[str, str | None]
    """The ROCm release of each image key the host runs (None: unknown, refused by the config checks)."""
    stop_grace_seconds: int
    """The longest stop grace of the host's containers: docker.service must give dockerd that long to stop them."""

    @property
    def daemon_inputs(self) -> dict[str, Any]:
        """What the preflight is given that a daemon setting may change (camelCase, as read back): the host's log
        options, and a memory limit with no swap, as its partitions with a `memory` and the monitoring exporters
        have (components/monitoring/docker_host.py)."""
        return {"logOpts": self.host.logs.opts, "memory": PROBE_MEMORY_MIB, "memorySwap": PROBE_MEMORY_MIB}

    @property
    def preflight_strict(self) -> bool:
        """AMD's host settings are required in prod; in dev a workstation rarely has them, so they are warnings."""
        return self.environment == "prod"


def preflight_container(
    args: HostChecksArgs,
    image_key: str,
    image: pulumi.Input[str],
    programs: docker.Volume,
    opts: pulumi.ResourceOptions,
) -> docker.Container:
    """The host's first check; it also fills the host's `programs` volume: its uploads land in the volume mounted
    at their directory, because the daemon mounts a created container's volumes before it extracts an archive into
    it (moby v20.10.24 daemon/archive.go L276-285 containerExtractToDir: Mount, then mountVolumes; v28.0.0
    daemon/archive_unix.go L104 openContainerFS, which binds the volumes into a private mount namespace)."""
    rocm = sorted({r for key in set(args.partition_images.values()) if (r := args.image_rocm.get(key))})
    command = preflight_command(args.host, rocm, args.stop_grace_seconds)
    return docker.Container(
        f"{args.host.name}-preflight",
        # What it probes is in its name: a new probe is a new preflight, judged afresh.
        name=f"preflight-{content_hash(command, image_key, args.daemon_inputs)}",
        image=image,
        command=command,
        envs=[f"PYTHONPATH={PROGRAM_PARENT}"],
        uploads=program_uploads(CHECK_PROGRAMS, PROGRAM_MOUNT, PROGRAM_SOURCE),
        volumes=[
            *(
                docker.ContainerVolumeArgs(host_path=path, container_path=f"{HOST_ROOT}{path}", read_only=True)
                for path in HOST_PATHS
            ),
            programs_mount(programs, writable=True),
        ],
        labels=check_labels("preflight", strict=args.preflight_strict),
        **log_args(args.host.logs),
        # The probe of the daemon (args.daemon_inputs), judged by `verdict`.
        memory=args.daemon_inputs["memory"],
        memory_swap=args.daemon_inputs["memorySwap"],
        restart="no",
        must_run=False,
        attach=True,
        logs=True,
        # It reads files of /proc and /sys: seconds, within the margin alone.
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(custom_timeouts=create_timeouts())),
    )


def gpucheck_container(
    args: HostChecksArgs,
    container: ContainerConfig,
    image: pulumi.Input[str],
    access: Mapping[str, Any],
    env: Mapping[str, str],
    programs: docker.Volume,
    opts: pulumi.ResourceOptions,
    secret_env: bool = False,
) -> docker.Container:
    """`access` and `env`: the partition's device access and environment, from the definition its own container
    uses (components.docker.gpu_host rocm_access and the visibility variable). It runs programs/gpucheck.py from
    the host's `programs` volume, read-only, which the preflight it waits for has filled."""
    host = args.host
    gpus = len(container.gpus) if container.gpus is not None else host.logical_gpus
    command = gpucheck_command(
        gpus,
        args.config.floors_for(host.gpu_model, args.environment, host.compute_partition),
        args.config.timeout_seconds,
    )
    # Device access and the environment are among the check's own inputs, which replace it when they change
    # (ForceNew in the provider's schema, terraform-provider-docker v4.5.0 internal/provider/
    # resource_docker_container.go: devices, group_add, ipc_mode, env L590-596, ...); the hash adds the rest of the
    # partition (cpuset, which the provider updates in place, and the image it runs). The name is shown in plain text
    # (`docker ps`, the state, synth's plan), so it hashes the environment's names only, never its values: a short
    # digest over a secret would let anyone test guesses of it. A changed value still replaces the check (ForceNew)
    # under the same name, so the old one is deleted first (deleteBeforeReplace).
    partition = container.model_dump(mode="json", exclude={"env"})
    # Its volumes are a set to the provider (TypeSet) and its ports' order is suppressed by their DiffSuppressFunc
    # (resource_docker_container.go L1192-1247): their order must not rename (re-run) the check either.
    for key in ("volumes", "ports"):
        partition[key] = sorted(partition[key], key=lambda v: json.dumps(v, sort_keys=True))
    spec = [command, args.partition_images[container.name], partition, sorted(env)]
    return docker.Container(
        f"{host.name}-{container.name}-gpucheck",
        name=f"gpucheck-{container.name}-{content_hash(*spec)}",
        image=image,
        command=command,
        envs=container_envs({**env, "PYTHONPATH": PROGRAM_PARENT}, secret_env),
        volumes=[programs_mount(programs, writable=False)],
        # The partition's own label (rocm_access) and the check's.
        **{**access, "labels": [*(access.get("labels") or []), *check_labels("gpucheck", strict=True)]},
        restart="no",
        must_run=False,
        attach=True,
        logs=True,
        # `attach` waits for it to exit: gpucheck gives up after --timeout (then stops its ranks, 10 s each).
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(
                custom_timeouts=create_timeouts(args.config.timeout_seconds), delete_before_replace=True
            ),
        ),
    )
