"""Placement beyond `EXACT_GPUS` GPUs: a large-neighbourhood search that lightens the lightest placement the branch
and bound, the relaxation and the MILP (domain/placement_milp.py) found, within what is left of the deadline.

For each pair of classes of interchangeable GPUs (those with free GPUs first), the sets with a GPU in either are
freed and placed again exactly by the class MILP (`placement_milp.solve`) on their GPUs and the free ones, the other
sets held (no pair crosses sets, so only the freed sets' weight changes), while that lightens the placement. Each
neighbourhood's MILP proves its optimum in milliseconds. The subset search of domain/topology.py, exact up to 16
GPUs, was measured first as the neighbourhoods' solver: 10-70 ms a neighbourhood, and none it can take (16 GPUs)
reaches corpus case 43's optimum, which moves a 7-set, a 6-set and a 3-set into the 2 free GPUs (18 GPUs).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from domain import placement_milp

# What the MILP leaves of the deadline to `improved` (`left_to_search`): 0.15 s takes corpus case 43 from the
# MILP's 990 to 980.
SEARCH_SECONDS = 0.15
BOTH_SECONDS = 0.45
CPU_SHARE = 0.9
# `improved`'s neighbourhoods: at most this many GPUs (its MILPs prove their optimum in milliseconds), and what
# HiGHS is given less than the time left, to stop and hand back on models of that size.
_NEIGHBOURHOOD_GPUS = 24
_NEIGHBOURHOOD_STOPPING = 0.02
# Classes beyond which no neighbourhood is tried: a random 64-GPU table (64 classes of one, 2,016 pairs of classes)
# was lightened by none of them in the deadline, which they took whole (median 96 -> 731 ms, 20 tables measured).
_CLASSES = 32


def left_to_search(left: float, cpu: float) -> float:
    """What the MILP leaves of the `left` seconds to `improved`: SEARCH_SECONDS where at least BOTH_SECONDS are left
    and the call has had a core so far (`cpu`: its CPU time over its wall clock, at least CPU_SHARE); else nothing.
    On a loaded machine the MILP needs all of it: beside a full `make test` (two thirds of a core) it then found
    case 43's 990, where with 0.15 s less it did not and the search got the relaxation's 1,110 only to 1,050."""
    return SEARCH_SECONDS if left >= BOTH_SECONDS and cpu >= CPU_SHARE else 0.0


def improved(
    cost: list[list[int]], numa: list[int | None], sets: list[tuple[int, ...]], deadline: float = math.inf
) -> list[tuple[int, ...]]:
    """`sets` (GPU positions, sizes > 1) made lighter until no neighbourhood lightens them or the deadline: for two
    classes c and d, the sets with a GPU in either are freed and placed again, exactly, on their GPUs and the free
    GPUs (those of the classes they touch where more than _NEIGHBOURHOOD_GPUS); taken where (weight, NUMA nodes
    spanned) is lower. Pairs of classes with free GPUs first: on a host filled but for a few GPUs a lighter
    placement moves sets into them (corpus case 43: from the MILP's 990 to its optimum 980 in 5 neighbourhoods,
    0.13 s). A neighbourhood is tried once per content; none beyond _CLASSES classes."""
    groups = placement_milp.classes(cost, numa)
    if len(groups) > _CLASSES:
        return list(sets)
    of = {g: c for c, members in enumerate(groups) for g in members}
    sets = [tuple(s) for s in sets]

    def key(placed: Sequence[Sequence[int]]) -> tuple[int, int]:
        weight = sum(cost[a][b] for members in placed for i, a in enumerate(members) for b in members[i + 1 :])
        return weight, sum(len({numa[g] for g in members} - {None}) for members in placed)

    tried: set[tuple[tuple[int, ...], ...]] = set()
    lighter = True
    while lighter:
        lighter = False
        used = {g for members in sets for g in members}
        spare = [g for g in range(len(cost)) if g not in used]
        with_spare = {of[g] for g in spare}
        pairs = sorted(
            ((c, d) for c in range(len(groups)) for d in range(c + 1, len(groups))),
            key=lambda pair: not with_spare & set(pair),
        )
        for pair in pairs:
            freed = [k for k, members in enumerate(sets) if any(of[g] in pair for g in members)]
            gpus = sorted({g for k in freed for g in sets[k]} | set(spare))
            if len(gpus) > _NEIGHBOURHOOD_GPUS:  # many GPUs free: those of the classes the freed sets touch
                touched = set(pair) | {of[g] for k in freed for g in sets[k]}
                gpus = sorted({g for k in freed for g in sets[k]} | {g for g in spare if of[g] in touched})
            content = tuple(sets[k] for k in freed) + (tuple(gpus),)
            if not freed or len(gpus) > _NEIGHBOURHOOD_GPUS or content in tried:
                continue
            left = deadline - time.perf_counter()
            if left <= _NEIGHBOURHOOD_STOPPING:
                return sets
            tried.add(content)
            solved = placement_milp.solve(
                [[cost[a][b] for b in gpus] for a in gpus],
                [numa[a] for a in gpus],
                [len(sets[k]) for k in freed],
                time_limit=left,
                stopping=_NEIGHBOURHOOD_STOPPING,
            )
            if solved.sets is None:
                continue
            placed = [tuple(gpus[i] for i in members) for members in solved.sets]
            if key(placed) < key([sets[k] for k in freed]):
                for k, members in zip(freed, placed):
                    sets[k] = members
                lighter = True
                break
    return sets
