"""Placement beyond `EXACT_GPUS` GPUs: a proven lower bound on a placement's weight, and better placements than the
budgeted search finds, through HiGHS (`scipy.optimize.linprog` and `scipy.optimize.milp`).

Both models count GPUs per class of interchangeable GPUs (`classes`: same NUMA node, same link to every other GPU,
as the partitions of one physical GPU are; a class's GPUs cost the same to each other) instead of placing each GPU:
a set of size s puts n_C of its GPUs in class C, pays c_C per pair inside C and w_CD per pair across C and D. Which
GPUs of a class it takes never changes the cost, so a flat host of 64 partitions of 8 physical GPUs is 8 classes,
not 64 GPUs whose orderings the solver would have to tell apart. Sets of one GPU cost nothing and only take room.

`relaxation` (issue 38): every pair across two classes costs at least theta, the cheapest link between two classes,
so a set weighs at least theta * T(s) + sum_C (c_C - theta) * T(n_C), T(n) = n(n - 1)/2. Over patterns (a class's
counts per set, at most its size in all), each class takes one pattern and each set its size; each set's pairs
inside classes are at most what the classes' sizes allow it (`_most_pairs`). The linear relaxation of that
(Dantzig-Wolfe) is solved by column generation, each class's best pattern by a knapsack over the sets; its
Lagrangian bound (the restricted master's value plus each class's most negative reduced cost) is a lower bound at
every round. The generated patterns as an integer program (a node limit, not a clock), then steps by the true links
while they lighten it (`_exchanged`), give a placement: counts, so the same on every machine, unless the placement's
deadline (`place`: TIME_LIMIT_SECONDS of wall clock) cuts a step short, which a machine too loaded to finish them in
time meets (they take well under half of it on the benchmark's hosts).

`solve`: the exact model as a MILP, for whatever gap the relaxation leaves, within its time limit (its construction
counted; not built beyond _MILP_PAIRS, where it could not pay off within a second): unary counts
z[C, k, j] = 1 when set k has more than j GPUs in C; P[C, D, k] = n_C n_D by P >= sum_j q_j with
q_j >= n_D - |D| (1 - z[C, k, j]) and, for each class, sum_D P[C, D, k] = n_C (s_k - n_C) = s_k n_C - sum_j (2j + 1)
z[C, k, j] (which, with the lower bounds, makes every P exact); the same pair caps per set and per group of classes
joined by links up to each weight; u[v, k] >= z[C, k, 0] counts the NUMA nodes set k spans. Minimised:
scale * weight + nodes spanned, the rule's first two criteria in their order (`scale` exceeds any sum of spans).
Identical classes are ordered by their counts of the first sets (swapping them never changes the cost).
Where a link depends only on the level where two classes first meet (`_hierarchy`: XGMI inside a hive, PCIe between
hives, as on real hosts), a pair costs theta at the top plus, for each level whose block holds it, that level's
theta less the next one's, plus in its class its own link less theta[1]: the weight is linear in T of the unary
counts per class and per block (y[B, k, j], sum_j y = sum_{C in B} n_C), exact without a variable per pair of
classes (a tenth of the variables on the benchmark's 64-GPU hosts, whose optimum it often proves at the root).

HiGHS is deterministic for a given model and version (its branch and bound is serial); only the MILP's time limit,
a clock, depends on the machine. The caller hands it the bound proven so far as a cut (`weight_bound`) and takes its
sets where they are strictly better, optimal where it proved them so: a faster or idler machine may find a lighter
placement or prove a smaller gap. A prod placement is pinned
by the lock (`make lock`), which records the gap it was proven to, so no later run moves it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

# The wall clock of a whole placement beyond EXACT_GPUS, from the start of `place`: search, relaxation, the MILP's
# construction and its solve each stop at this deadline (each keeps the bound it proved so far), so that a placement
# returns within a second also on a loaded machine; HiGHS is given what is left less _STOPPING, the time it takes to
# stop after its limit and hand back (up to 0.2 s measured on the largest models it gets, under load).
TIME_LIMIT_SECONDS = 0.75
_STOPPING = 0.1
# The MILP is not built when it would have more pair variables (classes^2 x sets / 2) than this: a random 64-GPU
# table (64 classes of one) with 8 sets makes 33,000 variables, 0.16 s to build and 0.2 s past its limit for HiGHS
# to stop, and proves nothing the relaxation did not within a second.
_MILP_PAIRS = 4000
# Branch-and-bound nodes for the integer program over generated patterns: a count, so every machine finds the same.
_PATTERN_NODES = 2000
# Column generation's rounds at most (its Lagrangian bound holds after any round; real hosts need a few dozen).
_PRICING_ROUNDS = 200
# Distinct links between classes beyond which a table is not looked at as levels (`_hierarchy`): real hosts have
# XGMI and one or two PCIe weights.
_LEVELS = 3
# The exchange's steps at most, and the size of its table of trades (classes^2 x sets^2) beyond which it only moves.
_EXCHANGE_STEPS = 100
_TRADE_CELLS = 250_000


class MilpResult(NamedTuple):
    sets: list[tuple[int, ...]] | None  # the optimum (sets of size > 1, in the order of `sizes` without the 1s)
    weight_bound: int  # no placement of these sizes weighs less
    optimal: bool


class Relaxation(NamedTuple):
    weight_bound: int  # no placement of these sizes weighs less
    sets: list[tuple[int, ...]] | None  # a placement of the sets of size > 1 (in order), or None


def interchangeable(cost: list[list[int]], numa: list[int | None], g: int, h: int) -> bool:
    """Same NUMA node and the same link cost to every other GPU: swapping g and h never changes a placement's cost."""
    return numa[g] == numa[h] and all(cost[g][z] == cost[h][z] for z in range(len(cost)) if z not in (g, h))


def classes(cost: list[list[int]], numa: list[int | None]) -> list[list[int]]:
    """The GPUs grouped into classes of interchangeable GPUs, each in ascending order. `interchangeable` is
    transitive on a symmetric cost table, so comparing with a class's first GPU is enough."""
    found: list[list[int]] = []
    for g in range(len(cost)):
        joined = next((members for members in found if interchangeable(cost, numa, members[0], g)), None)
        if joined is None:
            found.append([g])
        else:
            joined.append(g)
    return found


def _pairs(n: int) -> int:
    return n * (n - 1) // 2


def _most_pairs(size: int, room: Sequence[int]) -> int:
    """The most pairs a set of `size` GPUs can have inside blocks of these sizes: the largest blocks filled first
    (T is convex, so concentrating never loses)."""
    most = 0
    for block in sorted(room, reverse=True):
        taken = min(block, size)
        most, size = most + _pairs(taken), size - taken
    return most


def _members(groups: list[list[int]], counts: Sequence[Sequence[int]], k_count: int) -> list[tuple[int, ...]]:
    """Each set's GPUs: counts[C][k] GPUs of class C for set k, the class's GPUs handed out in order."""
    found: list[list[int]] = [[] for _ in range(k_count)]
    for members, per_set in zip(groups, counts):
        taken = 0
        for k, count in enumerate(per_set):
            found[k] += members[taken : taken + count]
            taken += count
    return [tuple(sorted(s)) for s in found]


def relaxation(
    cost: list[list[int]], numa: list[int | None], sizes: list[int], deadline: float = math.inf
) -> Relaxation:
    # Here: SciPy (1.2 s to import, measured) only when a placement needs the solver.
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp

    sets = [s for s in sizes if s > 1]
    k_count = len(sets)
    if not k_count:
        return Relaxation(0, [])
    groups = classes(cost, numa)
    room = [len(members) for members in groups]
    inside = [cost[m[0]][m[1]] if len(m) > 1 else 0 for m in groups]
    theta = min((cost[a[0]][b[0]] for i, a in enumerate(groups) for b in groups[i + 1 :]), default=0)
    gain = [theta - c for c in inside]  # what a pair inside class C saves against theta
    floor = theta * sum(_pairs(s) for s in sets)
    caps = [_most_pairs(s, room) for s in sets]

    # Start from the empty pattern of each class and a first fit of the sets, largest first.
    free, fit = list(room), [[0] * k_count for _ in groups]
    for k in sorted(range(k_count), key=lambda k: -sets[k]):
        left = sets[k]
        for c in sorted(range(len(groups)), key=lambda c: -free[c]):
            taken = min(left, free[c])
            fit[c][k], free[c], left = fit[c][k] + taken, free[c] - taken, left - taken
    columns = [(c, (0,) * k_count) for c in range(len(groups))] + [(c, tuple(f)) for c, f in enumerate(fit)]

    def master() -> tuple[Any, Any, Any]:
        objective = np.array([-gain[c] * sum(map(_pairs, counts)) for c, counts in columns], dtype=float)
        equal = np.zeros((len(groups) + k_count, len(columns)))
        pairs = np.zeros((k_count, len(columns)))
        for i, (c, counts) in enumerate(columns):
            equal[c, i] = 1
            for k, count in enumerate(counts):
                equal[len(groups) + k, i], pairs[k, i] = count, _pairs(count)
        return objective, equal, pairs

    best = -math.inf
    for _ in range(_PRICING_ROUNDS):
        if best > -math.inf and time.perf_counter() > deadline:
            break  # the Lagrangian bound of the rounds done holds
        objective, equal, pairs = master()
        lp = linprog(
            objective,
            A_eq=equal,
            b_eq=np.array([1] * len(groups) + sets, dtype=float),
            A_ub=pairs,
            b_ub=np.array(caps, dtype=float),
            bounds=(0, None),
            method="highs",
        )
        if lp.status != 0:
            return Relaxation(0, None)
        convexity, per_set, per_pairs = (
            lp.eqlin.marginals[: len(groups)],
            lp.eqlin.marginals[len(groups) :],
            lp.ineqlin.marginals,
        )
        lagrangian, added = lp.fun, False
        for c, size in enumerate(room):
            # The class's pattern of least reduced cost: a knapsack over the sets, at most `size` GPUs.
            value, back = [0.0] + [-math.inf] * size, []
            for k in range(k_count):
                step, choice = value[:], [0] * (size + 1)
                for used in range(size + 1):
                    if value[used] == -math.inf:
                        continue
                    for count in range(1, min(sets[k], size - used) + 1):
                        v = value[used] + (gain[c] + per_pairs[k]) * _pairs(count) + per_set[k] * count
                        if v > step[used + count] + 1e-12:
                            step[used + count], choice[used + count] = v, count
                back.append(choice)
                value = step
            used = max(range(size + 1), key=lambda u: value[u])
            reduced = -value[used] - convexity[c]
            lagrangian += min(0.0, reduced)
            if reduced < -1e-7:
                counts = [0] * k_count
                for k in range(k_count - 1, -1, -1):
                    counts[k] = back[k][used]
                    used -= counts[k]
                if (c, tuple(counts)) not in columns:
                    columns.append((c, tuple(counts)))
                    added = True
        best = max(best, lagrangian)
        if not added:
            break
    # A small tolerance keeps the solver's floating-point value from rounding up past a whole number.
    bound = max(0, math.ceil(floor + best - 1e-6))

    remaining = deadline - time.perf_counter()
    if remaining <= 0:
        return Relaxation(bound, None)
    objective, equal, _ = master()
    rhs = np.array([1] * len(groups) + sets, dtype=float)
    chosen = milp(
        objective,
        constraints=LinearConstraint(equal, rhs, rhs),
        integrality=np.ones(len(columns)),
        bounds=Bounds(0, 1),
        options={"node_limit": _PATTERN_NODES, **({"time_limit": remaining} if remaining < math.inf else {})},
    )
    if chosen.x is None:
        return Relaxation(bound, None)
    held_by = {c: counts for (c, counts), x in zip(columns, chosen.x) if x > 0.5}
    held = np.array([held_by[c] for c in range(len(groups))])
    return Relaxation(bound, _members(groups, _exchanged(held, cost, groups, inside, deadline), k_count))


def _exchanged(
    held: Any, cost: list[list[int]], groups: list[list[int]], inside: list[int], deadline: float = math.inf
) -> list[list[int]]:
    """`held` (GPUs per class and set) improved while one step makes it lighter by the true links: two classes of
    one size swapping what they hold, one GPU of a set moved to a class with room, or two sets trading one GPU each
    between two classes; the steepest step first, at most _EXCHANGE_STEPS, until the deadline."""
    import numpy as np  # here: with SciPy, only when a placement needs the solver

    n = len(groups)
    link = np.array([[cost[a[0]][b[0]] if c != d else 0 for d, b in enumerate(groups)] for c, a in enumerate(groups)])
    own = np.array(inside)
    room = np.array([len(members) for members in groups])
    same_room = (room[:, None] == room[None, :]) & ~np.eye(n, dtype=bool)
    trades = held.size**2 <= _TRADE_CELLS
    for _ in range(_EXCHANGE_STEPS):
        if time.perf_counter() > deadline:
            break
        near = link @ held  # near[c, k]: what a GPU of set k in class c pays to the set's GPUs in other classes
        # swap[c, d]: the weight change when classes c and d swap what they hold
        apart = held[None, :, :] - held[:, None, :]
        swap = (
            apart
            * (
                (near[:, None, :] - link[:, :, None] * held[None, :, :])
                - (near[None, :, :] - link[:, :, None] * held[:, None, :])
            )
        ).sum(axis=2)
        pairs = (held * (held - 1) // 2).sum(axis=1)
        swap = np.where(same_room, swap + (own[:, None] - own[None, :]) * (pairs[None, :] - pairs[:, None]), np.inf)
        # moved[c, d, k]: the weight change when one GPU of set k leaves class c for class d
        near_all = near + own[:, None] * held
        moved = near_all[None, :, :] - (link.T + np.diag(own))[:, :, None] - near_all[:, None, :] + own[:, None, None]
        has = held > 0
        free = room - held.sum(axis=1)
        alone = np.where(has[:, None, :] & (free > 0)[None, :, None], moved, np.inf)
        np.einsum("iik->ik", alone)[:] = np.inf
        traded = np.full((1, 1, 1, 1), np.inf)
        if trades:
            traded = moved[:, :, :, None] + moved.transpose(1, 0, 2)[:, :, None, :]
            allowed = has[:, None, :, None] & has[None, :, None, :] & ~np.eye(held.shape[1], dtype=bool)[None, None]
            traded = np.where(allowed, traded, np.inf)
            np.einsum("iikl->ikl", traded)[:] = np.inf
        best = min(swap.min(), alone.min(), traded.min())
        if best >= 0:
            break
        if swap.min() == best:
            c, d = np.unravel_index(swap.argmin(), swap.shape)
            held[[c, d]] = held[[d, c]]
        elif alone.min() == best:
            c, d, k = np.unravel_index(alone.argmin(), alone.shape)
            held[c, k], held[d, k] = held[c, k] - 1, held[d, k] + 1
        else:
            c, d, k, other = np.unravel_index(traded.argmin(), traded.shape)
            held[c, k], held[d, k] = held[c, k] - 1, held[d, k] + 1
            held[d, other], held[c, other] = held[d, other] - 1, held[c, other] + 1
    return [[int(v) for v in row] for row in held]


class _Model:
    """A MILP's variables and sparse rows as HiGHS takes them."""

    def __init__(self) -> None:
        self.objective: list[float] = []
        self.integral: list[int] = []
        self.upper: list[float] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.values: list[float] = []
        self.low: list[float] = []
        self.high: list[float] = []

    def variable(self, cost: float = 0.0, integral: bool = False, upper: float = math.inf) -> int:
        self.objective.append(cost)
        self.integral.append(int(integral))
        self.upper.append(upper)
        return len(self.objective) - 1

    def constrain(self, terms: Sequence[tuple[int, float]], low: float, high: float) -> None:
        row = len(self.low)
        for col, value in terms:
            self.rows.append(row)
            self.cols.append(col)
            self.values.append(value)
        self.low.append(low)
        self.high.append(high)

    def solve(self, time_limit: float) -> Any:
        # Here: SciPy's MILP (1.2 s to import, measured) only when a placement needs the solver.
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_array

        matrix = coo_array((self.values, (self.rows, self.cols)), shape=(len(self.low), len(self.objective)))
        return milp(
            np.array(self.objective),
            constraints=LinearConstraint(matrix.tocsr(), self.low, self.high),
            integrality=np.array(self.integral),
            bounds=Bounds(0, np.array(self.upper)),
            # mip_rel_gap 0: "optimal" means proven optimal, not within HiGHS's default 0.01 %.
            options={"time_limit": time_limit, "mip_rel_gap": 0.0, "presolve": True},
        )


def _levels(groups: list[list[int]], cost: list[list[int]]) -> list[list[list[int]]]:
    """Partitions of the classes: each class alone, then the groups joined by links up to each weight."""
    levels = [[[c] for c in range(len(groups))]]
    link = lambda c, d: cost[groups[c][0]][groups[d][0]]  # noqa: E731
    for limit in sorted({link(c, d) for c in range(len(groups)) for d in range(c + 1, len(groups))}):
        joined: list[list[int]] = []
        for c in range(len(groups)):
            near = [block for block in joined if any(link(c, d) <= limit for d in block)]
            merged = [c] + [d for block in near for d in block]
            joined = [block for block in joined if block not in near] + [sorted(merged)]
        if 1 < len(joined) < len(groups):
            levels.append(joined)
    return levels


def solve(
    cost: list[list[int]],
    numa: list[int | None],
    sizes: list[int],
    time_limit: float | None = None,
    weight_bound: int = 0,
    stopping: float = _STOPPING,
) -> MilpResult:
    """The exact class model, built and solved within `time_limit` seconds (TIME_LIMIT_SECONDS by default), its
    construction counted, given a bound already proven (`weight_bound`, a cut). Not built where it would exceed
    _MILP_PAIRS, or left where the time runs out while it is built: then no sets and no bound. Stopped by its clock,
    the best placement it found, if any, with the bound it proved (not optimal). `stopping`: what HiGHS is given
    less than the limit, the time it takes to stop and hand back (less for a neighbourhood's small model)."""
    # HiGHS must start by this, to stop and hand back within the limit.
    deadline = time.perf_counter() + (TIME_LIMIT_SECONDS if time_limit is None else time_limit) - stopping
    sets = [s for s in sizes if s > 1]
    k_count = len(sets)
    if not k_count:
        return MilpResult([], 0, True)
    if time.perf_counter() >= deadline:
        return MilpResult(None, 0, False)
    groups = classes(cost, numa)
    hierarchy = _hierarchy(groups, cost)
    if hierarchy is None and _pairs(len(groups)) * k_count > _MILP_PAIRS:
        return MilpResult(None, 0, False)
    room = [len(members) for members in groups]
    inside = [cost[m[0]][m[1]] if len(m) > 1 else 0 for m in groups]
    link = [[cost[a[0]][b[0]] for b in groups] for a in groups]
    nodes = sorted({v for v in numa if v is not None})
    scale = len(cost) + 1  # a set spans at most min(size, nodes) nodes: all sets together fewer than n + 1
    levels = _levels(groups, cost)
    model = _Model()
    z: dict[tuple[int, int], list[int]] = {}
    pair: list[dict[tuple[int, int], int]] = []
    # Where links depend only on the level where two classes first meet, a pair costs its class's link, else
    # theta[1] plus what each level above adds: the weight is linear in the unary counts of classes and blocks.
    theta = hierarchy.theta if hierarchy is not None else [0, 0]
    constant = theta[-1] * sum(_pairs(size) for size in sets)
    block_pairs: dict[tuple[int, ...], list[tuple[int, float]]] = {}  # a block's pairs, of every set
    for k, size in enumerate(sets):
        if time.perf_counter() > deadline:
            return MilpResult(None, 0, False)
        for c in range(len(groups)):
            own = inside[c] - theta[1]
            z[c, k] = [model.variable(scale * own * j, integral=True, upper=1) for j in range(min(room[c], size))]
            for more, fewer in zip(z[c, k], z[c, k][1:]):
                model.constrain([(more, 1), (fewer, -1)], 0, math.inf)
        model.constrain([(v, 1) for c in range(len(groups)) for v in z[c, k]], size, size)
        for node in nodes:
            spans = model.variable(1)
            for c, members in enumerate(groups):
                if numa[members[0]] == node:
                    model.constrain([(spans, 1), (z[c, k][0], -1)], 0, math.inf)
        if hierarchy is not None:
            for i, blocks in enumerate(hierarchy.levels, start=1):
                level_pairs: list[tuple[int, float]] = []
                for block in blocks:
                    extent = min(sum(room[c] for c in block), size)
                    y = [
                        model.variable(scale * (theta[i] - theta[i + 1]) * j, integral=True, upper=1)
                        for j in range(extent)
                    ]
                    for more, fewer in zip(y, y[1:]):
                        model.constrain([(more, 1), (fewer, -1)], 0, math.inf)
                    model.constrain([(v, 1) for v in y] + [(v, -1) for c in block for v in z[c, k]], 0, 0)
                    level_pairs += [(v, j) for j, v in enumerate(y)]
                    block_pairs.setdefault(tuple(block), []).extend((v, j) for j, v in enumerate(y))
                # The pair caps of the pair model, per level: no set has more pairs inside blocks than their sizes
                # allow it (they tighten the relaxation of the unary counts, which the objective wants large).
                model.constrain(level_pairs, 0, _most_pairs(size, [sum(room[c] for c in b) for b in blocks]))
            model.constrain(
                [(v, j) for c in range(len(groups)) for j, v in enumerate(z[c, k])], 0, _most_pairs(size, room)
            )
            continue
        across = {}
        for c in range(len(groups)):
            for d in range(c + 1, len(groups)):
                across[c, d] = across[d, c] = model.variable(scale * link[c][d])
        pair.append(across)
        for c in range(len(groups)):
            partners = [(across[c, d], 1.0) for d in range(len(groups)) if d != c]
            model.constrain(partners + [(v, 2 * j + 1 - size) for j, v in enumerate(z[c, k])], 0, 0)
            for d in range(c + 1, len(groups)):
                few, many = (c, d) if room[c] <= room[d] else (d, c)
                top = len(z[many, k])
                lower = []
                for v in z[few, k]:
                    q = model.variable()
                    model.constrain([(q, 1), (v, -top)] + [(w, -1) for w in z[many, k]], -top, math.inf)
                    lower.append((q, -1.0))
                model.constrain([(across[c, d], 1), *lower], 0, math.inf)
        for blocks in levels:
            terms = _inside_blocks(blocks, z, across, k)
            model.constrain(terms, 0, _most_pairs(size, [sum(room[c] for c in block) for block in blocks]))
    for c in range(len(groups)):
        model.constrain([(v, 1) for k in range(k_count) for v in z[c, k]], 0, room[c])
    for joined, terms in block_pairs.items():
        model.constrain(terms, 0, _most_pairs_of_sets(sum(room[c] for c in joined), sets))
    for blocks in levels if hierarchy is None else []:
        for block in blocks:
            terms = [t for k in range(k_count) for t in _inside_blocks([block], z, pair[k], k)]
            model.constrain(terms, 0, _most_pairs_of_sets(sum(room[c] for c in block), sets))
    first = min(3, k_count)
    for d in range(len(groups)):
        twin = next((c for c in range(d - 1, -1, -1) if _same_class_kind(groups, link, inside, numa, c, d)), None)
        if twin is not None:
            # Identical classes in the order of their counts of the first sets (lexicographic).
            weights = [(max(room) + 1) ** (first - 1 - k) for k in range(first)]
            model.constrain(
                [(v, weights[k]) for k in range(first) for v in z[twin, k]]
                + [(v, -weights[k]) for k in range(first) for v in z[d, k]],
                0,
                math.inf,
            )
    if weight_bound > 0:
        # No placement weighs less than the bound proven before: a cut that guides HiGHS's search (measured: a
        # 64-GPU host's placement within 2 % where it found none in the same time without it).
        model.constrain(
            [(v, c) for v, c in enumerate(model.objective) if c], scale * (weight_bound - constant), math.inf
        )
    left = deadline - time.perf_counter()
    if left <= 0:
        return MilpResult(None, 0, False)
    result = model.solve(left)
    # The key's bound B holds for weight * scale + spans with spans < scale, so weight >= floor(B / scale).
    dual = getattr(result, "mip_dual_bound", None)
    proven = max(0, constant + math.floor((dual - 1e-6) / scale)) if dual is not None and math.isfinite(dual) else 0
    if result.x is None:
        return MilpResult(None, proven, False)
    counts = [[round(sum(result.x[v] for v in z[c, k])) for k in range(k_count)] for c in range(len(groups))]
    found = _members(groups, counts, k_count)
    if result.status != 0:
        return MilpResult(found, proven, False)
    weight = sum(cost[a][b] for members in found for a in members for b in members if a < b)
    return MilpResult(found, weight, True)


class _Hierarchy(NamedTuple):
    levels: list[list[list[int]]]  # partitions of the classes above them, finer first
    theta: list[int]  # [unused, the link of the pairs first in one block at level 1, ..., at the top: never]


def _hierarchy(groups: list[list[int]], cost: list[list[int]]) -> _Hierarchy | None:
    """The levels of `_levels` where every pair of classes first in one block at a level (or never) has one link:
    XGMI inside a hive, PCIe between hives, as on real hosts. None where links vary otherwise (random tables,
    whose links between classes take more than _LEVELS + 1 values, are not looked at further)."""
    if len({cost[a[0]][b[0]] for i, a in enumerate(groups) for b in groups[i + 1 :]}) > _LEVELS + 1:
        return None
    levels: list[list[list[int]]] = []
    for blocks in _levels(groups, cost)[1:]:
        if not levels or blocks != levels[-1]:
            levels.append(blocks)
    where = [{c: j for j, block in enumerate(blocks) for c in block} for blocks in levels]
    theta: list[int | None] = [None] * (len(levels) + 2)
    for c in range(len(groups)):
        for d in range(c + 1, len(groups)):
            i = next((i for i, at in enumerate(where, start=1) if at[c] == at[d]), len(levels) + 1)
            value = cost[groups[c][0]][groups[d][0]]
            if theta[i] not in (None, value):
                return None
            theta[i] = value
    filled = [0] * len(theta)
    for i in range(len(theta) - 1, 0, -1):  # a level without first meetings (one class): as the next
        known = theta[i]
        filled[i] = known if known is not None else (filled[i + 1] if i + 1 < len(theta) else 0)
    return _Hierarchy(levels, filled)


def _inside_blocks(
    blocks: list[list[int]], z: dict[tuple[int, int], list[int]], across: dict[tuple[int, int], int], k: int
) -> list[tuple[int, float]]:
    """Set k's pairs inside the blocks: inside each class (sum_j j z_j = T(n)) and across classes of one block."""
    terms: list[tuple[int, float]] = []
    for block in blocks:
        for c in block:
            terms += [(v, j) for j, v in enumerate(z[c, k])]
            terms += [(across[c, d], 1) for d in block if d > c]
    return terms


def _most_pairs_of_sets(room: int, sets: list[int]) -> int:
    """The most pairs `room` GPUs can hold of sets of these sizes together: the largest sets first."""
    most = 0
    for size in sorted(sets, reverse=True):
        taken = min(room, size)
        most, room = most + _pairs(taken), room - taken
    return most


def _same_class_kind(
    groups: list[list[int]], link: list[list[int]], inside: list[int], numa: list[int | None], c: int, d: int
) -> bool:
    """Classes c and d are interchangeable as wholes: same size, inside cost, NUMA node and links to every other."""
    return (
        len(groups[c]) == len(groups[d])
        and inside[c] == inside[d]
        and numa[groups[c][0]] == numa[groups[d][0]]
        and all(link[c][e] == link[d][e] for e in range(len(groups)) if e not in (c, d))
    )
