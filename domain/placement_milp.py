"""Placement beyond `EXACT_GPUS` GPUs as a mixed-integer linear program, solved by HiGHS through
`scipy.optimize.milp`: a proven lower bound on the placement's cost, and the optimum itself when HiGHS closes the
gap within its time limit.

The model (sets of one GPU cost nothing and only take room, so they are left out): x[g, k] = 1 when GPU g is in
set k; each set k takes its size s_k, each GPU at most one set. y[g, h, k] stands for "g and h both in set k":
y <= x[g, k], y <= x[h, k], and each member of set k has exactly s_k - 1 partners in it,
sum_h y[g, h, k] = (s_k - 1) x[g, k] (the reformulation-linearization constraint, which makes the linear
relaxation at least as strong as each GPU's cheapest links). u[v, k] >= x[g, k] for a GPU g on NUMA node v counts
the nodes set k spans. Minimised: scale * weight + nodes spanned, the rule's first two criteria in their order
(`scale` exceeds any sum of spans). Interchangeable GPUs (same NUMA node, same link to every other GPU, as the
partitions of one physical GPU are) are ordered: the lower one sits in a set of lower index, or the higher one is
unused; swapping them never changes the cost, so this removes copies of the same solution, not solutions.

HiGHS is deterministic for a given model and version (its branch and bound is serial); only its time limit, a
clock, depends on the machine. So the caller takes HiGHS's sets only where it proved them optimal and strictly
better than the search's, and otherwise only its bound: a faster or idler machine may prove a smaller gap, and may
find the optimum the search missed where a busier one does not. A prod placement is pinned by the lock
(`make lock`), which records the gap it was proven to, so no later run moves it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

# HiGHS's limit per placement. Real hosts' models close well within it (docs/benchmarks.md).
TIME_LIMIT_SECONDS = 1.0


class MilpResult(NamedTuple):
    sets: list[tuple[int, ...]] | None  # the optimum (sets of size > 1, in the order of `sizes` without the 1s)
    weight_bound: int  # no placement of these sizes weighs less
    optimal: bool


def solve(
    cost: list[list[int]],
    numa: list[int | None],
    sizes: list[int],
    time_limit: float | None = None,
) -> MilpResult:
    # Here: SciPy's MILP (1.2 s to import, measured) only when a placement needs the solver.
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    n = len(cost)
    sets = [s for s in sizes if s > 1]
    k_count = len(sets)
    if not k_count:
        return MilpResult([], 0, True)
    nodes = sorted({v for v in numa if v is not None})
    scale = n + 1  # a set spans at most min(size, nodes) nodes: all sets together fewer than n + 1
    pairs = [(g, h) for g in range(n) for h in range(g + 1, n)]
    pair_index = {pair: i for i, pair in enumerate(pairs)}
    nx, ny = n * k_count, len(pairs) * k_count

    def x(g: int, k: int) -> int:
        return g * k_count + k

    def y(g: int, h: int, k: int) -> int:
        return nx + pair_index[min(g, h), max(g, h)] * k_count + k

    def u(v: int, k: int) -> int:
        return nx + ny + v * k_count + k

    variables = nx + ny + len(nodes) * k_count
    objective = np.zeros(variables)
    for (g, h), i in pair_index.items():
        objective[nx + i * k_count : nx + (i + 1) * k_count] = cost[g][h] * scale
    objective[nx + ny :] = 1

    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    lower: list[float] = []
    upper: list[float] = []

    def constrain(terms: Sequence[tuple[int, float]], low: float, high: float) -> None:
        row = len(lower)
        for col, value in terms:
            rows.append(row)
            cols.append(col)
            values.append(value)
        lower.append(low)
        upper.append(high)

    for k, size in enumerate(sets):
        constrain([(x(g, k), 1) for g in range(n)], size, size)
    for g in range(n):
        constrain([(x(g, k), 1) for k in range(k_count)], 0, 1)
    for k, size in enumerate(sets):
        for g in range(n):
            constrain([(y(g, h, k), 1) for h in range(n) if h != g] + [(x(g, k), 1 - size)], 0, 0)
            for h in range(g + 1, n):
                constrain([(y(g, h, k), 1), (x(g, k), -1)], -math.inf, 0)
                constrain([(y(g, h, k), 1), (x(h, k), -1)], -math.inf, 0)
            node = numa[g]
            if node is not None:
                constrain([(u(nodes.index(node), k), 1), (x(g, k), -1)], 0, math.inf)
    for h in range(n):
        twin = next((g for g in range(h) if interchangeable(cost, numa, g, h)), None)
        if twin is not None:
            # index(g) <= index(h), where a GPU's index is its set's, or k_count when unused.
            constrain(
                [(x(twin, k), k - k_count) for k in range(k_count)] + [(x(h, k), k_count - k) for k in range(k_count)],
                0,
                math.inf,
            )

    matrix = coo_array((values, (rows, cols)), shape=(len(lower), variables)).tocsr()
    integrality = np.zeros(variables)
    integrality[:nx] = 1
    result = milp(
        objective,
        constraints=LinearConstraint(matrix, lower, upper),
        integrality=integrality,
        bounds=Bounds(0, 1),
        # mip_rel_gap 0: "optimal" means proven optimal, not within HiGHS's default 0.01 %.
        options={
            "time_limit": TIME_LIMIT_SECONDS if time_limit is None else time_limit,
            "mip_rel_gap": 0.0,
            "presolve": True,
        },
    )
    # The key's bound B holds for weight * scale + spans with spans < scale, so weight >= floor(B / scale).
    # A small tolerance keeps the solver's floating-point bound from rounding up past a whole number.
    dual = getattr(result, "mip_dual_bound", None)
    weight_bound = max(0, math.floor((dual - 1e-6) / scale)) if dual is not None and math.isfinite(dual) else 0
    if result.status != 0 or result.x is None:
        return MilpResult(None, weight_bound, False)
    chosen = result.x[:nx].reshape(n, k_count)
    found = [tuple(g for g in range(n) if chosen[g, k] > 0.5) for k in range(k_count)]
    weight = sum(cost[a][b] for members in found for a in members for b in members if a < b)
    return MilpResult(found, weight, True)


def interchangeable(cost: list[list[int]], numa: list[int | None], g: int, h: int) -> bool:
    """Same NUMA node and the same link cost to every other GPU: swapping g and h never changes a placement's cost."""
    return numa[g] == numa[h] and all(cost[g][z] == cost[h][z] for z in range(len(cost)) if z not in (g, h))
