"""Topology parsing, GPU placement and the `rocm-stack topology` command (tools/topology.py).

Samples in tests/data/topology/ and where they come from:
  Real tool output (copied from public pages, spacing as published):
  * rocm_smi_4gpu_pcie_rocm_smi_lib_issue108.txt: https://github.com/ROCm/rocm_smi_lib/issues/108
    ("How weights and hops are calculated", 2022): 4 GPUs on PCIe, one per NUMA node, `GPU[0]\\t\\t:` NUMA lines.
  * rocm_smi_8gpu_mi300_ms_swift_docs.txt: modelscope/ms-swift docs/source_en/BestPractices/AMD-support.md
    ("Inspect GPU topology and NUMA: rocm-smi --showtopo"): 8 MI300-series GPUs (DID 0x74a2), all XGMI, NUMA 0/1
    halves, with a WARNING line before the tables.
  * rocm_smi_4gpu_mi210_archer2_docs.txt: ARCHER2-HPC/archer2-docs docs/user-guide/gpu.md ("Node Topology"):
    4x MI210, ROCm 5.x spelling `GPU 0          : (Topology) Numa Node: 0`.
  * rocm_smi_2gpu_mi100_linktype_only_rocm_issue1503.txt: https://github.com/ROCm/ROCm/issues/1503 (2x MI100):
    only the Link Type table, spacing collapsed as pasted in the issue.
  * amd_smi_8gpu_mi300x_amdsmi_changelog.txt: ROCm/amdsmi CHANGELOG.md, entry "Topology is now left-aligned with
    BDF of each device" (`amd-smi topology` on 8x MI300X).
  * amd_smi_2gpu_pcie_json_before_6.1.1_amdsmi_changelog.json and amd_smi_2gpu_json_access_linktype_amdsmi_
    changelog.json: ROCm/amdsmi CHANGELOG.md, entry "Updated `amd-smi topology --json` to align with host/guest"
    (ROCm 6.1.1): the "Previous format" and the `amd-smi topology -a -t --json` example.
  Hand-written (no public sample of these shapes was found):
  * handwritten_rocm_smi_8x_mi300x.txt: 8x MI300X, all XGMI weight 15, NUMA 0 for GPUs 0-3 and 1 for 4-7.
  * handwritten_rocm_smi_4x_mi250_8gcd.txt: 4x MI250 = 8 GCDs. Which GCDs are linked, and by how many XGMI links,
    follows the MI250X `xgmi_num_links` matrix posted in https://github.com/ROCm/rocm-systems/issues/5763
    (GCD 2k and 2k+1 share a package, 4 links). Weight 15 for the in-package pair, 30 for a direct link
    between packages, 45 without one; hops 1 everywhere as amd-smi/rocm-smi report for XGMI. Note: the real
    KFD weight is 15 per XGMI hop whatever the link count (rocm-systems PR 7372), see
    `test_mi250_with_kfd_weights_still_keeps_packages_together`.
  * handwritten_amd_smi_8x_mi300x.json: `amd-smi topology --json` (ROCm >= 6.1.1 shape) for 8x MI300X.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from pydantic import ValidationError

import domain.topology as topology_module
from bench import placement as bench_placement
from domain import placement_milp, placement_neighbourhoods
from schema.docker import PROD_PLACEMENT_GAP
from domain.topology import (
    EXACT_GPUS,
    PlacementError,
    Topology,
    TopologyError,
    load_topology,
    numa_node_of,
    _BranchAndBound,
    _pair_costs,
    _SubsetSearch,
    parse_topology,
    place,
)

DATA = Path(__file__).parent / "data" / "topology"
REPO = Path(__file__).resolve().parents[1]

MI250 = DATA / "handwritten_rocm_smi_4x_mi250_8gcd.txt"
MI300X = DATA / "handwritten_rocm_smi_8x_mi300x.txt"
MI300X_REAL = DATA / "rocm_smi_8gpu_mi300_ms_swift_docs.txt"
MI300X_JSON = DATA / "handwritten_amd_smi_8x_mi300x.json"
MI300X_AMD_SMI = DATA / "amd_smi_8gpu_mi300x_amdsmi_changelog.txt"
PCIE_ISSUE = DATA / "rocm_smi_4gpu_pcie_rocm_smi_lib_issue108.txt"


def off_diagonal(matrix: tuple[tuple, ...]) -> set:
    return {v for i, row in enumerate(matrix) for j, v in enumerate(row) if i != j}


def matrix_text(title: str, cell, n: int) -> str:
    """A rocm-smi table as `rocm-smi --showtopo` prints it."""
    lines = [f"{'=' * 20} {title} {'=' * 20}", "       " + "".join(f"GPU{j}".ljust(13) for j in range(n))]
    lines += [f"GPU{i}".ljust(7) + "".join(str(cell(i, j)).ljust(13) for j in range(n)) for i in range(n)]
    return "\n".join(lines) + "\n\n"


def topology(weight: list[list[int]], numa: list[int | None]) -> Topology:
    return Topology(gpus=tuple(range(len(numa))), numa=tuple(numa), weight=tuple(map(tuple, weight)))


# ------------------------------------------------------------------------------------------ real samples


def test_rocm_smi_issue108_pcie_host() -> None:
    topo = load_topology(PCIE_ISSUE)
    assert topo.gpus == (0, 1, 2, 3)
    assert topo.numa == (0, 1, 3, 2)
    assert off_diagonal(topo.weight) == {52} and off_diagonal(topo.hops) == {3}
    assert off_diagonal(topo.link_type) == {"PCIE"}
    assert [topo.link_type[i][i] for i in range(4)] == ["SELF"] * 4  # rocm-smi prints 0 on the diagonal


def test_rocm_smi_ms_swift_8x_mi300() -> None:
    topo = load_topology(MI300X_REAL)  # its WARNING line before the tables is not part of any table
    assert topo.gpus == tuple(range(8))
    assert topo.numa == (0, 0, 0, 0, 1, 1, 1, 1)
    assert off_diagonal(topo.weight) == {15} and off_diagonal(topo.hops) == {1}
    assert off_diagonal(topo.link_type) == {"XGMI"}


def test_rocm_smi_archer2_rocm5_numa_spelling() -> None:
    topo = load_topology(DATA / "rocm_smi_4gpu_mi210_archer2_docs.txt")
    assert topo.numa == (0, 1, 2, 3)
    assert off_diagonal(topo.weight) == {15}


def test_rocm_smi_issue1503_only_link_type_collapsed_spacing() -> None:
    topo = load_topology(DATA / "rocm_smi_2gpu_mi100_linktype_only_rocm_issue1503.txt")
    assert topo.gpus == (0, 1)
    assert topo.link_type == (("SELF", "PCIE"), ("PCIE", "SELF"))
    assert topo.weight is None and topo.hops is None and topo.numa == (None, None)


def test_amd_smi_text_8x_mi300x() -> None:
    topo = load_topology(MI300X_AMD_SMI)
    assert topo.gpus == tuple(range(8))
    assert topo.numa == (None,) * 8  # amd-smi topology prints no NUMA node
    assert off_diagonal(topo.weight) == {15} and off_diagonal(topo.hops) == {1}
    assert off_diagonal(topo.link_type) == {"XGMI"}


def test_amd_smi_json_before_6_1_1() -> None:
    topo = load_topology(DATA / "amd_smi_2gpu_pcie_json_before_6.1.1_amdsmi_changelog.json")
    assert topo.weight == ((0, 40), (40, 0))
    assert topo.hops == ((0, 2), (2, 0))
    assert topo.link_type == (("SELF", "PCIE"), ("PCIE", "SELF"))


def test_amd_smi_json_links_with_only_access_and_type() -> None:
    topo = load_topology(DATA / "amd_smi_2gpu_json_access_linktype_amdsmi_changelog.json")
    assert topo.link_type == (("SELF", "PCIE"), ("PCIE", "SELF"))
    assert topo.weight is None and topo.hops is None


def test_amd_smi_json_and_text_and_rocm_smi_agree_on_mi300x() -> None:
    from_json, from_text, from_rocm_smi = (load_topology(p) for p in (MI300X_JSON, MI300X_AMD_SMI, MI300X))
    assert from_json.weight == from_text.weight == from_rocm_smi.weight
    assert from_json.hops == from_text.hops == from_rocm_smi.hops
    assert from_json.link_type == from_text.link_type == from_rocm_smi.link_type


# ------------------------------------------------------------------------------------- robust parsing


def test_spacing_tabs_crlf_and_banners_do_not_matter() -> None:
    original = MI300X.read_text()
    mangled = "\r\n".join(
        "\t".join(line.split()) + "   "
        for line in original.splitlines()
        if not line.startswith("=" * 5) or "between two GPUs" in line or "Numa Nodes" in line
    )
    assert "End of ROCm SMI Log" not in mangled
    assert parse_topology(mangled) == parse_topology(original)


def test_sections_in_any_order_and_some_missing() -> None:
    weight = matrix_text("Weight between two GPUs", lambda i, j: 0 if i == j else 40, 3)
    link = matrix_text("Link Type between two GPUs", lambda i, j: 0 if i == j else "PCIE", 3)
    topo = parse_topology(link + weight)
    assert topo.gpus == (0, 1, 2) and off_diagonal(topo.weight) == {40}
    assert topo.hops is None and topo.numa == (None, None, None)


def test_numa_only_output_gives_the_gpus() -> None:
    text = "================= Numa Nodes =================\n" + "\n".join(
        f"GPU[{i}]\t\t: (Topology) Numa Node: {i // 2}" for i in range(4)
    )
    topo = parse_topology(text)
    assert topo.gpus == (0, 1, 2, 3) and topo.numa == (0, 0, 1, 1) and topo.weight is None


def test_numa_affinity_first_then_numa_node_negative_means_unknown() -> None:
    numa = (
        "=== Numa Nodes ===\n"
        "GPU[0] : (Topology) Numa Node: 0\nGPU[0] : (Topology) Numa Affinity: 1\n"  # sysfs wins
        "GPU[1] : (Topology) Numa Node: 1\nGPU[1] : (Topology) Numa Affinity: -1\n"  # no sysfs node
        "GPU[2] : (Topology) Numa Affinity: 0\n"
        "GPU[3] : (Topology) Numa Node: -1\nGPU[3] : (Topology) Numa Affinity: -1\n"
    )
    topo = parse_topology(matrix_text("Hops between two GPUs", lambda i, j: int(i != j), 4) + numa)
    assert topo.numa == (1, 1, 0, None)


@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_one_to_sixteen_gpus(n: int) -> None:
    text = (
        matrix_text("Weight between two GPUs", lambda i, j: 0 if i == j else 15 + 5 * ((i + j) % 2), n)
        + matrix_text("Hops between two GPUs", lambda i, j: int(i != j), n)
        + "".join(f"GPU[{i}]\t\t: (Topology) Numa Node: {i * 2 // n}\n" for i in range(n))
    )
    topo = parse_topology(text)
    assert topo.gpus == tuple(range(n))
    assert topo.numa == tuple(i * 2 // n for i in range(n))
    assert topo.weight[0][n - 1] == (0 if n == 1 else 15 + 5 * ((n - 1) % 2))


def test_amd_smi_text_with_static_numa_appended() -> None:
    static = "".join(f"GPU: {i}\n    NUMA:\n        NODE: {i // 4}\n        AFFINITY: {i // 4}\n" for i in range(8))
    topo = parse_topology(MI300X_AMD_SMI.read_text() + "\n" + static)
    assert topo.numa == (0, 0, 0, 0, 1, 1, 1, 1)


def test_topology_is_frozen() -> None:
    topo = load_topology(MI300X)
    with pytest.raises(ValidationError):
        topo.gpus = (0,)  # type: ignore[misc]


# ---------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the input is empty"),
        ("   \n\n\t\n", "the input is empty"),
        ("root:x:0:0:root:/root:/bin/bash\nGPU use (%): 0\n", "no topology table found"),
        ("Lorem ipsum dolor sit amet, GPU0 GPU1 between", "rocm-smi --showtopo"),
    ],
)
def test_not_topology_output(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match="expected the output of `rocm-smi --showtopo`") as err:
        parse_topology(text)
    assert message in str(err.value)


def test_row_with_wrong_number_of_values() -> None:
    text = MI300X.read_text().replace("GPU3   15           15           15           0   ", "GPU3   15  15  0  ", 1)
    with pytest.raises(TopologyError, match=r"'Weight between two GPUs': row GPU3 has 7 values, expected 8"):
        parse_topology(text)


def test_rows_not_matching_columns() -> None:
    text = matrix_text("Hops between two GPUs", lambda i, j: int(i != j), 3).replace("\nGPU2 ", "\nGPU7 ")
    with pytest.raises(TopologyError, match="rows GPU0, GPU1, GPU7 do not match columns GPU0, GPU1, GPU2"):
        parse_topology(text)


def test_tables_disagree_on_gpus() -> None:
    text = matrix_text("Weight between two GPUs", lambda i, j: 15 * (i != j), 4) + matrix_text(
        "Hops between two GPUs", lambda i, j: int(i != j), 2
    )
    with pytest.raises(TopologyError, match=r"'Hops between two GPUs' lists GPUs \[0, 1\] but an earlier"):
        parse_topology(text)


def test_non_numeric_weight() -> None:
    text = matrix_text("Weight between two GPUs", lambda i, j: "N/A" if (i, j) == (0, 1) else 15 * (i != j), 2)
    with pytest.raises(TopologyError, match="GPU0 to GPU1: expected a whole number, got 'N/A'"):
        parse_topology(text)


def test_header_without_table() -> None:
    with pytest.raises(TopologyError, match="no table .* follows the title"):
        parse_topology("==== Weight between two GPUs ====\nnothing here\n")


def test_section_twice() -> None:
    table = matrix_text("Weight between two GPUs", lambda i, j: 15 * (i != j), 2)
    with pytest.raises(TopologyError, match="appears twice"):
        parse_topology(table + table)


def test_numa_for_a_gpu_without_table_row() -> None:
    text = matrix_text("Hops between two GPUs", lambda i, j: int(i != j), 2) + "GPU[5]\t\t: (Topology) Numa Node: 1\n"
    with pytest.raises(TopologyError, match=r"NUMA nodes are given for GPUs \[5\]"):
        parse_topology(text)


def test_more_than_sixty_four_gpus() -> None:
    # 64 is what an 8-GPU host shows in CPX (AMD SMI docs, rocm-systems projects/amdsmi/docs/conceptual/partition.md:
    # "On an 8xMI300X system in CPX mode, 64 logical GPUs are reported (amd-smi IDs 0-63)").
    assert len(parse_topology(matrix_text("Hops between two GPUs", lambda i, j: int(i != j), 64)).gpus) == 64
    with pytest.raises(TopologyError, match="65 GPUs; 1 to 64 are supported"):
        parse_topology(matrix_text("Hops between two GPUs", lambda i, j: int(i != j), 65))


def test_amd_smi_table_without_bdf_header() -> None:
    with pytest.raises(TopologyError, match="'WEIGHT TABLE': expected a header of PCI addresses"):
        parse_topology("WEIGHT TABLE:\n  gpu0 gpu1\ngpu0 0 15\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"gpu": 0,', "not valid JSON"),
        ('{"gpu_data": []}', "not a list of per-GPU objects"),
        ('[{"gpu": 0, "links": [{"gpu": 0, "weight": 0}]}, {"gpu": 1, "links": []}]', "some GPU pairs are missing"),
        ('[{"gpu": 0, "links": [{"gpu": 3, "weight": 15}]}]', r"GPUs \[3\] are not listed"),
        ('[{"gpu": 0, "weight": "N/A"}]', "expected an object keyed gpu_<n>"),
        ('[{"gpu": 0, "bdf": "0000:0c:00.0"}]', "no weight, hops or link_type data"),
    ],
)
def test_bad_amd_smi_json(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        parse_topology(text)


def test_load_names_the_file(tmp_path: Path) -> None:
    empty = tmp_path / "gpu-node-1.showtopo.txt"
    empty.write_text("")
    with pytest.raises(TopologyError, match=r"gpu-node-1\.showtopo\.txt: the input is empty"):
        load_topology(empty)
    with pytest.raises(TopologyError, match="missing.txt: cannot read"):
        load_topology(tmp_path / "missing.txt")


# ----------------------------------------------------------------------------------------- placement


def test_mi250_gcd_pairs_stay_together() -> None:
    topo = load_topology(MI250)
    sets = place(topo, [2, 2, 2, 2])
    assert sets == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [numa_node_of(topo, s) for s in sets] == [0, 0, 1, 1]


def test_mi250_halves_are_whole_packages_on_one_numa_node() -> None:
    topo = load_topology(MI250)
    assert place(topo, [4, 4]) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert place(topo, [2, 2]) == [(0, 1), (2, 3)]
    assert place(topo, [2, 4]) == [(0, 1), (4, 5, 6, 7)]


def test_mi250_with_kfd_weights_still_keeps_packages_together() -> None:
    """Real KFD weights: 15 for any direct XGMI link, 30 for two hops (links from rocm-systems#5763)."""
    links = [
        [0, 4, 1, 0, 0, 0, 2, 0],
        [4, 0, 0, 1, 0, 1, 0, 0],
        [1, 0, 0, 4, 2, 0, 0, 0],
        [0, 1, 4, 0, 0, 0, 0, 1],
        [0, 0, 2, 0, 0, 4, 1, 0],
        [0, 1, 0, 0, 4, 0, 0, 1],
        [2, 0, 0, 0, 1, 0, 0, 4],
        [0, 0, 0, 1, 0, 1, 4, 0],
    ]
    weight = [[0 if i == j else 15 if links[i][j] else 30 for j in range(8)] for i in range(8)]
    assert place(topology(weight, [0, 0, 0, 0, 1, 1, 1, 1]), [2, 2, 2, 2]) == [(0, 1), (2, 3), (4, 5), (6, 7)]


@pytest.mark.parametrize("path", [MI300X, MI300X_REAL])
def test_mi300x_numa_local_halves(path: Path) -> None:
    topo = load_topology(path)
    sets = place(topo, [4, 4])
    assert sets == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [numa_node_of(topo, s) for s in sets] == [0, 1]
    assert place(topo, [2, 2, 2, 2]) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert place(topo, [8]) == [tuple(range(8))]
    assert place(topo, [3, 5]) == [(0, 1, 2), (3, 4, 5, 6, 7)]  # the 5 cannot fit one node; the 3 can
    # After GPU 0, node 0 has 3 GPUs left: the 4 goes to node 1 although (1, 2, 3, 4) has lower indices.
    assert place(topo, [1, 4, 3]) == [(0,), (4, 5, 6, 7), (1, 2, 3)]


def test_numa_locality_beats_lower_indices() -> None:
    topo = topology([[0 if i == j else 15 for j in range(4)] for i in range(4)], [0, 1, 0, 1])
    assert place(topo, [2]) == [(0, 2)]
    assert place(topo, [2, 2]) == [(0, 2), (1, 3)]


def test_link_weight_beats_numa_locality() -> None:
    # XGMI pairs 0-2 and 1-3 cross the sockets; PCIe within a socket weighs more.
    weight = [[0, 40, 15, 72], [40, 0, 72, 15], [15, 72, 0, 40], [72, 15, 40, 0]]
    assert place(topology(weight, [0, 0, 1, 1]), [2, 2]) == [(0, 2), (1, 3)]


def test_without_weights_link_type_or_hops_decide() -> None:
    xgmi = lambda i, j: 0 if i == j else "XGMI" if i // 2 == j // 2 else "PCIE"  # noqa: E731
    assert place(parse_topology(matrix_text("Link Type between two GPUs", xgmi, 4)), [2, 2]) == [(0, 1), (2, 3)]
    ring = lambda i, j: 0 if i == j else 1 if (i - j) % 4 in (1, 3) else 2  # noqa: E731
    assert place(parse_topology(matrix_text("Hops between two GPUs", ring, 4)), [2]) == [(0, 1)]
    crossed = lambda i, j: 0 if i == j else "XGMI" if (i + j) % 2 == 0 else "PCIE"  # noqa: E731
    assert place(parse_topology(matrix_text("Link Type between two GPUs", crossed, 4)), [2, 2]) == [(0, 2), (1, 3)]


def test_sets_are_in_request_order_with_lowest_indices_first() -> None:
    topo = load_topology(MI300X_JSON)  # no NUMA information: ties go to the lowest indices
    assert place(topo, [1, 3]) == [(0,), (1, 2, 3)]
    assert place(topo, [3, 1]) == [(0, 1, 2), (3,)]
    assert place(topo, [1] * 8) == [(g,) for g in range(8)]
    assert place(topo, []) == []


def test_gpu_ids_come_from_the_tables() -> None:
    text = matrix_text("Hops between two GPUs", lambda i, j: int(i != j), 4)
    for old, new in (("GPU3", "GPU7"), ("GPU2", "GPU5")):
        text = text.replace(old, new)
    topo = parse_topology(text)
    assert topo.gpus == (0, 1, 5, 7)
    assert place(topo, [2, 2]) == [(0, 1), (5, 7)]


def test_deterministic() -> None:
    topo = load_topology(MI250)
    first = [place(topo, sizes) for sizes in ([2, 2, 2, 2], [4, 4], [3, 3], [1, 2, 5])]
    assert all([place(topo, sizes) for sizes in ([2, 2, 2, 2], [4, 4], [3, 3], [1, 2, 5])] == first for _ in range(5))


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ([4, 4, 4], r"partitions \[4, 4, 4\] need 12 GPUs but the host has 8"),
        ([4, 0], "partition 1 has size 0; sizes must be whole numbers >= 1"),
        ([-2], "partition 0 has size -2"),
        ([True], "partition 0 has size True"),
    ],
)
def test_impossible_requests(sizes: list, message: str) -> None:
    with pytest.raises(PlacementError, match=message):
        place(load_topology(MI300X), sizes)


def test_numa_node_of() -> None:
    topo = load_topology(PCIE_ISSUE)
    assert numa_node_of(topo, [2]) == 3
    assert numa_node_of(topo, [0, 1]) is None
    assert numa_node_of(load_topology(MI300X_AMD_SMI), [0]) is None  # unknown
    with pytest.raises(ValueError, match=r"GPUs \[9\] are not in the topology"):
        numa_node_of(topo, [9])


def brute_force(topo: Topology, sizes: list[int]) -> list[tuple[int, ...]]:
    """The rule spelled out: min (weight, NUMA spread, sets in request order) over every assignment."""

    def cost(s: tuple[int, ...]) -> tuple[int, int]:
        weight = sum(topo.weight[a][b] + topo.weight[b][a] for a, b in itertools.combinations(s, 2))
        nodes = {topo.numa[g] for g in s} - {None}
        return weight, max(len(nodes) - 1, 0)

    def assignments(free: frozenset, k: int):
        if k == len(sizes):
            yield ()
            return
        for s in itertools.combinations(sorted(free), sizes[k]):
            for rest in assignments(free - set(s), k + 1):
                yield (s, *rest)

    def key(sets):
        costs = [cost(s) for s in sets]
        return sum(c[0] for c in costs), sum(c[1] for c in costs), sets

    return list(min(assignments(frozenset(range(len(topo.gpus))), 0), key=key))


def test_optimal_and_lowest_index_against_brute_force() -> None:
    rng = random.Random(6)
    for _ in range(150):
        n = rng.randint(1, 7)
        values = rng.choice([[15], [15, 30], [15, 30, 45], [40, 52, 72], list(range(1, 10))])
        weight = [[0 if i == j else rng.choice(values) for j in range(n)] for i in range(n)]
        numa = [rng.choice([0, 0, 1, 1, None]) for _ in range(n)]
        sizes = []
        while sum(sizes) < n and rng.random() < 0.75:
            sizes.append(rng.randint(1, n - sum(sizes)))
        topo = topology(weight, numa)
        assert place(topo, sizes) == brute_force(topo, sizes), (weight, numa, sizes)


def sixteen_gpu_hosts() -> dict[str, Topology]:
    halves = [g // 8 for g in range(16)]

    def mi250(i: int, j: int) -> int:  # 8 packages of 2 GCDs, ring of links between packages
        return 0 if i == j else 15 if i // 2 == j // 2 else 30 if (i - j) % 4 == 2 or (i - j) % 16 in (3, 13) else 45

    return {
        "16 XGMI, 2 NUMA nodes": topology([[15 * (i != j) for j in range(16)] for i in range(16)], halves),
        "2 XGMI hives over PCIe": topology(
            [[0 if i == j else 15 if i // 8 == j // 8 else 72 for j in range(16)] for i in range(16)], halves
        ),
        "8 MI250-like packages": topology([[mi250(i, j) for j in range(16)] for i in range(16)], halves),
        "PCIe, 4 NUMA nodes": topology(
            [[0 if i == j else 40 if i // 4 == j // 4 else 52 for j in range(16)] for i in range(16)],
            [g // 4 for g in range(16)],
        ),
    }


@pytest.mark.parametrize("host", list(sixteen_gpu_hosts()))
def test_sixteen_gpus_fast(host: str) -> None:
    topo = sixteen_gpu_hosts()[host]
    for sizes in ([2] * 8, [4, 4, 4, 4], [8, 8], [1] * 16, [3, 5, 8], [5, 5]):
        started = time.process_time()  # CPU time: other tests share the machine
        sets = place(topo, sizes)
        elapsed = time.process_time() - started
        assert sorted(len(s) for s in sets) == sorted(sizes)
        assert len({g for s in sets for g in s}) == sum(sizes)
        # CPU time, with room for a loaded machine (a CPU second is slower when 8 processes share 2 cores); the
        # benchmark judges the 100 ms target (bench/placement.py).
        assert elapsed < 0.5, f"{host} {sizes}: {elapsed * 1000:.0f} ms"
    assert place(topo, [8, 8]) == [tuple(range(8)), tuple(range(8, 16))]  # NUMA halves in every host


def test_exact_against_brute_force_on_a_seeded_corpus() -> None:
    """Issue 26: 200 random weight matrices of 4 to 8 GPUs (two NUMA nodes), mixed partition sizes from 1 to 8:
    every placement equals the rule spelled out by exhaustive enumeration (weight, then spread, then lowest
    indices in request order), and is marked optimal. (The corpus the benchmark times is the 16-GPU one.)"""
    for topo, sizes in bench_placement.corpus(200, 7, (4, 8)):
        placed = place(topo, sizes)
        assert placed == brute_force(topo, sizes), (topo.weight, sizes)
        assert placed.optimal


def two_set_brute_force(topo: Topology, sizes: list[int]) -> tuple[int, int]:
    """Another exact method for two sets that use every GPU: each set of the first size and its complement."""
    pairs = _pair_costs(topo)

    def cost(members: Sequence[int]) -> tuple[int, int]:
        nodes = {topo.numa[g] for g in members} - {None}
        return sum(pairs[a][b] for a, b in itertools.combinations(members, 2)), max(len(nodes) - 1, 0)

    best = None
    for first in itertools.combinations(range(len(topo.gpus)), sizes[0]):
        (w1, s1), (w2, s2) = cost(first), cost([g for g in range(len(topo.gpus)) if g not in first])
        best = min(best or (w1 + w2, s1 + s2), (w1 + w2, s1 + s2))
    assert best is not None
    return best


@pytest.mark.parametrize(
    ("seed", "sizes"), [(1, [8, 8]), (2, [5, 11]), (3, [3, 13]), (4, [4, 3, 3, 2, 2, 1, 1]), (5, [5, 4, 2, 2, 1])]
)
def test_sixteen_random_gpus_exact_against_a_second_method(
    seed: int, sizes: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 GPUs, random weights: the subset search's optimum equals a different exact method's, the complement
    enumeration for two sets, else the branch and bound (sets grown GPU by GPU) run without its node budget.
    Both take far longer than the subset search (benchmarked in bench/placement.py, corpus of 200)."""
    topo = bench_placement.random_topology(16, seed)
    started = time.process_time()  # CPU time: other tests share the machine
    placed = place(topo, sizes)
    elapsed = time.process_time() - started
    if len(sizes) == 2:
        expected = two_set_brute_force(topo, sizes)
    else:
        monkeypatch.setattr(topology_module, "_NODE_BUDGET", 10**9)
        search = _BranchAndBound(_pair_costs(topo), list(topo.numa), sizes)
        expected = bench_placement.cost(topo, search.solve())
    assert placed.optimal and bench_placement.cost(topo, placed) == expected
    assert [len(s) for s in placed] == sizes and len({g for s in placed for g in s}) == sum(sizes)
    # A generous ceiling, robust on a loaded machine: the p95 target (100 ms) is the benchmark's to judge.
    assert elapsed < 2, f"{sizes}: {elapsed:.2f} s CPU"


def test_the_solver_finds_the_exact_searchs_optimum_on_a_sample() -> None:
    """Issue 38: the MILP (HiGHS through scipy.optimize.milp) that places beyond EXACT_GPUS, run on up to 16 GPUs,
    proves the same optimum (link weight, then NUMA spread) as the exact subset search on a seeded sample of the
    benchmark's corpus (bench/placement.py compares the full one); ties may pick other GPUs of the same cost."""
    for topo, sizes in bench_placement.corpus(12, 38, (6, 12)):
        cost, numa = _pair_costs(topo), list(topo.numa)
        solved = placement_milp.solve(cost, numa, sizes, time_limit=30)
        exact = place(topo, sizes)
        assert solved.optimal and solved.sets is not None, (topo.weight, sizes)
        single = [s for s in sizes if s > 1]
        assert [len(s) for s in solved.sets] == single
        assert len({g for s in solved.sets for g in s}) == sum(single)
        assert bench_placement.cost(topo, solved.sets) == bench_placement.cost(topo, exact), (topo.weight, sizes)
        assert solved.weight_bound == exact.weight


def test_interchangeable_gpus_are_counted_per_class() -> None:
    """The models count GPUs per class of interchangeable GPUs: on a 32-GPU host of physical GPUs of 4 partitions
    listed flat, each physical GPU's partitions are one class."""
    for seed in range(6):
        topo = bench_placement.structured_topology(32, seed)
        groups = placement_milp.classes(_pair_costs(topo), list(topo.numa))
        per = len(groups[0])
        assert all(members == list(range(c * per, (c + 1) * per)) for c, members in enumerate(groups)), groups
        assert per > 1


def test_the_relaxation_and_the_class_model_against_the_exact_search() -> None:
    """On up to 16 GPUs, random and structured (partitions of physical GPUs) weights: the relaxation's bound is at
    most the exact optimum and its placement a valid one no lighter than it; the class model proves the exact
    search's optimum (weight, then spread) on the structured ones."""
    rng = random.Random(38)
    for index in range(16):
        n = rng.choice([8, 12, 16])
        topo = (bench_placement.structured_topology if index % 2 else bench_placement.random_topology)(n, index)
        sizes = bench_placement.mixed_sizes(rng, n)
        cost, numa = _pair_costs(topo), list(topo.numa)
        exact = place(topo, sizes)
        relaxed = placement_milp.relaxation(cost, numa, sizes)
        assert relaxed.weight_bound <= exact.weight, (index, sizes)
        assert relaxed.sets is not None and [len(s) for s in relaxed.sets] == [s for s in sizes if s > 1]
        assert len({g for s in relaxed.sets for g in s}) == sum(len(s) for s in relaxed.sets)
        assert bench_placement.cost(topo, relaxed.sets)[0] >= exact.weight
        if index % 2:
            solved = placement_milp.solve(cost, numa, sizes, time_limit=30)
            assert solved.optimal and solved.sets is not None, (index, sizes)
            assert bench_placement.cost(topo, solved.sets) == bench_placement.cost(topo, exact), (index, sizes)


def test_the_exchange_steps_keep_sizes_and_room_and_only_lighten() -> None:
    """The relaxation's last improvement (GPUs moved or traded between classes): each set keeps its size, no class
    holds more than its GPUs, and the placement it ends with weighs no more than where it started."""
    import numpy as np

    rng = random.Random(5)
    lighter = 0
    for seed in range(8):
        topo = bench_placement.structured_topology(32, seed)
        cost, numa = _pair_costs(topo), list(topo.numa)
        groups = placement_milp.classes(cost, numa)
        inside = [cost[m[0]][m[1]] for m in groups]
        sizes = [rng.randint(2, 7) for _ in range(4)]
        held = np.zeros((len(groups), len(sizes)), dtype=int)
        for k, size in enumerate(sizes):  # spread each set over the classes with room, round robin
            c = k
            for _ in range(size):
                while held[c % len(groups)].sum() >= len(groups[c % len(groups)]):
                    c += 1
                held[c % len(groups), k] += 1
                c += 1
        before = placement_milp._members(groups, held.tolist(), len(sizes))
        after_held = placement_milp._exchanged(held.copy(), cost, groups, inside)
        after = placement_milp._members(groups, after_held, len(sizes))
        assert [len(s) for s in after] == sizes
        assert all(sum(row) <= len(members) for row, members in zip(after_held, groups))
        assert bench_placement.cost(topo, after)[0] <= bench_placement.cost(topo, before)[0]
        lighter += bench_placement.cost(topo, after)[0] < bench_placement.cost(topo, before)[0]
    assert lighter >= 4


# Large-corpus hosts (bench/placement.py, seed 38) where the per-GPU model of before proved gaps of 17-100 %.
_PACKED = (42, 49, 66, 73, 76, 78)


def test_partitions_listed_flat_are_proven_within_two_percent() -> None:
    """Issue 38: 64 flat GPUs (physical GPUs of 4 or 8 partitions) with up to 14 sets: the relaxation alone (no
    clock, the same on every machine) proves its placement optimal by weight, and `place` reports a gap within
    prod's 2 %, where the per-GPU model's bound was near 0 (partitions of one GPU cost nothing to each other)."""
    corpus = bench_placement.large_corpus()
    for index in _PACKED:
        topo, sizes = corpus[index]
        relaxed = placement_milp.relaxation(_pair_costs(topo), list(topo.numa), sizes)
        assert relaxed.sets is not None
        assert bench_placement.cost(topo, relaxed.sets)[0] == relaxed.weight_bound > 0, (index, sizes)
    for index in _PACKED[:2]:
        topo, sizes = corpus[index]
        placed = place(topo, sizes)
        assert placed.gap <= PROD_PLACEMENT_GAP and placed.bound == placed.weight, (index, sizes)
        assert [len(s) for s in placed] == sizes and len({g for s in placed for g in s}) == sum(sizes)


def test_links_by_level_give_a_milp_without_pair_variables(monkeypatch) -> None:
    """Issue 38: where a link depends only on the level where two classes first meet (XGMI inside a hive, PCIe
    between hives: every host of the large corpus), the weight is linear in unary counts per class and per hive, so
    the MILP needs no variables per pair of classes: on corpus case 52 (64 GPUs in 16 classes, two hives; its gap
    was 2.1 %) 428 variables instead of 3,724, and it proves the optimum at its root. The same model proves the
    exact search's optimum on structured hosts of up to 16 GPUs
    (test_the_relaxation_and_the_class_model_against_the_exact_search)."""
    built = []
    solve_model = placement_milp._Model.solve

    def counted(model: placement_milp._Model, *args: object, **kwargs: object) -> object:
        built.append(len(model.objective))
        return solve_model(model, *args, **kwargs)

    monkeypatch.setattr(placement_milp._Model, "solve", counted)
    topo, sizes = bench_placement.large_corpus()[52]
    cost = _pair_costs(topo)
    groups = placement_milp.classes(cost, list(topo.numa))
    assert len(groups) == 16 and placement_milp._hierarchy(groups, cost) is not None
    solved = placement_milp.solve(cost, list(topo.numa), sizes, time_limit=30)
    assert solved.optimal and solved.sets is not None and solved.weight_bound == 1410
    assert bench_placement.cost(topo, solved.sets)[0] == 1410 and built[0] < 1000, built
    # Links that do not follow levels: one hive by its XGMI links, yet two of its GPUs are 104 apart.
    chain = [[0, 30, 104], [30, 0, 30], [104, 30, 0]]
    assert placement_milp._hierarchy([[0], [1], [2]], chain) is None
    hives = [[0, 30, 104], [30, 0, 104], [104, 104, 0]]
    assert placement_milp._hierarchy([[0], [1], [2]], hives) == ([[[0, 1], [2]]], [0, 30, 104])


def test_the_proven_bound_guides_the_milp_to_a_placement(monkeypatch) -> None:
    """Given the relaxation's bound as a cut, the MILP of corpus case 43 (64 GPUs, 11 sets; the relaxation's own
    placement weighs 1,110, 12.6 % above its bound 970) ends its root node with a placement of 990 and keeps the
    bound: a placement found by its clock comes back, not called optimal. (Its optimum is 980: 30 s of HiGHS.) The
    root is bounded by nodes here, not by the clock, so that every machine finds the same."""
    from scipy import optimize

    milp = optimize.milp

    def root_only(*args: object, options: dict, **kwargs: object) -> object:
        return milp(*args, options={**options, "time_limit": 60, "node_limit": 1}, **kwargs)

    monkeypatch.setattr(optimize, "milp", root_only)
    topo, sizes = bench_placement.large_corpus()[43]
    solved = placement_milp.solve(_pair_costs(topo), list(topo.numa), sizes, time_limit=60, weight_bound=970)
    assert not solved.optimal and solved.sets is not None and 969 <= solved.weight_bound <= 980
    assert [len(s) for s in solved.sets] == [s for s in sizes if s > 1]
    assert len({g for s in solved.sets for g in s}) == sum(s for s in sizes if s > 1)
    assert 980 <= bench_placement.cost(topo, solved.sets)[0] <= 990


def test_a_placement_the_milp_found_by_its_clock_is_taken_only_where_lighter(monkeypatch) -> None:
    """The MILP stopped by its clock hands back the best placement it found (not proven): `place` takes it where it
    is lighter than what the search and the relaxation found, and does not call it optimal; a heavier one it
    leaves."""
    monkeypatch.setattr(topology_module, "_NODE_BUDGET", 1)  # the search's greedy placement, and no relaxation's
    monkeypatch.setattr(placement_milp, "relaxation", lambda *_, **__: placement_milp.Relaxation(5, None))
    monkeypatch.setattr(
        placement_neighbourhoods, "improved", lambda _cost, _numa, sets, _deadline: sets
    )  # the MILP's step alone
    topo, sizes = bench_placement.random_topology(18, 0), [5, 1, 5]
    cost = _pair_costs(topo)

    def stopped_with(sets: list[tuple[int, ...]] | None) -> topology_module.Placement:
        monkeypatch.setattr(placement_milp, "solve", lambda *_, **__: placement_milp.MilpResult(sets, 5, False))
        return place(topo, sizes)

    before = stopped_with(None)
    lightest = [s for s in _SubsetSearch(cost, list(topo.numa), sizes).solve() if len(s) > 1]
    heaviest = [tuple(range(5)), tuple(range(5, 10))]
    assert bench_placement.cost(topo, lightest)[0] < before.weight < bench_placement.cost(topo, heaviest)[0]
    taken = stopped_with(lightest)
    assert taken.weight == bench_placement.cost(topo, lightest)[0] and not taken.optimal and taken.bound == before.bound
    assert stopped_with(heaviest) == before and not before.optimal


def test_a_time_limited_solver_bound_is_a_lower_bound() -> None:
    """Stopped by its clock after 20 ms on 16 random GPUs, the solver still proves a bound, and it is below the
    optimum the exact search finds (the bound is what the gap of a placement beyond 16 GPUs rests on)."""
    for seed, sizes in ((0, [4, 4, 4, 4]), (1, [3, 3, 3, 3, 2, 2]), (2, [2] * 8)):
        topo = bench_placement.random_topology(16, seed)
        solved = placement_milp.solve(_pair_costs(topo), list(topo.numa), sizes, time_limit=0.02)
        assert not solved.optimal and solved.sets is None
        assert 0 <= solved.weight_bound <= place(topo, sizes).weight


def test_beyond_sixteen_gpus_the_solver_proves_what_the_search_budget_cannot(monkeypatch) -> None:
    """18 random GPUs with the branch and bound cut to one node: the solver proves the optimum (gap 0; its time
    limit raised so a loaded machine cannot stop it), the same weight and spread as the subset search run beyond
    its 16-GPU limit as an oracle."""
    monkeypatch.setattr(topology_module, "_NODE_BUDGET", 1)
    monkeypatch.setattr(placement_milp, "TIME_LIMIT_SECONDS", 30)
    topo = bench_placement.random_topology(18, 5)
    sizes = [2, 1, 2]
    placed = place(topo, sizes)
    oracle = _SubsetSearch(_pair_costs(topo), list(topo.numa), sizes).solve()
    assert placed.optimal and placed.gap == 0.0 and placed.bound == placed.weight
    assert bench_placement.cost(topo, placed) == bench_placement.cost(topo, oracle)
    assert [len(s) for s in placed] == sizes and len({g for s in placed for g in s}) == sum(sizes)


def test_placement_reports_weight_bound_and_gap() -> None:
    """What a placement proves travels with it: the exact search's is optimal, its bound its weight, gap 0."""
    placed = place(load_topology(MI300X), [4, 4])
    assert placed.optimal and placed.gap == 0.0 and placed.bound == placed.weight > 0
    assert placed.weight == bench_placement.cost(load_topology(MI300X), placed)[0]


def test_more_than_sixteen_flat_gpus_say_when_the_search_stopped_early(monkeypatch) -> None:
    """Beyond EXACT_GPUS the branch and bound has a node budget: a structured host finishes within it (optimal),
    a random 24-GPU matrix does not, nor does the relaxation (the MILP left out, the clock lifted so that only
    counts stop them), and the placement says so with its proven gap."""
    monkeypatch.setattr(placement_milp, "TIME_LIMIT_SECONDS", 30)
    monkeypatch.setattr(placement_milp, "_MILP_PAIRS", 0)
    assert EXACT_GPUS == 16
    structured = topology(
        [[0 if i == j else 15 if i // 8 == j // 8 else 72 for j in range(24)] for i in range(24)],
        [g // 8 for g in range(24)],
    )
    placed = place(structured, [8, 8, 8])
    assert placed == [tuple(range(0, 8)), tuple(range(8, 16)), tuple(range(16, 24))] and placed.optimal
    rough = place(bench_placement.random_topology(24, 0), [4, 4, 4, 4, 4, 4])
    assert (
        not rough.optimal
        and 0 < rough.bound < rough.weight
        and rough.gap == pytest.approx(1 - rough.bound / rough.weight)
    )
    assert len({g for s in rough for g in s}) == 24
    assert place(bench_placement.random_topology(24, 0), [4, 4, 4, 4, 4, 4]) == rough  # a node count: deterministic


@pytest.mark.parametrize("seed, sizes", [(0, [4] * 16), (1, [8] * 8), (2, [2] * 32), (3, [7, 1, 5, 4, 3, 8, 2])])
def test_a_random_64_gpu_table_is_placed_within_a_second(seed: int, sizes: list[int]) -> None:
    """Issue 38: 64 classes of one GPU (no interchangeable GPUs) with up to 32 sets, where building the MILP alone
    took longer than the time limit (1-3 s a placement, 5 s and more with 16 sets): the whole call, wall clock,
    stays within the placement's deadline and a second, and reports the bound the relaxation proved."""
    topo = bench_placement.random_topology(64, seed)
    started = time.perf_counter()
    placed = place(topo, sizes)
    elapsed = time.perf_counter() - started
    assert elapsed <= 1.0, f"{sizes}: {elapsed:.2f} s"
    assert [len(s) for s in placed] == sizes and len({g for s in placed for g in s}) == sum(sizes)
    assert not placed.optimal and 0 < placed.bound < placed.weight


def test_the_milp_is_not_built_beyond_its_size(monkeypatch) -> None:
    """A random 64-GPU table with 8 sets would make a MILP of 33,000 variables (0.16 s to build, 0.2 s past its
    limit to stop): the solver returns at once without building it, proving nothing (bound 0, no sets)."""

    def built(*_: object) -> None:
        raise AssertionError("the MILP was built")

    monkeypatch.setattr(placement_milp._Model, "solve", built)
    topo = bench_placement.random_topology(64, 0)
    started = time.process_time()
    solved = placement_milp.solve(_pair_costs(topo), list(topo.numa), [8] * 8, time_limit=30)
    assert solved == placement_milp.MilpResult(None, 0, False)
    assert time.process_time() - started < 0.05


def test_a_milp_left_less_than_its_stopping_time_is_not_built(monkeypatch) -> None:
    """HiGHS takes up to 0.1 s past its limit to stop and hand back (_STOPPING): a MILP given less than that is not
    built, where before it was built and solved for a millisecond, past the placement's deadline."""

    def built(*_: object) -> None:
        raise AssertionError("the MILP was built")

    monkeypatch.setattr(placement_milp._Model, "solve", built)
    topo, sizes = bench_placement.large_corpus()[52]
    solved = placement_milp.solve(_pair_costs(topo), list(topo.numa), sizes, time_limit=placement_milp._STOPPING / 2)
    assert solved == placement_milp.MilpResult(None, 0, False)


def test_the_search_beyond_sixteen_gpus_stops_at_the_placements_deadline(monkeypatch) -> None:
    """The branch and bound's node budget is a count, but the wall clock of the whole placement bounds it too: with
    the budget lifted (10^5 nodes, several seconds on 48 random GPUs), the search stops at the deadline (0.2 s here)
    and the placement, not proven, still reports the bound of what ran."""
    monkeypatch.setattr(topology_module, "_NODE_BUDGET", 10**5)
    monkeypatch.setattr(placement_milp, "TIME_LIMIT_SECONDS", 0.2)
    topo = bench_placement.random_topology(48, 1)
    started = time.perf_counter()
    placed = place(topo, [6] * 8)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.6, f"{elapsed:.2f} s"
    assert not placed.optimal and 0 < placed.bound < placed.weight
    assert len({g for s in placed for g in s}) == 48


# ----------------------------------------------------------------------------------------------- CLI


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.cli", "topology", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_prints_topology_and_sets() -> None:
    result = cli(MI250, "--partition", "2,2,2,2", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert list(out) == [
        *("gpus", "numa", "weight", "hops", "link_type", "sets", "sets_numa"),
        *("optimal", "sets_weight", "weight_bound", "gap"),
    ]
    assert out["optimal"] is True and out["gap"] == 0.0 and out["sets_weight"] == out["weight_bound"] == 4 * 2 * 15
    assert out["sets"] == [[0, 1], [2, 3], [4, 5], [6, 7]] and out["sets_numa"] == [0, 0, 1, 1]
    assert out["weight"][0][:3] == [0, 15, 30] and out["link_type"][0][:2] == ["SELF", "XGMI"]


def test_cli_places_a_partitioned_host_physical_gpus_first(tmp_path: Path) -> None:
    # 16 logical GPUs = 2 physical GPUs in CPX (8 each; logical GPU i on physical GPU i // 8, AMD SMI docs
    # rocm-systems projects/amdsmi/docs/conceptual/partition.md, "Device enumeration"); hops all 1 (one xGMI fabric).
    path = tmp_path / "cpx.txt"
    path.write_text(matrix_text("Hops between two GPUs", lambda i, j: int(i != j), 16))
    result = cli(path, "--partition", "4,8,4", "--per-gpu", "8", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sets"] == [[8, 9, 10, 11], list(range(8)), [12, 13, 14, 15]]
    result = cli(path, "--partition", "4", "--per-gpu", "3")
    assert result.returncode == 2 and "--per-gpu 3 does not divide the 16 GPUs" in result.stderr


def test_cli_without_partition() -> None:
    result = cli(DATA / "amd_smi_2gpu_pcie_json_before_6.1.1_amdsmi_changelog.json", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "gpus": [0, 1],
        "numa": [None, None],
        "weight": [[0, 40], [40, 0]],
        "hops": [[0, 2], [2, 0]],
        "link_type": [["SELF", "PCIE"], ["PCIE", "SELF"]],
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{empty}"], "empty.txt: the input is empty"),
        (["{text}"], "no topology table found; expected the output of `rocm-smi --showtopo`"),
        (["{mismatch}"], "'Hops between two GPUs' lists GPUs [0, 1] but an earlier table lists GPUs [0, 1, 2, 3]"),
        (["missing.showtopo.txt"], "missing.showtopo.txt: cannot read"),
        ([MI300X, "--partition", "4,x"], "argument --place/--partition: expected sizes like 4,4"),
        ([MI300X, "--partition", "8,8"], "need 16 GPUs but the host has 8"),
        ([MI300X, "--partition", "4,0"], "partition 1 has size 0"),
        ([], "the following arguments are required: file"),
    ],
)
def test_cli_bad_input_one_line_exit_2(args: list, message: str, tmp_path: Path) -> None:
    files = {
        "empty": "",
        "text": "GPU use (%): 0\nsome log line\n",
        "mismatch": matrix_text("Weight between two GPUs", lambda i, j: 15 * (i != j), 4)
        + matrix_text("Hops between two GPUs", lambda i, j: int(i != j), 2),
    }
    for name, content in files.items():
        (tmp_path / f"{name}.txt").write_text(content)
    result = cli(*(str(a).format(**{name: tmp_path / f"{name}.txt" for name in files}) for a in args))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr and "Traceback" not in result.stderr
