"""`rocm-stack topology FILE [--partition 4,4] [--per-gpu 8]`: print a saved GPU topology (and a placement) as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from domain.topology import PlacementError, TopologyError, load_topology, numa_node_of, place, place_partitioned


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _sizes(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 4,4 or 2,2,2,2, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = _OneLineParser(
        prog="rocm-stack topology",
        description="Print the GPU topology of saved rocm-smi --showtopo / amd-smi topology output as JSON.",
    )
    parser.add_argument("file", help="saved output of `rocm-smi --showtopo` or `amd-smi topology [--json]`")
    parser.add_argument(
        "--partition", type=_sizes, metavar="N,N,...", help="also choose disjoint GPU sets of these sizes (e.g. 4,4)"
    )
    parser.add_argument(
        "--per-gpu",
        type=int,
        default=1,
        metavar="N",
        help="logical GPUs per physical GPU of a partitioned host (CPX on MI300X: 8): sets are "
        "placed on whole physical GPUs first, as the stack places gpuCount",
    )
    args = parser.parse_args(argv)
    try:
        topology = load_topology(args.file)
        result: dict[str, object] = topology.model_dump()
        if args.partition is not None:
            if args.per_gpu < 1 or len(topology.gpus) % args.per_gpu:
                raise PlacementError(f"--per-gpu {args.per_gpu} does not divide the {len(topology.gpus)} GPUs")
            sets = (
                place(topology, args.partition)
                if args.per_gpu == 1
                else place_partitioned(topology, topology.gpus, args.partition, args.per_gpu)
            )
            result["sets"] = sets
            result["sets_numa"] = [numa_node_of(topology, s) for s in sets]
            result["optimal"] = sets.optimal
            # What the search proved: the sets' link weight, a lower bound on any placement's, the gap between.
            result["sets_weight"] = sets.weight
            result["weight_bound"] = sets.bound
            result["gap"] = round(sets.gap, 4)
    except (TopologyError, PlacementError) as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    print(_json_lines(result))
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
