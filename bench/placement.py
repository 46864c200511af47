"""Placement timings for `python -m bench`: what domain/topology.py does for one host, worst cases included.

Issue 14's target: placing one host's partitions takes <= 100 ms, also for 64 logical GPUs (8 MI300X in CPX mode)
and for adversarial 16-GPU weight matrices (random weights, mixed sizes). Each placement runs in a fresh worker
(`python -m bench.worker place ...`) with a time limit, so a search that runs away is reported, not waited for.
Issue 26's: every placement of a seeded corpus of 200 random 16-GPU matrices with mixed partition sizes is optimal
(proven by the search; tests/test_topology.py checks it against independent exhaustive searches), p95 <= 100 ms;
the corpus runs in one worker (`python -m bench.worker corpus ...`), which also counts how many the budgeted branch
and bound used before missed.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from domain.topology import Topology, _BranchAndBound, _pair_costs, load_topology, place, place_partitioned

from . import fleet
from domain import placement_milp

TARGET_SECONDS = 0.1
LIMIT_SECONDS = 10
# The saved topology of prod's 8x MI300X hosts: the physical GPUs of the 64-logical-GPU case.
MI300X = "hosts/mi300x-8gpu.showtopo.txt"


@dataclass(frozen=True)
class Case:
    label: str
    kind: str  # "flat": place() on `gpus` GPUs; "cpx": 8 logical GPUs per physical GPU of the MI300X host
    gpus: int
    sizes: tuple[int, ...]
    seeds: tuple[int, ...] = (0,)  # random weight matrices (flat cases other than the MI300X file)


CASES = (
    Case("8x MI300X (saved topology), 4+4", "mi300x", 8, (4, 4)),
    Case("16 GPUs, random weights, 4+3+3+2+2+1+1", "flat", 16, (4, 3, 3, 2, 2, 1, 1), (0, 1, 2)),
    Case("16 GPUs, random weights, 3+3+3+3+2+2", "flat", 16, (3, 3, 3, 3, 2, 2), (0, 1, 2)),
    Case("16 GPUs, random weights, 8x2", "flat", 16, (2,) * 8, (0, 1, 2)),
    Case("64 logical GPUs (8x MI300X CPX), 8x8", "cpx", 64, (8,) * 8),
    Case("64 logical GPUs (8x MI300X CPX), 16+8+8+4+4+2+2+1+1", "cpx", 64, (16, 8, 8, 4, 4, 2, 2, 1, 1)),
)


def random_topology(gpus: int, seed: int) -> Topology:
    """A symmetric weight table of random link weights (10..100) over two NUMA nodes: no structure to exploit."""
    rng = random.Random(seed)
    weight = [[0] * gpus for _ in range(gpus)]
    for i in range(gpus):
        for j in range(i + 1, gpus):
            weight[i][j] = weight[j][i] = rng.randint(10, 100)
    return Topology(
        gpus=tuple(range(gpus)), numa=tuple(i * 2 // gpus for i in range(gpus)), weight=tuple(map(tuple, weight))
    )


CORPUS_SIZE, CORPUS_SEED, CORPUS_GPUS = 200, 26, 16
CORPUS_P95_SECONDS = 0.1


def mixed_sizes(rng: random.Random, gpus: int) -> list[int]:
    """Partition sizes of 1 to 8 GPUs, drawn until the GPUs run out (or, one time in five, earlier)."""
    sizes: list[int] = []
    while sum(sizes) < gpus:
        sizes.append(rng.randint(1, min(8, gpus - sum(sizes))))
        if rng.random() < 0.2:
            break
    return sizes


def corpus(count: int, seed: int, gpus: tuple[int, int]) -> list[tuple[Topology, list[int]]]:
    """`count` random weight matrices (`random_topology`) of gpus[0]..gpus[1] GPUs with mixed partition sizes."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        n = rng.randint(*gpus)
        cases.append((random_topology(n, rng.randrange(2**32)), mixed_sizes(rng, n)))
    return cases


def cost(topology: Topology, sets: list[tuple[int, ...]]) -> tuple[int, int]:
    """(total link weight, NUMA spread) of a placement: what `place` minimises, in that order."""
    pairs = _pair_costs(topology)
    spread = sum(max(len({topology.numa[g] for g in s} - {None}) - 1, 0) for s in sets)
    return sum(pairs[a][b] for s in sets for a, b in itertools.combinations(s, 2)), spread


def run_corpus(count: int = CORPUS_SIZE, seed: int = CORPUS_SEED, gpus: int = CORPUS_GPUS) -> dict[str, Any]:
    """Every corpus case placed and timed (wall and CPU seconds), with the answer the budgeted branch and bound
    (the search before issue 26, which stopped after 1,200 nodes) gives, to show what exactness changed."""
    rows = []
    for topology, sizes in corpus(count, seed, (gpus, gpus)):
        wall, cpu = time.perf_counter(), time.process_time()
        sets = place(topology, sizes)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        budgeted = _BranchAndBound(_pair_costs(topology), list(topology.numa), sizes).solve()
        rows.append(
            {
                "sizes": sizes,
                "wall": wall,
                "cpu": cpu,
                "optimal": sets.optimal,
                "cost": cost(topology, sets),
                "budgeted": cost(topology, [tuple(topology.gpus[g] for g in s) for s in budgeted]),
            }
        )
    return {"count": count, "seed": seed, "gpus": gpus, "rows": rows}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


_STATS: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median,
    "p95": lambda values: _quantile(values, 0.95),
    "max": max,
}


def corpus_summary(result: dict[str, Any]) -> dict[str, Any]:
    rows = result["rows"]
    missed = [r for r in rows if r["budgeted"] > r["cost"]]
    gaps = [r["budgeted"][0] / r["cost"][0] - 1 for r in missed if r["cost"][0]]
    return {
        "cases": len(rows),
        "optimal": sum(r["optimal"] for r in rows),
        "budgeted_missed": len(missed),
        "budgeted_gap_median": statistics.median(gaps) if gaps else 0.0,
        "budgeted_gap_max": max(gaps, default=0.0),
        **{f"{kind}_{name}": fn([r[kind] for r in rows]) for kind in ("wall", "cpu") for name, fn in _STATS.items()},
    }


def corpus_table(summary: dict[str, Any], seed: int) -> str:
    ms = lambda seconds: f"{seconds * 1e3:.1f} ms"  # noqa: E731
    return "\n".join(
        [
            f"Corpus: {summary['cases']} random {CORPUS_GPUS}-GPU matrices, mixed sizes (seed {seed}): "
            f"{summary['optimal']}/{summary['cases']} proven optimal; the budgeted search of before missed "
            f"{summary['budgeted_missed']} (weight gap median {summary['budgeted_gap_median']:.1%}, "
            f"max {summary['budgeted_gap_max']:.1%}).",
            "",
            "| corpus placement | median | p95 | max |",
            "|---|---:|---:|---:|",
            *(
                f"| {label} | {ms(summary[kind + '_median'])} | {ms(summary[kind + '_p95'])} | "
                f"{ms(summary[kind + '_max'])} |"
                for kind, label in (("wall", "wall clock"), ("cpu", "CPU time of the process"))
            ),
        ]
    )


def measure_corpus(count: int = CORPUS_SIZE, seed: int = CORPUS_SEED, log=print) -> dict[str, Any]:
    """The corpus in one fresh worker; its summary (corpus_summary) with the seed."""
    command = [sys.executable, "-m", "bench.worker", "corpus", str(count), str(seed)]
    result = subprocess.run(command, cwd=fleet.ROOT, capture_output=True, text=True, check=True)
    summary = {**corpus_summary(json.loads(result.stdout)), "seed": seed}
    log(f"  placement corpus: {corpus_target(summary)[2]}")
    return summary


def corpus_target(summary: dict[str, Any]) -> tuple[str, bool, str]:
    """Issue 26's target: every case optimal, p95 <= 100 ms. CPU time judges it: the wall clock of a shared
    machine counts the other processes' turns (both are printed)."""
    met = summary["optimal"] == summary["cases"] and summary["cpu_p95"] <= CORPUS_P95_SECONDS
    return (
        f"placement corpus: all optimal, p95 <= {CORPUS_P95_SECONDS * 1e3:.0f} ms (CPU time)",
        met,
        f"{summary['optimal']}/{summary['cases']} optimal, p95 {summary['cpu_p95'] * 1e3:.1f} ms CPU "
        f"({summary['wall_p95'] * 1e3:.1f} ms wall)",
    )


# Issue 38: flat hosts of 32 and 64 GPUs (a host of 8 or 16 GPUs whose partitions are listed as GPUs of their
# own), where placement runs the branch and bound, then the relaxation and the MILP (domain/placement_milp.py) for a
# proven gap.
LARGE_CORPUS_SIZE, LARGE_CORPUS_SEED, LARGE_GPUS = 40, 38, (32, 64)
LARGE_GAP_TARGET, LARGE_SECONDS_TARGET = 0.02, 1.0


def structured_topology(gpus: int, seed: int) -> Topology:
    """A realistic flat host of `gpus` logical GPUs: physical GPUs of 2, 4 or 8 partitions each (partitions of one
    GPU interchangeable, 0, 5 or 10 apart), XGMI (15) between the GPUs of a hive, hives of all or half the GPUs
    joined over PCIe (40 on one socket, 52 across), the physical GPUs split over 2 or 4 NUMA nodes."""
    rng = random.Random(seed)
    per = rng.choice([p for p in (2, 4, 8) if gpus % p == 0 and gpus // p <= 16])
    physical = gpus // per
    hive = rng.choice([physical, max(1, physical // 2)])
    nodes = rng.choice([2, 4])
    node = [p * nodes // physical for p in range(physical)]
    inside = [rng.choice([0, 5, 10]) for _ in range(physical)]

    def link(p: int, q: int) -> int:
        if p == q:
            return inside[p]
        if p // hive == q // hive:
            return 15
        return 40 if node[p] == node[q] else 52

    weight = tuple(tuple(0 if g == h else link(g // per, h // per) for h in range(gpus)) for g in range(gpus))
    return Topology(gpus=tuple(range(gpus)), numa=tuple(node[g // per] for g in range(gpus)), weight=weight)


def large_corpus(count: int = LARGE_CORPUS_SIZE, seed: int = LARGE_CORPUS_SEED) -> list[tuple[Topology, list[int]]]:
    """`count` structured hosts of each size in LARGE_GPUS, with mixed partition sizes."""
    rng = random.Random(seed)
    return [
        (structured_topology(n, rng.randrange(2**32)), mixed_sizes(rng, n)) for n in LARGE_GPUS for _ in range(count)
    ]


def run_large_corpus(count: int = LARGE_CORPUS_SIZE, seed: int = LARGE_CORPUS_SEED) -> dict[str, Any]:
    """Every large-corpus case placed and timed, with its proven gap and whether the MILP was needed. SciPy is
    imported first and timed apart: the first placement of a process that needs the solver pays its import inside
    the placement's deadline (docs/benchmarks.md), every later one does not."""
    started = time.perf_counter()
    import scipy.optimize  # noqa: F401  (timed here, not in the first case that needs it)

    imported = time.perf_counter() - started
    rows = []
    for topology, sizes in large_corpus(count, seed):
        wall, cpu = time.perf_counter(), time.process_time()
        sets = place(topology, sizes)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        rows.append(
            {
                "gpus": len(topology.gpus),
                "sizes": sizes,
                "wall": wall,
                "cpu": cpu,
                "gap": sets.gap,
                "optimal": sets.optimal,
                "weight": sets.weight,
                "bound": sets.bound,
            }
        )
    return {"count": count, "seed": seed, "rows": rows, "scipy_import": imported}


def large_corpus_summary(result: dict[str, Any]) -> dict[str, Any]:
    by_size: dict[str, Any] = {}
    for n in LARGE_GPUS:
        rows = [r for r in result["rows"] if r["gpus"] == n]
        gaps = [r["gap"] for r in rows]
        by_size[str(n)] = {
            "cases": len(rows),
            "optimal": sum(r["optimal"] for r in rows),
            "within_target": sum(g <= LARGE_GAP_TARGET for g in gaps),
            "gap_median": statistics.median(gaps),
            "gap_p95": _quantile(gaps, 0.95),
            "gap_max": max(gaps),
            **{
                f"{kind}_{name}": fn([r[kind] for r in rows]) for kind in ("wall", "cpu") for name, fn in _STATS.items()
            },
        }
    return by_size


def large_corpus_table(summary: dict[str, Any]) -> str:
    ms = lambda seconds: f"{seconds * 1e3:.0f} ms"  # noqa: E731
    lines = [
        "| flat GPUs | cases | proven optimal | gap <= 2 % | gap median / p95 / max | wall median / p95 / max |"
        " CPU p95 / max |",
        "|---:|---:|---:|---:|---|---|---|",
    ]
    for n, s in summary.items():
        lines.append(
            f"| {n} | {s['cases']} | {s['optimal']} | {s['within_target']} | {s['gap_median']:.1%} / "
            f"{s['gap_p95']:.1%} / {s['gap_max']:.1%} | {ms(s['wall_median'])} / {ms(s['wall_p95'])} / "
            f"{ms(s['wall_max'])} | {ms(s['cpu_p95'])} / {ms(s['cpu_max'])} |"
        )
    return "\n".join(lines)


def run_solver_against_exact(count: int = 100, seed: int = 38) -> dict[str, Any]:
    """The MILP (domain/placement_milp.py, given 10 s) against the exact subset search on `count` cases of 6 to 16
    GPUs (random and structured weights, mixed sizes): the same optimum (weight, spread) wherever the MILP proves
    one, and its bound never above the optimum."""

    rng = random.Random(seed)
    rows = []
    for index in range(count):
        n = rng.randint(6, 16)
        make = structured_topology if index % 2 and n % 2 == 0 else random_topology
        topology = make(n, rng.randrange(2**32))
        sizes = mixed_sizes(rng, n)
        exact = place(topology, sizes)
        started = time.perf_counter()
        solved = placement_milp.solve(_pair_costs(topology), list(topology.numa), sizes, time_limit=10)
        seconds = time.perf_counter() - started
        rows.append(
            {
                "gpus": n,
                "seconds": seconds,
                "proved": solved.optimal,
                "same": solved.sets is not None and cost(topology, solved.sets) == cost(topology, exact),
                "bound_ok": solved.weight_bound <= exact.weight,
            }
        )
    return {
        "cases": count,
        "proved": sum(r["proved"] for r in rows),
        "same": sum(r["same"] for r in rows),
        "bound_ok": sum(r["bound_ok"] for r in rows),
        "seconds_median": statistics.median(r["seconds"] for r in rows),
        "seconds_max": max(r["seconds"] for r in rows),
    }


def cpx_topology(per_gpu: int = 8) -> dict[str, Any]:
    """The MI300X host's topology seen through `per_gpu` logical GPUs per physical GPU, as plain data: a pair of
    logical GPUs costs what their physical GPUs' link costs (0 inside one physical GPU)."""
    physical = load_topology(fleet.ROOT / MI300X)
    n = len(physical.gpus) * per_gpu
    weight = physical.weight or [[0] * len(physical.gpus)] * len(physical.gpus)
    return {
        "gpus": tuple(range(n)),
        "numa": tuple(physical.numa[g // per_gpu] for g in range(n)),
        "weight": tuple(
            tuple(0 if g // per_gpu == h // per_gpu else weight[g // per_gpu][h // per_gpu] for h in range(n))
            for g in range(n)
        ),
    }


def place_once(kind: str, gpus: int, sizes: tuple[int, ...], seed: int) -> list[tuple[int, ...]]:
    """One placement of a case (what the worker times)."""
    if kind == "mi300x":
        return place(load_topology(fleet.ROOT / MI300X), sizes)
    if kind == "flat":
        return place(random_topology(gpus, seed), sizes)
    topology = Topology(**cpx_topology())
    return place_partitioned(topology, topology.gpus, sizes, 8)


def _run(case: Case, seed: int) -> float | str:
    """Seconds of one placement in a fresh worker, or why there is no number (over the limit, failed)."""
    command = [
        sys.executable,
        "-m",
        "bench.worker",
        "place",
        case.kind,
        str(case.gpus),
        ",".join(map(str, case.sizes)),
        str(seed),
    ]
    try:
        result = subprocess.run(command, cwd=fleet.ROOT, capture_output=True, text=True, timeout=LIMIT_SECONDS + 5)
    except subprocess.TimeoutExpired:
        return f"> {LIMIT_SECONDS} s"
    if result.returncode != 0:
        return "failed: " + (result.stderr.strip().splitlines() or ["?"])[-1]
    seconds = json.loads(result.stdout)["seconds"]
    return seconds if seconds <= LIMIT_SECONDS else f"> {LIMIT_SECONDS} s"


def measure(cases: tuple[Case, ...] = CASES, log=print) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        runs = [_run(case, seed) for seed in case.seeds]
        rows.append({"case": case.label, "runs": runs})
        log(f"  placement {case.label}: {', '.join(_shown(r) for r in runs)}")
    return rows


def _shown(run: float | str) -> str:
    return f"{run * 1e3:.1f} ms" if isinstance(run, float) else run


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| placement (one host) | runs | median | worst |", "|---|---:|---:|---:|"]
    for row in rows:
        timed = [r for r in row["runs"] if isinstance(r, float)]
        failed = [r for r in row["runs"] if not isinstance(r, float)]
        median = _shown(statistics.median(timed)) if timed and not failed else "–"
        worst = failed[0] if failed else _shown(max(timed))
        lines.append(f"| {row['case']} | {len(row['runs'])} | {median} | {worst} |")
    return "\n".join(lines)


def target(rows: list[dict[str, Any]]) -> tuple[str, bool | None, str]:
    """Issue 14's target over every case: (target, met (None: nothing run), the numbers). A run over the time
    limit or one that failed misses it."""
    label = f"placement of one host <= {TARGET_SECONDS * 1e3:.0f} ms"
    runs = [(row["case"], run) for row in rows for run in row["runs"]]
    timed = [run for _, run in runs if isinstance(run, float)]
    missed = sorted({case for case, run in runs if not isinstance(run, float) or run > TARGET_SECONDS})
    if not runs:
        return label, None, "nothing run"
    numbers = (f"worst timed {_shown(max(timed))}" if timed else "nothing timed") + (
        f"; missed by: {', '.join(missed)}" if missed else ""
    )
    return label, not missed, numbers
