"""programs/gpucheck.py on the CPU: real spawned processes on gloo, the exit-status contract, the busbw formula.

The GPU side (nccl, bf16 on an H100/H200) is measured through the device tool; its output is in bench/gpu/.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from programs import gpucheck

REPO = Path(__file__).resolve().parents[1]
FAST = ["--backend", "gloo", "--sizes", "64K", "1M", "--matmul-size", "128", "--json"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "programs.gpucheck", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )


def only_json(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """stdout is exactly one JSON object (one line), nothing else."""
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout + result.stderr
    return json.loads(lines[0])


@pytest.fixture(scope="module")
def two_gloo() -> subprocess.CompletedProcess[str]:
    # This machine has no GPU (CPU-only torch), so the count check expects 0.
    return run("--expect-gpus", "0", "--cpu-processes", "2", *FAST)


@pytest.mark.slow
def test_two_gloo_processes_pass(two_gloo: subprocess.CompletedProcess[str]) -> None:
    assert two_gloo.returncode == 0, two_gloo.stdout + two_gloo.stderr
    report = only_json(two_gloo)
    assert report["verdict"] == "pass" and report["failures"] == []
    assert report["world_size"] == 2 and report["backend"] == "gloo"
    assert [row["rank"] for row in report["matmul"]] == [0, 1]
    assert all(row["ok"] and row["rel_err"] < gpucheck.MATMUL_MAX_REL_ERR for row in report["matmul"])
    sizes = report["allreduce"]["sizes"]
    assert [row["bytes"] for row in sizes] == [64 * 1024, 1024 * 1024]
    assert all(row["correct"] for row in sizes)
    for row in sizes:  # 2 ranks: busbw = algbw * 2(2-1)/2 = algbw
        assert row["busbw_gbps"] == row["algbw_gbps"]
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / 1e9 / (row["time_us"] / 1e6), rel=1e-3)
    assert report["allreduce"]["busbw_at_largest_gbps"] == sizes[-1]["busbw_gbps"]


@pytest.mark.slow
def test_json_schema_is_stable(two_gloo: subprocess.CompletedProcess[str]) -> None:
    """Consumers (the Docker/Kubernetes check containers, make verify) read these keys: renaming one is a new
    schema version, not a silent change."""
    report = only_json(two_gloo)
    assert report["schema"] == "gpucheck/1"
    assert (
        tuple(report)
        == gpucheck.JSON_KEYS
        == (
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
    )
    assert (
        tuple(report["matmul"][0])
        == gpucheck.MATMUL_KEYS
        == (
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
    )
    assert tuple(report["allreduce"]) == ("ranks", "dtype", "warmup", "iters", "sizes", "busbw_at_largest_gbps")
    assert (
        tuple(report["allreduce"]["sizes"][0])
        == gpucheck.ALLREDUCE_KEYS
        == ("bytes", "time_us", "algbw_gbps", "busbw_gbps", "correct")
    )
    assert tuple(report["thresholds"]) == ("min_busbw_gbps", "min_tflops", "busbw_compared_at_bytes")


def test_wrong_gpu_count_exits_1_naming_what_was_seen(capsys: pytest.CaptureFixture[str]) -> None:
    # In-process: the count check comes first and starts no process (torch.cuda.device_count() is real here: 0).
    assert gpucheck.main(["--expect-gpus", "2", *FAST]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "fail" and report["visible_gpus"] == torch.cuda.device_count() == 0
    assert report["failures"] == ["expected 2 GPU(s), saw 0 visible (none; CPU-only torch build)"]
    assert report["matmul"] == [] and report["allreduce"] is None  # nothing else runs on the wrong devices


@pytest.mark.slow
def test_busbw_floor_fails_with_exit_1() -> None:
    result = run("--expect-gpus", "0", "--cpu-processes", "2", "--min-busbw", "100000", *FAST)
    assert result.returncode == 1
    report = only_json(result)
    assert report["thresholds"]["busbw_compared_at_bytes"] == 1024 * 1024  # the largest size decides
    assert len(report["failures"]) == 1
    assert (
        report["failures"][0].startswith("all-reduce busbw ")
        and "at 1048576 bytes < --min-busbw 100000" in report["failures"][0]
    )


@pytest.mark.slow
def test_one_process_skips_all_reduce_and_applies_tflops_floor() -> None:
    result = run("--expect-gpus", "0", "--cpu-processes", "1", "--min-busbw", "1", "--min-tflops", "100000", *FAST)
    assert result.returncode == 1
    report = only_json(result)
    assert report["allreduce"] is None
    assert report["notes"] == ["one process: no all-reduce, --min-busbw not applied"]
    assert report["failures"] == [
        f"rank 0 (cpu): {report['matmul'][0]['tflops']:.1f} TFLOP/s bf16 < --min-tflops 100000"
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "gloo"], "the following arguments are required: --expect-gpus"),
        (["--expect-gpus", "two"], "invalid int value: 'two'"),
        (["--expect-gpus", "-1"], "--expect-gpus must be >= 0"),
        (["--expect-gpus", "0"], "--expect-gpus 0 needs --backend gloo"),
        (["--expect-gpus", "1", "--cpu-processes", "2"], "--cpu-processes needs --backend gloo"),
        (["--expect-gpus", "1", "--backend", "rccl"], "invalid choice: 'rccl'"),
        (["--expect-gpus", "1", "--sizes", "6"], "a size must be a positive multiple of 4 bytes"),
        (["--expect-gpus", "1", "--sizes", "8X"], "is not a size"),
        (["--expect-gpus", "1", "--min-busbw", "0"], "'0' must be > 0"),
        (["--expect-gpus", "0", "--backend", "gloo", "--cpu-processes", "0"], "--cpu-processes must be >= 1"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        gpucheck.parse_args(args)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_bad_arguments_exit_2_from_main(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        gpucheck.main(["--expect-gpus", "1", "--sizes", "6"])
    assert exit_.value.code == 2 and capsys.readouterr().out == ""  # no JSON for a command that never ran


def test_sizes_use_nccl_tests_binary_suffixes() -> None:
    # nccl-tests README (https://github.com/NVIDIA/nccl-tests/blob/master/README.md, "Quick examples"):
    # `-b 8 -e 128M` is "scanning from 8 Bytes to 128MiB (Mebibytes)": the suffixes are binary.
    assert [gpucheck.parse_size(text) for text in ("8M", "1G", "64K", "4096", "1GiB")] == [
        8 * 2**20,
        2**30,
        64 * 2**10,
        4096,
        2**30,
    ]
    assert gpucheck.parse_args(["--expect-gpus", "1"]).sizes == [2**p for p in range(23, 31)]  # 8 MiB..1 GiB


@pytest.mark.parametrize(
    "size_bytes, ranks, time_us, algbw, busbw, source",
    [
        # NVIDIA/nccl-tests all_reduce_perf, 4 ranks (-t 4), 4218900 B, out-of-place and in-place columns:
        # https://gist.github.com/kwen2501/89c28b6d12045b45ccf7e33816af2713 (NCCL 2.18.5 run)
        (4218900, 4, 1011.4, 4.17, 6.26, "gist kwen2501 out-of-place"),
        (4218900, 4, 993.6, 4.25, 6.37, "gist kwen2501 in-place"),
        # all_reduce_perf -g 2 on two GPUs: busbw == algbw at n=2 (https://pastebin.com/ne4ipn6K, 8192 B line)
        (8192, 2, 8.69, 0.94, 0.94, "pastebin 2 GPUs"),
    ],
)
def test_busbw_matches_nccl_tests_output(
    size_bytes: int, ranks: int, time_us: float, algbw: float, busbw: float, source: str
) -> None:
    """Lines printed by all_reduce_perf itself, reproduced to the printed two decimals."""
    got_algbw = gpucheck.algorithm_bandwidth(size_bytes, time_us / 1e6)
    assert round(got_algbw, 2) == algbw, source
    assert round(gpucheck.bus_bandwidth(got_algbw, ranks), 2) == busbw, source


def test_busbw_inverts_the_ideal_time_of_performance_md() -> None:
    """https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md ("AllReduce"): with per-rank link
    bandwidth B, the best all-reduce of S bytes over n ranks takes t = (S*2*(n-1)) / (n*B); busbw must give B back.
    Worked example: S = 1 GiB, n = 8, B = 450 GB/s -> t = 2^30 * 14 / (8 * 450e9) s = 4.1756 ms, algbw 257.14."""
    size, ranks, link = 2**30, 8, 450.0
    seconds = size * 2 * (ranks - 1) / (ranks * link * 1e9)
    assert seconds == pytest.approx(4.1756e-3, rel=1e-4)
    algbw = gpucheck.algorithm_bandwidth(size, seconds)
    assert algbw == pytest.approx(257.14, abs=0.01)
    assert gpucheck.bus_bandwidth(algbw, ranks) == pytest.approx(link)
    assert gpucheck.bus_bandwidth(10.0, 1) == 0.0  # one rank moves nothing over a bus


def test_matmul_check_catches_a_corrupted_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bf16 product is checked, not just timed: one element with a flipped exponent bit fails it."""
    honest = gpucheck.matmul_check(torch.device("cpu"), 128, seed=0)
    assert honest["ok"] and honest["rel_err"] < gpucheck.MATMUL_MAX_REL_ERR

    real_matmul = torch.Tensor.__matmul__

    def flipped(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        product = real_matmul(a, b)
        if product.dtype == torch.bfloat16:  # the device product; the fp32 reference stays honest
            bits = product.view(torch.int16)
            bits[0, 5] ^= 1 << 13  # an exponent bit of one element (bf16: sign, 8 exponent, 7 mantissa bits)
        return product

    monkeypatch.setattr(torch.Tensor, "__matmul__", flipped)
    corrupted = gpucheck.matmul_check(torch.device("cpu"), 128, seed=0)
    assert not corrupted["ok"] and corrupted["max_err_over_rms"] > gpucheck.MATMUL_MAX_ERR_OVER_RMS


def test_timed_window_is_sized_from_steady_state_products(monkeypatch: pytest.MonkeyPatch) -> None:
    """One-time start costs land in the warm-up, not in the sizing: with a warm-up of slow first products (as a
    GPU's library load and clock ramp make them), sizing from the warm-up gave the committed H200 runs 138 and
    181 ms windows where one second was meant. The JSON records the window's floor and what sized it."""
    real_matmul = torch.Tensor.__matmul__
    calls = 0

    def slow_start(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        calls += 1
        if calls <= gpucheck.MATMUL_WARMUP:
            time.sleep(0.02)  # one-time costs: 0.2 s over the warm-up, more than the whole window below
        return real_matmul(a, b)

    monkeypatch.setattr(torch.Tensor, "__matmul__", slow_start)
    report = gpucheck.matmul_check(torch.device("cpu"), 256, seed=0, min_seconds=0.1)
    assert report["window_min_seconds"] == 0.1
    assert report["sized_from"]["iters"] == gpucheck.MATMUL_ITERS
    per_product = report["sized_from"]["seconds"] / gpucheck.MATMUL_ITERS
    # (the JSON rounds the probe's seconds to the microsecond)
    assert abs(report["iters"] - max(gpucheck.MATMUL_ITERS, math.ceil(0.1 / per_product))) <= 1
    assert report["iters"] > 0.1 / 0.02  # sized from the warm-up it would have been at most ~5 products
    # The window's own seconds are not asserted here: on a shared CPU the load changes between the probe and the
    # window (CI timed 15 ms after a slowed probe). The committed GPU runs are checked for it below.


def test_committed_gpu_runs_timed_their_window() -> None:
    """The committed H200 runs (bench/gpu/) timed at least the window they were sized for."""
    runs = sorted((REPO / "bench" / "gpu").glob("gpucheck-h200*.json"))
    assert runs
    for path in runs:
        for matmul in json.loads(path.read_text())["matmul"]:
            assert matmul["seconds"] >= matmul["window_min_seconds"] == gpucheck.MATMUL_MIN_GPU_SECONDS, path.name
