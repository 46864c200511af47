"""`python -m tools.synth`: the files reviewers and CI read."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.monitoring import CADVISOR_PORT, NODE_EXPORTER_PORT
from domain.alerts import CADVISOR_JOB, EXPORTER_JOB, NODE_EXPORTER_JOB

from conftest import cdi_stack, committed_plan
from tools import synth
from tools.synth import ROOT

EXPORTER_PORTS = ((EXPORTER_JOB, 5000), (NODE_EXPORTER_JOB, NODE_EXPORTER_PORT), (CADVISOR_JOB, CADVISOR_PORT))

P = "rocm-stack:"


def run_synth(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tools.synth", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


COMMANDS = (("tools.synth",), ("tools.cli", "synth"))


@pytest.fixture(scope="module")
def prod_runs(tmp_path_factory) -> dict[tuple[str, ...], tuple[subprocess.CompletedProcess, Path]]:
    """`--stack prod` run as a process by each command that synthesizes, each into a folder of its own: the tests
    below read these two runs rather than start more (a whole-process synth of prod takes seconds)."""
    runs = {}
    for command in COMMANDS:
        out = tmp_path_factory.mktemp("out")
        runs[command] = (
            subprocess.run(
                [sys.executable, "-m", *command, "--stack", "prod", "--out", str(out)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            ),
            out,
        )
    return runs


def test_prod_synth_writes_plan_and_docker_scripts(prod_runs):
    result, tmp_path = prod_runs[COMMANDS[0]]
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert (plan["project"], plan["stack"]) == ("rocm-stack", "prod")
    assert plan["outputs"]["environment"] == "prod"
    for resource in plan["resources"]:
        assert {"type", "name", "parent", "inputs", "protect", "depends_on"} <= set(resource)
    types = {r["type"] for r in plan["resources"]}
    assert {
        "rocm-stack:docker:GpuHost",
        "pulumi:providers:docker",
        "docker:index/container:Container",
        "docker:index/remoteImage:RemoteImage",
    } <= types

    scrape = yaml.safe_load((tmp_path / "monitoring" / "prometheus.yml").read_text())
    targets = {
        job["job_name"]: [t for group in job["static_configs"] for t in group["targets"]]
        for job in scrape["scrape_configs"]
    }
    # Every host's exporter, node-exporter and cAdvisor; the vLLM partitions serve-b of gpu-node-3/4, a job per host
    # (each with its host's scrape token).
    assert targets == {
        **{job: [f"gpu-node-{i}.example.internal:{port}" for i in range(1, 5)] for job, port in EXPORTER_PORTS},
        **{f"vllm-gpu-node-{i}": [f"gpu-node-{i}.example.internal:8000"] for i in (3, 4)},
    }

    scripts = sorted(p.name for p in (tmp_path / "docker").iterdir())
    assert scripts == [f"gpu-node-{i}.sh" for i in range(1, 5)]
    lines = (tmp_path / "docker" / "gpu-node-2.sh").read_text().splitlines()
    assert "export DOCKER_HOST=ssh://deploy@gpu-node-2.example.internal" in lines
    runs = [shlex.split(line)[2:] for line in lines if line.startswith('by "$deadline" docker create ')]
    pulls = [line for line in lines if "docker pull" in line]
    # The host preflight, a GPU check per partition, the two partitions, the GPU metrics exporter, node-exporter and
    # cAdvisor; the images of the training, the partitions' shells, the exporter, node-exporter and cAdvisor.
    assert len(runs) == 8 and len(pulls) == 6
    train = next(r for r in runs if "--name=train-a" in r)
    # The flags of the ROCm docs' `docker run`, minus the debugging ones in prod.
    # ... with only the partition's render nodes (GPUs 4-7 of the saved MI300X map; "Restricting GPU access").
    for flag in [
        "--device=/dev/kfd:/dev/kfd:rwm",
        *(f"--device=/dev/dri/renderD{m}:/dev/dri/renderD{m}:rwm" for m in (160, 168, 176, 184)),
        # ... its own /dev/shm of the training's shmSize beside the host's other partition (--ipc=private), and a
        # rotated log.
        "--ipc=private",
        "--cap-add=SYS_NICE",
        "--cpuset-cpus=96-191,288-383",
        "--shm-size=65536m",
        "--log-opt=max-size=100m",
    ]:
        assert flag in train
    assert not any(arg.startswith(("--device=/dev/dri:", "--group-add")) for arg in train)
    assert not any(arg.startswith(("--env=HIP_VISIBLE_DEVICES=", "--env=ROCR_VISIBLE_DEVICES=")) for arg in train)
    assert "--cap-add=SYS_PTRACE" not in train and "--security-opt=seccomp=unconfined" not in train
    # gpu-node-2's train-a partition runs the training workload on its 4 GPUs.
    assert train[-6:] == [
        "rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.8.0",
        "torchrun",
        "--standalone",
        "--nproc-per-node",
        "4",
        "/opt/rocm-stack/programs/train.py",
    ]


def test_synth_is_deterministic(prod_runs):
    """Two processes (each with its own hash seed) write the same plan."""
    (first, a), (second, b) = prod_runs.values()
    assert first.returncode == second.returncode == 0
    assert (a / "plan.json").read_text() == (b / "plan.json").read_text()


def test_a_synth_process_writes_what_synthesize_renders_and_flushes_its_output(prod_runs):
    # The CLI process runs without the cyclic GC and ends with os._exit after writing (tools.synth.exit_process):
    # its files must be the in-process ones byte for byte, and its piped (block-buffered) stdout complete.
    plan = committed_plan("prod")
    files = synth.rendered_files(plan)
    for result, out in prod_runs.values():
        assert result.returncode == 0, result.stderr
        assert (
            result.stdout == f"{len(plan.resources)} resources of stack 'prod': {len(files)} files written to {out}\n"
        )
        assert {relative: (out / relative).read_text() for relative in files} == files


def test_dev_synth_shows_debug_flags(tmp_path):
    assert run_synth("--stack", "dev", "--out", str(tmp_path)).returncode == 0
    (script,) = (tmp_path / "docker").iterdir()
    text = script.read_text()
    assert "--name=train" in text and "--name=serve" in text
    assert "--cap-add=SYS_PTRACE" in text and "--security-opt=seccomp=unconfined" in text


def _project_with(tmp_path: Path, stack: str, config: dict) -> Path:
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        (project / name).write_text((ROOT / name).read_text())
    (project / "components").symlink_to(ROOT / "components")
    (project / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    return project


def test_invalid_config_exits_2_with_messages_and_writes_nothing(tmp_path):
    project = _project_with(
        tmp_path,
        "prod",
        {
            P + "images": {"pytorch": "rocm/pytorch:latest"},
            P + "hosts": [{"name": "n1", "gpus": 4, "containers": [{"name": "a", "gpus": [4]}]}],
        },
    )
    out = tmp_path / "out"
    result = run_synth("--stack", "prod", "--out", str(out), "--project-dir", str(project))
    assert result.returncode == 2
    assert f"{P}images.pytorch: 'rocm/pytorch:latest' is not pinned" in result.stderr
    assert f"{P}hosts[0].containers[0].gpus[0]: GPU 4 is out of range" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_a_cdi_stack_synthesizes_with_cdi_devices_in_its_host_script(tmp_path):
    """`gpuAccess: cdi` used to stop synth with "cannot render input(s) deviceRequests" (exit 1). Its HOST.sh
    passes each CDI device as the docker CLI takes it, `--device amd.com/gpu=N` (docker/cli v25.0.0
    cli/command/container/opts.go L480-481), after checking that the CLI and daemon take CDI devices."""
    project = _project_with(tmp_path, "dev", cdi_stack())
    out = tmp_path / "out"
    result = run_synth("--stack", "dev", "--out", str(out), "--project-dir", str(project))
    assert result.returncode == 0, result.stderr
    script = (out / "docker" / "workstation.sh").read_text()
    creates = {
        shlex.split(line)[4].removeprefix("--name="): shlex.split(line)
        for line in script.splitlines()
        if line.startswith('by "$deadline" docker create ')
    }
    assert [a for a in creates["train"] if a.startswith("--device")] == ["--device=amd.com/gpu=0"]
    assert [a for a in creates["serve"] if a.startswith("--device")] == ["--device=amd.com/gpu=1"]
    assert script.index("docker info --format '{{json .CDISpecDirs}}'") < script.index("docker create ")
    shellcheck = Path(sys.executable).parent / "shellcheck"
    checked = subprocess.run([str(shellcheck), "--severity=warning", "-"], input=script, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout


def test_secure_values_are_secrets_in_the_plan(tmp_path):
    project = _project_with(
        tmp_path,
        "dev",
        {
            P + "registry": {"server": "registry.example.com", "username": "ci"},
            P + "registryPassword": {"secure": "v1:AAAAencrypted"},
        },
    )
    result = run_synth("--stack", "dev", "--out", str(tmp_path / "out"), "--project-dir", str(project))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "out" / "plan.json").read_text()
    assert '"registryAuth": "[secret]"' in text and "v1:AAAA" not in text


def test_unknown_stack_exits_2(tmp_path):
    result = run_synth("--stack", "nope", "--out", str(tmp_path))
    assert result.returncode == 2 and "stacks/Pulumi.nope.yaml" in result.stderr


def test_make_synth_uses_the_venv_and_writes_out(tmp_path):
    result = subprocess.run(
        ["make", "-s", "synth", "STACK=dev", f"OUT={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "plan.json").is_file()


def test_rewriting_without_monitoring_drops_the_stale_scrape_config(tmp_path, dev_plan):
    synth.write(dev_plan, tmp_path)
    assert (tmp_path / "monitoring" / "prometheus.yml").is_file()
    without = dataclasses.replace(
        dev_plan, outputs={k: v for k, v in dev_plan.outputs.items() if k != "prometheusScrapeConfig"}
    )
    synth.write(without, tmp_path)
    assert not (tmp_path / "monitoring" / "prometheus.yml").exists()


def test_synth_walks_no_stack_per_registration(monkeypatch):
    """The SDK's stack walk per registration (traceback.extract_stack in `_get_stack_trace`) is skipped under synth
    (about a tenth of its time, docs/benchmarks.md), and is back for whatever runs after it."""
    import traceback

    from pulumi.runtime import resource

    walks = []
    extract_stack = traceback.extract_stack
    monkeypatch.setattr(traceback, "extract_stack", lambda *a, **k: walks.append(1) or extract_stack(*a, **k))
    plan = synth.synthesize("dev")
    assert plan.resources and walks == []
    assert resource._get_stack_trace.__module__ == "pulumi.runtime.resource"
    assert resource._get_stack_trace().frames == [] and walks == [1]  # the SDK's own walk, restored


def test_without_stack_traces_the_plan_is_byte_identical(monkeypatch, prod_plan):
    """The mock monitor reads neither the source position nor the trace: prod's plan and Docker scripts are the
    same bytes with the SDK's walk as without it."""
    import contextlib

    monkeypatch.setattr(synth, "_without_stack_traces", contextlib.nullcontext)
    walked = synth.synthesize("prod")
    assert walked.text() == prod_plan.text()
    assert synth.docker_scripts(walked) == synth.docker_scripts(prod_plan)


def test_the_sdk_sends_an_empty_trace_where_it_finds_no_callers_frame():
    """The value synth sends instead (pulumi 3.272.0 runtime/resource.py `_get_stack_trace`: fewer than three
    `__init__` frames above it -> `source_pb2.StackTrace()`), which `_get_source_position` reads as no position."""
    from pulumi.runtime import resource
    from pulumi.runtime.proto import source_pb2

    assert resource._get_stack_trace() == source_pb2.StackTrace()
    assert resource._get_source_position(source_pb2.StackTrace()) is None
