"""GPU topology of one host, read from saved `rocm-smi --showtopo` / `amd-smi topology` output, and placement.

`parse_topology(text)` / `load_topology(path)` accept, auto-detected:
  * `rocm-smi --showtopo` (or any of --showtopoweight/--showtopohops/--showtopotype/--showtoponuma): the tables
    "Weight between two GPUs", "Hops between two GPUs", "Link Type between two GPUs" and the "Numa Nodes" lines;
  * `amd-smi topology` text: "WEIGHT TABLE:", "HOPS TABLE:", "LINK TYPE TABLE:" (rows/columns are PCI BDFs, GPU
    ids are the row order). amd-smi prints no NUMA node here; append `amd-smi static --numa` to the same file to
    add it;
  * `amd-smi topology --json`, both the ROCm >= 6.1.1 shape (`links` per GPU) and the older one (`weight`,
    `hops`, `link_type` maps keyed `gpu_N`).
Every section is optional; what is present must agree on the GPUs. Neither tool prints the CPUs of a NUMA node,
so a cpuset hint has to come from the host's config (`numa_node_of` gives the node to look up).

`place(topology, sizes)` chooses disjoint GPU sets, see its docstring for the rule; `place_partitioned` does it on a
host whose GPUs are split by a compute partition mode (logical GPUs), physical GPUs first.

CLI: `rocm-stack topology FILE [--place 4,4] [--svg FILE] [--json]` (tools/topology.py): a table, a picture or JSON.

Why one file: the parsers and the placement search share the topology model and its link costs; the search (branch
and bound over the link weights) is most of it.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from domain import placement_milp, placement_neighbourhoods
from domain.gpus import MAX_GPUS_PER_HOST as MAX_GPUS

EXPECTED = (
    "expected the output of `rocm-smi --showtopo` (tables 'Weight between two GPUs', 'Hops between two GPUs', "
    "'Link Type between two GPUs', 'Numa Nodes') or of `amd-smi topology` (WEIGHT/HOPS/LINK TYPE TABLE, "
    "text or --json)"
)

IntMatrix = tuple[tuple[int, ...], ...]
StrMatrix = tuple[tuple[str, ...], ...]


class TopologyError(ValueError):
    """The text is not usable topology output; the message says what was expected."""


class PlacementError(ValueError):
    """The requested partition sizes cannot be placed on the host's GPUs."""


class Topology(BaseModel):
    """One host's GPUs. Matrices are indexed by position in `gpus`; a section missing from the input is None."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpus: tuple[int, ...]
    numa: tuple[int | None, ...]
    weight: IntMatrix | None = None
    hops: IntMatrix | None = None
    link_type: StrMatrix | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        n = len(self.gpus)
        if not 1 <= n <= MAX_GPUS:
            raise ValueError(f"{n} GPUs; 1 to {MAX_GPUS} are supported")
        if list(self.gpus) != sorted(set(self.gpus)):
            raise ValueError(f"GPU ids must be unique and increasing, got {list(self.gpus)}")
        if len(self.numa) != n:
            raise ValueError(f"{len(self.numa)} NUMA entries for {n} GPUs")
        for name in ("weight", "hops", "link_type"):
            matrix = getattr(self, name)
            if matrix is not None and (len(matrix) != n or any(len(row) != n for row in matrix)):
                raise ValueError(f"{name} is not a {n}x{n} matrix")
            if name != "link_type" and matrix is not None and any(v < 0 for row in matrix for v in row):
                raise ValueError(f"{name} has a negative value; link costs are 0 or more")
        return self

    def subset(self, gpus: Sequence[int]) -> Topology:
        """The same host seen through some of its GPUs (those a placement may still use)."""
        keep = [self.gpus.index(g) for g in sorted(gpus)]

        def pick(matrix: tuple | None) -> tuple | None:
            return None if matrix is None else tuple(tuple(matrix[i][j] for j in keep) for i in keep)

        return Topology(
            gpus=tuple(self.gpus[i] for i in keep),
            numa=tuple(self.numa[i] for i in keep),
            weight=pick(self.weight),
            hops=pick(self.hops),
            link_type=pick(self.link_type),
        )


# ---------------------------------------------------------------------------------------------- parsing


def load_topology(path: str | Path) -> Topology:
    """Parse a saved topology file; TopologyError (naming the file) if it cannot be read or is not topology."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise TopologyError(f"{path}: cannot read: {err.strerror or err}") from err
    try:
        return parse_topology(text)
    except TopologyError as err:
        raise TopologyError(f"{path}: {err}") from err


def parse_topology(text: str) -> Topology:
    """Parse rocm-smi / amd-smi topology output, detecting which one it is."""
    text = text.lstrip("\ufeff")
    if not text.strip():
        raise TopologyError(f"the input is empty; {EXPECTED}")
    if text.lstrip()[0] in "[{":
        return _build(*_parse_amd_smi_json(text))
    if _ROCM_SMI_SECTION.search(text):
        return _build(*_parse_rocm_smi(text))
    if _AMD_SMI_TITLE.search(text):
        return _build(*_parse_amd_smi_text(text))
    raise TopologyError(f"no topology table found; {EXPECTED}")


# Each parser returns (gpu ids, {matrix name: rows}, {gpu id: numa node}).
_Parsed = tuple[list[int], dict[str, list[list]], dict[int, int]]


def _build(gpus: list[int], matrices: dict[str, list[list]], numa: dict[int, int]) -> Topology:
    unknown = sorted(set(numa) - set(gpus))
    if unknown:
        raise TopologyError(f"NUMA nodes are given for GPUs {unknown} that the tables do not list (GPUs {gpus})")
    order = sorted(range(len(gpus)), key=gpus.__getitem__)
    reordered = {name: [[rows[i][j] for j in order] for i in order] for name, rows in matrices.items()}
    if "link_type" in reordered:
        # rocm-smi prints 0 on the diagonal, amd-smi SELF; one spelling for both.
        for i, row in enumerate(reordered["link_type"]):
            row[i] = "SELF"
    ids = [gpus[i] for i in order]
    try:
        return Topology(
            gpus=tuple(ids),
            numa=tuple(numa.get(g) for g in ids),
            **{name: tuple(tuple(row) for row in rows) for name, rows in reordered.items()},
        )
    except ValidationError as err:
        raise TopologyError("; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())) from err


def _int_cell(value: object, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    raise TopologyError(f"{where}: expected a whole number, got {value!r}")


# rocm-smi ---------------------------------------------------------------------------------------------

_ROCM_SMI_SECTION = re.compile(
    r"^[\s=]*(weight|hops|link\s+type)\s+between\s+two\s+gpus[\s=]*$|^[\s=]*numa\s+nodes[\s=]*$", re.I | re.M
)
_ROCM_SMI_MATRIX = {"weight": "weight", "hops": "hops", "linktype": "link_type"}
_ROCM_SMI_TITLE = {
    "weight": "Weight between two GPUs",
    "hops": "Hops between two GPUs",
    "link_type": "Link Type between two GPUs",
}
# Newer rocm-smi prints `GPU[0]\t\t: ...`, ROCm 5.x `GPU 0          : ...`.
_ROCM_SMI_NUMA = re.compile(r"^\s*GPU\s*\[?(\d+)\]?\s*:\s*\(Topology\)\s*Numa\s+(Node|Affinity)\s*:\s*(-?\d+)", re.I)
_GPU_LABEL = re.compile(r"^GPU(\d+)$")


def _parse_rocm_smi(text: str) -> _Parsed:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = _ROCM_SMI_SECTION.match(line)
        if header:
            if header.group(1) is None:  # "Numa Nodes": its lines are matched by pattern below
                current = None
                continue
            name = _ROCM_SMI_MATRIX["".join(header.group(1).lower().split())]
            if name in sections:
                raise TopologyError(f"the table '{_ROCM_SMI_TITLE[name]}' appears twice")
            current = sections[name] = []
        elif line.lstrip().startswith("="):  # a banner ends the table ("End of ROCm SMI Log", next section)
            current = None
        elif current is not None:
            current.append(line)

    matrices: dict[str, list[list]] = {}
    gpus: list[int] | None = None
    for name, lines in sections.items():
        ids, rows = _rocm_smi_table(_ROCM_SMI_TITLE[name], lines)
        if gpus is not None and ids != gpus:
            raise TopologyError(f"'{_ROCM_SMI_TITLE[name]}' lists GPUs {ids} but an earlier table lists GPUs {gpus}")
        gpus = ids
        matrices[name] = (
            rows
            if name == "link_type"
            else [
                [_int_cell(v, f"'{_ROCM_SMI_TITLE[name]}' GPU{ids[i]} to GPU{ids[j]}") for j, v in enumerate(row)]
                for i, row in enumerate(rows)
            ]
        )

    numa = _rocm_smi_numa(text)
    if gpus is None:  # only `--showtoponuma`
        if not numa:
            raise TopologyError(f"the 'Numa Nodes' section lists no GPU; {EXPECTED}")
        gpus = sorted(numa)
    return gpus, matrices, numa


def _rocm_smi_table(title: str, lines: list[str]) -> tuple[list[int], list[list[str]]]:
    columns: list[int] | None = None
    rows: dict[int, list[str]] = {}
    for line in lines:
        tokens = line.split()
        if not tokens:
            if rows:
                break  # the table ends at its first blank line after the rows
            continue
        if columns is None:
            labels = [_GPU_LABEL.match(t) for t in tokens]
            if all(labels):
                columns = [int(m.group(1)) for m in labels if m is not None]
            continue
        label = _GPU_LABEL.match(tokens[0])
        if label is None:
            raise TopologyError(f"'{title}': expected a row starting with GPU<n>, got {line.strip()!r}")
        gpu = int(label.group(1))
        if gpu in rows:
            raise TopologyError(f"'{title}': row GPU{gpu} appears twice")
        if len(tokens) - 1 != len(columns):
            raise TopologyError(
                f"'{title}': row GPU{gpu} has {len(tokens) - 1} values, expected {len(columns)} "
                f"(one per column GPU{', GPU'.join(map(str, columns))})"
            )
        rows[gpu] = tokens[1:]
    if columns is None or not rows:
        raise TopologyError(f"'{title}': no table (a GPU0 GPU1 ... header and one row per GPU) follows the title")
    if list(rows) != columns:
        raise TopologyError(
            f"'{title}': rows GPU{', GPU'.join(map(str, rows))} do not match columns "
            f"GPU{', GPU'.join(map(str, columns))}; the matrix must be square"
        )
    return columns, list(rows.values())


def _rocm_smi_numa(text: str) -> dict[int, int]:
    found: dict[str, dict[int, int]] = {"node": {}, "affinity": {}}
    for line in text.splitlines():
        match = _ROCM_SMI_NUMA.match(line)
        if match:
            gpu, kind, value = int(match.group(1)), match.group(2).lower(), int(match.group(3))
            if found[kind].get(gpu, value) != value:
                raise TopologyError(f"GPU{gpu} is given two different NUMA {kind} values")
            found[kind][gpu] = value
    # "Numa Affinity" is the kernel's NUMA node of the GPU's PCI device, the id numactl and cpusets use;
    # "Numa Node" (the CPU node KFD links the GPU to) stands in where it is missing or negative (= unknown).
    valid = {kind: {gpu: node for gpu, node in nodes.items() if node >= 0} for kind, nodes in found.items()}
    return {**valid["node"], **valid["affinity"]}


# amd-smi text -----------------------------------------------------------------------------------------

_AMD_SMI_TITLE = re.compile(r"^\s*([A-Z][A-Z -]*?) TABLE:\s*$", re.M)
_AMD_SMI_MATRIX = {"WEIGHT": "weight", "HOPS": "hops", "LINK TYPE": "link_type"}
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def _parse_amd_smi_text(text: str) -> _Parsed:
    tables: dict[str, list[list[str]]] = {}
    current: list[list[str]] | None = None
    for line in text.splitlines():
        heading = _AMD_SMI_TITLE.match(line)
        if heading:
            current = tables.setdefault(heading.group(1), [])
            if current:
                raise TopologyError(f"'{heading.group(1)} TABLE' appears twice")
        elif not line.strip():
            if current:  # a blank line ends a table that has rows (not one right after its title)
                current = None
        elif current is not None:
            current.append(line.split())

    bdfs: list[str] | None = None
    matrices: dict[str, list[list]] = {}
    for title, rows in tables.items():
        table_bdfs, cells = _amd_smi_table(title, rows)
        if bdfs is not None and table_bdfs != bdfs:
            raise TopologyError(f"'{title} TABLE' lists GPUs {table_bdfs} but an earlier table lists {bdfs}")
        bdfs = table_bdfs
        name = _AMD_SMI_MATRIX.get(title)
        if name == "link_type":
            matrices[name] = cells
        elif name:
            matrices[name] = [
                [_int_cell(v, f"'{title} TABLE' {bdfs[i]} to {bdfs[j]}") for j, v in enumerate(row)]
                for i, row in enumerate(cells)
            ]
    assert bdfs is not None  # detection guarantees one title
    # amd-smi numbers GPUs in BDF order, which is the row order it prints.
    return list(range(len(bdfs))), matrices, _amd_smi_static_numa(text)


def _amd_smi_table(title: str, rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    if not rows or not rows[0] or not all(_BDF.match(t) for t in rows[0]):
        raise TopologyError(f"'{title} TABLE': expected a header of PCI addresses (0000:0c:00.0 ...)")
    columns, body = rows[0], rows[1:]
    labels = [r[0] for r in body]
    if labels != columns:
        raise TopologyError(f"'{title} TABLE': rows {labels} do not match columns {columns}; the matrix must be square")
    for row in body:
        if len(row) - 1 != len(columns):
            raise TopologyError(f"'{title} TABLE': row {row[0]} has {len(row) - 1} values, expected {len(columns)}")
    return columns, [row[1:] for row in body]


def _amd_smi_static_numa(text: str) -> dict[int, int]:
    """NUMA nodes from `amd-smi static --numa` appended to the file (`GPU: 0` ... `NUMA:` ... `NODE: 0`)."""
    numa: dict[int, int] = {}
    gpu: int | None = None
    in_numa = False
    for line in text.splitlines():
        stripped = line.strip()
        if m := re.fullmatch(r"GPU:\s*(\d+)", stripped):
            gpu, in_numa = int(m.group(1)), False
        elif stripped == "NUMA:":
            in_numa = True
        elif in_numa and gpu is not None and (m := re.fullmatch(r"NODE:\s*(-?\d+)", stripped)):
            if int(m.group(1)) >= 0:
                numa[gpu] = int(m.group(1))
            in_numa = False
    return numa


# amd-smi --json ---------------------------------------------------------------------------------------

# JSON key per matrix: ROCm >= 6.1.1 (`links` entries) and before (maps keyed gpu_N).
_JSON_FIELDS = {"weight": ("weight", "weight"), "hops": ("num_hops", "hops"), "link_type": ("link_type", "link_type")}


def _parse_amd_smi_json(text: str) -> _Parsed:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise TopologyError(f"not valid JSON ({err.msg} at line {err.lineno}); {EXPECTED}") from err
    if not isinstance(data, list) or not data or not all(isinstance(e, dict) and "gpu" in e for e in data):
        raise TopologyError(f"JSON is not a list of per-GPU objects with a 'gpu' key; {EXPECTED}")
    gpus = [_int_cell(e["gpu"], "JSON 'gpu'") for e in data]
    if len(set(gpus)) != len(gpus):
        raise TopologyError(f"JSON lists GPU ids {gpus} with duplicates")

    # cells[name][(src, dst)] = value, from whichever JSON shape the entry uses
    cells: dict[str, dict[tuple[int, int], object]] = {name: {} for name in _JSON_FIELDS}
    for entry, src in zip(data, gpus):
        if "links" in entry:
            links = entry["links"]
            if not isinstance(links, list) or not all(isinstance(link, dict) for link in links):
                raise TopologyError(f"JSON GPU {src} 'links': expected a list of objects")
            for link in links:
                dst = _int_cell(link.get("gpu"), f"JSON GPU {src} link 'gpu'")
                for name, (key, _) in _JSON_FIELDS.items():
                    if key in link:
                        cells[name][src, dst] = link[key]
        else:
            for name, (_, key) in _JSON_FIELDS.items():
                per_gpu = entry.get(key, {})
                if not isinstance(per_gpu, dict):
                    raise TopologyError(f"JSON GPU {src} '{key}': expected an object keyed gpu_<n>")
                for dst_key, value in per_gpu.items():
                    dst_match = re.fullmatch(r"gpu_(\d+)", dst_key)
                    if dst_match is None:
                        raise TopologyError(f"JSON GPU {src} '{key}': expected keys gpu_<n>, got {dst_key!r}")
                    cells[name][src, int(dst_match.group(1))] = value

    matrices: dict[str, list[list]] = {}
    for name, values in cells.items():
        if not values:
            continue
        if set(values) != {(a, b) for a in gpus for b in gpus}:
            stray = sorted({p for pair in values for p in pair} - set(gpus))
            detail = f"GPUs {stray} are not listed" if stray else "some GPU pairs are missing"
            raise TopologyError(f"JSON '{name}' is not a full matrix over GPUs {gpus}: {detail}")
        matrices[name] = [
            [
                str(values[a, b])
                if name == "link_type"
                else _int_cell(values[a, b], f"JSON {name} from GPU {a} to GPU {b}")
                for b in gpus
            ]
            for a in gpus
        ]
    if not matrices:
        raise TopologyError(f"JSON has no weight, hops or link_type data; {EXPECTED}")
    return gpus, matrices, {}


# -------------------------------------------------------------------------------------------- placement

# Without a weight table, hops or else the link type stand in as the cost of a pair (lower is closer).
_LINK_RANK = {"SELF": 0, "XGMI": 1, "PCIE": 2}


class Placement(list[tuple[int, ...]]):
    """The chosen sets in request order (GPU ids, ascending per set), and what the search proved about them.

    `weight` is their total link weight (the rule's first criterion; a pair counts its table entries both ways),
    `bound` a proven lower bound on the weight of any placement of the same sizes, so `gap` = (weight - bound) /
    weight is how much lighter the best placement can be at most (0.0: none is). `optimal`: proven optimal by the
    rule (weight, then NUMA spread, then lowest indices; beyond EXACT_GPUS weight and spread, ties as the search or
    the solver found them); it implies a gap of 0.
    """

    def __init__(
        self, sets: Iterable[tuple[int, ...]] = (), optimal: bool = True, weight: int = 0, bound: int | None = None
    ) -> None:
        super().__init__(sets)
        self.optimal = optimal
        self.weight = weight
        self.bound = weight if optimal else min(bound or 0, weight)

    @property
    def gap(self) -> float:
        return (self.weight - self.bound) / self.weight if self.weight else 0.0


# Up to this many GPUs `place` is exact (`_SubsetSearch`); a larger flat host gets the budgeted branch and bound.
EXACT_GPUS = 16


def place(topology: Topology, sizes: Sequence[int]) -> Placement:
    """Choose disjoint GPU sets of the requested sizes (in request order); returns GPU ids, ascending per set.

    Rule, in this priority: (1) minimise the total link weight inside the sets (weight table; without one the
    hops table, else the link type XGMI < PCIE); (2) keep each set on one NUMA node where possible (fewest
    extra NUMA nodes spanned, summed over the sets); (3) remaining ties go to the lowest GPU indices
    (lexicographic in request order). Weight comes first because it already grows across sockets for PCIe paths,
    while an XGMI link beats socket locality for GPU-to-GPU traffic. Up to EXACT_GPUS GPUs the answer is proven
    optimal (`_SubsetSearch`, dynamic programming over GPU subsets). On more GPUs (a flat host; partitioned hosts
    place physical GPUs first, see `place_partitioned`) a branch and bound runs within `_NODE_BUDGET` search nodes
    (a count, not a clock): exact when it finishes, which structured topologies do. Otherwise
    domain/placement_milp.py counts GPUs per class of interchangeable GPUs: its relaxation proves a lower bound on
    the weight, the placement's `gap`, and offers a placement taken where it is cheaper; then its MILP may raise the
    bound and replaces the sets where it finds cheaper ones, and a neighbourhood search
    (domain/placement_neighbourhoods.py) lightens the sets further while it can. All of it within
    placement_milp.TIME_LIMIT_SECONDS of wall clock from the call: each step stops at that deadline with what it
    has proven.
    """
    n = len(topology.gpus)
    if n > EXACT_GPUS:
        # SciPy (HiGHS), which the steps beyond the exact search may need, costs 0.2-1.2 s to import, once per
        # process: paid inside the deadline, the first placement of a process proved less (large corpus case 34:
        # 2.3 %, above prod's 2 %, where every later call proves 1.7 %). Imported before the clock starts.
        import scipy.optimize  # noqa: F401
    started, cpu_started = time.perf_counter(), time.process_time()
    sizes = list(sizes)
    for index, size in enumerate(sizes):
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise PlacementError(f"partition {index} has size {size!r}; sizes must be whole numbers >= 1")
    if sum(sizes) > n:
        raise PlacementError(
            f"partitions {sizes} need {sum(sizes)} GPUs but the host has {n} (GPUs {list(topology.gpus)})"
        )
    cost, numa = _pair_costs(topology), list(topology.numa)
    bound = None
    if n <= EXACT_GPUS:
        chosen, optimal = _SubsetSearch(cost, numa, sizes).solve(), True
    else:
        deadline = started + placement_milp.TIME_LIMIT_SECONDS
        search = _BranchAndBound(cost, numa, sizes, deadline)
        chosen = search.solve()
        optimal, bound = not search.stopped, search.root_bound
        if not optimal:
            relaxed = placement_milp.relaxation(cost, numa, sizes, deadline)
            bound = max(bound, relaxed.weight_bound)
            if relaxed.sets is not None:
                candidate = _with_single_gpus(search, relaxed.sets, sizes)
                chosen = candidate if search.key(candidate) < search.key(chosen) else chosen
            # The MILP, which also weighs the NUMA spread, gets what is left of the placement's time limit.
            left = deadline - time.perf_counter()
            if left > 0:
                # The bound proven so far guides the MILP's search where a lighter placement may exist.
                proven = bound if bound < search.key(chosen)[0] else 0
                # Where there is time and CPU for both, the MILP leaves some to the neighbourhood search below.
                cpu = (time.process_time() - cpu_started) / (time.perf_counter() - started)
                to_search = placement_neighbourhoods.left_to_search(left, cpu)
                solved = placement_milp.solve(cost, numa, sizes, time_limit=left - to_search, weight_bound=proven)
                bound = max(bound, solved.weight_bound)
                if solved.sets is not None:
                    # The sets found before where they cost as much, so a proven optimum is the same on every
                    # machine; what the MILP found by its clock (not proven) only where strictly cheaper.
                    better = search.key(solved.sets) < search.key(chosen)
                    chosen = _with_single_gpus(search, solved.sets, sizes) if better else chosen
                    optimal = solved.optimal
            if not optimal and search.key(chosen)[0] > bound:
                # What is left: the large-neighbourhood search from the lightest placement so far.
                found = placement_neighbourhoods.improved(cost, numa, [s for s in chosen if len(s) > 1], deadline)
                if search.key(found) < search.key(chosen):
                    chosen = _with_single_gpus(search, found, sizes)
    weight = _weight(cost, chosen)
    return Placement((tuple(topology.gpus[p] for p in positions) for positions in chosen), optimal, weight, bound)


def _weight(cost: list[list[int]], sets: Sequence[Sequence[int]]) -> int:
    return sum(cost[a][b] for positions in sets for a, b in itertools.combinations(positions, 2))


def _with_single_gpus(search: _BranchAndBound, sets: list[tuple[int, ...]], sizes: list[int]) -> list[tuple[int, ...]]:
    """The solver's sets (sizes > 1, in request order) with the sets of one GPU on the lowest GPUs left, in request
    order as the lowest-index rule orders equal sizes."""
    free = sorted(set(range(search.n)) - {g for members in sets for g in members})
    singles = [(g,) for g in free[: sizes.count(1)]]
    return search._in_request_order([*sets, *singles], [s for s in sizes if s > 1] + [1] * len(singles))


def numa_node_of(topology: Topology, gpus: Sequence[int]) -> int | None:
    """The NUMA node all of `gpus` sit on, or None (they span nodes, or a node is unknown)."""
    unknown = sorted(set(gpus) - set(topology.gpus))
    if unknown:
        raise ValueError(f"GPUs {unknown} are not in the topology (GPUs {list(topology.gpus)})")
    nodes = {topology.numa[topology.gpus.index(g)] for g in gpus}
    return nodes.pop() if len(nodes) == 1 else None


def set_cost(topology: Topology, gpus: Sequence[int]) -> int:
    """What `place` minimises for one set: the link cost of each pair of its GPUs (weight, else hops, else link type;
    both directions), summed."""
    cost = _pair_costs(topology)
    at = [topology.gpus.index(g) for g in gpus]
    return sum(cost[a][b] for a, b in itertools.combinations(at, 2))


def _informative(matrix: IntMatrix | None) -> bool:
    """A table with a non-zero link: one that is all zeros says nothing about which GPUs are closer."""
    return matrix is not None and any(v for i, row in enumerate(matrix) for j, v in enumerate(row) if i != j)


def cost_basis(topology: Topology) -> str | None:
    """The table a pair's cost comes from: "weight", "hops", "link_type", or None (no links known: all equal)."""
    # An all-zero weight table (ROCm 7.x `amd-smi topology` prints one on MI355X, issue 14) would make every set
    # look equally close: hops, else the link type, decide instead.
    if _informative(topology.weight):
        return "weight"
    if _informative(topology.hops):
        return "hops"
    return "link_type" if topology.link_type is not None else None


def _pair_costs(topology: Topology) -> list[list[int]]:
    n = len(topology.gpus)
    basis = cost_basis(topology)
    if basis == "link_type":
        unknown = max(_LINK_RANK.values()) + 1
        matrix: Sequence[Sequence[int]] = [
            [_LINK_RANK.get(t.upper(), unknown) for t in row]
            for row in topology.link_type  # type: ignore[union-attr]
        ]
    elif basis is not None:
        matrix = getattr(topology, basis)
    else:
        matrix = [[0] * n for _ in range(n)]
    # Both directions count, so an asymmetric table still gives one cost per pair.
    return [[0 if i == j else matrix[i][j] + matrix[j][i] for j in range(n)] for i in range(n)]


def physical_gpu(logical: int, per_gpu: int) -> int:
    """The physical GPU of a logical GPU when each shows `per_gpu`: the logical GPUs of one physical GPU are numbered
    consecutively (AMD SMI docs, rocm-systems projects/amdsmi/docs/conceptual/partition.md: an 8xMI300X in CPX shows
    IDs 0-63, the partitions of one GPU share its bus address `0000:0c:00.0` ... `.7`, and its render nodes are
    renderD128-135, the next physical GPU's start at renderD136)."""
    return logical // per_gpu


def place_partitioned(topology: Topology | None, free: Sequence[int], sizes: Sequence[int], per_gpu: int) -> Placement:
    """`place` on a host whose physical GPUs each show `per_gpu` logical GPUs (a compute partition mode).

    `free` are the logical GPUs still free, `topology` (if any) is over all logical GPUs. A set larger than
    `per_gpu` (a multiple of it) takes whole free physical GPUs, chosen by `place` on the physical GPUs (their link
    cost is the cheapest link between their logical GPUs); a set of at most `per_gpu` stays on one physical GPU:
    largest sets first, each on the physical GPU with the fewest free logical GPUs that still fit it (lowest index
    on ties), then `place` chooses the logical GPUs inside each physical GPU. Returns sets in request order,
    optimal (by this rule) when every `place` in it is.
    """
    sizes = list(sizes)
    for index, size in enumerate(sizes):
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise PlacementError(f"partition {index} has size {size!r}; sizes must be whole numbers >= 1")
        if size > per_gpu and size % per_gpu:
            raise PlacementError(
                f"partition {index} has size {size}, which would split a physical GPU of "
                f"{per_gpu} logical GPUs; use at most {per_gpu} or a multiple of it"
            )
    if sum(sizes) > len(free):
        raise PlacementError(f"partitions {sizes} need {sum(sizes)} GPUs but {len(free)} are free (GPUs {list(free)})")
    if topology is None:  # no links known: every set costs the same, the lowest indices win
        topology = Topology(gpus=tuple(sorted(free)), numa=(None,) * len(free))
    free_of: dict[int, list[int]] = {}
    for gpu in sorted(free):
        free_of.setdefault(physical_gpu(gpu, per_gpu), []).append(gpu)
    whole = [p for p, gpus in free_of.items() if len(gpus) == per_gpu]
    chosen: dict[int, tuple[int, ...]] = {}
    optimal, weight, bound = True, 0, 0

    large = [k for k, size in enumerate(sizes) if size > per_gpu]
    if large:
        need = [sizes[k] // per_gpu for k in large]
        if sum(need) > len(whole):
            raise PlacementError(
                f"partitions {[sizes[k] for k in large]} need {sum(need)} whole physical GPUs of "
                f"{per_gpu} logical GPUs but {len(whole)} are free (physical GPUs {whole})"
            )
        placed = place(_physical_topology(topology, whole, per_gpu), need)
        optimal, weight, bound = placed.optimal, placed.weight, placed.bound
        for k, physical in zip(large, placed):
            chosen[k] = tuple(g for p in physical for g in free_of.pop(p))

    room = {p: len(gpus) for p, gpus in free_of.items()}
    on: dict[int, list[int]] = {}
    for k in sorted((k for k, size in enumerate(sizes) if size <= per_gpu), key=lambda k: -sizes[k]):
        fits = [p for p in room if room[p] >= sizes[k]]
        if not fits:
            raise PlacementError(
                f"partition {k} of size {sizes[k]} fits on no physical GPU: free logical GPUs per physical GPU "
                f"{ {p: room[p] for p in sorted(room)} } (a set of at most {per_gpu} stays on one physical GPU)"
            )
        p = min(fits, key=lambda p: (room[p], p))
        room[p] -= sizes[k]
        on.setdefault(p, []).append(k)
    for p, ks in on.items():
        ks.sort()
        inside = place(topology.subset(free_of[p]), [sizes[k] for k in ks])
        optimal = optimal and inside.optimal
        weight, bound = weight + inside.weight, bound + inside.bound
        for k, gpus in zip(ks, inside):
            chosen[k] = gpus
    return Placement((chosen[k] for k in range(len(sizes))), optimal, weight, bound)


def _physical_topology(topology: Topology, physical: list[int], per_gpu: int) -> Topology:
    """The physical GPUs `physical` as a topology of their own: the cost of a pair is the cheapest link between
    their logical GPUs, the NUMA node the one all their logical GPUs share (else unknown)."""
    cost = _pair_costs(topology)
    position = {g: i for i, g in enumerate(topology.gpus)}
    members = {p: [position[g] for g in range(p * per_gpu, (p + 1) * per_gpu)] for p in physical}
    numa = []
    for p in physical:
        nodes = {topology.numa[i] for i in members[p]}
        numa.append(nodes.pop() if len(nodes) == 1 else None)
    weight = tuple(
        tuple(0 if p == q else min(cost[a][b] for a in members[p] for b in members[q]) for q in physical)
        for p in physical
    )
    return Topology(gpus=tuple(physical), numa=tuple(numa), weight=weight)


class _SubsetSearch:
    """Exact placement by dynamic programming over GPU subsets (up to EXACT_GPUS GPUs).

    A set's cost is its key: weight * scale + NUMA spread, so that comparing sums compares (weight, spread) in the
    rule's order. `_best(free, counts, ...)` is the least cost of placing the sets `counts` (how many of each
    distinct size) inside the GPU mask `free`: the lowest free GPU g either stays unused (when there is room) or is
    the lowest member of one of the sets, and each subproblem is solved once (memo on (free, counts)). A set of one
    GPU costs nothing, like an unused GPU, so sets of size 1 only take room. Bounds only skip work, never change a
    value: `_best` is exact below its bound `ub` and otherwise returns a lower bound >= ub, and the memo records
    which. The other sets cost at least their optimum on the GPUs other than g (itself a subproblem) and at least
    the cheapest set of each size; g's candidate sets are tried cheapest first, so the loop stops at the first that
    cannot improve. The answer is the lowest-index optimum: each request in turn takes the first set, in index
    order, with which the rest can still reach the optimum.
    """

    def __init__(self, cost: list[list[int]], numa: list[int | None], sizes: list[int]) -> None:
        n = self.n = len(cost)
        self.requested = sizes
        self.scale = n + 1  # the spread summed over all sets is below n + 1
        self.distinct = sorted(set(sizes))
        self.key: dict[int, int] = {}  # set (GPU mask) -> cost, for every set of a requested size
        self.by_low: dict[int, list[list[tuple[int, int]]]] = {}  # size -> per lowest GPU: (cost, set), cheapest first
        self.cheapest: dict[int, list[tuple[int, int]]] = {}  # size -> every (cost, set), cheapest first
        # A GPU's links to a set of GPUs, looked up by the set's low and high halves: one step per set listed.
        half = (n + 1) // 2
        low_half = (1 << half) - 1
        lo = [[0] * (1 << half) for _ in range(n)]
        hi = [[0] * (1 << n - half) for _ in range(n)]
        for g in range(n):
            row, row_lo, row_hi = cost[g], lo[g], hi[g]
            for m in range(1, 1 << half):
                row_lo[m] = row_lo[m & m - 1] + row[(m & -m).bit_length() - 1]
            for m in range(1, 1 << n - half):
                row_hi[m] = row_hi[m & m - 1] + row[half + (m & -m).bit_length() - 1]
        nodes = sorted({node for node in numa if node is not None})
        node_bit = [0 if node is None else 1 << nodes.index(node) for node in numa]
        lo_nodes, hi_nodes = [0] * (1 << half), [0] * (1 << n - half)
        for m in range(1, 1 << half):
            lo_nodes[m] = lo_nodes[m & m - 1] | node_bit[(m & -m).bit_length() - 1]
        for m in range(1, 1 << n - half):
            hi_nodes[m] = hi_nodes[m & m - 1] | node_bit[half + (m & -m).bit_length() - 1]
        weight = {0: 0}  # sets of the size being built, each grown by a GPU above its members
        for size in range(1, max(sizes, default=0) + 1):
            # Only sets that can still grow to the next requested size: room for its other members above the top.
            top = n - (min(s for s in self.distinct if s >= size) - size)
            weight = {
                m | 1 << g: w + lo[g][m & low_half] + hi[g][m >> half]
                for m, w in weight.items()
                for g in range(m.bit_length(), top)
            }
            if size in self.distinct:
                listed = sorted(
                    (w * self.scale + max((lo_nodes[m & low_half] | hi_nodes[m >> half]).bit_count() - 1, 0), m)
                    for m, w in weight.items()
                )
                self.cheapest[size] = listed
                self.key.update((m, k) for k, m in listed)
                per_low: list[list[tuple[int, int]]] = [[] for _ in range(n)]
                for k, m in listed:
                    per_low[(m & -m).bit_length() - 1].append((k, m))
                self.by_low[size] = per_low
        self.memo: dict[tuple[int, tuple[int, ...]], tuple[int, bool]] = {}

    def solve(self) -> list[tuple[int, ...]]:
        if not self.requested:
            return []
        free = (1 << self.n) - 1
        counts = tuple(self.requested.count(size) if size > 1 else 0 for size in self.distinct)
        left = sum(size for size in self.requested if size > 1)
        target = self._best(free, counts, left, self._upper_bound() + 1)
        sets = []
        for size in self.requested:
            i = self.distinct.index(size)
            after = counts[:i] + (counts[i] - 1,) + counts[i + 1 :] if size > 1 else counts
            rest = left - size if size > 1 else left
            floor = self._floor(after)
            for members in itertools.combinations([g for g in range(self.n) if free >> g & 1], size):
                m = sum(1 << g for g in members)
                k = self.key.get(m, 0)  # size 1: no cost
                if k + floor <= target and self._best(free ^ m, after, rest, target - k + 1) == target - k:
                    break
            sets.append(members)
            free, counts, left, target = free ^ m, after, rest, target - k
        return sets

    def _floor(self, counts: tuple[int, ...]) -> int:
        """The sets `counts` cost at least the cheapest set of each size."""
        return sum(c * self.cheapest[size][0][0] for size, c in zip(self.distinct, counts) if c)

    def _upper_bound(self) -> int:
        """The cost of a good solution, to prune with from the start: largest sets first, each the cheapest that
        fits, then GPUs swapped between sets (or with unused GPUs) while that lowers the cost."""
        free = (1 << self.n) - 1
        masks = []
        for size in sorted((s for s in self.requested if s > 1), reverse=True):
            m = next(m for _, m in self.cheapest[size] if m & free == m)
            masks.append(m)
            free ^= m
        masks.append(free)  # unused GPUs (and sets of one), at no cost

        def cost(i: int, m: int) -> int:
            return 0 if i == len(masks) - 1 else self.key[m]

        def members(m: int) -> list[int]:
            return [g for g in range(self.n) if m >> g & 1]

        improved = True
        while improved:
            improved = False
            for i, j in itertools.combinations(range(len(masks)), 2):
                now = cost(i, masks[i]) + cost(j, masks[j])
                for a, b in itertools.product(members(masks[i]), members(masks[j])):
                    swap = 1 << a | 1 << b
                    if cost(i, masks[i] ^ swap) + cost(j, masks[j] ^ swap) < now:
                        masks[i] ^= swap
                        masks[j] ^= swap
                        improved = True
                        break
        return sum(cost(i, m) for i, m in enumerate(masks))

    def _best(self, free: int, counts: tuple[int, ...], left: int, ub: int) -> int:
        """The least cost of the sets `counts` (`left` GPUs in all) inside `free`, if below `ub`; else a lower bound
        of it that is >= ub."""
        if not left:
            return 0
        state = (free, counts)
        known = self.memo.get(state)
        if known is not None and (known[1] or known[0] >= ub):
            return known[0]
        if sum(counts) == 1:  # one set left: the cheapest of its size inside `free`
            best = ub
            for k, m in self.cheapest[left]:
                if k >= ub:
                    break
                if m & free == m:
                    best = k
                    break
            self.memo[state] = (best, best < ub)
            return best
        low = free & -free
        g = low.bit_length() - 1
        best = self._best(free ^ low, counts, left, ub) if free.bit_count() > left else _INFINITE
        for i, size in enumerate(self.distinct):
            if not counts[i]:
                continue
            after = counts[:i] + (counts[i] - 1,) + counts[i + 1 :]
            options = self.by_low[size][g]
            first = next((k for k, m in options if m & free == m), None)
            if first is None:
                continue
            # The other sets, wherever g's set goes, cost at least their optimum on the GPUs other than g.
            floor = max(self._floor(after), self._best(free ^ low, after, left - size, min(ub, best) - first))
            for k, m in options:
                limit = min(ub, best)
                if k + floor >= limit:
                    break
                if m & free == m:
                    best = min(best, k + self._best(free ^ m, after, left - size, limit - k))
        # Not below ub: every option was shown to cost at least ub, which is all that is known.
        best = min(best, ub)
        self.memo[state] = (best, best < ub)
        return best


_INFINITE = sys.maxsize


# Listing every s-set to find each GPU's cheapest one is worth it up to this many sets (C(16, 5) = 4368).
_MAX_LISTED_SETS = 5000
# Nodes (calls of `_grow`) the search may visit, both passes together: a count, not a clock, so the answer is the
# same on every machine. Real hosts' searches need far fewer; random 16-GPU matrices would otherwise take seconds.
_NODE_BUDGET = 1200
# How often (in nodes) the search reads the clock of its deadline, which only a machine too loaded to visit its
# budget in time meets (1,200 nodes on 64 GPUs: 0.1 s of CPU).
_CLOCK_NODES = 64


class _OutOfBudget(Exception):
    """The search visited its node budget or met its deadline."""


class _BranchAndBound:
    """Exact search over the sets, built one GPU at a time, in two passes.

    1. The optimum cost: largest sets first, cheaper GPUs first, and a branch is cut as soon as a lower bound
       on its cost cannot beat the best solution so far (a greedy solution to start with).
    2. The lowest-index solution of that cost: the same search in index order, cutting every branch whose
       bound exceeds the optimum and stopping at the first solution, which is the lexicographically first.

    Both passes together visit at most `_NODE_BUDGET` nodes and stop at the deadline. If pass 1 runs out, the best
    solution so far (the incumbent: the greedy one or a later improvement) is the answer; if pass 2 does, pass 1's
    optimum is.

    Bounds rest on shares: a set's cost is at least the sum of its members' shares, where a GPU's share in a set
    of size s is either half its s - 1 cheapest links ("star") or 1/s of the cheapest s-set containing it.
    Shares are counted in 1/unit of a pair cost so that they stay whole numbers.
    """

    def __init__(
        self, cost: list[list[int]], numa: list[int | None], sizes: list[int], deadline: float = math.inf
    ) -> None:
        self.cost, self.numa, self.sizes, self.n = cost, numa, sizes, len(cost)
        self.deadline = deadline
        self.stopped = False  # out of budget or time: the answer is the best found, not proven
        self.by_cost = [sorted((h for h in range(self.n) if h != g), key=cost[g].__getitem__) for g in range(self.n)]
        # Interchangeable GPUs (same NUMA node, same cost to every other GPU): swapping one for a lower-index
        # twin never changes the cost and lowers the indices, so only the lowest free twin is ever tried.
        self.twins = [[a for a in range(g) if placement_milp.interchangeable(cost, numa, a, g)] for g in range(self.n)]
        self.unit = 2 * math.lcm(*sizes)
        self.listed_shares = {size: self._listed_shares(size) for size in set(sizes)}
        self.sets: list[tuple[int, ...]] = []
        self.attach = [0] * self.n  # cost of joining each GPU to the set being built
        self.limit = (0, 0)  # pass 1: best (weight, spread) so far; pass 2: the optimum
        self.lowest_index = False  # which pass
        self.found: list[tuple[int, ...]] | None = None
        self.requested = sizes
        self.incumbent: list[tuple[int, ...]] = []  # best solution so far, in request order
        self.nodes = 0
        self.root_bound = 0  # proven lower bound on the weight: the first node's bound

    def solve(self) -> list[tuple[int, ...]]:
        if not self.sizes:
            return []
        full = (1 << self.n) - 1
        self.limit, greedy = self._greedy()
        self.incumbent = self._in_request_order(greedy, self.requested)
        # The optimum does not depend on the order of the sets, and searching large sets first prunes best.
        self.sizes = sorted(self.requested, reverse=True)
        try:
            self._next_set(0, full, 0, 0)
            self.sizes, self.lowest_index = self.requested, True
            self._next_set(0, full, 0, 0)
        except _OutOfBudget:
            self.stopped = True
            return self.incumbent
        assert self.found is not None  # pass 1 proved a solution of cost `limit` exists
        return self.found

    def _in_request_order(self, sets: Sequence[Sequence[int]], sizes: list[int]) -> list[tuple[int, ...]]:
        """`sets` (of `sizes`) in request order, ascending each; among equal sizes the earlier request gets the set
        with the lowest GPU, as the lowest-index rule would."""
        by_size: dict[int, list[tuple[int, ...]]] = {}
        for size, members in zip(sizes, sets):
            by_size.setdefault(size, []).append(tuple(sorted(members)))
        for group in by_size.values():
            group.sort(reverse=True)
        return [by_size[size].pop() for size in self.requested]

    def key(self, sets: Sequence[Sequence[int]]) -> tuple[int, int]:
        """(weight, NUMA spread) of a placement: what the rule minimises, in its order."""
        return sum(self._set_cost(s) for s in sets), sum(self._spread(s) for s in sets)

    def _spread(self, members: Sequence[int]) -> int:
        return max(len({self.numa[g] for g in members if self.numa[g] is not None}) - 1, 0)

    def _set_cost(self, members: Sequence[int]) -> int:
        return sum(self.cost[a][b] for a, b in itertools.combinations(members, 2))

    def _cut(self, bound: tuple[int, int]) -> bool:
        if self.lowest_index:
            return self.found is not None or bound > self.limit
        return bound >= self.limit

    def _greedy(self) -> tuple[tuple[int, int], list[list[int]]]:
        """A quick solution and its cost: each set grown from its best seed by adding the GPU that adds the least
        (link cost to the members, then NUMA spread; the lowest index on ties). Each GPU's cost to the members is
        kept up to date as they join, not summed again per candidate (on 64 GPUs this was most of the search's
        time, which a loaded machine takes from the relaxation's)."""
        free = set(range(self.n))
        total = (0, 0)
        sets = []
        for size in self.sizes:
            order = sorted(free)
            options = []
            for seed in order:
                members, taken, weight = [seed], {seed}, 0
                attach = list(self.cost[seed])
                nodes = {self.numa[seed]} - {None}
                while len(members) < size:
                    best: tuple[tuple[int, int], int] | None = None
                    for g in order:
                        if g in taken:
                            continue
                        node = self.numa[g]
                        spread = max(len(nodes) + (node is not None and node not in nodes) - 1, 0)
                        if best is None or (attach[g], spread) < best[0]:
                            best = (attach[g], spread), g
                    assert best is not None
                    g = best[1]
                    weight += attach[g]
                    members.append(g)
                    taken.add(g)
                    nodes |= {self.numa[g]} - {None}
                    row = self.cost[g]
                    attach = [a + c for a, c in zip(attach, row)]
                options.append(((weight, max(len(nodes) - 1, 0)), members))
            key, members = min(options)
            free -= set(members)
            sets.append(members)
            total = (total[0] + key[0], total[1] + key[1])
        return total, sets

    def _listed_shares(self, size: int) -> list[int] | None:
        """Each GPU's share as 1/size of the cheapest size-set containing it, if listing the sets is cheap."""
        if size == 1 or math.comb(self.n, size) > _MAX_LISTED_SETS:
            return None
        cheapest = [sys.maxsize] * self.n
        for members in itertools.combinations(range(self.n), size):
            set_cost = self._set_cost(members)
            for g in members:
                cheapest[g] = min(cheapest[g], set_cost)
        return [c * (self.unit // size) for c in cheapest]

    def _shares(self, size: int, free: int, members: list[int]) -> list[int]:
        """Per GPU, a share for sets of `size` drawn from `free` (whichever kind adds up to more there)."""
        star = [0] * self.n
        for g in members:
            links = itertools.islice((self.cost[g][h] for h in self.by_cost[g] if free >> h & 1), size - 1)
            star[g] = sum(links) * (self.unit // 2)
        listed = self.listed_shares.get(size)
        if listed is not None and sum(listed[g] for g in members) > sum(star[g] for g in members):
            return listed
        return star

    def _joining(self, candidates: list[int], need: int) -> list[int]:
        """Per candidate, twice what it adds if it joins the set being built: its links to the members so far
        twice, plus its `need - 1` cheapest links to other candidates (each link among the newcomers is then
        counted at least once from either end)."""
        allowed = set(candidates)
        doubled = []
        for g in candidates:
            among = 0
            if need > 1:
                among = sum(itertools.islice((self.cost[g][h] for h in self.by_cost[g] if h in allowed), need - 1))
            doubled.append(2 * self.attach[g] + among)
        return doubled

    def _next_set(self, k: int, free: int, weight: int, spread: int) -> None:
        if k == len(self.sizes):
            if self.lowest_index and self.found is None and (weight, spread) == self.limit:
                self.found = list(self.sets)
            elif not self.lowest_index and (weight, spread) < self.limit:
                self.limit = (weight, spread)
                self.incumbent = self._in_request_order(self.sets, self.sizes)
            return
        # Equal-size requests are interchangeable; the lowest-index answer gives the earlier one the lower GPU.
        first = (
            next((s[0] + 1 for size, s in zip(self.sizes[k - 1 :: -1], self.sets[::-1]) if size == self.sizes[k]), 0)
            if k
            else 0
        )
        members = [g for g in range(self.n) if free >> g & 1]
        rest = self.sizes[k + 1 :]
        shares = {size: self._shares(size, free, members) for size in set(rest)}
        # c sets of size s take c * s distinct GPUs: at least the c * s smallest shares.
        units = sum(
            sum(sorted(shares[size][g] for g in members)[: size * count]) for size, count in Counter(rest).items()
        )
        later = complement = None
        if rest and sum(self.sizes[k:]) == len(members):
            # Every free GPU joins this set or a later one: it costs at least its smallest later share.
            later = [min(share[g] for share in shares.values()) for g in range(self.n)]
            if len(rest) == 1:
                # The last set T is the complement of this one, S, within the free GPUs F. Since
                # cost(F) = cost(S) + cost(T) + links(S, T): cost(S) + cost(T) = cost(F) - deg(S) + 2 cost(S),
                # deg(S) being the summed link cost of S's members to all of F; bounding that sees T's cost.
                degree = [-sum(self.cost[g][h] for h in members) for g in range(self.n)]
                complement = _Complement(self._set_cost(members), degree)
        self._grow(k, [], free, first, weight, spread, _Plan(units, later, complement))

    def _bound(self, members: list[int], free: int, candidates: list[int], need: int, weight: int, plan: _Plan) -> int:
        """Lower bound on the total weight of any solution through this node."""
        joining = self._joining(candidates, need)
        half = self.unit // 2
        units = weight * self.unit + sum(sorted(joining)[:need]) * half + plan.units
        if plan.later is not None:
            later = plan.later
            shares = sum(later[g] for g in range(self.n) if free >> g & 1)
            extra = sum(sorted(j * half - later[g] for g, j in zip(candidates, joining))[:need])
            units = max(units, weight * self.unit + shares + extra)
        bound = -(-units // self.unit)
        if plan.complement is not None:
            c = plan.complement
            partial = self._set_cost(members)
            bound = max(
                bound,
                weight
                + partial
                + c.free_cost
                + sum(c.degree[g] for g in members)
                + sum(sorted(j + c.degree[g] for g, j in zip(candidates, joining))[:need]),
            )
        return bound

    def _grow(self, k: int, members: list[int], free: int, start: int, weight: int, spread: int, plan: _Plan) -> None:
        self.nodes += 1
        if self.nodes > _NODE_BUDGET or (self.nodes % _CLOCK_NODES == 0 and time.perf_counter() > self.deadline):
            raise _OutOfBudget
        need = self.sizes[k] - len(members)
        if need == 0:
            self.sets.append(tuple(members))
            attach, self.attach = self.attach, [0] * self.n  # the next set starts empty
            self._next_set(k + 1, free, weight, spread + self._spread(members))
            self.attach = attach
            self.sets.pop()
            return
        candidates = [g for g in range(start, self.n) if free >> g & 1]
        if len(candidates) < need:
            return
        bound = self._bound(members, free, candidates, need, weight, plan)
        if self.nodes == 1:
            self.root_bound = bound
        if self._cut((bound, spread + self._spread(members))):
            return
        choices = candidates[: len(candidates) - need + 1]
        if not self.lowest_index:
            choices.sort(key=self.attach.__getitem__)  # stable: index order among equal costs
        for g in choices:
            if self.found is not None:
                return
            if any(a >= start and free >> a & 1 for a in self.twins[g]):
                continue
            row = self.cost[g]
            added = self.attach[g]
            for h in range(self.n):
                self.attach[h] += row[h]
            members.append(g)
            self._grow(k, members, free & ~(1 << g), g + 1, weight + added, spread, plan)
            members.pop()
            for h in range(self.n):
                self.attach[h] -= row[h]


class _Complement(NamedTuple):
    free_cost: int  # cost of all pairs among the free GPUs
    degree: list[int]  # minus each GPU's summed link cost to the free GPUs


class _Plan(NamedTuple):
    """What a set's search knows about the sets after it."""

    units: int  # lower bound on their weight, in 1/unit of a pair cost
    later: list[int] | None  # when they take every remaining GPU: each GPU's smallest share in them
    complement: _Complement | None  # when only the last set follows and takes every remaining GPU
