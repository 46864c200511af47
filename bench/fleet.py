"""Stack configurations of N GPU hosts, and throwaway Pulumi projects that hold them.

A fleet is the prod stack with more hosts: prod's own hosts first (its workloads run on their partitions),
then generated ones, described once as a host group (`rocm-stack:hostGroups`, as a user would write a fleet).
Every other section is copied from prod, so the Kubernetes, monitoring and workload sections the program grows
are benchmarked as soon as prod declares them.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from schema.project import ROOT

TEMPLATE_STACK = ROOT / "stacks" / "Pulumi.prod.yaml"
BASELINE = Path(__file__).resolve().parent / "baseline"
STACK = "bench"
HOSTS = "rocm-stack:hosts"
GROUPS = "rocm-stack:hostGroups"
GPUS_PER_HOST = 8
NAME_PATTERN = "gpu-{index:04d}"


def name(index: int) -> str:
    """The name of generated host `index` (counting prod's hosts)."""
    return f"gpu-{index:04d}"


def host_template() -> dict[str, Any]:
    """One 8-GPU host split into two explicit 4-GPU partitions, as in prod."""
    half = GPUS_PER_HOST // 2
    return {
        "docker": {"host": "ssh://deploy@{name}.example.internal", "sshOpts": ["-o", "StrictHostKeyChecking=yes"]},
        "gpus": GPUS_PER_HOST,
        "gpuModel": "MI300X",
        "gpuAccess": "renderNodes",
        "renderNodes": "hosts/mi300x-8gpu.render-nodes.json",
        "containers": [
            {
                "name": "train-a",
                "image": "pytorch",
                "gpus": list(range(half)),
                "command": ["sleep", "infinity"],
                "shmSize": "64GiB",
            },
            {
                "name": "serve-b",
                "image": "vllm",
                "gpus": list(range(half, GPUS_PER_HOST)),
                "command": ["sleep", "infinity"],
                "shmSize": "64GiB",
            },
        ],
    }


def template_config(template: Path = TEMPLATE_STACK) -> dict[str, Any]:
    return dict(yaml.safe_load(template.read_text())["config"])


def fleet_config(hosts: int, template: Path = TEMPLATE_STACK) -> tuple[dict[str, Any], list[str]]:
    """The template stack's config with `hosts` hosts (`environment: prod`): its own, then a group of generated
    ones; and the keys of the sections left out because they name template hosts that a smaller fleet lacks."""
    config = template_config(template)
    own = config.get(HOSTS, [])
    config[HOSTS] = own[:hosts]
    if hosts > len(own):
        config[GROUPS] = [
            {"template": host_template(), "namePattern": NAME_PATTERN, "start": len(own), "count": hosts - len(own)}
        ]
    left_out: list[str] = []
    while hosts < len(own) and (refused := _sections_refused(config)):
        left_out += refused
        for key in refused:
            del config[key]
    return config, left_out


def template_lock():
    """The template stack's placement lock: the fleet's first hosts are its hosts, placed as in prod."""
    from schema.docker import read_lock  # here: placement runs import this module without the schema

    lock, problems = read_lock(TEMPLATE_STACK.name.split(".")[1], ROOT)
    assert not problems, problems
    return lock


def _sections_refused(config: dict[str, Any]) -> list[str]:
    """Top-level keys (other than the hosts) that the config loader names in its problems."""
    from schema import ConfigError, load  # here: placement runs import this module without the schema

    secret_keys = [key for key, value in config.items() if isinstance(value, dict) and set(value) == {"secure"}]
    try:
        load(STACK, config, secret_keys, lock=template_lock())
    except ConfigError as error:
        keys = {f"rocm-stack:{re.split(r'[.[]', problem.path)[0]}" for problem in error.problems}
        refused = sorted(keys - {HOSTS, GROUPS, "rocm-stack:environment"})
        if not refused:
            raise
        return refused
    return []


def _write_stack(project: Path, config: dict[str, Any]) -> None:
    (project / "stacks").mkdir(parents=True, exist_ok=True)
    # CSafeDumper: a 1,000-host stack file is written per run.
    (project / "stacks" / f"Pulumi.{STACK}.yaml").write_text(
        yaml.dump({"config": config}, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    )


def our_project(directory: Path, config: dict[str, Any]) -> Path:
    """The real program with `config` as stack `bench`: every top-level entry of the repository linked
    (files the stack names, like host topology files, resolve as in prod) except stacks/."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name != "stacks":
            (directory / entry.name).symlink_to(entry)
    _write_stack(directory, config)
    from schema.docker import lock_file, lock_text  # here: placement runs import this module without the schema

    (directory / lock_file(STACK)).write_text(lock_text(STACK, template_lock()))
    return directory


def baseline_project(directory: Path, resources_file: Path) -> Path:
    """The baseline program, replaying the custom resources listed in `resources_file`."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copyfile(BASELINE / name, directory / name)
    _write_stack(directory, {"baseline:resources": str(resources_file)})
    return directory
