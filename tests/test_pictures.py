"""The topology table and the placement pictures (issue 39, items 1 and 2): `rocm-stack topology FILE` prints the
matrix rocm-smi users read (link type and weight per pair, NUMA node per GPU, a legend); `--svg` and `rocm-stack
lock --svg` draw GPUs, links and partitions. The SVG is read with ElementTree, never compared as pixels; the values
it must show are taken from the saved tool output (tests/data/topology, where each file's source is named), not
from the drawing code.
"""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from domain.picture import Partition, host_svg
from domain.topology import load_topology, physical_gpu
from test_topology import DATA, MI250, MI300X_REAL, REPO, cli
from tools import lock as lock_tool

# Real `rocm-smi --showtopo` captures (sources in tests/test_topology.py's docstring).
PCIE_4 = DATA / "rocm_smi_4gpu_pcie_rocm_smi_lib_issue108.txt"
SVG = "{http://www.w3.org/2000/svg}"


def showtopo_tables(path: Path) -> dict[str, list[list[str]]]:
    """The matrices of a `rocm-smi --showtopo` file read straight from its lines (title -> rows of cells)."""
    tables: dict[str, list[list[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        title = re.match(r"=+ (Weight|Link Type) between two GPUs =+", line)
        if title:
            current = tables.setdefault(title.group(1), [])
        elif current is not None and line.startswith("GPU") and not line.startswith("GPU["):
            current.append(line.split()[1:])
        elif not line.strip():
            current = None
    return tables


def table_rows(text: str) -> dict[str, list[str]]:
    """`GPUn` -> its cells, from the rich table's box-drawn rows."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if re.fullmatch(r"GPU\d+", cells[0]) and len(cells) > 2:
            rows[cells[0]] = cells[1:]
    return rows


# --- 1. the table ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [PCIE_4, MI300X_REAL])
def test_the_table_shows_each_pairs_link_type_and_weight_and_each_gpus_numa_node(path: Path) -> None:
    result = cli(path)
    assert result.returncode == 0, result.stderr
    tables = showtopo_tables(path)
    numa = dict(re.findall(r"GPU\[(\d+)\]\s*: \(Topology\) Numa Affinity: (\d+)", path.read_text()))
    rows = table_rows(result.stdout)
    n = len(tables["Weight"])
    assert list(rows) == [f"GPU{i}" for i in range(n)]
    for i in range(n):
        expected = ["-" if i == j else f"{tables['Link Type'][i][j]} {tables['Weight'][i][j]}" for j in range(n)]
        assert rows[f"GPU{i}"] == [*expected, numa[str(i)]], result.stdout
    header = next(line for line in result.stdout.splitlines() if "GPU0" in line and "NUMA" in line)
    assert [c.strip() for c in header.split("┃")[2:-1]] == [*(f"GPU{i}" for i in range(n)), "NUMA"]
    legend = result.stdout.split("Legend", 1)[1]
    for key in ("XGMI", "PCIE", "weight", "NUMA"):
        assert re.search(rf"^{key}\s", legend, re.M), legend


def test_the_table_with_a_placement_gives_each_set_its_gpus_numa_node_and_cost() -> None:
    # 4 GPUs on PCIe, each on its own NUMA node, weight 52 between every two (rocm_smi_lib issue 108).
    result = cli(PCIE_4, "--place", "2,1")
    assert result.returncode == 0, result.stderr
    placement = result.stdout.split("Placement (proven optimal)", 1)[1]
    sets = [line.strip("│ ").split("│") for line in placement.splitlines() if line.startswith("│")]
    assert [[c.strip() for c in row] for row in sets] == [["0", "0,1", "spans", "104"], ["1", "2", "3", "0"]]


def test_json_keeps_the_output_scripts_read() -> None:
    result = cli(PCIE_4, "--place", "2,2", "--json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('{\n  "gpus": [0, 1, 2, 3],\n  "numa": [0, 1, 3, 2],\n  "weight": [\n')
    assert (
        '"sets": [\n    [0, 1],\n    [2, 3]\n  ],\n  "sets_numa": [null, null],\n  "optimal": true,\n'
        '  "sets_weight": 208,\n  "weight_bound": 208,\n  "gap": 0.0\n}' in result.stdout
    )


# --- 2. the pictures ----------------------------------------------------------------------------------------------


def ids(svg: str) -> dict[str, ET.Element]:
    return {g.get("id", ""): g for g in ET.fromstring(svg).iter(f"{SVG}g")}


def fill(group: ET.Element) -> str:
    path = group.find(f"{SVG}path")
    assert path is not None
    found = re.search(r"fill: (#[0-9a-f]{6})", path.get("style", ""))
    assert found, path.get("style")
    return found.group(1)


def text(group: ET.Element) -> str:
    return "".join(group.itertext()).strip()


def centre(group: ET.Element) -> tuple[float, float]:
    path = group.find(f"{SVG}path")
    assert path is not None
    numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", path.get("d", ""))]
    xs, ys = numbers[0::2], numbers[1::2]
    return (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2


def test_the_picture_has_a_node_per_gpu_a_link_per_pair_and_a_group_per_partition(tmp_path: Path) -> None:
    """4x MI250: the link weights differ (15 in a package, 30 or 45 between packages); each link is drawn once with
    its type and weight from the file, each partition's GPUs in its colour, its entry with its cost."""
    out = tmp_path / "mi250.svg"
    result = cli(MI250, "--place", "2,2,2", "--svg", out)
    assert result.returncode == 0, result.stderr
    groups = ids(out.read_text())
    tables = showtopo_tables(MI250)
    gpus = sorted(int(k.removeprefix("gpu-")) for k in groups if k.startswith("gpu-"))
    assert gpus == list(range(8))
    links = {tuple(k.split("-")[1:]) for k in groups if k.startswith("link-")}
    assert links == {
        (str(a), str(b), tables["Link Type"][a][b], tables["Weight"][a][b])
        for a, b in itertools.combinations(range(8), 2)
    }
    entries = {k.removeprefix("partition-"): text(g) for k, g in groups.items() if k.startswith("partition-")}
    sets = {"set 0": [0, 1], "set 1": [2, 3], "set 2": [4, 5]}  # the GCD pairs of a package (test_topology.py)
    assert set(entries) == set(sets)
    for name, members in sets.items():
        cost = sum(
            int(tables["Weight"][a][b]) + int(tables["Weight"][b][a]) for a, b in itertools.combinations(members, 2)
        )
        assert entries[name].endswith(f"· cost {cost}"), entries[name]
        colour = fill(groups[f"swatch-{name}"])
        assert {g for g in gpus if fill(groups[f"gpu-{g}"]) == colour} == set(members)
    assert {fill(groups[f"gpu-{g}"]) for g in (6, 7)} == {"#ffffff"}  # in no partition


def test_gpus_are_grouped_by_numa_node(tmp_path: Path) -> None:
    """Each NUMA node's GPUs sit in one run of the circle: the angles of a node's GPUs are contiguous."""
    topology = load_topology(PCIE_4)
    groups = ids(host_svg("pcie", topology.gpus, topology, [Partition("a", [0, 1])]))
    assert {k for k in groups if k.startswith("numa-")} == {"numa-0", "numa-1", "numa-2", "numa-3"}
    real = load_topology(MI300X_REAL)
    groups = ids(host_svg("mi300", real.gpus, real, []))
    points = {g: centre(groups[f"gpu-{g}"]) for g in real.gpus}
    cx = sum(x for x, _ in points.values()) / len(points)
    cy = sum(y for _, y in points.values()) / len(points)
    around = sorted(real.gpus, key=lambda g: math.atan2(points[g][1] - cy, points[g][0] - cx))
    nodes = [real.numa[g] for g in around]
    changes = sum(nodes[k] != nodes[k - 1] for k in range(len(nodes)))
    assert set(nodes) == {0, 1} and changes == 2, nodes  # two runs on the circle: one per NUMA node


def test_a_partitioned_host_draws_logical_gpus_inside_their_physical_gpu(tmp_path: Path) -> None:
    """CPX: 8 logical GPUs per physical GPU, logical GPU i on physical GPU i // 8 (AMD SMI docs, rocm-systems
    projects/amdsmi/docs/conceptual/partition.md, "Device enumeration"). Without a topology file no link is drawn."""
    gpus = list(range(64))
    svg = host_svg("cpx", gpus, None, [Partition("big", list(range(16))), Partition("small", [16, 17])], per_gpu=8)
    groups = ids(svg)
    assert sorted(int(k.removeprefix("gpu-")) for k in groups if k.startswith("gpu-")) == gpus
    boxes = {int(k.removeprefix("physical-")): g for k, g in groups.items() if k.startswith("physical-")}
    assert sorted(boxes) == list(range(8))
    for g in gpus:
        x, y = centre(groups[f"gpu-{g}"])
        nearest = min(boxes, key=lambda p: math.dist((x, y), centre(boxes[p])))
        assert nearest == physical_gpu(g, 8), g
    assert not [k for k in groups if k.startswith("link-")]
    assert {k for k in groups if k.startswith("partition-")} == {"partition-big", "partition-small"}
    assert "no topology file: links and NUMA nodes unknown" in "".join(ET.fromstring(svg).itertext())


def test_a_placement_not_proven_optimal_says_so_with_its_bound() -> None:
    topology = load_topology(MI300X_REAL)  # XGMI weight 15 between every two GPUs
    parts = [Partition("a", [0, 1]), Partition("b", [2, 3, 4])]
    svg = host_svg("h", topology.gpus, topology, parts, gap=(120 - 100) / 120, bound=100)
    note = "placement NOT proven optimal: proven within 16.7% (total cost 120, the best is at least 100)"
    assert note in ET.fromstring(svg).itertext()
    assert "NOT proven" not in "".join(ET.fromstring(host_svg("h", topology.gpus, topology, parts)).itertext())


# --- the pictures in docs/ are what the commands draw ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("stack", "project", "folder"),
    [("prod", REPO, "prod"), ("cpx", REPO / "docs" / "examples" / "cpx", "cpx")],
)
def test_the_pictures_in_docs_are_current(stack: str, project: Path, folder: str, tmp_path: Path) -> None:
    """Regenerate with `rocm-stack lock --stack prod --svg docs/pictures/prod` and `rocm-stack lock --stack cpx
    --project-dir docs/examples/cpx --svg docs/pictures/cpx` (docs/topology.md)."""
    assert lock_tool.main(["--stack", stack, "--project-dir", str(project), "--svg", str(tmp_path)]) == 0
    committed = REPO / "docs" / "pictures" / folder
    drawn = {p.name: p.read_text() for p in tmp_path.glob("*.svg")}
    assert drawn and drawn == {p.name: p.read_text() for p in committed.glob("*.svg")}
