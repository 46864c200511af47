"""Which /dev/dri/renderD<minor> nodes belong to each GPU of a host, read from output saved on the host.

The render minor of GPU i is not 128 + i: MI300-class GPUs reserve 8 render minors each for their partitions
(an 8x MI300X host has renderD128, renderD136, ..., renderD184), and a partitioned GPU (CPX, DPX) appears as several
GPUs, each with its own node. So the map is captured on the host (`hosts/README.md`) in one of these formats,
auto-detected:

  * `amd-smi list -e --json` or `amd-smi list -e` (AMD SMI 25.3 / ROCm 6.4+): per GPU `gpu` and `render`
    ("renderD128"); the plain `amd-smi list` has no render field and is refused;
  * `amd-ctk cdi list` (AMD Container Toolkit): `amd.com/gpu=<i>` lines, each followed by its indented
    `/dev/dri/renderD<minor>` nodes;
  * the KFD topology: `grep -H drm_render_minor /sys/class/kfd/kfd/topology/nodes/*/properties`, or the
    `properties` files concatenated in node order; GPUs are the nodes with a render minor (CPU nodes have 0),
    numbered in KFD node order, which is the order the ROCm runtime enumerates them in.

The GPU indices are the host's, as in `gpus`, `gpuCount` placement and the topology file.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

EXPECTED = (
    "expected `amd-smi list -e --json` / `amd-smi list -e`, `amd-ctk cdi list`, or the KFD topology "
    "(`grep -H drm_render_minor /sys/class/kfd/kfd/topology/nodes/*/properties`)"
)

RenderNodes = dict[int, tuple[int, ...]]


class RenderNodesError(ValueError):
    """The text is no usable GPU -> render-node map; the message says what was expected."""


def _minor(name: str) -> int | None:
    match = re.fullmatch(r"(?:/dev/dri/)?renderD(\d+)", name.strip())
    return int(match[1]) if match else None


def _from_amd_smi_records(records: list[dict[str, object]]) -> RenderNodes:
    nodes: dict[int, list[int]] = {}
    for record in records:
        if "render" not in record:
            raise RenderNodesError("`amd-smi list` without -e prints no render node; save `amd-smi list -e --json`")
        minor = _minor(str(record["render"]))
        if minor is None:  # "N/A": ROCm 6.4.0 printed it for CPX partitions (fixed in 6.4.1)
            raise RenderNodesError(
                f"GPU {record.get('gpu')} has no render node ({record['render']!r}); save the "
                "output again with ROCm 6.4.1 or newer"
            )
        nodes.setdefault(int(str(record["gpu"])), []).append(minor)
    return {gpu: tuple(minors) for gpu, minors in nodes.items()}


def _amd_smi_text(text: str) -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "GPU" and not line.startswith((" ", "\t")):
            records.append({"gpu": value.strip()})
        elif key == "RENDER" and records:
            records[-1]["render"] = value.strip()
    return records


def _amd_ctk(text: str) -> RenderNodes:
    nodes: dict[int, list[int]] = {}
    current: int | None = None
    for line in text.splitlines():
        if match := re.fullmatch(r"amd\.com/gpu=(\w+)", line.strip()):
            current = int(match[1]) if match[1].isdigit() else None  # `all` lists no nodes of its own
            if current is not None:
                nodes.setdefault(current, [])
        elif current is not None and (minor := _minor(line)) is not None:
            nodes[current].append(minor)
    return {gpu: tuple(minors) for gpu, minors in nodes.items()}


def _kfd(text: str) -> RenderNodes:
    by_node = re.findall(r"/nodes/(\d+)/properties:drm_render_minor\s+(\d+)", text)
    if by_node:
        minors = [minor for _, minor in sorted(((int(n), int(m)) for n, m in by_node))]
    else:
        # Concatenated properties files: one `drm_render_minor` per node, in node order.
        minors = [int(m) for m in re.findall(r"^drm_render_minor\s+(\d+)\s*$", text, re.MULTILINE)]
    return {gpu: (minor,) for gpu, minor in enumerate(m for m in minors if m > 0)}


def parse_render_nodes(text: str) -> RenderNodes:
    """GPU index -> its render minors, from any supported format (see the module docstring)."""
    stripped = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    try:
        document = json.loads(stripped)
    except ValueError:
        document = None
    if isinstance(document, dict):  # amd-smi wraps the list in some versions
        document = next((v for v in document.values() if isinstance(v, list)), None)
    if isinstance(document, list) and all(isinstance(r, dict) and "gpu" in r for r in document):
        nodes = _from_amd_smi_records(document)
    elif re.search(r"^GPU:\s*\d+\s*$", stripped, re.MULTILINE):
        nodes = _from_amd_smi_records(_amd_smi_text(stripped))
    elif re.search(r"amd\.com/gpu=\d+", stripped):
        nodes = _amd_ctk(stripped)
    elif "drm_render_minor" in stripped:
        nodes = _kfd(stripped)
    else:
        raise RenderNodesError(f"no GPU render nodes found; {EXPECTED}")
    if not nodes or any(not minors for minors in nodes.values()):
        raise RenderNodesError(f"a GPU without a render node; {EXPECTED}")
    return nodes


@functools.cache
def load_render_nodes(path: str) -> RenderNodes:
    """The map in a saved file, relative to the project directory (read once per run)."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise RenderNodesError(f"cannot read {path}: {error.strerror}") from None
    try:
        return parse_render_nodes(text)
    except RenderNodesError as error:
        raise RenderNodesError(f"{path}: {error}") from None
