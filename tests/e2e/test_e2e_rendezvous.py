"""Multi-node training's rendezvous under real torchrun (torch 2.13, CPU, gloo): two agents on this machine run the
command a JobSet pod runs (components/workloads/training.torchrun_multinode, pinned against the synthesized JobSet
in tests/test_workloads.py), one process each, node rank from PET_NODE_RANK as the downward API sets it.

Node rank 1 starts first: in a JobSet nothing orders the pods, and pod 0's DNS name resolves only once the headless
Service publishes it. With static rendezvous node rank 0 hosts the store because of its rank, and the others retry
connecting until the rendezvous timeout (600 s, static_tcp_rendezvous.py L28), so the order does not matter.
About 15 s on 2 cores (four processes import torch), hence e2e; no Docker.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from components.workloads import training

REPO = Path(__file__).resolve().parents[2]
HEAD_START_S = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local(command: list[str], port: int, checkpoint_dir: Path) -> list[str]:
    """The rendered command with this machine's stand-ins: torchrun from this interpreter, pod 0's name -> localhost,
    a free port, the repository's train.py (tiny run) for the ConfigMap's copy. Nothing else changes."""
    host, entry = training.rendezvous_host("llm-pretrain"), training.ENTRY
    swap = {host: "localhost", str(training.RENDEZVOUS_PORT): str(port)}
    assert command[0] == "torchrun" and command[-1] == entry and host in command
    local = [sys.executable, "-m", "torch.distributed.run", *(swap.get(arg, arg) for arg in command[1:-1])]
    tiny = ["--steps", "4", "--checkpoint-every", "2", "--batch-size", "8", "--backend", "gloo"]
    return [*local, str(REPO / "programs" / "train.py"), "--checkpoint-dir", str(checkpoint_dir), *tiny]


def test_node_rank_one_started_first_waits_for_node_rank_zero_and_both_finish(tmp_path):
    command = training.torchrun_multinode("llm-pretrain", nodes=2, gpus_per_node=1)
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}

    def agent(rank: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            _local(command, port, tmp_path / f"node{rank}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, training.NODE_RANK_ENV: str(rank)},
        )

    started = time.monotonic()
    follower = agent(1)
    time.sleep(HEAD_START_S)
    assert follower.poll() is None, follower.communicate()  # still waiting for a store nobody hosts yet
    leader = agent(0)
    out0, err0 = leader.communicate(timeout=120)
    out1, err1 = follower.communicate(timeout=60)
    assert (leader.returncode, follower.returncode) == (0, 0), (err0[-2000:], err1[-2000:])
    events = [json.loads(line) for line in out0.splitlines() if line.startswith("{")]
    assert events[0]["event"] == "start" and events[0]["world_size"] == 2
    assert events[-1]["event"] == "done" and events[-1]["step"] == 4
    print(f"two-node static rendezvous, rank 1 first by {HEAD_START_S} s: {time.monotonic() - started:.1f} s")
