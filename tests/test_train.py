"""The training program (programs/train.py) under real `torchrun --nproc-per-node 2` on CPU with gloo.

Each torchrun costs ~5 s on 2 cores (three processes import torch), so runs are shared through module fixtures.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from programs.checkpoint import CheckpointStore, InvalidCheckpoint
from programs.settings import OPTIONS, parse_config
from programs.train import main as train_main

REPO = Path(__file__).resolve().parents[1]

TRAIN = REPO / "programs" / "train.py"
DATA = Path(__file__).resolve().parent / "data" / "train"
# Tiny model, 8 steps, checkpoints at 3, 6 and 8 (the last step always), two kept.
RUN = ["--steps", "8", "--checkpoint-every", "3", "--checkpoint-keep", "2", "--batch-size", "16", "--backend", "gloo"]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment minus any training settings that would leak in, plus `extra`."""
    env = {key: value for key, value in os.environ.items() if key not in {option.env for option in OPTIONS}}
    return {**env, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", **extra}


def torchrun(checkpoint_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(TRAIN),
        "--checkpoint-dir",
        str(checkpoint_dir),
        *RUN,
        *args,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, cwd=checkpoint_dir.parent, env=clean_env(**env)
    )


def events(result: subprocess.CompletedProcess[str], kind: str) -> list[dict[str, Any]]:
    lines = (json.loads(line) for line in result.stdout.splitlines() if line.startswith("{"))
    return [event for event in lines if event["event"] == kind]


def steps_of(directory: Path) -> list[int]:
    return sorted(checkpoint.step for checkpoint in CheckpointStore(directory, 1).checkpoints())


def final_state(directory: Path) -> dict[str, Any]:
    newest = CheckpointStore(directory, 1).checkpoints()[0]
    return torch.load(newest.path, weights_only=True)


def assert_same_state(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual["step"] == expected["step"]
    assert actual["model"].keys() == expected["model"].keys()
    for name, tensor in expected["model"].items():
        assert torch.equal(actual["model"][name], tensor), f"parameter {name} differs"
    for index, slot in expected["optimizer"]["state"].items():
        for key, tensor in slot.items():
            assert torch.equal(actual["optimizer"]["state"][index][key], tensor), f"optimizer {index}.{key} differs"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """An uninterrupted run of all 8 steps."""
    directory = tmp_path_factory.mktemp("reference") / "checkpoints"
    return torchrun(directory), directory


@pytest.mark.slow
def test_run_finishes_steps_and_logs_samples_per_second(reference) -> None:
    result, directory = reference
    assert result.returncode == 0, result.stderr[-3000:]
    (start,) = events(result, "start")
    assert (start["world_size"], start["backend"], start["global_batch"]) == (2, "gloo", 32)
    steps = events(result, "step")
    assert [event["step"] for event in steps] == list(range(1, 9))  # rank 0 only: one line per step
    assert all(event["samples_per_s"] > 0 and math.isfinite(event["loss"]) for event in steps)
    first, last = [event["loss"] for event in steps[:3]], [event["loss"] for event in steps[-3:]]
    assert sum(last) < sum(first), "the synthetic task must be learnable"
    (done,) = events(result, "done")
    assert (done["step"], done["resumed_from"], done["mean_samples_per_s"] > 0) == (8, 0, True)
    assert [event["step"] for event in events(result, "checkpoint")] == [3, 6, 8]
    assert steps_of(directory) == [6, 8]  # --checkpoint-keep 2 pruned step 3
    assert not [path for path in directory.iterdir() if not path.name.startswith("ckpt-")]


@pytest.mark.slow
def test_killed_worker_fails_the_run_and_restart_resumes_to_identical_parameters(reference, tmp_path) -> None:
    directory = tmp_path / "checkpoints"
    crashed = torchrun(directory, "--fail-at-step", "5", "--fail-rank", "1")
    assert crashed.returncode != 0
    assert "rank 1 kills itself after step 5" in crashed.stderr
    assert "Signal 9 (SIGKILL)" in crashed.stderr  # torchrun saw the worker die and tore the group down
    assert events(crashed, "done") == []
    assert steps_of(directory) == [3]  # steps 4 and 5 are lost: less than one interval

    resumed = torchrun(directory)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (resume,) = events(resumed, "resume")
    assert resume["step"] == 3
    assert [event["step"] for event in events(resumed, "step")] == [4, 5, 6, 7, 8]
    assert events(resumed, "done")[0]["resumed_from"] == 3
    assert_same_state(final_state(directory), final_state(reference[1]))
    # The same losses as the uninterrupted run, step for step.
    assert [e["loss"] for e in events(resumed, "step")] == [e["loss"] for e in events(reference[0], "step")[3:]]


def _workers(launcher: int) -> dict[int, int]:
    """RANK -> pid of torchrun's worker processes (its children)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, ppid = int(stat.parent.name), int(stat.read_text().rpartition(")")[2].split()[1])
            environ = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue  # gone meanwhile
        ranks = [int(v.removeprefix(b"RANK=")) for v in environ if v.startswith(b"RANK=")]
        if ppid == launcher and ranks:
            found[ranks[0]] = pid
    return found


SIGTERM_STEPS = 200


@pytest.mark.slow
def test_sigterm_to_one_rank_stops_every_rank_after_one_step_with_a_checkpoint_and_resume_loses_nothing(
    tmp_path,
) -> None:
    """torchrun forwards a SIGTERM it gets to every worker (torch 2.13 elastic/agent/server/api.py L752-756,
    multiprocessing/api.py L1023-1053); here only rank 1 gets it, as the ranks of one node when a multi-node job
    loses a pod, so rank 0 learns of it from the per-step all-reduce. Every rank stops after the same step, rank 0
    checkpoints exactly that step, all exit 0 (so torchrun, not signalled itself, exits 0), and the next run resumes
    there with the uninterrupted run's losses, step for step. The run through Docker's `docker stop` is
    tests/e2e/test_e2e_graceful_stop.py."""
    many = ("--steps", str(SIGTERM_STEPS), "--checkpoint-every", "50")
    reference = torchrun(tmp_path / "reference", *many)
    assert reference.returncode == 0, reference.stderr[-3000:]
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(TRAIN)]
    stderr = tmp_path / "stopped.stderr"
    with stderr.open("w") as stderr_file:
        launcher = subprocess.Popen(
            [*command, "--checkpoint-dir", str(directory), *RUN, *many],
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            text=True,
            cwd=tmp_path,
            env=clean_env(),
        )
    assert launcher.stdout is not None
    watchdog = threading.Timer(120, launcher.kill)
    watchdog.start()
    lines = []
    # One reader to the end: the pipe's text reader reads ahead, so the lines after step 5 may already be in its
    # buffer (communicate() reads the pipe's fd itself and would never see them: steps 6.. lost, 1 run in ~8).
    for line in launcher.stdout:
        lines.append(line)
        if line.startswith("{") and json.loads(line)["event"] == "step" and json.loads(line)["step"] == 5:
            os.kill(_workers(launcher.pid)[1], signal.SIGTERM)
    watchdog.cancel()
    stopped = subprocess.CompletedProcess(launcher.args, launcher.wait(timeout=120), "".join(lines), stderr.read_text())
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    (stop,) = events(stopped, "stop")
    step = stop["step"]
    assert 5 <= step < SIGTERM_STEPS and stop["seconds_since_signal"] is None  # rank 0 got no signal itself
    assert events(stopped, "checkpoint")[-1]["step"] == step == steps_of(directory)[-1]
    assert [e["step"] for e in events(stopped, "step")] == list(range(1, step + 1))
    assert events(stopped, "done") == []

    resumed = torchrun(directory, *many)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [e["step"] for e in events(resumed, "resume")] == [step]
    losses = [e["loss"] for e in events(stopped, "step") + events(resumed, "step")]
    assert losses == [e["loss"] for e in events(reference, "step")]  # every step once, none lost or repeated
    assert_same_state(final_state(directory), final_state(tmp_path / "reference"))


# Loaded by every Python of a run through PYTHONPATH: in torchrun's workers (RANK set), it says that it is there and,
# should the interpreter ever finalize, which native threads were still alive at that moment.
FINALIZING_PROBE = """
import atexit, os
def _threads():
    return sorted(open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task"))
def _say(text):  # one write(2): the ranks share torchrun's stderr, and print() may split a line in two writes
    os.write(2, f"probe: rank {os.environ['RANK']} {text}\\n".encode())
if "RANK" in os.environ:
    _say("loaded")
    atexit.register(lambda: _say(f"finalizes with {_threads()}"))
"""

# What the rank's own main() leaves behind (the reason for exit_without_finalizing): run in-process by torchrun.
AFTER_MAIN = """
import os, sys
sys.path.insert(0, {repo!r})
from programs.train import main
code = main(sys.argv[1:])
threads = sorted(open(f"/proc/self/task/{{task}}/comm").read().strip() for task in os.listdir("/proc/self/task"))
os.write(2, f"after main: rank {{os.environ['RANK']}} {{threads}}\\n".encode())  # one write: ranks share stderr
os._exit(code)
"""


@pytest.mark.slow
def test_no_rank_finalizes_the_interpreter_while_gloo_worker_threads_run(tmp_path) -> None:
    """The SIGABRT that ended a finished run now and then ("terminate called without an active exception" in
    rank 1): DDP keeps the process group, and its gloo worker threads, alive past destroy_process_group() (torch
    2.13: measured here, the first run below), and a worker thread that takes the GIL once finalization has begun
    is ended by pthread_exit, whose unwind through a noexcept frame aborts (see programs/train.py
    exit_without_finalizing). The fix is deterministic to check: no rank ever finalizes with those threads alive."""
    script = tmp_path / "after_main.py"
    script.write_text(AFTER_MAIN.format(repo=str(REPO)))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    run_args = ["--checkpoint-dir", str(tmp_path / "checkpoints"), *RUN]
    leaked = subprocess.run(
        [*command, str(script), *run_args], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=clean_env()
    )
    assert leaked.returncode == 0, leaked.stderr[-3000:]
    after_main = [line for line in leaked.stderr.splitlines() if line.startswith("after main: rank")]
    assert len(after_main) == 2 and all("pt_gloo_runloop" in line for line in after_main), after_main

    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(FINALIZING_PROBE)
    shutil.rmtree(tmp_path / "checkpoints")
    result = torchrun(tmp_path / "checkpoints", PYTHONPATH=str(probe))
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(line for line in result.stderr.splitlines() if line.startswith("probe: rank")) == [
        "probe: rank 0 loaded",
        "probe: rank 1 loaded",
    ]  # loaded in both ranks, and neither finalized: no line of the atexit hook
    assert [event["step"] for event in events(result, "done")] == [8]  # stdout flushed before the exit


@pytest.mark.slow
def test_corrupt_and_half_written_checkpoints_are_never_loaded(reference, tmp_path) -> None:
    directory = tmp_path / "checkpoints"
    shutil.copytree(reference[1], directory)  # valid checkpoints of steps 6 and 8
    newest = CheckpointStore(directory, 1).checkpoints()[0].path
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # a torn write of step 8
    half_written = directory / ".ckpt-000000009-abc.tmp"  # a writer killed before its rename
    half_written.write_bytes(b"PK\x03\x04 partial")

    result = torchrun(directory)
    assert result.returncode == 0, result.stderr[-3000:]
    (invalid,) = events(result, "checkpoint_invalid")
    assert invalid["step"] == 8 and "sha256 mismatch" in invalid["reason"]
    assert events(result, "resume")[0]["step"] == 6
    assert [event["step"] for event in events(result, "step")] == [7, 8]
    assert not half_written.exists()
    assert (directory / (newest.name + ".invalid")).exists()  # kept aside for inspection, out of the way
    assert_same_state(final_state(directory), final_state(reference[1]))


def save_steps(store: CheckpointStore, *steps: int) -> None:
    for step in steps:
        store.save(step, {"step": step, "model": {"w": torch.full((4,), float(step))}, "optimizer": {}})


def newest_valid_step(store: CheckpointStore) -> int | None:
    found = store.latest_valid()
    return found[0].step if found else None


def test_store_falls_back_past_every_kind_of_damage(tmp_path) -> None:
    store = CheckpointStore(tmp_path, keep=10)
    save_steps(store, 1, 2, 3, 4)
    by_step = {checkpoint.step: checkpoint for checkpoint in store.checkpoints()}
    data = bytearray(by_step[4].path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    by_step[4].path.write_bytes(bytes(data))
    by_step[3].path.write_bytes(b"")  # zero-length after a crash
    # Checksum matches but it is no checkpoint: the name's hash is honest, torch.load refuses.
    garbage = b"not a torch file"
    (tmp_path / f"ckpt-000000005-{hashlib.sha256(garbage).hexdigest()}.pt").write_bytes(garbage)

    assert newest_valid_step(store) == 2
    assert sorted(path.name.split("-")[1] for path in tmp_path.glob("*.invalid")) == [
        "000000003",
        "000000004",
        "000000005",
    ]
    assert newest_valid_step(store) == 2  # quarantined files are not looked at again


def test_store_load_checks_content_against_name(tmp_path) -> None:
    store = CheckpointStore(tmp_path, keep=10)
    save_steps(store, 7)
    (checkpoint,) = store.checkpoints()
    assert torch.equal(store.load(checkpoint)["model"]["w"], torch.full((4,), 7.0))
    renamed = tmp_path / checkpoint.path.name.replace("000000007", "000000009")
    checkpoint.path.rename(renamed)
    with pytest.raises(InvalidCheckpoint, match="step 9, content says 7"):
        store.load(store.checkpoints()[0])


def test_store_with_only_bad_files_starts_fresh(tmp_path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    save_steps(store, 1)
    (only,) = store.checkpoints()
    only.path.write_bytes(only.path.read_bytes()[:-10])
    (tmp_path / ".ckpt-000000002-x.tmp").write_bytes(b"half")
    assert store.latest_valid() is None
    assert CheckpointStore(tmp_path / "missing", keep=1).latest_valid() is None


def test_store_save_is_atomic_when_the_writer_dies(tmp_path, monkeypatch) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    save_steps(store, 1)

    def dies_midway(obj: object, file: Any) -> None:
        file.write(b"PK\x03\x04 first bytes")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(OSError, match="No space"):
        save_steps(store, 2)
    assert [path.name.split("-")[1] for path in tmp_path.iterdir()] == ["000000001"]  # no temp, no step 2
    assert newest_valid_step(store) == 1


def test_store_keeps_newest(tmp_path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    save_steps(store, 10, 20, 30, 40)
    assert [checkpoint.step for checkpoint in store.checkpoints()] == [40, 30]
    with pytest.raises(ValueError):
        CheckpointStore(tmp_path, keep=0)


def test_env_vars_configure_and_flags_override() -> None:
    env = {
        "TRAIN_STEPS": "40",
        "BATCH_SIZE": "8",
        "CHECKPOINT_DIR": "/ckpt",
        "CHECKPOINT_EVERY": "0",
        "CHECKPOINT_KEEP": "5",
        "TRAIN_BACKEND": "gloo",
        "TRAIN_PRECISION": "bf16",
        "TRAIN_LR": "0.5",
        "TRAIN_GRAD_CLIP": "0",
        "TRAIN_ENTRYPOINT": "my.pkg:make",
        "TRAIN_FAIL_AT_STEP": "3",
        "TRAIN_FAIL_RANK": "1",
    }
    config = parse_config([], env)
    assert (config.steps, config.batch_size, config.checkpoint_dir, config.checkpoint_every) == (
        40,
        8,
        Path("/ckpt"),
        0,
    )
    assert (config.checkpoint_keep, config.backend, config.precision, config.lr) == (5, "gloo", "bf16", 0.5)
    assert config.grad_clip == 0
    assert (config.entrypoint, config.fail_at_step, config.fail_rank) == ("my.pkg:make", 3, 1)
    assert parse_config(["--steps", "7", "--backend", "nccl"], env).steps == 7
    defaults = parse_config([], {})
    assert (defaults.backend, defaults.fail_at_step, defaults.entrypoint) == ("auto", None, "programs.synthetic:build")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {"TRAIN_STEPS": "0"}, "environment variable TRAIN_STEPS: expected an integer >= 1, got 0"),
        ([], {"BATCH_SIZE": "many"}, "environment variable BATCH_SIZE: expected an integer, got 'many'"),
        ([], {"CHECKPOINT_EVERY": "-1"}, "CHECKPOINT_EVERY: expected an integer >= 0"),
        ([], {"CHECKPOINT_DIR": " "}, "CHECKPOINT_DIR: expected a directory path"),
        ([], {"TRAIN_BACKEND": "rccl"}, "TRAIN_BACKEND: expected one of auto, nccl, gloo, got 'rccl'"),
        ([], {"TRAIN_LR": "nan"}, "TRAIN_LR: expected a finite number, got 'nan'"),
        ([], {"TRAIN_LR": "0"}, "TRAIN_LR: expected a number > 0, got '0'"),
        (["--grad-clip", "-1"], {}, "argument --grad-clip: expected a number >= 0, got '-1'"),
        ([], {"TRAIN_ENTRYPOINT": "mymodule"}, "TRAIN_ENTRYPOINT: expected 'package.module:function'"),
        (["--checkpoint-keep", "0"], {}, "argument --checkpoint-keep: expected an integer >= 1, got 0"),
        (["--stepz", "3"], {}, "unrecognized arguments: --stepz"),
    ],
)
def test_invalid_settings_exit_2_naming_the_setting(argv, env, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_config(argv, env)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_program_exits_2_on_settings_this_machine_cannot_run(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRAIN_STEPS", "x")
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--checkpoint-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "TRAIN_STEPS" in capsys.readouterr().err
    monkeypatch.delenv("TRAIN_STEPS")
    if not torch.cuda.is_available():  # fails before any process group exists, so it can run in this process
        assert train_main(["--checkpoint-dir", str(tmp_path), "--backend", "nccl"]) == 2
        assert "backend nccl needs a visible GPU" in capsys.readouterr().err


def configmap_copy_of_program(root: Path) -> Path:
    """programs/*.py laid out like a Kubernetes ConfigMap volume: each file a symlink through `..data`."""
    version = root / "programs" / "..2026_01_01_00_00_00.000000001"
    version.mkdir(parents=True)
    (root / "programs" / "..data").symlink_to(version.name)
    for source in (REPO / "programs").glob("*.py"):
        shutil.copy(source, version / source.name)
        (root / "programs" / source.name).symlink_to(f"..data/{source.name}")
    return root / "programs" / "train.py"


@pytest.mark.slow
def test_single_process_with_a_user_entrypoint(tmp_path) -> None:
    """`python .../train.py` (no torchrun) from a ConfigMap-style copy, TRAIN_ENTRYPOINT naming user code."""
    train = configmap_copy_of_program(tmp_path / "opt")
    checkpoints = tmp_path / "checkpoints"
    command = [
        sys.executable,
        str(train),
        "--checkpoint-dir",
        str(checkpoints),
        "--steps",
        "4",
        "--checkpoint-every",
        "2",
    ]
    env = clean_env(TRAIN_ENTRYPOINT="custom_entry:build", PYTHONPATH=str(DATA))
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    (start,) = events(result, "start")
    assert (start["world_size"], start["parameters"]) == (1, 4 * 3 + 3)  # the user's Linear(4, 3)
    assert [event["step"] for event in events(result, "step")] == [1, 2, 3, 4]
    assert steps_of(checkpoints) == [2, 4]
    assert set(final_state(checkpoints)["model"]) == {"weight", "bias"}

    # Started again after it finished (a rescheduled pod): resumes at the end and exits 0 without training.
    again = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert events(again, "step") == []
    assert (events(again, "done")[0]["resumed_from"], events(again, "done")[0]["loss"]) == (4, None)


def test_settings_check_runs_without_torch():
    """The Job's `check-settings` init container parses settings only: it must not import torch (seconds of
    start-up, and nothing it needs). `sys.modules["torch"] = None` makes any `import torch` raise ImportError."""
    from components.workloads.training import SETTINGS_CHECK

    blocked = "import sys; sys.modules['torch'] = None\n" + SETTINGS_CHECK
    root = str(Path(__file__).resolve().parent.parent)
    run = {"capture_output": True, "text": True, "timeout": 60}
    ok = subprocess.run([sys.executable, "-c", blocked, root], env={"PATH": os.environ["PATH"]}, **run)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, "-c", blocked, root], env={"TRAIN_STEPS": "0"}, **run)
    assert bad.returncode == 2 and "TRAIN_STEPS" in bad.stderr


def test_a_checkpoint_from_before_elastic_runs_resumes_at_its_position_in_the_data_stream(tmp_path, capsys) -> None:
    """Format 1 had no `batches`: its world never changed size, so it had read step x world_size batches. In this
    process (world of one, no torchrun): a real checkpoint rewritten as format 1 of a 2-process run at step 2."""
    run = ["--checkpoint-dir", str(tmp_path), "--checkpoint-every", "2", "--batch-size", "4", "--backend", "gloo"]
    assert train_main([*run, "--steps", "2"]) == 0
    store = CheckpointStore(tmp_path, keep=1)
    (checkpoint,) = store.checkpoints()
    state = store.load(checkpoint)
    del state["batches"]
    checkpoint.path.unlink()
    store.save(2, {**state, "format": 1, "world_size": 2})
    capsys.readouterr()
    assert train_main([*run, "--steps", "3"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (resume,) = [e for e in lines if e["event"] == "resume"]
    assert (resume["step"], resume["batches"], resume["saved_world_size"]) == (2, 4, 2)
    assert [(e["step"], e["batches"]) for e in lines if e["event"] == "step"] == [(3, 5)]
