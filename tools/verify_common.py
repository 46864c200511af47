"""What the Docker hosts' verify (tools/verify.py) and the Kubernetes nodes' (tools/verify_k8s.py) share: the stack's
settings, the check and fleet rows, and how they are shown (tables, `--json`)."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from schema import StackConfig, decode, load
from rich import box
from rich.console import Console
from rich.table import Table
from schema.stackfile import as_program_config
from tools import synth

# --kubernetes: how long a node's check pod may stay unschedulable before the node is judged busy (or unschedulable).
SCHEDULE_WAIT_S = 60


@dataclass
class Row:
    host: str
    check: str
    verdict: str  # pass | fail | warn | error
    details: str


@dataclass
class FleetRow:
    """One partition of one host as it stands: what the fleet table shows (`--json`: these keys)."""

    host: str
    partition: str  # `-` for a host that could not be reached
    gpus: str
    image: str  # the running image's digest (its repository digest, else its image id)
    state: str
    check: str  # the verdict of the GPU check just run
    tflops: float | None  # the slowest GPU's bf16 TFLOP/s in that check
    floor: float | None  # the check's --min-tflops
    restarts: int | None


class Results(list[Row]):
    """The check rows, and the fleet rows: one per host and partition."""

    def __init__(self, rows: Sequence[Row] = (), fleet: Sequence[FleetRow] = ()) -> None:
        super().__init__(rows)
        self.fleet = list(fleet)


def tflops_text(measured: float | None, floor: float | None) -> str:
    """The slowest GPU's TFLOP/s against the floor: `612.3 >= 500`, `41 < 500`, `612.3 (no floor)`."""
    if measured is None:
        return "-" if floor is None else f"- (floor {floor:g})"
    if floor is None:
        return f"{measured:.4g} (no floor)"
    return f"{measured:.4g} {'>=' if measured >= floor else '<'} {floor:g}"


def fleet_table(fleet: Sequence[FleetRow], first: str = "HOST", width: int = 160) -> str:
    """The fleet in one table (rich), a row per host and partition."""

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None, soft_wrap=False)
    shown = Table(box=box.SIMPLE_HEAD, title="Fleet", title_justify="left")
    for column in (first, "PARTITION", "GPUS", "IMAGE", "STATE", "GPU CHECK", "TFLOP/S (FLOOR)", "RESTARTS"):
        shown.add_column(column, overflow="fold")
    for f in fleet:
        shown.add_row(
            f.host,
            f.partition,
            f.gpus,
            f.image if f.image == "-" else f.image[:19],  # sha256: and 12 hex digits, as `docker images` shows ids
            f.state,
            f.check.upper(),
            tflops_text(f.tflops, f.floor),
            "-" if f.restarts is None else str(f.restarts),
        )
    console.print(shown)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def table(rows: list[Row], first: str = "HOST") -> str:
    header = (first, "CHECK", "VERDICT", "DETAILS")
    cells = [(r.host, r.check, r.verdict.upper(), (r.details.splitlines() or [""])[0]) for r in rows]
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3] for row in [header, *cells]]
    for r in rows:
        more = r.details.splitlines()[1:]
        if more:
            lines += [f"{r.host} {r.check}:", *more]
    return "\n".join(line.rstrip() for line in lines)


def report_json(rows: Sequence[Row], fleet: Sequence[FleetRow]) -> str:
    """`--json`: {"checks": [...], "fleet": [...]}, each row with the fields of Row and FleetRow."""
    return json.dumps({"checks": [asdict(r) for r in rows], "fleet": [asdict(f) for f in fleet]}, indent=2)


def stack_settings(stack: str) -> StackConfig:
    """The stack's validated config (partitions placed as the program places them)."""

    values, secret_keys = as_program_config(synth.stack_config(stack))
    return load(stack, {k: decode(v) for k, v in values.items()}, secret_keys, place_unlocked=True)
