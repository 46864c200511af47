"""`rocm-stack topology FILE [--place 4,4] [--per-gpu 8] [--svg FILE] [--json]`: a saved GPU topology (and a placement).

By default a table as `rocm-smi --showtopo` readers know it, in one matrix: link type and weight per GPU pair, the
NUMA node per GPU, a legend; with `--place`, the chosen sets and their cost. `--json` prints what scripts read
(the parsed topology, and `sets`, `sets_numa`, `optimal` with `--place`). `--svg FILE` draws the host's GPUs and
the placement (domain/picture.py).

Exit codes: 0 shown; 2 the topology file or the placement was refused, the picture could not be written, or a usage
error (one line why).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.output import exit_codes
from domain.topology import (
    Placement,
    PlacementError,
    Topology,
    TopologyError,
    cost_basis,
    load_topology,
    numa_node_of,
    place,
    place_partitioned,
    set_cost,
)
from rich.console import Console
from rich.table import Table
from domain.picture import Partition, host_svg


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _sizes(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 4,4 or 2,2,2,2, got {text!r}") from None


# What each cell of the table means; the facts are those of docs/topology.md ("Formats accepted", "How sets are
# chosen"), with their sources there.
LEGEND = (
    ("XGMI", "AMD Infinity Fabric (xGMI) link between the two GPUs"),
    ("PCIE", "path over PCI Express (through the host's PCIe switches and CPUs)"),
    ("-", "the GPU itself (rocm-smi prints 0, amd-smi SELF)"),
    (
        "weight",
        "the number after the type: KFD's link weight (rocm-smi 'Weight between two GPUs', amd-smi WEIGHT TABLE), "
        "lower is closer; amd-smi documents 15 per xGMI hop, and PCIe paths weigh more, more across sockets",
    ),
    ("hops", "shown as 'Nh' where the file has hops but no weight"),
    ("NUMA", "the GPU's NUMA node (rocm-smi 'Numa Affinity', else 'Numa Node'; ? where unknown)"),
)


def cell(topology: Topology, i: int, j: int) -> str:
    """One pair as the table shows it: `TYPE WEIGHT` (or hops), `-` for the GPU itself."""
    if i == j:
        return "-"
    parts = []
    if topology.link_type is not None:
        parts.append(topology.link_type[i][j])
    if topology.weight is not None:
        parts.append(str(topology.weight[i][j]))
    elif topology.hops is not None:
        parts.append(f"{topology.hops[i][j]}h")
    return " ".join(parts) or "?"


def placement_rows(topology: Topology, sets: Placement) -> list[tuple[str, str, str, int]]:
    """Per set: its number, GPUs, NUMA node (`spans` where it spans nodes or one is unknown), cost."""
    return [
        (
            str(k),
            ",".join(map(str, gpus)),
            "spans" if (node := numa_node_of(topology, gpus)) is None else str(node),
            set_cost(topology, gpus),
        )
        for k, gpus in enumerate(sets)
    ]


def render_table(topology: Topology, source: str, sets: Placement | None, width: int | None = None) -> str:
    """The matrix, its legend and (with `sets`) the placement, as rich renders them for a terminal `width` wide."""

    # Wide enough for every column (a terminal wraps long lines; a table squeezed to fit would wrap its cells).
    width = width or max(100, 10 * (len(topology.gpus) + 2))
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None, soft_wrap=False)
    matrix = Table(title=f"GPU topology of {source}", title_justify="left", show_lines=False)
    matrix.add_column("", style="bold")
    for gpu in topology.gpus:
        matrix.add_column(f"GPU{gpu}", justify="center", no_wrap=True)
    matrix.add_column("NUMA", justify="center")
    for i, gpu in enumerate(topology.gpus):
        node = topology.numa[i]
        matrix.add_row(
            f"GPU{gpu}", *(cell(topology, i, j) for j in range(len(topology.gpus))), "?" if node is None else str(node)
        )
    console.print(matrix)
    legend = Table(title="Legend", title_justify="left", show_header=False, box=None, padding=(0, 2, 0, 0))
    legend.add_column(style="bold", no_wrap=True)
    legend.add_column()
    for key, meaning in LEGEND:
        legend.add_row(key, meaning)
    console.print(legend)
    if sets is not None:
        basis = {"weight": "link weight", "hops": "hops", "link_type": "link type (XGMI 1, PCIE 2)", None: "none known"}
        proven = (
            "proven optimal"
            if sets.optimal
            else f"NOT proven optimal: weight {sets.weight}, lower bound {sets.bound}, gap {sets.gap:.1%}"
        )
        chosen = Table(title=f"Placement ({proven})", title_justify="left")
        for name in ("SET", "GPUS", "NUMA", "COST"):
            chosen.add_column(name, justify="right" if name == "COST" else "left")
        for number, members, on_node, cost in placement_rows(topology, sets):
            chosen.add_row(number, members, on_node, str(cost))
        console.print(chosen)
        console.print(
            f"COST: the set's pairs' {basis[cost_basis(topology)]}, both directions, summed (what placement "
            "minimises; docs/topology.md)"
        )
    return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())


def main(argv: Sequence[str] | None = None) -> int:
    parser = _OneLineParser(
        prog="rocm-stack topology",
        description="Show the GPU topology of saved rocm-smi --showtopo / amd-smi topology output, and a placement.",
        epilog=exit_codes(__doc__),
    )
    parser.add_argument("file", help="saved output of `rocm-smi --showtopo` or `amd-smi topology [--json]`")
    parser.add_argument(
        "--place",
        "--partition",
        dest="place",
        type=_sizes,
        metavar="N,N,...",
        help="also choose disjoint GPU sets of these sizes (e.g. 4,4)",
    )
    parser.add_argument(
        "--per-gpu",
        type=int,
        default=1,
        metavar="N",
        help="logical GPUs per physical GPU of a partitioned host (CPX on MI300X: 8): sets are "
        "placed on whole physical GPUs first, as the stack places gpuCount",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of the table")
    parser.add_argument("--svg", type=Path, metavar="FILE", help="also draw the GPUs and the placement into FILE")
    args = parser.parse_args(argv)
    sets = None
    try:
        topology = load_topology(args.file)
        if args.per_gpu < 1 or len(topology.gpus) % args.per_gpu:
            raise PlacementError(f"--per-gpu {args.per_gpu} does not divide the {len(topology.gpus)} GPUs")
        if args.place is not None:
            sets = (
                place(topology, args.place)
                if args.per_gpu == 1
                else place_partitioned(topology, topology.gpus, args.place, args.per_gpu)
            )
    except (TopologyError, PlacementError) as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    if args.svg is not None:
        partitions = [Partition(f"set {k}", gpus) for k, gpus in enumerate(sets)] if sets else []
        gap, bound = (sets.gap, sets.bound) if sets is not None else (0.0, None)
        try:
            svg = host_svg(Path(args.file).name, topology.gpus, topology, partitions, args.per_gpu, gap, bound)
            args.svg.write_text(svg, encoding="utf-8")
        except OSError as error:
            parser.exit(2, f"{parser.prog}: error: cannot write {args.svg}: {error.strerror}\n")
        print(f"wrote {args.svg}", file=sys.stderr)
    if args.json:
        result: dict[str, object] = topology.model_dump()
        if sets is not None:
            result["sets"] = sets
            result["sets_numa"] = [numa_node_of(topology, s) for s in sets]
            result["optimal"] = sets.optimal
            # What the search proved: the sets' link weight, a lower bound on any placement's, the gap between.
            result["sets_weight"] = sets.weight
            result["weight_bound"] = sets.bound
            result["gap"] = round(sets.gap, 4)
        print(_json_lines(result))
    else:
        sys.stdout.write(render_table(topology, args.file, sets))
    return 0


def _json_lines(result: dict[str, object]) -> str:
    """JSON with one key per line and one matrix row per line."""

    def value(v: object) -> str:
        if isinstance(v, (list, tuple)) and v and all(isinstance(row, (list, tuple)) for row in v):
            return "[\n" + ",\n".join(f"    {json.dumps(row)}" for row in v) + "\n  ]"
        return json.dumps(v)

    return "{\n" + ",\n".join(f"  {json.dumps(k)}: {value(v)}" for k, v in result.items()) + "\n}"


if __name__ == "__main__":
    sys.exit(main())
