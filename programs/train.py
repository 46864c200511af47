"""Distributed data-parallel training that survives killed workers: atomic checkpoints, resume on start.

Launch (one process per GPU; on ROCm the `nccl` backend is RCCL, and HIP_VISIBLE_DEVICES picks the GPUs):

  One machine, G GPUs (Docker host / one partition):
    torchrun --standalone --nproc-per-node G programs/train.py [flags]

  N machines (Kubernetes Indexed Job: same command on every node, HOST = a stable name of node 0's pod
  behind a headless Service, PET_NODE_RANK = the pod's completion index; static rendezvous):
    torchrun --nnodes N --nproc-per-node G --rdzv-backend static --master-addr HOST --master-port 29500 \
             --rdzv-id JOB_NAME programs/train.py [flags]

  CPU only (tests, laptops): the same with `--nproc-per-node 2` and TRAIN_BACKEND=gloo (auto picks gloo when no
  GPU is visible). `python programs/train.py` without torchrun runs one process.

Flags / environment variables (flag wins; see --help for defaults):
  --steps TRAIN_STEPS, --batch-size BATCH_SIZE (per process), --checkpoint-dir CHECKPOINT_DIR,
  --checkpoint-every CHECKPOINT_EVERY, --checkpoint-keep CHECKPOINT_KEEP, --backend TRAIN_BACKEND (auto|nccl|gloo),
  --precision TRAIN_PRECISION (fp32|bf16), --lr TRAIN_LR, --grad-clip TRAIN_GRAD_CLIP, --seed TRAIN_SEED,
  --hidden-size TRAIN_HIDDEN_SIZE, --layers TRAIN_LAYERS, --log-every TRAIN_LOG_EVERY,
  --entrypoint TRAIN_ENTRYPOINT (module:function, see programs/workload.py),
  --fail-at-step TRAIN_FAIL_AT_STEP / --fail-rank TRAIN_FAIL_RANK (failure drill).

Behaviour:
  * Rank 0 prints one JSON object per line on stdout: `start`, `resume`, `step` (step, loss of rank 0's batch,
    samples_per_s over the whole world, step_time_s), `checkpoint`, `checkpoint_invalid`, `done`.
  * Every CHECKPOINT_EVERY steps and at the last step rank 0 writes CHECKPOINT_DIR/ckpt-<step>-<sha256>.pt
    atomically (see programs/checkpoint.py) and keeps the newest CHECKPOINT_KEEP; all ranks wait for it.
  * On start rank 0 picks the newest checkpoint that passes its checksum and torch.load (corrupt or
    half-written files are skipped and renamed *.invalid); every rank loads that same file and training
    continues at the next step, so a killed job loses at most CHECKPOINT_EVERY steps. A run whose checkpoint
    already reached TRAIN_STEPS exits 0 at once. CHECKPOINT_DIR must be storage every node sees.
  * SIGTERM (`docker stop`, the delete before `pulumi up` replaces the container, a pod's deletion; torchrun, the
    container's main process, forwards it to every worker) stops the run at the end of the current step: every
    step all ranks agree on whether any of them got it (one all-reduce of a flag), so they all stop after the
    same step; rank 0 checkpoints that step (atomically, as any checkpoint) unless it just did, logs `stop`, and
    every rank exits 0. The next start resumes from that checkpoint: no step is lost. torchrun itself then exits 1
    (it re-raises the signal as SignalException), so Docker's on-failure policy restarts it after a daemon
    restart and a Kubernetes Job does not count the stop as its completion.
  * Exit status: 0 done or stopped by SIGTERM, 2 invalid settings, anything else a failure (torchrun reports the
    failed rank, and writes its traceback to TORCHELASTIC_ERROR_FILE), so restart policies and Job backoff apply.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # `torchrun programs/train.py` runs this file as a script: make `import programs.*` mean the folder this file
    # is in. abspath, not resolve(): a Kubernetes ConfigMap mount makes each file a symlink into a hidden
    # `..<timestamp>/` folder, whose parent is not the folder that holds `programs/`.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from programs.checkpoint import CHECKPOINT_NAME, Checkpoint, CheckpointStore, InvalidCheckpoint
from programs.settings import TrainConfig, parse_config
from programs.workload import Workload, load_entrypoint

# 2: the checkpoint holds `batches`, the data stream's position, so a run resumed at another world size goes on
# with the next batch (Workload.batch).
CHECKPOINT_FORMAT = 2


class SetupError(Exception):
    """Settings that cannot work on this machine (exit status 2, like a bad flag)."""


@dataclasses.dataclass(frozen=True)
class World:
    """This process's place in the distributed run (torchrun's RANK/WORLD_SIZE/LOCAL_RANK) and its device."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device


class Logger:
    """JSON lines on stdout from rank 0 only, so a log collector sees one stream per job."""

    def __init__(self, rank: int) -> None:
        self.enabled = rank == 0

    def __call__(self, event: str, **fields: Any) -> None:
        if self.enabled:
            print(json.dumps({"event": event, "time": round(time.time(), 3), **fields}), flush=True)


def init_world(config: TrainConfig) -> World:
    environ = os.environ
    launched_by_torchrun = "RANK" in environ and "WORLD_SIZE" in environ
    rank = int(environ.get("RANK", 0))
    world_size = int(environ.get("WORLD_SIZE", 1))
    local_rank = int(environ.get("LOCAL_RANK", 0))
    gpu_visible = torch.cuda.is_available()
    backend = config.backend if config.backend != "auto" else ("nccl" if gpu_visible else "gloo")
    if backend == "nccl":
        if not gpu_visible:
            raise SetupError("backend nccl needs a visible GPU (torch.cuda.is_available() is False); use gloo on CPU")
        if local_rank >= torch.cuda.device_count():
            raise SetupError(
                f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPU(s) visible: "
                "--nproc-per-node must not exceed the GPUs in HIP_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if config.fail_at_step is not None and config.fail_rank >= world_size:
        raise SetupError(f"--fail-rank {config.fail_rank} is not a rank of this world of {world_size}")
    if launched_by_torchrun:
        dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    else:  # a plain `python train.py`: a world of one needs no rendezvous
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return World(rank, world_size, local_rank, backend, device)


class StopRequest:
    """Whether this process got SIGTERM; the handler only records it, so the step in progress (and a checkpoint
    being written) finishes."""

    def __init__(self) -> None:
        self.received_at: float | None = None

    def handle(self, signum: int, frame: object) -> None:
        if self.received_at is None:
            self.received_at = time.monotonic()


def any_rank(flag: bool, world: World) -> bool:
    """True on every rank if any rank says so (the same collective on all ranks, every step)."""
    tensor = torch.tensor([int(flag)], device=world.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


def all_ranks_ok(ok: bool, world: World) -> bool:
    """True only if every rank says ok, so a failure on one rank stops all of them instead of hanging the rest."""
    flag = torch.tensor([int(ok)], device=world.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def broadcast_name(name: str, world: World) -> str:
    """Rank 0's checkpoint file name (ASCII, fixed length, "" for none) to every rank.

    A byte tensor rather than broadcast_object_list, which needs numpy on the receiving side."""
    width = len("ckpt-000000000-") + 64 + len(".pt")
    buffer = torch.zeros(width, dtype=torch.uint8, device=world.device)
    if world.rank == 0 and name:
        buffer.copy_(torch.tensor(list(name.encode("ascii")), dtype=torch.uint8))
    dist.broadcast(buffer, src=0)
    return bytes(buffer.tolist()).rstrip(b"\0").decode("ascii")


@dataclasses.dataclass(frozen=True)
class Position:
    """Where the run stands: the last step done and how many batches of the data stream it consumed."""

    step: int = 0
    batches: int = 0


def resume(
    store: CheckpointStore, world: World, model: torch.nn.Module, optimizer: torch.optim.Optimizer, log: Logger
) -> Position:
    """Load the newest valid checkpoint into model and optimizer on every rank; return its position (0 if none)."""
    name = ""
    state: dict[str, Any] | None = None
    if world.rank == 0:
        store.remove_temp_files()
        found = store.latest_valid()  # on CPU: no GPU memory spike next to the model
        if found is not None:
            name, state = found[0].path.name, found[1]
    name = broadcast_name(name, world)
    if not name:
        return Position()
    error = ""
    if state is None:
        match = CHECKPOINT_NAME.match(name)
        assert match, name
        try:
            state = store.load(Checkpoint(store.directory / name, int(match["step"]), match["sha256"]))
        except InvalidCheckpoint as invalid:
            error = (
                f"rank {world.rank} cannot use {name} that rank 0 chose ({invalid}); "
                "CHECKPOINT_DIR must be the same shared storage on every node"
            )
    if not all_ranks_ok(not error, world):
        raise RuntimeError(error or f"another rank could not load checkpoint {name}")
    assert state is not None
    model.load_state_dict(state["model"])  # a shape mismatch (changed model settings) is an error, not a fresh start
    optimizer.load_state_dict(state["optimizer"])
    # A format-1 checkpoint (before elastic runs) was written by a world that never changed size.
    batches = int(state.get("batches", state["step"] * state.get("world_size", 1)))
    log(
        "resume",
        checkpoint=str(store.directory / name),
        step=state["step"],
        batches=batches,
        saved_world_size=state.get("world_size"),
        world_size=world.world_size,
    )
    return Position(int(state["step"]), batches)


def train(config: TrainConfig, world: World, stop: StopRequest) -> None:
    log = Logger(world.rank)
    workload: Workload = load_entrypoint(config.entrypoint)(config, world.device)
    model = workload.model.to(world.device)
    optimizer = (workload.make_optimizer or (lambda params: torch.optim.AdamW(params, lr=config.lr)))(
        model.parameters()
    )
    store = CheckpointStore(config.checkpoint_dir, config.checkpoint_keep, log)
    global_batch = config.batch_size * world.world_size
    log(
        "start",
        world_size=world.world_size,
        backend=world.backend,
        device=str(world.device),
        device_name=torch.cuda.get_device_name(world.device) if world.device.type == "cuda" else "cpu",
        torch=torch.__version__,
        parameters=sum(p.numel() for p in model.parameters()),
        global_batch=global_batch,
        config={
            key: str(value) if isinstance(value, Path) else value for key, value in dataclasses.asdict(config).items()
        },
    )

    start = resume(store, world, model, optimizer, log) if config.checkpoint_every else Position()
    start_step, batches = start.step, start.batches
    ddp = DistributedDataParallel(model, device_ids=[world.device.index] if world.device.type == "cuda" else None)
    autocast = torch.autocast(world.device.type, dtype=torch.bfloat16, enabled=config.precision == "bf16")

    window_start, window_steps = time.perf_counter(), 0
    timed_samples, timed_seconds, first_window = 0, 0.0, True
    loss_value: float | None = None  # stays None when a finished run is started again
    for step in range(start_step + 1, config.steps + 1):
        inputs, targets = workload.batch(batches + world.rank)
        batches += world.world_size
        with autocast:
            loss = workload.loss(ddp(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        window_steps += 1

        if world.rank == 0 and (step % config.log_every == 0 or step == config.steps):
            loss_value = loss.item()  # waits for the device, so the clock below covers the GPU work of the window
            now = time.perf_counter()
            elapsed = now - window_start
            log(
                "step",
                step=step,
                loss=loss_value,
                world_size=world.world_size,
                batches=batches,
                samples_per_s=round(window_steps * global_batch / elapsed, 2),
                step_time_s=round(elapsed / window_steps, 6),
            )
            if not first_window:  # the first window holds warm-up (allocation, kernel selection, DDP buckets)
                timed_samples += window_steps * global_batch
                timed_seconds += elapsed
            first_window, window_start, window_steps = False, now, 0

        stopping = any_rank(stop.received_at is not None, world) and step < config.steps
        if config.checkpoint_every and (step % config.checkpoint_every == 0 or step == config.steps or stopping):
            saving_since = time.perf_counter()
            if world.rank == 0:
                saved = store.save(
                    step,
                    {
                        "format": CHECKPOINT_FORMAT,
                        "step": step,
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "world_size": world.world_size,
                        "batches": batches,
                        "entrypoint": config.entrypoint,
                    },
                )
                log("checkpoint", step=step, path=str(saved.path), seconds=round(time.perf_counter() - saving_since, 3))
            dist.barrier()  # after this, checkpoint `step` is durable for every rank (the failure drill relies on it)
            window_start += time.perf_counter() - saving_since  # keep checkpoint I/O out of samples/s

        if step == config.fail_at_step and world.rank == config.fail_rank:
            print(
                f"train.py: failure drill: rank {world.rank} kills itself after step {step}",
                file=sys.stderr,
                flush=True,
            )
            os.kill(os.getpid(), signal.SIGKILL)

        if stopping:
            log(
                "stop",
                step=step,
                signal="SIGTERM",
                # rank 0's own signal; None when only another rank got it
                seconds_since_signal=round(time.monotonic() - stop.received_at, 3) if stop.received_at else None,
            )
            return

    log(
        "done",
        step=config.steps,
        resumed_from=start_step,
        steps_run=config.steps - start_step,
        loss=loss_value,
        mean_samples_per_s=round(timed_samples / timed_seconds, 2) if timed_seconds else None,
    )


def main(argv: list[str] | None = None) -> int:
    config = parse_config(argv, os.environ)
    stop = StopRequest()
    # Before the rendezvous: a signal during start-up stops the run after its first step. Restored on return,
    # for callers that run main() in their own process (tests).
    previous = signal.signal(signal.SIGTERM, stop.handle)
    try:
        try:
            world = init_world(config)
        except SetupError as error:
            print(f"train.py: error: {error}", file=sys.stderr)
            return 2
        train(config, world, stop)
        dist.destroy_process_group()
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_without_finalizing(code: int | None) -> None:
    """Exit now, skipping the interpreter's finalization (nothing is left to clean up: checkpoints are renamed
    into place, the process group is destroyed). DDP keeps the process group, and so its gloo worker threads
    (`pt_gloo_runloop`), alive past destroy_process_group() (torch 2.13, measured in tests/test_train.py). A worker
    thread that drops the last reference to a Python-owned tensor once finalization has begun must take the GIL;
    CPython ends such a thread with pthread_exit (docs.python.org/3.11/c-api/init.html, PyEval_RestoreThread and
    Py_FinalizeEx), whose forced unwind through a noexcept C++ frame calls std::terminate: rank 1 aborted with
    "terminate called without an active exception" (SIGABRT) after a finished run, now and then, under load."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if code is None else code)  # None as sys.exit reads it


if __name__ == "__main__":
    exit_without_finalizing(record(main)())
