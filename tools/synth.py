"""Offline synth: run the real `__main__.py` under Pulumi's mock engine and write what it declares.

    python -m tools.synth --stack dev --out out/dev

writes `plan.json` (every resource with its type, name, parent, inputs as the provider receives them,
protect, delete_before_replace, replace_on_changes and depends_on; secrets as "[secret]"), `manifests/`
(one YAML per Kubernetes object), `helm/RELEASE.yaml` (one per Helm release), `docker/HOST.sh` (the equivalent
docker commands) and `monitoring/prometheus.yml` (the scrape config of the Docker hosts' metrics exporters).
This is the reviewers' and CI's view of a change; deploying stays `pulumi up -s STACK`.

In tests, `synthesize(stack, config)` returns the same `Plan` in-process.
Exit codes: 0 written, 2 the stack configuration was refused (the messages name each key).
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import re
import runpy
import shlex
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SECRET = "[secret]"
# What the mock engine hands the program for a `secure:` value it cannot decrypt offline.
SECRET_PLACEHOLDER = "synth-placeholder-secret"

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
        return [r for r in self.resources
                if r["type"].startswith("kubernetes:") and not _K8S_NON_OBJECTS.match(r["type"])]

    def to_json(self) -> dict[str, Any]:
        return {"project": self.project, "stack": self.stack, "resources": self.resources,
                "outputs": self.outputs}


class ProgramRefused(Exception):
    """The program stopped before declaring anything (pulumi.RunError): a refused configuration."""


def _redact(value: Any) -> Any:
    from pulumi.runtime import rpc

    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return SECRET
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the mock wire format turns every number into a float
    return value


def _fake_id(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def _mock_engine(records: list[dict[str, Any]], mock_outputs: dict[str, dict[str, Any]],
                 run_results: Mapping[str, tuple[int, str]]):
    import threading

    from pulumi.runtime.mocks import MockMonitor, Mocks

    # The SDK calls the monitor from a thread pool: each thread hands its call's values to the monitor.
    this_call = threading.local()

    class SynthMocks(Mocks):
        def new_resource(self, args):
            computed = {}
            if args.typ == "docker:index/remoteImage:RemoteImage":
                computed = {"imageId": _fake_id(args.inputs["name"]),
                            "repoDigest": f"{args.inputs['name'].split(':')[0]}@{_fake_id(args.name)}"}
            elif args.typ == "docker:index/container:Container" and args.inputs.get("attach"):
                # A container the provider waits for (attach): the exit code and output a run leaves in its state.
                code, logs = run_results.get(args.name, (0, ""))
                computed = {"exitCode": code, "containerLogs": logs}
            this_call.inputs, this_call.computed = args.inputs, computed
            return f"{args.name}-id", {**args.inputs, **computed}

        def call(self, args):
            return {}

    class RecordingMonitor(MockMonitor):
        def RegisterResource(self, request):
            response = super().RegisterResource(request)
            if request.type != "pulumi:pulumi:Stack":
                # Nothing reads resources back (no getResource invokes): keep one copy, the plan's.
                del self.resources[response.urn]
                records.append({
                    "type": request.type,
                    "name": request.name,
                    "urn": response.urn,
                    "parent": request.parent or None,
                    "provider": request.provider.rsplit("::", 1)[0] or None if request.provider else None,
                    "custom": bool(request.custom),
                    "protect": bool(request.protect),
                    "delete_before_replace": bool(request.deleteBeforeReplace),
                    "replace_on_changes": sorted(request.replaceOnChanges),
                    "depends_on": sorted(request.dependencies),
                    "inputs": _redact(this_call.inputs),
                })
                if this_call.computed:
                    mock_outputs[response.urn] = this_call.computed
            return response

    return SynthMocks(), RecordingMonitor


def stack_config(stack: str, project_dir: Path = ROOT) -> dict[str, Any]:
    path = project_dir / "stacks" / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no stack file {path.relative_to(project_dir)}")
    # libyaml's loader when PyYAML has it: the pure-Python one takes seconds on a 1,000-host stack file.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return (yaml.load(path.read_text(), Loader=loader) or {}).get("config") or {}


def _as_pulumi_config(config: Mapping[str, Any], secrets: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Config as the Pulumi CLI hands it to a program: scalars as text, structures as JSON."""
    values: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            values[key] = SECRET_PLACEHOLDER
            secret_keys.append(key)
        elif isinstance(value, str):
            values[key] = value
        else:
            values[key] = json.dumps(value)
    for key, value in secrets.items():
        values[key] = value
        secret_keys.append(key)
    return values, secret_keys


def synthesize(stack: str, config: Mapping[str, Any] | None = None, *,
               secrets: Mapping[str, str] | None = None, project_dir: Path = ROOT,
               run_results: Mapping[str, tuple[int, str]] | None = None) -> Plan:
    """Run the program of `project_dir` for `stack` under the mock engine and return what it declared.

    `config` defaults to `stacks/Pulumi.<stack>.yaml`; its `{secure: ...}` values become secrets.
    `secrets` adds plaintext values that the program sees as Pulumi secrets (for tests).
    `run_results`: (exit code, output) of attached one-shot containers by resource name; others exit 0.
    Raises ProgramRefused when the program stops with pulumi.RunError (a refused configuration).
    """
    import pulumi
    from pulumi.runtime import config as runtime_config
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import set_mocks
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text())["name"]
    if config is None:
        config = stack_config(stack, project_dir)
    values, secret_keys = _as_pulumi_config(config, secrets or {})

    records: list[dict[str, Any]] = []
    mock_outputs: dict[str, dict[str, Any]] = {}
    mocks, monitor_class = _mock_engine(records, mock_outputs, run_results or {})
    settings.ROOT.set(None)  # a fresh root stack per synth, also when called repeatedly in one process
    # What a refused run left pending (an apply that raised) must not fail the next one: cleared as pulumi's own
    # mock test decorator does (pulumi/runtime/mocks.py `test`: SETTINGS.rpc_manager.clear(); SETTINGS.outputs.clear()).
    settings.SETTINGS.rpc_manager.clear()
    settings.SETTINGS.outputs.clear()
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
        _sync_await(run_pulumi_func(lambda: runpy.run_path(str(project_dir / "__main__.py"),
                                                           run_name="__main__")))
    except pulumi.RunError as refused:
        raise ProgramRefused(str(refused)) from None
    finally:
        if gc_was_enabled:
            gc.enable()
        os.chdir(cwd)
        sys.path.remove(str(project_dir))

    outputs = {}
    for name, value in (settings.get_root_resource().outputs or {}).items():
        output = pulumi.Output.from_input(value)
        resolved = _sync_await(output.future())
        outputs[name] = SECRET if _sync_await(output.is_secret()) else _redact(resolved)
    # Registration order depends on the event loop; sorted, two synths of one config are byte-identical.
    return Plan(project, stack, sorted(records, key=lambda r: r["urn"]), outputs, mock_outputs)


def _file_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def _docker_run_line(container: dict[str, Any], image_names: Mapping[str, str]) -> str:
    i = container["inputs"]
    args = ["docker", "run", "--detach", "--name", i["name"]]
    args += [f"--device={d['hostPath']}" for d in i.get("devices", [])]
    for group in i.get("groupAdds", []):
        args += ["--group-add", group]
    if "ipcMode" in i:
        args.append(f"--ipc={i['ipcMode']}")
    if "shmSize" in i:
        args.append(f"--shm-size={i['shmSize']}m")
    if "cpuSet" in i:
        args.append(f"--cpuset-cpus={i['cpuSet']}")
    args += [f"--cap-add={c}" for c in i.get("capabilities", {}).get("adds", [])]
    args += [f"--cap-drop={c}" for c in i.get("capabilities", {}).get("drops", [])]
    args += [f"--security-opt={o}" for o in i.get("securityOpts", [])]
    envs = i.get("envs", [])
    if envs == SECRET:  # a secret value anywhere makes the whole list secret
        args += ["-e", "[secret environment]"]
    else:
        for env in envs:
            args += ["-e", env]
    for port in i.get("ports", []):
        external = port.get("external", port["internal"])
        args += ["-p", f"{port.get('ip', '0.0.0.0')}:{external}:{port['internal']}"]
    for volume in i.get("volumes", []):
        suffix = ":ro" if volume.get("readOnly") else ""
        args += ["-v", f"{volume['hostPath']}:{volume['containerPath']}{suffix}"]
    if "restart" in i:
        retries = f":{i['maxRetryCount']}" if i["restart"] == "on-failure" and "maxRetryCount" in i else ""
        args.append(f"--restart={i['restart']}{retries}")
    if "healthcheck" in i:
        check = i["healthcheck"]
        args.append(f"--health-cmd={shlex.join(check['tests'][1:])}")
        args += [f"--health-{flag}={check[key]}" for flag, key in
                 (("interval", "interval"), ("timeout", "timeout"), ("retries", "retries"),
                  ("start-period", "startPeriod")) if key in check]
    args.append(image_names.get(i["image"], i["image"]))
    args += i.get("commands", i.get("command", []))
    line = shlex.join(args)
    # Files the provider copies into the container before it starts (`docker cp` equivalent).
    uploads = i.get("uploads", [])
    if uploads == SECRET:
        line += "\n#   uploads files (one holds a secret) before start"
    else:
        for upload in uploads:
            line += f"\n#   uploads {upload['file']} ({len(upload.get('content', ''))} bytes) before start"
    return line


def docker_scripts(plan: Plan) -> dict[str, str]:
    """Per Docker provider (one per host daemon): the `docker pull` / `docker run` lines it declares."""
    providers = {r["urn"]: r for r in plan.of_type("pulumi:providers:docker")}
    image_names = {plan.mock_outputs[r["urn"]]["imageId"]: r["inputs"]["name"]
                   for r in plan.of_type("docker:index/remoteImage:RemoteImage")}
    by_provider: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for resource in plan.resources:  # grouped once: scanning all resources per host is quadratic in hosts
        by_provider[resource["provider"]].append(resource)
    scripts = {}
    for urn, provider in providers.items():
        on_host = by_provider[urn]
        lines = ["#!/bin/sh", f"# What stack '{plan.stack}' declares on this host; compare with the ROCm docs.",
                 "set -eu", f"export DOCKER_HOST={shlex.quote(provider['inputs'].get('host', ''))}"]
        lines += [shlex.join(["docker", "pull", r["inputs"]["name"]])
                  for r in on_host if r["type"] == "docker:index/remoteImage:RemoteImage"]
        lines += [_docker_run_line(r, image_names)
                  for r in on_host if r["type"] == "docker:index/container:Container"]
        scripts[provider["name"]] = "\n".join(lines) + "\n"
    return scripts


def helm_releases(plan: Plan) -> Iterator[tuple[str, dict[str, Any]]]:
    for release in plan.of_type("kubernetes:helm.sh/v3:Release"):
        i = release["inputs"]
        yield release["name"], {
            "chart": i.get("chart"),
            "repo": i.get("repositoryOpts", {}).get("repo"),
            "version": i.get("version"),
            "namespace": i.get("namespace"),
            "values": i.get("values", {}),
        }


def manifest_of(resource: dict[str, Any]) -> dict[str, Any]:
    """The Kubernetes object as the API server would receive it (the provider's inputs).

    A Secret's payload that holds a Pulumi secret is one opaque value offline: it is left out, and an
    annotation says so, so the manifest stays a valid object."""
    obj = {k: v for k, v in resource["inputs"].items() if k != "compat"}
    hidden = sorted(k for k in ("data", "stringData") if obj.get("kind") == "Secret" and obj.get(k) == SECRET)
    if hidden:
        metadata = obj.get("metadata", {})
        annotations = {**metadata.get("annotations", {}),
                       "rocm-stack/synth": f"{' and '.join(hidden)} hold a secret, not shown"}
        obj = {**{k: v for k, v in obj.items() if k not in hidden},
               "metadata": {**metadata, "annotations": annotations}}
    return obj


def write(plan: Plan, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(plan.to_json(), indent=2, sort_keys=True) + "\n")
    for folder in ("manifests", "helm", "docker"):
        (out / folder).mkdir(exist_ok=True)
        for stale in (out / folder).iterdir():
            stale.unlink()
    for resource in plan.kubernetes_objects():
        obj = manifest_of(resource)
        metadata = obj.get("metadata", {})
        stem = "_".join(filter(None, [obj.get("kind"), metadata.get("namespace"), metadata.get("name")
                                      or resource["name"]]))
        (out / "manifests" / f"{_file_name(stem)}.yaml").write_text(yaml.safe_dump(obj, sort_keys=False))
    for name, release in helm_releases(plan):
        (out / "helm" / f"{_file_name(name)}.yaml").write_text(yaml.safe_dump(release, sort_keys=False))
    for host, script in docker_scripts(plan).items():
        (out / "docker" / f"{_file_name(host)}.sh").write_text(script)
    scrape_config = plan.outputs.get("prometheusScrapeConfig")
    prometheus = out / "monitoring" / "prometheus.yml"
    if scrape_config:
        prometheus.parent.mkdir(exist_ok=True)
        prometheus.write_text(scrape_config)
    else:
        prometheus.unlink(missing_ok=True)  # an earlier synth's, for a stack that had monitoring then


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.synth", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", required=True, help="stack name: reads stacks/Pulumi.STACK.yaml")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--project-dir", type=Path, default=ROOT, help="the Pulumi project (default: this one)")
    args = parser.parse_args(argv)
    try:
        plan = synthesize(args.stack, project_dir=args.project_dir.resolve())
    except ProgramRefused as refused:
        print(refused, file=sys.stderr)
        return 2
    except FileNotFoundError as missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    write(plan, args.out)
    print(f"{len(plan.resources)} resources of stack '{args.stack}' written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
