"""Placement beyond 16 GPUs (issue 38, item 2): the large-neighbourhood search that lightens what the relaxation
and the MILP found (`placement_neighbourhoods.improved`), and the branch and bound's greedy start kept cheap, so
that a loaded machine's share of the deadline goes to the steps that prove bounds.

No test here depends on the wall clock: the placement's deadline is lifted where `place` runs, and the answers are
checked, not the time.
"""

from __future__ import annotations

import itertools
import random

import pytest

from bench import placement as bench_placement
from domain import placement_milp, placement_neighbourhoods
from domain.topology import _BranchAndBound, _pair_costs, place
from schema.docker import PROD_PLACEMENT_GAP


def _weight(cost: list[list[int]], sets: list[tuple[int, ...]]) -> int:
    return sum(cost[a][b] for members in sets for a, b in itertools.combinations(members, 2))


def test_the_neighbourhood_search_brings_corpus_case_43_within_two_percent(monkeypatch) -> None:
    """Large corpus case 43 (64 GPUs in 8 classes of 8, two hives, 11 sets filling all but 2 GPUs): the relaxation
    proves 970 and places 1,110; the MILP found 990 within the deadline (2.02 %) and its optimum 980 only after 2-5 s.
    With the MILP finding nothing (here: its full-size model hands back nothing; the deadline lifted so that only the
    search's own stop, no neighbourhood lightening the sets, ends it), the neighbourhood search alone takes the
    relaxation's 1,110 to 980: gap 1.0 %, within prod's 2 %. On main this placement stayed at 1,110 (12.6 %)."""
    real_solve = placement_milp.solve
    topo, sizes = bench_placement.large_corpus()[43]

    def small_only(cost: list[list[int]], *args: object, **kwargs: object) -> placement_milp.MilpResult:
        if len(cost) == len(topo.gpus):
            return placement_milp.MilpResult(None, 0, False)
        return real_solve(cost, *args, **kwargs)  # the neighbourhoods' exact MILPs

    monkeypatch.setattr(placement_milp, "solve", small_only)
    monkeypatch.setattr(placement_milp, "TIME_LIMIT_SECONDS", 60)
    placed = place(topo, sizes)
    assert placed.bound == 970 and placed.weight == 980 and not placed.optimal
    assert placed.gap <= PROD_PLACEMENT_GAP
    assert [len(s) for s in placed] == sizes and len({g for s in placed for g in s}) == sum(sizes)
    assert placed.weight == bench_placement.cost(topo, placed)[0]


def test_the_neighbourhood_search_keeps_sizes_and_only_lightens() -> None:
    """On the relaxation's placements of 32-GPU corpus hosts and of a random 18-GPU table (whose neighbourhoods use
    the MILP's pair model), each set keeps its size and place in order, no GPU is taken twice, and no step makes
    the placement heavier (weight, then NUMA nodes spanned); cases 20 and 25 keep their weight on fewer NUMA nodes
    (2 -> 1, 6 -> 1), the random table gets lighter."""
    corpus = bench_placement.large_corpus()
    cases = [corpus[20], corpus[25], (bench_placement.random_topology(18, 1), [3, 3, 3])]
    fewer_nodes = lighter = 0
    for topo, sizes in cases:
        cost, numa = _pair_costs(topo), list(topo.numa)
        before = placement_milp.relaxation(cost, numa, sizes).sets
        assert before is not None
        after = placement_neighbourhoods.improved(cost, numa, before)
        assert [len(s) for s in after] == [len(s) for s in before]
        assert len({g for s in after for g in s}) == sum(map(len, after))
        key_before, key_after = bench_placement.cost(topo, before), bench_placement.cost(topo, after)
        assert key_after <= key_before and _weight(cost, after) <= _weight(cost, before)
        fewer_nodes += key_after[0] == key_before[0] and key_after[1] < key_before[1]
        lighter += key_after[0] < key_before[0]
    assert fewer_nodes == 2 and lighter == 1


def _reference_greedy(search: _BranchAndBound) -> tuple[tuple[int, int], list[list[int]]]:
    """The greedy start as it was written before (each candidate's cost to the members summed again, its NUMA spread
    counted again): each set, in request order, grown from its best seed by the GPU adding the least (link cost,
    then spread; lowest index on ties), the lightest seed's set taken (ties: the lowest members)."""
    free = set(range(search.n))
    total, sets = (0, 0), []
    for size in search.sizes:
        options = []
        for seed in sorted(free):
            members = [seed]
            while len(members) < size:
                members.append(
                    min(
                        sorted(free - set(members)),
                        key=lambda g: (sum(search.cost[g][m] for m in members), search._spread([*members, g])),
                    )
                )
            options.append(((search._set_cost(members), search._spread(members)), members))
        key, members = min(options)
        free -= set(members)
        sets.append(members)
        total = (total[0] + key[0], total[1] + key[1])
    return total, sets


def test_the_greedy_start_is_the_same_and_counts_no_set_again(monkeypatch) -> None:
    """The branch and bound's greedy start (on 64 GPUs most of the search's time: 2.0 s of its 3.1 s over the large
    corpus) keeps each GPU's cost to the members as they join: the same start as the former code on corpus hosts,
    random tables and NUMA nodes partly unknown, and no set's spread or weight counted again per candidate (the former
    code counted one per candidate GPU, tens of thousands per 64-GPU host)."""
    corpus = bench_placement.large_corpus()
    rng = random.Random(38)
    cases = [corpus[i] for i in (3, 34, 43, 62)] + [
        (bench_placement.random_topology(n, rng.randrange(2**32)), bench_placement.mixed_sizes(rng, n))
        for n in (17, 24, 40)
    ]
    for topo, sizes in cases:
        cost = _pair_costs(topo)
        for numa in (list(topo.numa), [None if g % 3 == 0 else node for g, node in enumerate(topo.numa)]):
            assert _BranchAndBound(cost, numa, sizes)._greedy() == _reference_greedy(_BranchAndBound(cost, numa, sizes))

    counted = []
    monkeypatch.setattr(_BranchAndBound, "_spread", lambda self, members: counted.append(members) or 0)
    monkeypatch.setattr(_BranchAndBound, "_set_cost", lambda self, members: counted.append(members) or 0)
    topo, sizes = corpus[43]
    _BranchAndBound(_pair_costs(topo), list(topo.numa), sizes)._greedy()
    assert counted == []


def test_no_neighbourhood_is_tried_beyond_its_classes(monkeypatch) -> None:
    """A random 64-GPU table (64 classes of one GPU, 2,016 pairs of classes): no neighbourhood lightened the
    relaxation's placement within the deadline, which they took whole (20 tables: wall median 96 -> 731 ms), so
    none is tried beyond _CLASSES classes; a structured 64-GPU host (8 classes) gets them."""

    def solved(*_: object, **__: object) -> placement_milp.MilpResult:
        raise AssertionError("a neighbourhood was tried")

    monkeypatch.setattr(placement_milp, "solve", solved)
    topo = bench_placement.random_topology(64, 0)
    sets = [tuple(range(k, k + 8)) for k in range(0, 64, 8)]
    assert placement_neighbourhoods.improved(_pair_costs(topo), list(topo.numa), sets) == sets
    topo, _ = bench_placement.large_corpus()[43]
    with pytest.raises(AssertionError, match="a neighbourhood was tried"):
        placement_neighbourhoods.improved(_pair_costs(topo), list(topo.numa), sets)


def test_the_milp_leaves_the_search_time_only_where_the_call_has_had_a_core() -> None:
    """Beside a full `make test` (two thirds of a core) the MILP that left the search 0.15 s no longer found case
    43's 990 and the search took the relaxation's 1,110 only to 1,050 (7.6 %): the MILP leaves the search time only
    where enough is left for both and the call has had a core so far (CPU time over wall clock)."""
    share = placement_neighbourhoods.left_to_search
    assert share(0.6, 1.0) == placement_neighbourhoods.SEARCH_SECONDS > 0
    assert share(0.6, 0.65) == 0.0  # loaded: the MILP keeps it all
    assert share(placement_neighbourhoods.BOTH_SECONDS / 2, 1.0) == 0.0  # too little left for both
