"""Offline synth: run the real `__main__.py` under Pulumi's mock engine and write what it declares.

    rocm-stack synth --stack dev [--out out/dev]

writes `plan.json` (every resource with its type, name, parent, inputs as the provider receives them,
protect, retain_on_delete, delete_before_replace, replace_on_changes, ignore_changes, depends_on, custom_timeouts and
aliases (old
URNs it is found by, with their parents); secrets as "[secret]"), `manifests/` (one YAML per Kubernetes object), `helm/RELEASE.yaml` (one
per Helm release), `docker/HOST.sh` (a runnable script of the docker commands that create and start the host's
containers) and `monitoring/prometheus.yml` (the scrape config of the Docker hosts' metrics exporters).
This is the reviewers' and CI's view of a change; deploying stays `pulumi up -s STACK`.

In tests, `synthesize(stack, config)` returns the same `Plan` in-process.
Exit codes: 0 written; 2 the stack file or its configuration was refused (one line per problem, naming the
file:line:column or the key), or the output folder cannot take the files; 2 also for a usage error.

`--out` deletes only files an
earlier synth wrote there (listed in its `.synth-manifest`), only regular files strictly inside it; two
synths into one folder take turns (a lock on `.synth-lock`).

Why one file: the mock engine, the plan it records and the files written from it (manifests, HOST.sh, the output
folder's safety rules) are one command's steps, each reading the plan's records.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import gc
import hashlib
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, cast

import yaml

from tools.output import exit_codes
from schema.project import ROOT
from schema.stackfile import StackFileError, as_program_config, read_config
from components.docker.readback import parse_go_duration

SECRET = "[secret]"

# Types whose inputs are not a Kubernetes object of their own.
_K8S_NON_OBJECTS = re.compile(r"^kubernetes:(helm\.sh/|yaml/|kustomize/)|^pulumi:providers:")


@dataclass
class Plan:
    project: str
    stack: str
    resources: list[dict[str, Any]]
    outputs: dict[str, Any]
    # Outputs the mock engine computed (image ids), by URN; kept out of plan.json.
    mock_outputs: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    def of_type(self, type_token: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r["type"] == type_token]

    def get(self, type_token: str, name: str) -> dict[str, Any]:
        matches = [r for r in self.of_type(type_token) if r["name"] == name]
        if len(matches) != 1:
            raise KeyError(f"{type_token} {name!r}: {len(matches)} declared")
        return matches[0]

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        return [
            r for r in self.resources if r["type"].startswith("kubernetes:") and not _K8S_NON_OBJECTS.match(r["type"])
        ]

    def to_json(self) -> dict[str, Any]:
        return {"project": self.project, "stack": self.stack, "resources": self.resources, "outputs": self.outputs}

    def text(self) -> str:
        """plan.json as written."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


class ProgramRefused(Exception):
    """The program stopped before declaring anything (pulumi.RunError): a refused configuration."""


def _redact(value: Any) -> Any:
    from pulumi.runtime import rpc  # here: pulumi's runtime only for a synth (see synthesize)

    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return SECRET
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the mock wire format turns every number into a float
    return value


def _aliases(request: Any, make_urn: Callable[[str, str, str], str]) -> list[dict[str, str | None]]:
    """Each alias of a resource: the URN the engine also looks it up by (a moved or renamed resource keeps its state
    under it), and that URN's parent. An alias spec's unset name, type and parent are the resource's own (pulumi/pulumi
    pkg/resource/deploy/step_generator.go collapseAliasToUrn L545-583), then the URN is made from the parent as any
    child's is (sdk/go/common/resource/alias.go CreateURN L40-56), here in the mock engine's form like every URN of
    the plan (`make_urn`)."""
    found: list[dict[str, str | None]] = []
    for alias in request.aliases:
        spec = alias.spec
        # The program's aliases are `Alias(parent=...)` specs: no URN strings, no other stack or project.
        assert alias.WhichOneof("alias") == "spec" and not spec.stack and not spec.project, alias
        parent = "" if spec.noParent else spec.parentUrn or request.parent
        found.append(
            {"urn": make_urn(parent, spec.type or request.type, spec.name or request.name), "parent": parent or None}
        )
    return found


def _fake_id(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def autoname(resource_name: str) -> str:
    """The name the mock engine gives a Kubernetes object declared without metadata.name, where the provider names
    it `<resource name>-<8 random hex digits>` (pulumi-kubernetes provider/pkg/metadata/naming.go
    AssignNameIfAutonamable; pulumi sdk/go/common/resource/resource_id.go NewUniqueName L98-110: 8 of
    "0123456789abcdef" by default). Here the suffix is a digest of the name, stable from plan to plan, so the
    objects that refer to the name show the reference (tools/impact.py follows it when a secret is rotated)."""
    return f"{resource_name}-{hashlib.sha256(resource_name.encode()).hexdigest()[:8]}"


def autonamed(type_token: str, inputs: Mapping[str, Any]) -> bool:
    """A Kubernetes object declared without a name: the provider names it (autoname)."""
    metadata = inputs.get("metadata")
    return (
        type_token.startswith("kubernetes:")
        and not _K8S_NON_OBJECTS.match(type_token)
        and isinstance(metadata, dict)
        and not metadata.get("name")
        and not metadata.get("generateName")
    )


def _mock_engine(
    records: list[dict[str, Any]],
    mock_outputs: dict[str, dict[str, Any]],
    run_results: Mapping[str, tuple[int, str]],
    read_back: Mapping[str, Mapping[str, Any]],
) -> tuple[Any, type[Any]]:
    from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs, Mocks  # here: see synthesize

    # The SDK calls the monitor from a thread pool: each thread hands its call's values to the monitor.
    this_call = threading.local()

    class SynthMocks(Mocks):
        def new_resource(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:
            computed: dict[str, Any] = {}
            if args.typ == "docker:index/remoteImage:RemoteImage":
                computed = {
                    "imageId": _fake_id(args.inputs["name"]),
                    "repoDigest": f"{args.inputs['name'].split(':')[0]}@{_fake_id(args.name)}",
                }
            elif autonamed(args.typ, args.inputs):
                computed = {"metadata": {**args.inputs["metadata"], "name": autoname(args.name)}}
            elif args.typ == "docker:index/container:Container" and args.inputs.get("attach"):
                # A container the provider waits for (attach): the exit code and output a run leaves in its state.
                code, logs = run_results.get(args.name, (0, ""))
                computed = {"exitCode": code, "containerLogs": logs}
            if args.typ == "docker:index/container:Container":
                computed.update(read_back.get(args.name, {}))
            this_call.inputs, this_call.computed = args.inputs, computed
            return mock_id(args.name), {**args.inputs, **computed}

        # A bare dict is "no failures" (MockMonitor.Invoke: `if isinstance(tup, dict)`); (dict, None) would fail.
        def call(self, args: MockCallArgs) -> dict[str, Any]:  # type: ignore[override]
            return {}

    class RecordingMonitor(MockMonitor):
        def RegisterResource(self, request: Any) -> Any:
            response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
            if request.type != "pulumi:pulumi:Stack":
                # Nothing reads resources back (no getResource invokes): keep one copy, the plan's.
                del self.resources[response.urn]
                records.append(
                    {
                        "type": request.type,
                        "name": request.name,
                        "urn": response.urn,
                        "parent": request.parent or None,
                        "provider": request.provider.rsplit("::", 1)[0] or None if request.provider else None,
                        "custom": bool(request.custom),
                        "protect": bool(request.protect),
                        "retain_on_delete": bool(request.retainOnDelete),
                        "delete_before_replace": bool(request.deleteBeforeReplace),
                        "replace_on_changes": sorted(request.replaceOnChanges),
                        "ignore_changes": sorted(request.ignoreChanges),
                        "depends_on": sorted(request.dependencies),
                        # Set ones only, as the program gave them (Go duration strings: "2140s").
                        "custom_timeouts": {
                            op: getattr(request.customTimeouts, op)
                            for op in ("create", "update", "delete")
                            if getattr(request.customTimeouts, op)
                        },
                        "aliases": _aliases(request, self.make_urn),
                        "inputs": _redact(this_call.inputs),
                    }
                )
                if this_call.computed:
                    mock_outputs[response.urn] = this_call.computed
            return response

    return SynthMocks(), RecordingMonitor


@contextlib.contextmanager
def _without_stack_traces() -> Iterator[None]:
    """No Python stack walk per registration while the mock engine runs.

    The SDK captures the whole stack at every registration for the engine's source positions
    (pulumi/runtime/resource.py `_get_stack_trace`: traceback.extract_stack, a URI per frame), about a tenth of
    synth; the mock monitor reads neither field (MockMonitor.RegisterResource), so the plan is byte-identical
    without it. The SDK has no switch for it (3.272.0, nor pulumi/pulumi master at 1b59498): here it sends the
    empty trace it sends itself where it finds no caller's frame. Only synth: under `pulumi up` the engine keeps
    each resource's source position in its state (apitype ResourceV3.sourcePosition) and names it in errors.
    """
    # here: pulumi's runtime only for a synth (see synthesize)
    from pulumi.runtime import resource
    from pulumi.runtime.proto import source_pb2

    walk = resource._get_stack_trace
    resource._get_stack_trace = source_pb2.StackTrace
    try:
        yield
    finally:
        resource._get_stack_trace = walk


_STACK_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _project(project_dir: Path) -> dict[str, Any]:
    """Pulumi.yaml of the project; a folder without one (a test's bare stacks/) is this project's layout."""
    path = project_dir / "Pulumi.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else {"name": "rocm-stack", "stackConfigDir": "stacks"}


def stack_file(stack: str, project_dir: Path = ROOT) -> Path:
    """`<stackConfigDir>/Pulumi.<stack>.yaml`; StackFileError naming the stacks that exist when it is missing."""
    folder = project_dir / str(_project(project_dir).get("stackConfigDir", "."))
    path = folder / f"Pulumi.{stack}.yaml"
    if not _STACK_NAME.fullmatch(stack) or not path.is_file():
        # The CLI itself would start from an empty config (workspace/loaders.go L160-164); here stacks live in
        # the repository, so a missing file is a typo.
        stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in folder.glob("Pulumi.*.yaml"))
        shown = path.relative_to(project_dir) if path.is_relative_to(project_dir) else path
        raise StackFileError(shown, f"no such stack file; the stacks are: {', '.join(stacks) or 'none'}")
    return path


def stack_config(stack: str, project_dir: Path = ROOT) -> dict[str, Any]:
    """The stack's config as the Pulumi CLI reads it (schema.stackfile): `namespace:key` -> value."""
    return read_config(stack_file(stack, project_dir), _project(project_dir)["name"])


def synthesize(
    stack: str,
    config: Mapping[str, Any] | None = None,
    *,
    secrets: Mapping[str, str] | None = None,
    project_dir: Path = ROOT,
    run_results: Mapping[str, tuple[int, str]] | None = None,
    read_back: Mapping[str, Mapping[str, Any]] | None = None,
) -> Plan:
    """Run the program of `project_dir` for `stack` under the mock engine and return what it declared.

    `config` defaults to `stacks/Pulumi.<stack>.yaml`; its `{secure: ...}` values become secrets.
    `secrets` adds plaintext values that the program sees as Pulumi secrets (for tests).
    `run_results`: (exit code, output) of attached one-shot containers by resource name; others exit 0.
    `read_back`: outputs (camelCase) the provider read back for a container by resource name, where the daemon
    changed what it was given (components/docker/daemon.py) or a refresh found it stopped (`exitCode`); others read
    back their inputs.
    Raises ProgramRefused when the program stops with pulumi.RunError (a refused configuration).
    """
    # Here: pulumi's runtime (0.7 s to import, measured) only for a synth; the tools that import this module for
    # stack_config (tools/lock.py, tools/verify_common.py) never load it.
    import pulumi
    from pulumi.runtime import config as runtime_config
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import set_mocks
    from pulumi.runtime.stack import Stack, run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text())["name"]
    if config is None:
        config = stack_config(stack, project_dir)
    values, secret_keys = as_program_config(config, secrets)

    records: list[dict[str, Any]] = []
    mock_outputs: dict[str, dict[str, Any]] = {}
    mocks, monitor_class = _mock_engine(records, mock_outputs, run_results or {}, read_back or {})
    settings.ROOT.set(None)  # a fresh root stack per synth, also when called repeatedly in one process
    # What a refused run left pending (an apply that raised) must not fail the next one: cleared as pulumi's own
    # mock test decorator does (pulumi/runtime/mocks.py `test`: SETTINGS.rpc_manager.clear(); SETTINGS.outputs.clear()).
    settings.SETTINGS.rpc_manager.clear()
    settings.SETTINGS.outputs.clear()
    # The root stack registers in set_mocks, the program's resources in run_pulumi_func.
    with _without_stack_traces():
        set_mocks(mocks, project=project, stack=stack, preview=False, monitor=monitor_class(mocks))
        runtime_config.set_all_config(values, secret_keys)

        cwd = Path.cwd()
        sys.path.insert(0, str(project_dir))
        os.chdir(project_dir)  # the CLI runs the program from the project directory
        # The cyclic GC rescans every live Output and future of the run ever more often as they pile up: with it
        # a 1,000-host synth took 2.5x longer and its time per resource grew 1.4x from 10 hosts (issue 8).
        # Reference counting frees nearly all of it anyway; peak memory without the GC is ~3% higher.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:

            def program() -> None:
                runpy.run_path(str(project_dir / "__main__.py"), run_name="__main__")

            _sync_await(run_pulumi_func(program))
        except pulumi.RunError as refused:
            raise ProgramRefused(str(refused)) from None
        finally:
            if gc_was_enabled:
                gc.enable()
            os.chdir(cwd)
            sys.path.remove(str(project_dir))

    outputs = {}
    root = settings.get_root_resource()
    assert isinstance(root, Stack), "run_pulumi_func registers the root stack"
    for name, value in (root.outputs or {}).items():
        output = pulumi.Output.from_input(value)
        resolved = _sync_await(output.future())
        outputs[name] = SECRET if _sync_await(output.is_secret()) else _redact(resolved)
    # Registration order depends on the event loop; sorted, two synths of one config are byte-identical.
    return Plan(project, stack, sorted(records, key=lambda r: r["urn"]), outputs, mock_outputs)


def _file_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


# docker/HOST.sh runs what the plan declares on a host with the docker CLI, the way pulumi_docker 5.2's
# provider (terraform-provider-docker, internal/provider/resource_docker_container_funcs.go) does it:
# `docker create` with every input, each upload copied in as a tar at `/` (`docker cp -`), then
# `docker start`. Images are pulled only when absent (resource_docker_image_funcs.go findImage).
# Inputs it renders; any other input stops synth, so the script never silently drops one.
# `mustRun` has no docker flag: the provider only checks after start that the container runs.
_RENDERED_INPUTS = {
    "entrypoints",
    "networksAdvanced",
    "attach",
    "logs",
    "wait",
    "waitTimeout",
    "labels",
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
    "readOnly",
    "init",
    "networkMode",
    "start",
    "stopSignal",
    "stopTimeout",
    # No create flag: the provider's delete stops the container with this timeout before removing it
    # (components/docker/stop.py); the script's header says to stop with it before replacing.
    "destroyGraceSeconds",
}
_HEARDOC_END = "ROCM_STACK_EOF"


def _publish(port: dict[str, Any]) -> str:
    # The provider's defaults: ip 0.0.0.0, protocol tcp, and no external port means a random free one.
    ip = port.get("ip") or "0.0.0.0"
    ip = f"[{ip}]" if ":" in ip else ip
    return f"--publish={ip}:{port.get('external', '')}:{port['internal']}/{port.get('protocol', 'tcp')}"


def _health_flags(check: dict[str, Any]) -> list[str]:
    # docker/cli's --health-cmd always stores ["CMD-SHELL", cmd] (cli/command/container/opts.go): an exec-form
    # ["CMD", args...] becomes the shell-quoted args, which /bin/sh -c splits back into the same argv.
    kind, *args = check["tests"]
    if kind == "NONE":
        return ["--no-healthcheck"]
    flags = [f"--health-cmd={shlex.join(args) if kind == 'CMD' else args[0]}"]
    return flags + [
        f"--health-{flag}={check[key]}"
        for flag, key in (
            ("interval", "interval"),
            ("timeout", "timeout"),
            ("retries", "retries"),
            ("start-period", "startPeriod"),
        )
        if key in check
    ]


def _cdi_device_ids(inputs: dict[str, Any]) -> list[str]:
    """The CDI device names of a container's device requests. The docker CLI (>= 25.0) turns every `--device` that
    is a qualified CDI name into one request {Driver: "cdi", DeviceIDs: names} (docker/cli v25.0.0
    cli/command/container/opts.go L473-481, L594-598), what the provider sends for `device_requests`
    (terraform-provider-docker v4.5.0 resource_docker_container_structures.go deviceRequestsSetToDockerRequests)."""
    requests = inputs.get("deviceRequests", [])
    unrenderable = [r for r in requests if r.get("driver", "cdi") != "cdi" or set(r) - {"driver", "deviceIds"}]
    if unrenderable:
        raise ValueError(
            f"docker/HOST.sh renders only CDI device requests (driver cdi, deviceIds), not {unrenderable} of "
            f"container {inputs['name']!r}"
        )
    return [device_id for r in requests for device_id in r.get("deviceIds", [])]


def volume_bind(volume: Mapping[str, Any]) -> str:
    """A `volumes` entry as the docker CLI's --volume and the daemon's HostConfig.Binds: the host path or the named
    volume, the container path, `:ro` when read-only."""
    source = volume.get("hostPath") or volume["volumeName"]
    return f"{source}:{volume['containerPath']}{':ro' if volume.get('readOnly') else ''}"


def mock_id(name: str) -> str:
    """The id the mock engine gives resource `name` (a container's stands for its Docker ID)."""
    return f"{name}-id"


def docker_create_args(inputs: dict[str, Any], image_names: Mapping[str, str]) -> list[str]:
    """The `docker create` argv of a container's inputs (secret envs left out: the caller refuses those).
    `image_names`: the names of the image ids and container ids the inputs refer to."""
    i = inputs
    unrendered = sorted(set(i) - _RENDERED_INPUTS)
    if unrendered:
        raise ValueError(
            f"docker/HOST.sh cannot render input(s) {', '.join(unrendered)} of container "
            f"{i['name']!r}: add them to tools/synth.py docker_create_args"
        )
    args = ["docker", "create", f"--name={i['name']}"]
    if "hostname" in i:
        args.append(f"--hostname={i['hostname']}")
    if "user" in i:
        args.append(f"--user={i['user']}")
    networks = i.get("networksAdvanced", [])
    if len(networks) > 1 or any(set(n) != {"name"} for n in networks):
        raise ValueError(f"docker/HOST.sh renders one network by name, not {networks} of container {i['name']!r}")
    args += [f"--network={n['name']}" for n in networks]
    if "networkMode" in i:
        mode, _, container = str(i["networkMode"]).partition(":")  # host, none, or container:<id> (by its name)
        args.append(f"--network={mode}:{image_names.get(container, container)}" if container else f"--network={mode}")
    if i.get("readOnly"):
        args.append("--read-only")
    if i.get("init"):
        args.append("--init")
    # `--entrypoint` takes one word: the rest of the entrypoint goes before the command (the same argv runs).
    entrypoint = i.get("entrypoints", [])
    args += [f"--entrypoint={word}" for word in entrypoint[:1]]
    args += [f"--label={label['label']}={label['value']}" for label in i.get("labels", [])]
    args += [
        f"--device={d['hostPath']}:{d.get('containerPath') or d['hostPath']}:{d.get('permissions') or 'rwm'}"
        for d in i.get("devices", [])
    ]
    args += [f"--device={device_id}" for device_id in _cdi_device_ids(i)]
    args += [f"--group-add={group}" for group in i.get("groupAdds", [])]
    if "ipcMode" in i:
        args.append(f"--ipc={i['ipcMode']}")
    if "pidMode" in i:
        mode, _, container = str(i["pidMode"]).partition(":")  # host, or container:<id> (the id by its name)
        args.append(f"--pid={mode}:{image_names.get(container, container)}" if container else f"--pid={mode}")
    if "shmSize" in i:
        args.append(f"--shm-size={i['shmSize']}m")  # the provider's shmSize is in MiB, as docker's `m`
    # The provider's memory and memory_swap are MiB, as docker's `m`.
    if "memory" in i:
        args.append(f"--memory={i['memory']}m")
    if "memorySwap" in i:
        args.append(f"--memory-swap={i['memorySwap']}m")
    if "logDriver" in i:
        args.append(f"--log-driver={i['logDriver']}")
    args += [f"--log-opt={key}={value}" for key, value in sorted(i.get("logOpts", {}).items())]
    if "cpuSet" in i:
        args.append(f"--cpuset-cpus={i['cpuSet']}")
    args += [f"--cap-add={c}" for c in i.get("capabilities", {}).get("adds", [])]
    args += [f"--cap-drop={c}" for c in i.get("capabilities", {}).get("drops", [])]
    args += [f"--security-opt={o}" for o in i.get("securityOpts", [])]
    if i.get("envs") != SECRET:
        args += [f"--env={env}" for env in i.get("envs", [])]
    args += [_publish(port) for port in i.get("ports", [])]
    args += [f"--volume={volume_bind(v)}" for v in i.get("volumes", [])]
    restart = i.get("restart", "no")
    retries = f":{i['maxRetryCount']}" if restart == "on-failure" and i.get("maxRetryCount") else ""
    args.append(f"--restart={restart}{retries}")
    if "stopSignal" in i:
        args.append(f"--stop-signal={i['stopSignal']}")
    if "stopTimeout" in i:
        args.append(f"--stop-timeout={i['stopTimeout']}")
    if "healthcheck" in i:
        args += _health_flags(i["healthcheck"])
    return args + [image_names.get(i["image"], i["image"]), *entrypoint[1:], *i.get("command", [])]


def upload_text(upload: Mapping[str, Any]) -> str | None:
    """An upload's text: its `content`, or the file its `source` names in the project directory (where the provider
    reads it, components/docker/programs.py), which must still be what `sourceHash` says."""
    if "source" not in upload:
        return cast("str | None", upload.get("content"))
    data = (ROOT / str(upload["source"])).read_bytes()
    if hashlib.sha256(data).hexdigest() != upload.get("sourceHash"):
        raise ValueError(f"{upload['source']} changed after the plan was made (sourceHash): synthesize again")
    return data.decode()


def _upload_lines(name: str, uploads: list[dict[str, Any]]) -> list[str]:
    """Each file written from the script's text (base64 where a heredoc cannot hold it exactly), with the
    provider's mode (`permissions`, else 0744 when executable, else 0644), then copied in as one tar."""
    lines = ["files=$(mktemp -d)"]
    for upload in uploads:
        path = upload["file"]
        unknown = set(upload) - {
            "file",
            "content",
            "contentBase64",
            "source",
            "sourceHash",
            "executable",
            "permissions",
        }
        if unknown:
            raise ValueError(f"docker/HOST.sh cannot render upload {path} of container {name!r}: {sorted(unknown)}")
        target = f'"$files"{shlex.quote(path)}'
        lines.append(f'mkdir -p "$(dirname {target})"')
        content = upload_text(upload)
        if content is not None and content.endswith("\n") and f"\n{_HEARDOC_END}\n" not in f"\n{content}":
            lines += [f"cat > {target} <<'{_HEARDOC_END}'", content + _HEARDOC_END]
        else:
            encoded = upload.get("contentBase64") or base64.b64encode((content or "").encode()).decode()
            lines += [f"base64 -d > {target} <<'{_HEARDOC_END}'", *textwrap.wrap(encoded, 76), _HEARDOC_END]
        mode = upload.get("permissions") or ("0744" if upload.get("executable") else "0644")
        lines.append(f"chmod {mode} {target}")
    names = " ".join(shlex.quote(u["file"].lstrip("/")) for u in uploads)
    lines += [
        f'tar -C "$files" --owner=0 --group=0 --numeric-owner -cf "$files.tar" {names}',
        f'by "$deadline" docker cp - {shlex.quote(name)}:/ < "$files.tar"',
        'rm -rf "$files" "$files.tar"',
    ]
    return lines


# The provider's own create timeout where the program sets none (resource_docker_container.go L12,
# resource_docker_image.go L10: 20 minutes).
PROVIDER_CREATE_TIMEOUT_S = 20 * 60


def create_deadline(resource: dict[str, Any]) -> int:
    """Seconds the provider gives the resource's create: its `custom_timeouts.create`, else the provider's default."""

    create = resource["custom_timeouts"].get("create")
    return parse_go_duration(create) // 10**9 if create else PROVIDER_CREATE_TIMEOUT_S


def _container_block(
    container: dict[str, Any], image_names: Mapping[str, str], gates: list[str], verdict_label: str, log_lines: int
) -> list[str]:
    """`gates`: the Docker names of the containers on this host that this one depends on (its checks)."""
    i = container["inputs"]
    name = i["name"]
    deadline = create_deadline(container)
    lines = [
        f"# {name}: created, its files copied in, then started, as the Docker provider does, all within the",
        f"# create timeout of its resource ({deadline} s): a step still running then is cut and the container fails.",
        "(",
        "set -e",
        f"deadline=$(($(date +%s) + {deadline}))",
        f"trap '[ $? -eq 0 ] || overdue \"$deadline\" {shlex.quote(name)} {deadline}' EXIT",
        'by "$deadline" ' + shlex.join(docker_create_args(i, image_names)),
    ]
    if i.get("envs") == SECRET:  # a secret value anywhere makes the whole list secret
        lines.insert(-1, "# its environment holds a Pulumi secret, not shown here")
    uploads = i.get("uploads", [])
    if uploads == SECRET:
        lines.append("# its files hold a Pulumi secret, not shown here")
    elif uploads:
        lines += _upload_lines(name, uploads)
    if i.get("start", True):
        # attach: the provider waits for the container to stop (ContainerWait), keeping its output with `logs`;
        # `docker start --attach` does both and exits with the container's exit code.
        lines.append(f'by "$deadline" docker start {"--attach " if i.get("attach") else ""}{shlex.quote(name)}')
    if i.get("wait"):
        # wait: the provider polls every second until the health check says healthy, for waitTimeout s (60) of
        # wall-clock time (context.WithTimeout, resource_docker_container_funcs.go L590-622).
        timeout = i.get("waitTimeout", 60)
        lines += [
            f"waited=$(($(date +%s) + {timeout}))",
            f'until [ "$(by "$deadline" docker inspect -f \'{{{{.State.Health.Status}}}}\' {shlex.quote(name)})" '
            "= healthy ]; do",
            f'  if [ "$(date +%s)" -ge "$waited" ]; then echo "{name}: not healthy after {timeout}s; its last '
            f'{log_lines} log lines:" >&2; docker logs --tail {log_lines} {shlex.quote(name)} >&2; exit 1; fi',
            '  [ "$(date +%s)" -lt "$deadline" ] || exit 124',
            "  sleep 1",
            "done",
        ]
    # Outside the subshell -e is off, so one container's failure leaves the others to be tried (as `pulumi up`
    # goes on with independent resources) and the script still exits non-zero.
    labels = {label["label"]: label["value"] for label in i.get("labels", [])}
    if labels.get(verdict_label) == "warn":  # a check whose failure the stack only reports (the preflight in dev)
        lines += [")", f'[ $? -eq 0 ] || echo "warning: {name} failed; a warning only in this environment" >&2']
    else:
        lines += [")", f'[ $? -eq 0 ] || failed="$failed {name}"']
    if not gates:
        return lines
    # What depends on a failed check is never created, as `pulumi up` stops there (components/docker/checks.py).
    return [
        f"gate=$(blocked {' '.join(shlex.quote(g) for g in gates)})",
        f'if [ -n "$gate" ]; then echo "{name}: not created: $gate, which it waits for, failed" >&2; '
        f'failed="$failed {name}"; else',
        *lines,
        "fi",
    ]


def _in_dependency_order(containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The containers with each after those of them it depends on (its checks), otherwise in plan order."""
    pending = {c["urn"]: c for c in containers}
    ordered: list[dict[str, Any]] = []
    while pending:
        ready = [c for c in pending.values() if not set(c["depends_on"]) & pending.keys()]
        if not ready:
            raise ValueError(
                f"docker/HOST.sh: a dependency cycle among {sorted(c['inputs']['name'] for c in pending.values())}"
            )
        for container in ready:
            ordered.append(pending.pop(container["urn"]))
    return ordered


def _cdi_check(kinds: list[str]) -> list[str]:
    """Lines that stop the script before any change unless the docker CLI and daemon take CDI devices: the CLI
    parses `--device vendor/class=name` as CDI from 25.0 (docker/cli v25.0.0 cli/command/container/opts.go L480;
    an older one takes it for a path), and the daemon registers its "cdi" device driver only with the CDI feature
    on (moby v25.0.0 cmd/dockerd/daemon.go L279-280: `"features": {"cdi": true}` in daemon.json, on by default
    from v28.2.0, daemon.go L663), and otherwise clears CDISpecDirs, which `docker info` reports (moby v25.0.0
    daemon/info.go L80, cmd/dockerd/daemon.go L639-641)."""
    need = f"the CDI devices {' '.join(kinds)}=N (gpuAccess cdi) need"
    return [
        "# CDI devices need a docker CLI and daemon >= 25.0 with the daemon's CDI feature on.",
        "versions=$(docker version --format '{{.Client.Version}} {{.Server.Version}}') || exit 1",
        'for version in $versions; do case "${version%%.*}" in',
        "  2[5-9] | [3-9][0-9]) ;;",
        f'  *) echo "{need} docker >= 25.0 (client and daemon); this one is $versions" >&2; exit 1 ;;',
        "esac; done",
        "case \"$(docker info --format '{{json .CDISpecDirs}}')\" in",
        "  '' | null | '[]')",
        f'    echo "{need} the daemon\'s CDI feature: set \\"features\\": {{\\"cdi\\": true}} in '
        '/etc/docker/daemon.json (default from Docker 28.2), restart dockerd, then run amd-ctk cdi generate" >&2',
        "    exit 1 ;;",
        "esac",
    ]


def docker_scripts(plan: Plan) -> dict[str, str]:
    """Per Docker provider (one per host daemon): a runnable script of the images and containers it declares."""
    # Here: components.docker.checks loads pulumi_docker (1.8 s, measured), which only the HOST.sh scripts need.
    from components.docker.checks import LOG_LINES_SHOWN, VERDICT_LABEL

    providers = {r["urn"]: r for r in plan.of_type("pulumi:providers:docker")}
    image_names = {
        plan.mock_outputs[r["urn"]]["imageId"]: r["inputs"]["name"]
        for r in plan.of_type("docker:index/remoteImage:RemoteImage")
    } | {mock_id(r["name"]): r["inputs"]["name"] for r in plan.of_type("docker:index/container:Container")}
    by_provider: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for resource in plan.resources:  # grouped once: scanning all resources per host is quadratic in hosts
        by_provider[resource["provider"]].append(resource)
    scripts = {}
    for urn, provider in providers.items():
        on_host = by_provider[urn]
        containers = [r for r in on_host if r["type"] == "docker:index/container:Container"]
        lines = [
            "#!/bin/sh",
            f"# What stack '{plan.stack}' declares on this host, as docker commands: run it on a daemon "
            "without these containers",
            "# (to replace them, first `docker stop` them, which waits each one's --stop-timeout after SIGTERM as",
            "# `pulumi up` waits its destroyGraceSeconds, then `docker rm`), or compare it with the ROCm docs.",
            "set -u",
            f"export DOCKER_HOST={shlex.quote(provider['inputs'].get('host', ''))}",
        ]
        if "sshOpts" in provider["inputs"]:
            lines.append(f"# The provider's ssh options, for ~/.ssh/config: {provider['inputs']['sshOpts']}")
        secret = [
            c["inputs"]["name"] for c in containers if SECRET in (c["inputs"].get("envs"), c["inputs"].get("uploads"))
        ]
        if secret:
            lines += [
                f"echo 'containers {' '.join(secret)} hold Pulumi secrets that synth does not see: "
                "deploy this host with pulumi up' >&2",
                "exit 1",
            ]
        cdi = sorted({d.split("=")[0] for c in containers for d in _cdi_device_ids(c["inputs"])})
        if cdi:
            lines += _cdi_check(cdi)
        lines += [
            "failed=",
            "# The first of its arguments that failed (or was not created) above.",
            'blocked() { for dep in "$@"; do case " $failed " in *" $dep "*) echo "$dep"; return;; esac; done; }',
            "# `by DEADLINE COMMAND...`: COMMAND, killed at the epoch second DEADLINE (timeout(1) exits 137), as the",
            "# provider's create timeout cuts its step. KILL: `docker start --attach` forwards any other signal to the",
            "# container and goes on waiting (docker/cli cli/command/container/start.go ForwardAllSignals).",
            'by() { left=$(($1 - $(date +%s))); shift; [ "$left" -gt 0 ] || return 124; timeout -s KILL "$left" "$@"; }',
            "# `overdue DEADLINE WHAT SECONDS`: after a failed step, say when it failed for running out of time.",
            'overdue() { [ "$(date +%s)" -lt "$1" ] || echo "$2: cut at its deadline of $3 s (the create timeout '
            'pulumi up gives it)" >&2; }',
        ]
        for image in (r for r in on_host if r["type"] == "docker:index/remoteImage:RemoteImage"):
            ref, deadline = shlex.quote(image["inputs"]["name"]), create_deadline(image)
            lines.append(
                f"deadline=$(($(date +%s) + {deadline})); docker image inspect {ref} >/dev/null 2>&1 || "
                f'by "$deadline" docker pull {ref} || {{ overdue "$deadline" {ref} {deadline}; failed="$failed {ref}"; }}'
            )
        for network in (r for r in on_host if r["type"] == "docker:index/network:Network"):
            unknown = set(network["inputs"]) - {"name", "driver"}
            if unknown:
                raise ValueError(
                    f"docker/HOST.sh cannot render input(s) {sorted(unknown)} of network {network['name']!r}"
                )
            name, driver = (
                shlex.quote(network["inputs"]["name"]),
                shlex.quote(network["inputs"].get("driver", "bridge")),
            )
            lines.append(
                f"docker network inspect {name} >/dev/null 2>&1 || docker network create --driver={driver} {name} "
                f'|| failed="$failed {name}"'
            )
        for volume in (r for r in on_host if r["type"] == "docker:index/volume:Volume"):
            unknown = set(volume["inputs"]) - {"name"}
            if unknown:
                raise ValueError(
                    f"docker/HOST.sh cannot render input(s) {sorted(unknown)} of volume {volume['name']!r}"
                )
            name = shlex.quote(volume["inputs"]["name"])
            lines.append(
                f'docker volume inspect {name} >/dev/null 2>&1 || docker volume create {name} || failed="$failed {name}"'
            )
        names = {c["urn"]: c["inputs"]["name"] for c in containers}
        for container in _in_dependency_order(containers):
            gates = [names[urn] for urn in container["depends_on"] if urn in names]
            lines += _container_block(container, image_names, gates, VERDICT_LABEL, LOG_LINES_SHOWN)
        lines += ['if [ -n "$failed" ]; then echo "failed:$failed" >&2; exit 1; fi']
        scripts[provider["name"]] = "\n".join(lines) + "\n"
    return scripts


def helm_releases(plan: Plan) -> Iterator[tuple[str, dict[str, Any]]]:
    for release in plan.of_type("kubernetes:helm.sh/v3:Release"):
        i = release["inputs"]
        yield (
            release["name"],
            {
                "chart": i.get("chart"),
                "repo": i.get("repositoryOpts", {}).get("repo"),
                "version": i.get("version"),
                "namespace": i.get("namespace"),
                "values": i.get("values", {}),
            },
        )


def manifest_of(resource: dict[str, Any]) -> dict[str, Any]:
    """The Kubernetes object as the API server would receive it (the provider's inputs).

    A Secret's payload that holds a Pulumi secret is one opaque value offline: it is left out, and an
    annotation says so, so the manifest stays a valid object."""
    obj = {k: v for k, v in resource["inputs"].items() if k != "compat"}
    hidden = sorted(k for k in ("data", "stringData") if obj.get("kind") == "Secret" and obj.get(k) == SECRET)
    if hidden:
        metadata = obj.get("metadata", {})
        annotations = {
            **metadata.get("annotations", {}),
            "rocm-stack/synth": f"{' and '.join(hidden)} hold a secret, not shown",
        }
        obj = {
            **{k: v for k, v in obj.items() if k not in hidden},
            "metadata": {**metadata, "annotations": annotations},
        }
    return obj


# The files synth wrote into an output folder, one relative path a line: the next run deletes only these.
MANIFEST = ".synth-manifest"


class OutputError(Exception):
    """The output folder cannot take the plan's files (a folder in the way, a tracked file, no permission)."""


def rendered_files(plan: Plan) -> dict[str, str]:
    """Every file of the output folder: relative path -> text."""
    files = {"plan.json": plan.text()}
    for resource in plan.kubernetes_objects():
        obj = manifest_of(resource)
        metadata = obj.get("metadata", {})
        stem = "_".join(
            filter(None, [obj.get("kind"), metadata.get("namespace"), metadata.get("name") or resource["name"]])
        )
        files[f"manifests/{_file_name(stem)}.yaml"] = yaml.safe_dump(obj, sort_keys=False)
    for name, release in helm_releases(plan):
        files[f"helm/{_file_name(name)}.yaml"] = yaml.safe_dump(release, sort_keys=False)
    for host, script in docker_scripts(plan).items():
        files[f"docker/{_file_name(host)}.sh"] = script
    scrape_config = plan.outputs.get("prometheusScrapeConfig")
    if scrape_config:
        files["monitoring/prometheus.yml"] = scrape_config
    return files


def _tracked(out: Path, paths: list[str]) -> list[str]:
    """Those of `paths` (relative to `out`) that git tracks, when `out` is inside a git work tree."""

    try:
        result = subprocess.run(
            ["git", "-C", str(out), "ls-files", "-z", "--full-name", "--", *paths],
            capture_output=True,
            text=True,
            timeout=60,
        )
        top = subprocess.run(
            ["git", "-C", str(out), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if result.returncode or top.returncode:
        return []  # not a git work tree (or no git): nothing is tracked
    root = Path(top.stdout.strip())
    return sorted(str((root / name).relative_to(out.resolve())) for name in result.stdout.split("\0") if name)


# An exclusive lock (fcntl.flock) on this file in `out` for the whole write: a second synth into the folder waits.
LOCK = ".synth-lock"


def _inside(out: Path, relative: str) -> Path | None:
    """`out/relative` when it names a path strictly inside `out` through real folders only (no absolute path, no
    `..`, no symlink on the way, the last part aside), else None: a manifest line is data, never trusted."""
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or any(p in ("..", ".") for p in parts) or "\0" in relative:
        return None
    folder = out
    for part in parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            return None
    return out / relative


def _write_file(path: Path, text: str) -> None:
    """Write `path` through a temporary file in its folder and os.replace: a symlink there is replaced itself,
    never written through, and a reader never sees half a file."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".synth-")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write(plan: Plan, out: Path) -> list[str]:
    """Write the plan's files into `out` and return their relative paths.

    Only what an earlier synth listed in MANIFEST is deleted when the plan no longer has it, and only a regular
    file strictly inside `out`; anything else in `out` (a user's file, a sub-folder) is left alone, a file that git
    tracks is never overwritten, and no symlink is followed. Concurrent synths into one folder take turns (LOCK).
    Raises OutputError when a file cannot be written there."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out} is a file, not a folder")
    files = rendered_files(plan)
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        raise OutputError(f"cannot write into {out}: {error.strerror} ({error.filename})") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _write_locked(files, out)
    finally:
        os.close(lock)  # releases the lock


def _write_locked(files: dict[str, str], out: Path) -> list[str]:
    manifest = out / MANIFEST
    if manifest.is_symlink():
        raise OutputError(f"{manifest} is a symlink; synth only reads the manifest it wrote (delete it)")
    try:
        previous = [line for line in manifest.read_text().splitlines() if line and not line.startswith("#")]
    except FileNotFoundError:
        previous = []
    except (OSError, UnicodeDecodeError) as error:
        raise OutputError(f"cannot read {manifest}: {error}") from None
    targets = {}
    for relative in files:
        target = _inside(out, relative)
        if target is None:
            raise OutputError(f"{out / relative} is reached through a symlink; synth writes only inside {out}")
        if target.is_dir() and not target.is_symlink():
            raise OutputError(f"{target} is a folder where synth writes a file; move it away")
        targets[relative] = target
    tracked = [p for p in _tracked(out, sorted(files)) if p not in previous]
    if tracked:
        raise OutputError(
            f"{out / tracked[0]} is a file tracked by git; synth never overwrites one (choose another --out folder)"
        )
    try:
        for relative in previous:
            stale = _inside(out, relative)
            # Only regular files synth wrote: an entry outside `out` (absolute, `..`, through a symlink), a folder
            # or a symlink is left alone.
            if relative not in files and stale is not None and stale.is_file() and not stale.is_symlink():
                stale.unlink()
        for relative, text in files.items():
            target = targets[relative]
            for folder in reversed(target.relative_to(out).parents[:-1]):
                (out / folder).mkdir(exist_ok=True)
            if _inside(out, relative) is None:  # a folder made into a symlink meanwhile
                raise OutputError(f"{target} is reached through a symlink; synth writes only inside {out}")
            _write_file(target, text)
        _write_file(
            manifest,
            "# Files written by `python -m tools.synth`; the next run deletes only these.\n"
            + "".join(f"{relative}\n" for relative in sorted(files)),
        )
    except OSError as error:
        raise OutputError(f"cannot write into {out}: {error.strerror} ({error.filename})") from None
    return sorted(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rocm-stack synth", description=__doc__.split("\n\n")[0], epilog=exit_codes(__doc__)
    )
    parser.add_argument("--stack", required=True, help="stack name: reads stacks/Pulumi.STACK.yaml")
    # The Makefile's OUT default too (`make synth` passes it): one place a plan is looked for.
    parser.add_argument("--out", type=Path, help="output directory (default: out/STACK, as `make synth`)")
    parser.add_argument("--project-dir", type=Path, default=ROOT, help="the Pulumi project (default: this one)")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path("out") / args.stack
    try:
        plan = synthesize(args.stack, project_dir=args.project_dir.resolve())
        written = write(plan, args.out)
    except (ProgramRefused, StackFileError, OutputError) as refused:
        print(refused, file=sys.stderr)
        return 2
    print(f"{len(plan.resources)} resources of stack '{args.stack}': {len(written)} files written to {args.out}")
    return 0


def exit_process(code: int) -> NoReturn:
    """End a synth process right after its files are written, without interpreter teardown.

    The CLI runs with the cyclic GC off and never turns it back on: one collection over a 1,000-host run's
    objects took ~3.5 s, and freeing them at exit another ~0.2 s, with byte-identical files either way (issue 14).
    The files are closed by then; only the standard streams need flushing. In-process callers of synthesize()
    and main() keep the GC as they had it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    gc.disable()
    exit_process(main())
