"""GPU health check: the GPUs are the ones expected, compute right and fast, and talk to each other fast.

Run (standard library + torch only; ships next to the training program in the same image):

  python -m programs.gpucheck --expect-gpus N [--min-busbw GBPS] [--min-tflops T] [--json]
  python -m programs.gpucheck --expect-gpus 0 --backend gloo --cpu-processes 2 --json   # CPU, for tests

Checks, in order:
  1. torch.cuda.device_count() (HIP on a ROCm build of PyTorch) equals --expect-gpus; otherwise it fails at once,
     naming the devices it saw, and runs nothing else: a partition that sees the wrong GPUs is broken however
     fast they are.
  2. One process per GPU (started here), each: a bf16 matrix product (default 8192^3, warm-up, then timed with
     device events), reported in TFLOP/s, and its result on a sample of rows checked against an fp32 CPU product
     of the same bf16 inputs. --min-tflops applies to every GPU (the slowest decides).
  3. With more than one process: an all-reduce (torch.distributed, `nccl` = RCCL on ROCm) over sizes 8 MiB..1 GiB,
     reported as algbw and busbw exactly as nccl-tests defines them (see bus_bandwidth). --min-busbw applies to
     the largest size's busbw (see LARGEST_SIZE_DECIDES).

Output: one JSON object on stdout with --json (schema SCHEMA, keys in JSON_KEYS), else a short text report.
Exit status: 0 every check passed, 1 a check failed (the JSON's `failures` says which), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing
import os
import platform
import queue
import re
import sys
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist

SCHEMA = "gpucheck/1"
JSON_KEYS = (
    "schema",
    "verdict",
    "failures",
    "notes",
    "expect_gpus",
    "visible_gpus",
    "devices",
    "backend",
    "world_size",
    "thresholds",
    "matmul",
    "allreduce",
    "software",
    "env",
    "elapsed_s",
)
MATMUL_KEYS = (
    "rank",
    "device",
    "name",
    "n",
    "dtype",
    "iters",
    "seconds",
    "window_min_seconds",
    "sized_from",
    "tflops",
    "rel_err",
    "max_err_over_rms",
    "ok",
)
ALLREDUCE_KEYS = ("bytes", "time_us", "algbw_gbps", "busbw_gbps", "correct")

# nccl-tests' defaults (README "Arguments": -w 5 warm-up iterations, -n 20 timed iterations, -a 1 = the time
# averaged over ranks) and its default data type (float), so the numbers compare with all_reduce_perf's.
ALLREDUCE_WARMUP, ALLREDUCE_ITERS = 5, 20
DEFAULT_SIZES = tuple(2**p for p in range(23, 31))  # 8 MiB .. 1 GiB, powers of two
# nccl-tests doc/PERFORMANCE.md: "on large sizes, the time becomes linear with the size ... Therefore, on large
# sizes, it makes more sense to look at the bandwidth"; small sizes measure latency, not the links. So the floor
# applies to the largest size measured, not to the best size (a lucky mid-size must not hide slow links).
LARGEST_SIZE_DECIDES = True

# Matrix-product correctness. bf16 keeps 8 significant bits (unit roundoff 2^-8), so rounding the output alone
# leaves a relative error of up to 2^-8 per element (the fp32 accumulation adds orders of magnitude less). Bounds:
# the relative Frobenius error of the sampled rows, and the largest single error relative to the result's RMS
# (a typical |element|); a wrong tile, flipped exponent bits or garbage are errors of order 1.
MATMUL_MAX_REL_ERR = 2**-7
MATMUL_MAX_ERR_OVER_RMS = 2**-4
MATMUL_SAMPLE_ROWS = 64
MATMUL_WARMUP, MATMUL_ITERS = 10, 50
MATMUL_MIN_GPU_SECONDS = 1.0
GPU_MATMUL_N, CPU_MATMUL_N = 8192, 256

# Environment worth recording next to the numbers (which GPUs, and NCCL/RCCL settings).
RECORDED_ENV = re.compile(
    r"^(HIP_VISIBLE_DEVICES|CUDA_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|NCCL_.*|RCCL_.*|"
    r"TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)$"
)


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """All-reduce bus bandwidth from algorithm bandwidth, as nccl-tests defines it.

    https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md ("AllReduce"): busbw = algbw * 2(n-1)/n,
    with algbw = S/t (src/all_reduce.cu AllReduceGetBw: bytes / 1.0E9 / seconds, so GB/s are 10^9 bytes/s)."""
    return algbw * 2 * (ranks - 1) / ranks


def algorithm_bandwidth(size_bytes: int, seconds: float) -> float:
    """algbw = S/t in GB/s (10^9 bytes per second), as nccl-tests prints it."""
    return size_bytes / 1e9 / seconds


# ---------------------------------------------------------------------------------------------------- arguments

SIZE_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}  # binary, like nccl-tests' -b/-e ("128M" = 128 MiB)


def parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+)([KMG]?)(i?B)?", text.strip(), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or with K/M/G: 8M, 1G)")
    size = int(match[1]) * SIZE_SUFFIX[match[2].upper()]
    if size <= 0 or size % 4:
        raise argparse.ArgumentTypeError(f"{text!r}: a size must be a positive multiple of 4 bytes (float32)")
    return size


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m programs.gpucheck", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--expect-gpus",
        type=int,
        required=True,
        metavar="N",
        help="GPUs this container/node must see (0 only with --backend gloo on a CPU-only host)",
    )
    p.add_argument(
        "--min-busbw",
        type=positive_float,
        metavar="GBPS",
        help="floor for the all-reduce bus bandwidth at the largest size, GB/s (needs 2+ processes)",
    )
    p.add_argument("--min-tflops", type=positive_float, metavar="T", help="floor for every GPU's bf16 TFLOP/s")
    p.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        default="nccl",
        help="nccl: one process per GPU (RCCL on ROCm); gloo: CPU processes (tests, laptops)",
    )
    p.add_argument("--cpu-processes", type=int, metavar="K", help="with --backend gloo: processes (default 2)")
    p.add_argument(
        "--sizes", type=parse_size, nargs="+", metavar="SIZE", help="all-reduce sizes (default 8M 16M ... 1G)"
    )
    p.add_argument(
        "--matmul-size",
        type=int,
        metavar="N",
        help=f"square matrix size (default {GPU_MATMUL_N} on GPU, {CPU_MATMUL_N} on CPU)",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=900.0,
        metavar="S",
        help="seconds for all processes to finish (a hung collective fails the check)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if args.expect_gpus < 0:
        p.error("--expect-gpus must be >= 0")
    if args.backend == "nccl":
        if args.expect_gpus == 0:
            p.error("--expect-gpus 0 needs --backend gloo (nothing to check with nccl and no GPU)")
        if args.cpu_processes is not None:
            p.error("--cpu-processes needs --backend gloo (with nccl there is one process per GPU)")
    elif args.cpu_processes is None:
        args.cpu_processes = 2
    elif args.cpu_processes < 1:
        p.error("--cpu-processes must be >= 1")
    if args.matmul_size is not None and args.matmul_size < MATMUL_SAMPLE_ROWS:
        p.error(f"--matmul-size must be >= {MATMUL_SAMPLE_ROWS}")
    args.sizes = sorted(set(args.sizes or DEFAULT_SIZES))
    return args


# ---------------------------------------------------------------------------------------------------- workers


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_check(device: torch.device, n: int, seed: int, min_seconds: float | None = None) -> dict[str, Any]:
    """bf16 C = A @ B: TFLOP/s over a window of at least MATMUL_ITERS products and `min_seconds` (default: a second
    on a GPU, none on CPU), and C's sampled rows against an fp32 CPU reference."""
    if min_seconds is None:
        min_seconds = MATMUL_MIN_GPU_SECONDS if device.type == "cuda" else 0.0
    generator = torch.Generator(device).manual_seed(seed)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=generator)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=generator)

    def timed(iters: int) -> tuple[torch.Tensor, float]:
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                product = a @ b
            end.record()
            end.synchronize()
            return product, start.elapsed_time(end) / 1e3
        began = time.perf_counter()
        for _ in range(iters):
            product = a @ b
        return product, time.perf_counter() - began

    timed(MATMUL_WARMUP)  # one-time costs (library load, kernel choice, clocks ramping up), not timed for sizing
    # The window is sized from steady-state products: sized from the warm-up, whose time per product includes those
    # one-time costs, the committed H200 runs timed 138 and 181 ms instead of a second. A window of MATMUL_ITERS
    # products at 8192^3 lasts ~70 ms on an H100, short enough for clock ramps to move the figure by ~6 % between
    # runs (measured); so on a GPU the timed window lasts at least min_seconds.
    _, probe_seconds = timed(MATMUL_ITERS)
    iters = max(MATMUL_ITERS, math.ceil(min_seconds / (probe_seconds / MATMUL_ITERS)))
    c, seconds = timed(iters)
    rows = torch.linspace(0, n - 1, MATMUL_SAMPLE_ROWS, device=device).long()  # first, last and between
    reference = a[rows].float().cpu() @ b.float().cpu()
    got = c[rows].float().cpu()
    error = got - reference
    rms = reference.pow(2).mean().sqrt().item()
    finite = bool(torch.isfinite(got).all())
    rel_err = (error.norm() / reference.norm()).item() if finite else float("inf")
    max_err_over_rms = error.abs().max().item() / rms if finite else float("inf")
    return {
        "device": str(device),
        "name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "n": n,
        "dtype": "bfloat16",
        "iters": iters,
        "seconds": round(seconds, 6),
        "window_min_seconds": min_seconds,
        "sized_from": {"iters": MATMUL_ITERS, "seconds": round(probe_seconds, 6)},
        "tflops": round(2 * n**3 * iters / seconds / 1e12, 3),
        "rel_err": rel_err,
        "max_err_over_rms": max_err_over_rms,
        "ok": finite and rel_err <= MATMUL_MAX_REL_ERR and max_err_over_rms <= MATMUL_MAX_ERR_OVER_RMS,
    }


def allreduce_bench(device: torch.device, rank: int, world: int, sizes: list[int]) -> list[dict[str, Any]]:
    """Per size: check one all-reduce's sum, then time ALLREDUCE_ITERS back to back (host clock around the loop,
    device synchronized, as nccl-tests does), averaged over ranks."""
    results = []
    for size in sizes:
        tensor = torch.full((size // 4,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(tensor)
        correct = torch.tensor([float(bool((tensor == world * (world + 1) / 2).all()))], device=device)
        tensor.zero_()  # keeps the timed sums finite whatever the world size
        for _ in range(ALLREDUCE_WARMUP - 1):
            dist.all_reduce(tensor)
        synchronize(device)
        dist.all_reduce(torch.zeros(1, device=device))  # start together
        synchronize(device)
        began = time.perf_counter()
        for _ in range(ALLREDUCE_ITERS):
            dist.all_reduce(tensor)
        synchronize(device)
        seconds = torch.tensor([(time.perf_counter() - began) / ALLREDUCE_ITERS], dtype=torch.float64, device=device)
        dist.all_reduce(seconds)
        dist.all_reduce(correct, op=dist.ReduceOp.MIN)
        mean = seconds.item() / world
        algbw = algorithm_bandwidth(size, mean)
        results.append(
            {
                "bytes": size,
                "time_us": round(mean * 1e6, 3),
                "algbw_gbps": round(algbw, 6),
                "busbw_gbps": round(bus_bandwidth(algbw, world), 6),
                "correct": bool(correct.item()),
            }
        )
        del tensor
    return results


def worker(
    rank: int, world: int, backend: str, matmul_n: int, sizes: list[int], store: str, timeout: float, results: Any
) -> None:
    """One process per GPU (or per CPU stand-in): its matrix product, then its part of the all-reduce."""
    try:
        if backend == "nccl":
            device = torch.device("cuda", rank)
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
            torch.set_num_threads(1)  # K processes on shared cores; CPU numbers are not measurements anyway
        result: dict[str, Any] = {"matmul": {"rank": rank, **matmul_check(device, matmul_n, seed=rank)}}
        if world > 1:
            dist.init_process_group(
                backend,
                init_method=f"file://{store}",
                rank=rank,
                world_size=world,
                timeout=datetime.timedelta(seconds=timeout),
                device_id=device if backend == "nccl" else None,
            )
            result["allreduce"] = allreduce_bench(device, rank, world, sizes)
            dist.destroy_process_group()
        results.put((rank, result))
    except Exception as error:  # reported by the parent as a failure of this rank
        results.put((rank, {"error": f"{type(error).__name__}: {error}"}))


def run_workers(args: argparse.Namespace, world: int, matmul_n: int) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Start `world` spawned processes; return their results by rank and the failures of those that gave none."""
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked; spawn is also what ROCm needs
    results = context.Queue()
    failures: list[str] = []
    got: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="gpucheck-") as scratch:
        processes = [
            context.Process(
                target=worker,
                name=f"gpucheck-rank{rank}",
                daemon=True,
                args=(
                    rank,
                    world,
                    args.backend,
                    matmul_n,
                    args.sizes,
                    os.path.join(scratch, "store"),
                    args.timeout,
                    results,
                ),
            )
            for rank in range(world)
        ]
        for process in processes:
            process.start()
        deadline = time.monotonic() + args.timeout
        while len(got) < world:
            try:
                rank, result = results.get(timeout=1.0)
                got[rank] = result
                if "error" in result:
                    break  # the other ranks would wait in a collective until their timeout
            except queue.Empty:
                dead = [
                    rank
                    for rank, process in enumerate(processes)
                    if rank not in got and process.exitcode not in (None, 0)
                ]
                if dead:
                    failures += [
                        f"rank {rank}: process died with exit code {processes[rank].exitcode}" for rank in dead
                    ]
                    break
                if time.monotonic() > deadline:
                    failures.append(
                        f"ranks {sorted(set(range(world)) - set(got))} did not finish within "
                        f"--timeout {args.timeout:g} s (hung collective?)"
                    )
                    break
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(timeout=10)
    for rank, result in sorted(got.items()):
        if "error" in result:
            failures.append(f"rank {rank}: {result['error']}")
    return got, failures


# ---------------------------------------------------------------------------------------------------- report


def visible_devices() -> list[dict[str, Any]]:
    return [{"index": index, "name": torch.cuda.get_device_name(index)} for index in range(torch.cuda.device_count())]


def describe(devices: list[dict[str, Any]], env: dict[str, str]) -> str:
    seen = ", ".join(f"[{d['index']}] {d['name']}" for d in devices) or "none"
    selected = ", ".join(f"{key}={value}" for key, value in env.items() if key.endswith("VISIBLE_DEVICES"))
    build = (
        f"HIP {torch.version.hip}"
        if torch.version.hip
        else (f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only torch build")
    )
    return f"{len(devices)} visible ({seen}; {build}{'; ' + selected if selected else ''})"


def check(args: argparse.Namespace) -> dict[str, Any]:
    began = time.monotonic()
    env = {key: value for key, value in sorted(os.environ.items()) if RECORDED_ENV.match(key)}
    devices = visible_devices()
    gpu = args.backend == "nccl"
    world = len(devices) if gpu else args.cpu_processes
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "verdict": "fail",
        "failures": [],
        "notes": [],
        "expect_gpus": args.expect_gpus,
        "visible_gpus": len(devices),
        "devices": devices,
        "backend": args.backend,
        "world_size": world,
        "thresholds": {
            "min_busbw_gbps": args.min_busbw,
            "min_tflops": args.min_tflops,
            "busbw_compared_at_bytes": max(args.sizes) if LARGEST_SIZE_DECIDES else None,
        },
        "matmul": [],
        "allreduce": None,
        "software": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "hip": torch.version.hip,
            "hostname": platform.node(),
        },
        "env": env,
        "elapsed_s": None,
    }
    failures, notes = report["failures"], report["notes"]
    if len(devices) != args.expect_gpus:
        failures.append(f"expected {args.expect_gpus} GPU(s), saw {describe(devices, env)}")
    else:
        matmul_n = args.matmul_size or (GPU_MATMUL_N if gpu else CPU_MATMUL_N)
        results, worker_failures = run_workers(args, world, matmul_n)
        failures += worker_failures
        report["matmul"] = [results[rank]["matmul"] for rank in sorted(results) if "matmul" in results[rank]]
        for row in report["matmul"]:
            if not row["ok"]:
                failures.append(
                    f"rank {row['rank']} ({row['name']}): bf16 matmul result wrong: relative error "
                    f"{row['rel_err']:.3g} (limit {MATMUL_MAX_REL_ERR:.3g}), largest error "
                    f"{row['max_err_over_rms']:.3g} x RMS (limit {MATMUL_MAX_ERR_OVER_RMS:.3g})"
                )
            if args.min_tflops and row["tflops"] < args.min_tflops:
                failures.append(
                    f"rank {row['rank']} ({row['name']}): {row['tflops']:.1f} TFLOP/s bf16 < "
                    f"--min-tflops {args.min_tflops:g}"
                )
        if world > 1 and all("allreduce" in results.get(rank, {}) for rank in range(world)):
            sizes = results[0]["allreduce"]
            report["allreduce"] = {
                "ranks": world,
                "dtype": "float32",
                "warmup": ALLREDUCE_WARMUP,
                "iters": ALLREDUCE_ITERS,
                "sizes": sizes,
                "busbw_at_largest_gbps": sizes[-1]["busbw_gbps"],
            }
            failures += [f"all-reduce of {row['bytes']} bytes gave a wrong sum" for row in sizes if not row["correct"]]
            if args.min_busbw and sizes[-1]["busbw_gbps"] < args.min_busbw:
                failures.append(
                    f"all-reduce busbw {sizes[-1]['busbw_gbps']:.1f} GB/s at {sizes[-1]['bytes']} bytes "
                    f"< --min-busbw {args.min_busbw:g} over {world} ranks"
                )
        elif world == 1:
            notes.append("one process: no all-reduce" + (", --min-busbw not applied" if args.min_busbw else ""))
        if len(report["matmul"]) != world and not failures:
            failures.append(f"only {len(report['matmul'])} of {world} ranks reported")
    report["verdict"] = "fail" if failures else "pass"
    report["elapsed_s"] = round(time.monotonic() - began, 3)
    return report


def text_report(report: dict[str, Any]) -> str:
    lines = [
        f"gpucheck: {report['verdict'].upper()}  ({report['visible_gpus']} GPU(s) visible, expected "
        f"{report['expect_gpus']}; backend {report['backend']}, {report['world_size']} process(es))"
    ]
    lines += [
        f"  rank {row['rank']} {row['name']}: bf16 {row['n']}^3 {row['tflops']:.1f} TFLOP/s, "
        f"rel err {row['rel_err']:.2e} {'ok' if row['ok'] else 'WRONG'}"
        for row in report["matmul"]
    ]
    if report["allreduce"]:
        lines.append(f"  all-reduce over {report['allreduce']['ranks']} ranks:  bytes  time_us  algbw  busbw (GB/s)")
        lines += [
            f"    {row['bytes']:>11}  {row['time_us']:>9.1f}  {row['algbw_gbps']:>7.2f}  {row['busbw_gbps']:>7.2f}"
            for row in report["allreduce"]["sizes"]
        ]
    lines += [f"  FAILED: {failure}" for failure in report["failures"]]
    lines += [f"  note: {note}" for note in report["notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)  # exits 2 on bad arguments
    report = check(args)
    print(json.dumps(report) if args.json else text_report(report), flush=True)
    return 0 if report["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
