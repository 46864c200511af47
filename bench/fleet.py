"""Stack configurations of N GPU hosts, and throwaway Pulumi projects that hold them.

Everything but `rocm-stack:hosts` is copied from the prod stack, so the Kubernetes, monitoring and workload
sections the program grows are benchmarked as soon as prod declares them.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_STACK = ROOT / "stacks" / "Pulumi.prod.yaml"
BASELINE = Path(__file__).resolve().parent / "baseline"
STACK = "bench"
GPUS_PER_HOST = 8


def host(index: int) -> dict[str, Any]:
    """One 8-GPU host split into two explicit 4-GPU partitions, as in prod."""
    name = f"gpu-{index:04d}"
    half = GPUS_PER_HOST // 2
    return {
        "name": name,
        "docker": {"host": f"ssh://deploy@{name}.example.internal", "sshOpts": ["-o", "StrictHostKeyChecking=yes"]},
        "gpus": GPUS_PER_HOST,
        "gpuModel": "MI300X",
        "containers": [
            {"name": "train-a", "image": "pytorch", "gpus": list(range(half)),
             "command": ["sleep", "infinity"], "shmSize": "64GiB"},
            {"name": "serve-b", "image": "vllm", "gpus": list(range(half, GPUS_PER_HOST)),
             "command": ["sleep", "infinity"], "shmSize": "64GiB"},
        ],
    }


def fleet_config(hosts: int, template: Path = TEMPLATE_STACK) -> dict[str, Any]:
    """The template stack's config (`environment: prod`) with `hosts` generated hosts instead of its own."""
    config = dict(yaml.safe_load(template.read_text())["config"])
    config["rocm-stack:hosts"] = [host(i) for i in range(hosts)]
    return config


def _write_stack(project: Path, config: dict[str, Any]) -> None:
    (project / "stacks").mkdir(parents=True, exist_ok=True)
    # CSafeDumper: a 1,000-host stack file is written per run.
    (project / "stacks" / f"Pulumi.{STACK}.yaml").write_text(
        yaml.dump({"config": config}, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))


def our_project(directory: Path, config: dict[str, Any]) -> Path:
    """The real program (Pulumi.yaml, __main__.py, components/ linked) with `config` as stack `bench`."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copyfile(ROOT / name, directory / name)
    (directory / "components").symlink_to(ROOT / "components")
    _write_stack(directory, config)
    return directory


def baseline_project(directory: Path, resources_file: Path) -> Path:
    """The baseline program, replaying the custom resources listed in `resources_file`."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copyfile(BASELINE / name, directory / name)
    _write_stack(directory, {"baseline:resources": str(resources_file)})
    return directory
