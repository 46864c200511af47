"""A host's GPUs and its partitions as an SVG picture (`rocm-stack topology --svg`, `rocm-stack lock --svg`).

GPUs are nodes on a circle (no three points of a circle are in line, so no link passes through a GPU), grouped by
NUMA node (a shaded sector each); on a host in a compute partition mode each physical GPU is a box of its logical
GPUs and the links are those between physical GPUs (the cheapest between their logical GPUs, as placement weighs
them). A link's line says its type (XGMI solid, PCIE dashed) and its weight (thicker is lighter, the number on it
where the host's links differ). Each partition has its own colour: its GPUs are filled with it and its entry on the
right gives its GPUs, NUMA node and cost; where the placement is not proven optimal, a line says so, with its
proven gap, the placement's total cost and, where known, the proven lower bound of the best placement's.

Drawn with matplotlib's SVG backend (a wheel on PyPI, no system binary). Every element a reader or a test looks for
carries an `id`: `gpu-N` (a GPU), `physical-P` (a physical GPU's box), `numa-N` (a NUMA sector), `link-A-B-TYPE-W`
(a link between GPUs or physical GPUs A and B), `partition-NAME` (a partition's entry). Text stays text
(`svg.fonttype: none`) and the file has no date or random ids, so the same input draws the same bytes.
"""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from domain.gpus import gpu_ranges
from domain.topology import Topology, cost_basis, numa_node_of, physical_gpu, set_cost

# Partition colours: matplotlib's "tab10" qualitative palette, then "Dark2".
COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#1b9e77",
    "#d95f02",
    "#7570b3",
)
FREE = "#ffffff"
NUMA_SHADES = ("#eef3fb", "#fbf1e6", "#eef8ee", "#f7eef8")
LINK_STYLE = {"XGMI": ("-", "#555555"), "PCIE": ("--", "#999999")}


@dataclass(frozen=True)
class Partition:
    name: str
    gpus: Sequence[int]


@dataclass(frozen=True)
class Link:
    a: int
    b: int
    type: str
    weight: int | None


def links(topology: Topology, per_gpu: int = 1) -> list[Link]:
    """The links to draw: between GPUs, or between physical GPUs (their cheapest logical pair's type and weight)."""
    n = len(topology.gpus)
    units = n // per_gpu
    found = []
    for p, q in itertools.combinations(range(units), 2):
        pairs = [(i, j) for i in range(p * per_gpu, (p + 1) * per_gpu) for j in range(q * per_gpu, (q + 1) * per_gpu)]
        i, j = min(pairs, key=lambda ij: set_cost(topology, (topology.gpus[ij[0]], topology.gpus[ij[1]])))
        kind = topology.link_type[i][j].upper() if topology.link_type is not None else "?"
        weight = (
            topology.weight[i][j]
            if topology.weight is not None
            else (topology.hops[i][j] if topology.hops is not None else None)
        )
        a, b = (topology.gpus[p], topology.gpus[q]) if per_gpu == 1 else (p, q)
        found.append(Link(a, b, kind, weight))
    return found


def partition_label(topology: Topology | None, partition: Partition) -> str:
    gpus = list(partition.gpus)
    text = f"{partition.name}: GPUs {gpu_ranges(gpus)}"
    if topology is not None:
        node = numa_node_of(topology, gpus)
        text += f" · NUMA {'spans' if node is None else node} · cost {set_cost(topology, gpus)}"
    return text


def host_svg(
    title: str,
    gpus: Sequence[int],
    topology: Topology | None,
    partitions: Sequence[Partition],
    per_gpu: int = 1,
    gap: float = 0.0,
    bound: int | None = None,
) -> str:
    """The picture of one host: `gpus` (logical GPU ids), its topology if known, its partitions; `gap` how much
    lighter the best placement can at most be (domain/topology.py Placement.gap, the lock's `gap`), `bound` the
    proven lower bound of its total cost where known."""
    # Here: matplotlib (pyplot 1.2 s to import, measured) only when a picture is drawn.
    import matplotlib

    matplotlib.use("svg")
    from matplotlib import patches, pyplot

    numa = {g: (topology.numa[topology.gpus.index(g)] if topology is not None else None) for g in gpus}
    units = sorted({physical_gpu(g, per_gpu) for g in gpus})
    members = {p: [g for g in gpus if physical_gpu(g, per_gpu) == p] for p in units}
    unit_numa = {p: (numa[members[p][0]] if len({numa[g] for g in members[p]}) == 1 else None) for p in units}
    order = sorted(units, key=lambda p: (unit_numa[p] is None, unit_numa[p] or 0, p))
    step = 2 * math.pi / len(order)
    radius = max(2.0, len(order) * (0.5 if per_gpu == 1 else 0.75))
    angle = {p: math.pi / 2 - k * step for k, p in enumerate(order)}  # clockwise from the top
    centre = {p: (radius * math.cos(angle[p]), radius * math.sin(angle[p])) for p in units}
    colour_of = {g: COLOURS[k % len(COLOURS)] for k, part in enumerate(partitions) for g in part.gpus}

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "rocm-stack", "font.size": 9}):
        figure, axes = pyplot.subplots(figsize=(11, 7.5))
        axes.set_aspect("equal")
        axes.axis("off")
        axes.set_title(title, loc="left", fontsize=12)

        # NUMA nodes: a sector behind each run of physical GPUs on one node.
        for k, (node, grouped) in enumerate(itertools.groupby(order, key=lambda p: unit_numa[p])):
            run = list(grouped)
            start = math.degrees(angle[run[-1]] - step / 2)
            end = math.degrees(angle[run[0]] + step / 2)
            label = f"NUMA {node}" if node is not None else "NUMA ?"
            axes.add_patch(
                patches.Wedge(
                    (0, 0),
                    radius + 1.1,
                    start,
                    end,
                    width=2.2,
                    facecolor=NUMA_SHADES[k % len(NUMA_SHADES)],
                    edgecolor="#cccccc",
                    gid=f"numa-{'unknown' if node is None else node}",
                )
            )
            middle = math.radians((start + end) / 2)
            axes.text(
                (radius + 1.45) * math.cos(middle),
                (radius + 1.45) * math.sin(middle),
                label,
                ha="center",
                va="center",
                fontsize=10,
                color="#555555",
            )

        # Links between GPUs (or physical GPUs).
        drawn = links(topology, per_gpu) if topology is not None and len(units) > 1 else []
        weights = sorted({link.weight for link in drawn if link.weight is not None})
        for link in drawn:
            style, colour = LINK_STYLE.get(link.type, (":", "#bbbbbb"))
            (x1, y1), (x2, y2) = centre[link.a], centre[link.b]  # GPU ids, or physical GPU ids
            width = 0.6 + 2.4 * (weights[0] / link.weight if link.weight and weights and weights[0] else 1)
            shared = (
                per_gpu == 1 and colour_of.get(link.a) is not None and colour_of.get(link.a) == colour_of.get(link.b)
            )
            axes.plot(
                [x1, x2],
                [y1, y2],
                linestyle=style,
                color=colour_of[link.a] if shared else colour,
                linewidth=width + (1.2 if shared else 0),
                alpha=0.9 if shared else 0.55,
                zorder=1,
                gid=f"link-{link.a}-{link.b}-{link.type}-{link.weight if link.weight is not None else 'none'}",
            )
            if len(weights) > 1:
                axes.text((x1 + x2) / 2, (y1 + y2) / 2, str(link.weight), fontsize=7, ha="center", color="#333333")

        # GPUs: a circle each, or a physical GPU's box of logical GPUs.
        for p in units:
            x, y = centre[p]
            if per_gpu == 1:
                g = members[p][0]
                axes.add_patch(
                    patches.Circle(
                        (x, y), 0.42, facecolor=colour_of.get(g, FREE), edgecolor="#333333", zorder=2, gid=f"gpu-{g}"
                    )
                )
                axes.text(x, y, f"GPU{g}", ha="center", va="center", zorder=3, fontsize=9, fontweight="bold")
                continue
            columns = math.ceil(per_gpu / 2)
            cell = 0.42
            width, height = columns * cell + 0.2, 2 * cell + 0.45
            axes.add_patch(
                patches.FancyBboxPatch(
                    (x - width / 2, y - height / 2),
                    width,
                    height,
                    boxstyle="round,pad=0.02",
                    facecolor="#f5f5f5",
                    edgecolor="#333333",
                    zorder=2,
                    gid=f"physical-{p}",
                )
            )
            axes.text(x, y + height / 2 - 0.14, f"GPU{p}", ha="center", va="center", zorder=3, fontsize=8)
            for k, g in enumerate(members[p]):
                gx = x - width / 2 + 0.1 + (k % columns + 0.5) * cell
                gy = y - height / 2 + 0.1 + (1 - k // columns + 0.5) * cell - 0.05
                axes.add_patch(
                    patches.Rectangle(
                        (gx - cell * 0.42, gy - cell * 0.42),
                        cell * 0.84,
                        cell * 0.84,
                        facecolor=colour_of.get(g, FREE),
                        edgecolor="#555555",
                        linewidth=0.5,
                        zorder=3,
                        gid=f"gpu-{g}",
                    )
                )
                axes.text(gx, gy, str(g), ha="center", va="center", fontsize=6, zorder=4)

        # Partitions: an entry each on the right, in its colour.
        legend_x = radius + 2.1
        top = radius + 0.6
        for k, part in enumerate(partitions):
            y = top - 0.55 * k
            entry = axes.text(
                legend_x + 0.35,
                y,
                partition_label(topology, part),
                va="center",
                fontsize=9,
                gid=f"partition-{part.name}",
            )
            entry.set_color("#222222")
            axes.add_patch(
                patches.Rectangle(
                    (legend_x, y - 0.13),
                    0.26,
                    0.26,
                    facecolor=COLOURS[k % len(COLOURS)],
                    edgecolor="#333333",
                    gid=f"swatch-{part.name}",
                )
            )
        notes = [_links_note(drawn, topology)]
        if gap > 0 and topology is not None:
            total = sum(set_cost(topology, part.gpus) for part in partitions)
            notes.insert(
                0,
                f"placement NOT proven optimal: proven within {gap:.1%} (total cost {total}"
                + (f", the best is at least {bound})" if bound is not None else ")"),
            )
        if per_gpu > 1:
            notes.append(f"{per_gpu} logical GPUs per physical GPU (box); links between physical GPUs")
        if any(g not in colour_of for g in gpus):
            notes.append("white: in no partition")
        for k, note in enumerate(notes):
            axes.text(legend_x, top - 0.55 * len(partitions) - 0.3 - 0.45 * k, note, fontsize=8, color="#555555")

        axes.set_xlim(-radius - 2.0, legend_x + 9.5)
        axes.set_ylim(-radius - 2.0, radius + 2.0)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
        pyplot.close(figure)
    return buffer.getvalue()


def _links_note(drawn: Sequence[Link], topology: Topology | None) -> str:
    if topology is None:
        return "no topology file: links and NUMA nodes unknown"
    kinds = sorted({link.type for link in drawn})
    weights = sorted({link.weight for link in drawn if link.weight is not None})
    what = {"weight": "weight", "hops": "hops", "link_type": "link type", None: "nothing"}[cost_basis(topology)]
    text = f"links: {', '.join(kinds) or 'none'} (XGMI solid, PCIE dashed)"
    if len(weights) == 1:
        text += f", all {what} {weights[0]}"
    elif weights:
        text += f", {what} on each line; thicker is lighter"
    return text + f"; cost: the set's pairs' {what}, both ways, summed"
