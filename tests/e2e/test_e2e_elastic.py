"""Elastic training under real torchrun (torch 2.13, CPU, gloo): the rendezvous pod's store program and the agents'
command exactly as an elastic JobSet renders them (components/workloads/training.torchrun_elastic, pinned against the
synthesized JobSet in tests/test_workloads.py), one process per agent, `--nnodes 1:3`.

Two agents train; the agent holding rank 0 is killed with its worker (SIGKILL: a lost node, no time to checkpoint);
the other goes on alone from the last checkpoint; a third agent starts and joins at the next round; the run goes on
at two workers from the step it had reached. The data stream's position travels in the checkpoint (train.py
`batches`), so no batch is skipped at either change of world size.

Only the rendezvous settings differ from the pods': a 1 s last call instead of torch's 30 s (dynamic_rendezvous.py
L145), so a round closes once the agents present joined. The shrink waits for the killed node's heartbeats to expire
(15 s); each generation of workers imports torch again; no Docker.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from components.workloads import training
from programs.checkpoint import CheckpointStore

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "train"
JOB = "llm-elastic"
EVERY = 5  # checkpoint interval
# torch's heartbeats are kept (5 s x 3, dynamic_rendezvous.py L1426-1432): shorter ones on this shared machine let a
# joining agent declare a busy live one dead and form a world of its own beside it (seen with 1 s x 2).
FAST_RENDEZVOUS = "last_call_timeout=1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Run:
    """The store, the agents, and rank 0's JSON events in arrival order (only rank 0 logs, wherever it runs)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.port = tmp, _free_port()
        self.events: list[dict[str, Any]] = []
        self.agents: dict[str, subprocess.Popen[str]] = {}
        self.env = {
            **os.environ,
            **training.ELASTIC_ENV,
            "OMP_NUM_THREADS": "1",
            "PYTHONWARNINGS": "ignore",
            "PYTHONPATH": os.pathsep.join([str(DATA), str(REPO)]),
            "RECORD_DIR": str(tmp / "record"),
            "STEP_PAUSE_S": "0.05",
        }
        (tmp / "record").mkdir()
        command = training.rendezvous_store_command()
        assert command[:2] == ["python3", training.RENDEZVOUS_PROGRAM]
        swap = {str(training.C10D_PORT): str(self.port)}
        local = [sys.executable, str(REPO / "programs" / "rendezvous.py"), *(swap.get(a, a) for a in command[2:])]
        self.store = subprocess.Popen(local, stdout=subprocess.PIPE, text=True, env=self.env)
        assert self.store.stdout is not None
        assert json.loads(self.store.stdout.readline()) == {"event": "listening", "port": self.port}

    def command(self) -> list[str]:
        rendered = training.torchrun_elastic(JOB, min_nodes=1, max_nodes=3, gpus_per_node=1, max_restarts=3)
        endpoint = f"{training.rendezvous_store_host(JOB)}:{training.C10D_PORT}"
        swap = {endpoint: f"localhost:{self.port}", "is_host=false": f"is_host=false,{FAST_RENDEZVOUS}"}
        assert rendered[0] == "torchrun" and rendered[-1] == training.ENTRY and endpoint in rendered
        local = [sys.executable, "-m", "torch.distributed.run", *(swap.get(a, a) for a in rendered[1:-1])]
        settings = ["--steps", "100000", "--checkpoint-every", str(EVERY), "--checkpoint-keep", "3"]
        settings += ["--batch-size", "8", "--backend", "gloo", "--entrypoint", "recording_entry:build"]
        return [*local, str(REPO / "programs" / "train.py"), "--checkpoint-dir", str(self.tmp / "ckpt"), *settings]

    def start(self, name: str) -> None:
        agent = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=(self.tmp / f"{name}.err").open("w"),
            text=True,
            env=self.env,
        )
        self.agents[name] = agent

        def read() -> None:
            assert agent.stdout is not None
            for line in agent.stdout:
                if line.startswith("{"):
                    self.events.append({**json.loads(line), "agent": name})

        threading.Thread(target=read, daemon=True).start()

    def wait(self, what: str, condition: Any, timeout: float = 150) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [event for event in list(self.events) if condition(event)]
            if found:
                return found
            time.sleep(0.05)
        logs = {name: (self.tmp / f"{name}.err").read_text()[-3000:] for name in self.agents}
        raise AssertionError(f"no {what} within {timeout} s: {self.events[-5:]} {logs}")

    def kill(self, name: str) -> None:
        """SIGKILL the agent and its workers at once, as when its node is lost."""
        agent = self.agents[name]
        workers = [int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat") if _parent(stat) == agent.pid]
        for pid in [agent.pid, *workers]:
            os.kill(pid, signal.SIGKILL)
        agent.wait(timeout=10)

    def stop(self) -> None:
        for agent in self.agents.values():
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
        for agent in self.agents.values():
            agent.wait(timeout=60)
        self.store.terminate()
        assert self.store.wait(timeout=10) == 0


def _parent(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError):
        return None  # gone meanwhile


def _steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in events if event["event"] == "step"]


def test_elastic_run_shrinks_when_a_node_is_lost_and_grows_when_one_joins(tmp_path):
    started = time.monotonic()
    run = Run(tmp_path)
    try:
        run.start("a")
        run.start("b")
        (first,) = run.wait("step 12 of two workers", lambda e: e["event"] == "step" and e["step"] == 12)
        assert first["world_size"] == 2
        run.kill(first["agent"])  # the node of rank 0 (and, by default, of the rendezvous store: not here)
        killed = time.monotonic()
        before = {e["step"]: e for e in _steps(run.events)}
        killed_at = max(before)

        (shrunk,) = run.wait("resume", lambda e: e["event"] == "resume")
        assert shrunk["world_size"] == 1 and killed_at - EVERY < shrunk["step"] <= killed_at
        run.wait("3 steps of one worker", lambda e: e["event"] == "step" and e["step"] == shrunk["step"] + 3)
        shrink_s = time.monotonic() - killed
        run.start("c")
        joined = time.monotonic()
        grown = run.wait("resume of two", lambda e: e["event"] == "resume" and e["world_size"] == 2)[0]
        grow_s = time.monotonic() - joined
        run.wait("5 steps of two", lambda e: e["event"] == "step" and e["step"] == grown["step"] + 5)
    finally:
        run.stop()
    print(
        f"elastic 2 -> 1 -> 2: {time.monotonic() - started:.1f} s (kill to resumed {shrink_s:.1f} s, join to {grow_s:.1f} s)"
    )

    # Growing loses nothing: the agent stopped its worker with SIGTERM, which checkpointed the step it had reached.
    stops = [e for e in run.events if e["event"] == "stop"]
    assert stops[0]["step"] == grown["step"] == max(e["step"] for e in _steps(run.events) if e["world_size"] == 1)

    # One lineage of steps, each once after the last resume point, world sizes 2 -> 1 -> 2.
    steps = _steps(run.events)
    lineage = [e for e in steps if e["step"] <= shrunk["step"] and e["world_size"] == 2]
    lineage += [e for e in steps if e["world_size"] == 1] + [e for e in steps if e["step"] > grown["step"]]
    assert [e["step"] for e in lineage] == list(range(1, stops[-1]["step"] + 1))
    sizes = [e["world_size"] for e in lineage]
    assert sizes == [2] * shrunk["step"] + [1] * (grown["step"] - shrunk["step"]) + [2] * (len(sizes) - grown["step"])
    # Each step moves the data stream on by its world size; each resume picks it up where its checkpoint left it.
    batches = [0] + [e["batches"] for e in lineage]
    assert [after - prior for prior, after in zip(batches, batches[1:])] == sizes
    assert (shrunk["batches"], grown["batches"]) == (batches[shrunk["step"]], batches[grown["step"]])

    # The loss curve continues: rank 0 reads the same batch at the first replayed step as before the kill, from the
    # same restored weights, so its loss is the same to the bit; nothing starts over.
    # (Unless the kill came right after a checkpoint: then no step was lost at all.)
    assert shrunk["step"] + 1 in before or shrunk["step"] == killed_at
    if shrunk["step"] + 1 in before:
        assert next(e for e in steps if e["world_size"] == 1)["loss"] == before[shrunk["step"] + 1]["loss"]

    # What the workers really asked for (recording_entry.py, one file per process): every batch of the stream up to
    # the end, none skipped; each process strode through it by its world's size.
    asked = {path.name: [int(i) for i in path.read_text().split()] for path in (tmp_path / "record").iterdir()}
    assert set().union(*asked.values()) == set(range(batches[-1]))
    for indices in asked.values():
        strides = {after - prior for prior, after in zip(indices, indices[1:])}
        assert strides <= {1} or strides <= {2}, indices
    final = CheckpointStore(tmp_path / "ckpt", 1).latest_valid()
    assert final is not None and (final[1]["step"], final[1]["batches"]) == (stops[-1]["step"], batches[-1])
