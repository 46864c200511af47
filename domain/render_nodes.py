"""Which /dev/dri/renderD<minor> node belongs to each GPU of a host, read from output saved on the host.

The render minor of GPU i is not 128 + i: MI300-class GPUs reserve 8 render minors each for their partitions
(an 8x MI300X host has renderD128, renderD136, ..., renderD184), and a partitioned GPU (CPX, DPX) appears as several
GPUs, each with its own node. So the map is captured on the host (`hosts/README.md`) in one of these formats,
auto-detected:

  * `amd-smi list -e --json` or `amd-smi list -e` (AMD SMI 25.3 / ROCm 6.4.1+): per GPU `hip_id` and `render`
    ("renderD128"). The plain `amd-smi list` has no render field and is refused. On hosts with AMD AI NICs
    amd-smi prints a second JSON document (or `AI_NIC:` blocks) for the NICs, which are no GPUs;
  * the KFD topology: `grep -H drm_render_minor /sys/class/kfd/kfd/topology/nodes/*/properties` (each line
    names its node), or at most 10 `properties` files concatenated in node order; GPUs are the nodes with a
    render minor (CPU nodes have 0).

Keys are the GPU indices HIP uses (HIP_VISIBLE_DEVICES), as in `gpus`, `gpuCount` placement and the topology file:
HIP numbers GPUs in KFD node order, and amd-smi's `hip_id` is that index (ROCm/rocm-systems PR #4406 review:
"hip_id = kfd_node_id - smallest_kfd_gpu_node_id", projects/amdsmi/src/amd_smi/amd_smi.cc
amdsmi_get_gpu_enumeration_info), while amd-smi's own `gpu` index is its discovery order, which can differ.
`amd-ctk cdi list` numbers GPUs by PCI address (ROCm/container-toolkit internal/amdgpu/amdgpu.go GetAMDGPUsWithFS),
not HIP's order, so it is refused here.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

CAPTURE = (
    "`amd-smi list -e --json` (ROCm 6.4.1+), or the KFD topology: "
    "`grep -H drm_render_minor /sys/class/kfd/kfd/topology/nodes/*/properties | sort -V`"
)

RenderNodes = dict[int, tuple[int, ...]]

# Linux include/drm/drm_file.h: DRM_MINOR_RENDER = 2; drivers/gpu/drm/drm_drv.c DRM_MINOR_LIMIT gives type t the
# minors 64 * t .. 64 * t + 63 (render: 128..191; below are primary and legacy control nodes), then
# DRM_EXTENDED_MINOR_LIMIT XA_LIMIT(192, (1 << MINORBITS) - 1) once those are taken (MINORBITS 20, kdev_t.h).
FIRST_RENDER_MINOR, LAST_MINOR = 128, (1 << 20) - 1
# A shell glob lists nodes/10 before nodes/2: concatenated files without node names are in node order only below 11.
_MAX_UNNAMED_KFD_NODES = 10


_SPACE = re.compile(r"\s*")


class RenderNodesError(ValueError):
    """The text is no usable GPU -> render-node map; the message says why."""


# The kernel writes numbers in ASCII digits; Python's \d and str.isdigit() also take other scripts' digits ("١٢٨")
# and superscripts ("²", which int() then refuses with a ValueError).
_NUMBER = re.compile(r"[0-9]+")


def _minor(name: str) -> int | None:
    match = re.fullmatch(r"(?:/dev/dri/)?renderD([0-9]+)", name.strip())
    return int(match[1]) if match else None


def _index(value: object) -> int | None:
    """A GPU index as amd-smi prints it (a JSON number or text digits); None for anything else ("N/A")."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, str) and _NUMBER.fullmatch(value.strip()) else None


def _from_amd_smi_records(records: list[dict[str, object]]) -> RenderNodes:
    nodes: RenderNodes = {}
    for record in records:
        gpu = record.get("gpu")
        if "render" not in record:
            raise RenderNodesError("`amd-smi list` without -e prints no render node; save `amd-smi list -e --json`")
        minor = _minor(str(record["render"]))
        if minor is None:  # "N/A": ROCm 6.4.0 printed it for CPX partitions (fixed in 6.4.1)
            raise RenderNodesError(
                f"GPU {gpu} has no render node ({record['render']!r}); save the output again with ROCm 6.4.1 or newer"
            )
        if "hip_id" not in record:
            raise RenderNodesError(f"GPU {gpu} has no hip_id (the index HIP uses); save it with ROCm 6.4.1 or newer")
        hip_id = _index(record["hip_id"])
        if hip_id is None:
            raise RenderNodesError(f"GPU {gpu} has hip_id {record['hip_id']!r}, not a HIP device index")
        if hip_id in nodes:
            raise RenderNodesError(f"hip_id {hip_id} is given to two GPUs")
        nodes[hip_id] = (minor,)
    return nodes


def _amd_smi_text(text: str) -> list[dict[str, object]]:
    """`amd-smi list -e` text: a GPU's fields are indented under its `GPU: <n>` line; other devices' blocks
    (`AI_NIC: 0`, `BRCM_NIC: 0`, ...) are skipped."""
    records: list[dict[str, object]] = []
    current: dict[str, object] | None = None
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        if line[:1] not in (" ", "\t", ""):
            current = {"gpu": value.strip()} if key == "GPU" else None
            if current is not None:
                records.append(current)
        elif current is not None and key in ("RENDER", "HIP_ID"):
            current[key.lower()] = value.strip()
    return records


def _json_documents(text: str) -> list[object] | None:
    """Every JSON document in the text, one after another (amd-smi prints one per device kind); None when the
    text is no JSON at all."""
    decoder, documents, position = json.JSONDecoder(), list[object](), 0
    while (position := _SPACE.match(text, position).end()) < len(text):  # type: ignore[union-attr]
        try:
            document, position = decoder.raw_decode(text, position)
        except ValueError:
            if not documents:
                return None
            raise RenderNodesError(f"what follows JSON document {len(documents)} is no JSON") from None
        if not documents and not isinstance(document, (list, dict)):
            return None
        documents.append(document)
    return documents


def _gpu_records(documents: list[object]) -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    for document in documents:
        # Some amd-smi versions wrap the list in an object.
        for items in document.values() if isinstance(document, dict) else [document]:
            if isinstance(items, list):
                records += [r for r in items if isinstance(r, dict) and "gpu" in r]
    return records


def _kfd(text: str) -> RenderNodes:
    named = re.findall(r"/nodes/([^/\s]+)/properties:drm_render_minor\s+(\S+)", text)
    if named:
        by_node: dict[int, int] = {}
        for node, minor in named:
            if not (_NUMBER.fullmatch(node) and _NUMBER.fullmatch(minor)):
                raise RenderNodesError(f"KFD node {node!r} has drm_render_minor {minor!r}: both must be numbers")
            if int(node) in by_node:
                raise RenderNodesError(f"KFD node {node} is listed twice")
            by_node[int(node)] = int(minor)
        minors = [by_node[node] for node in sorted(by_node)]
    else:
        # Concatenated properties files: one `drm_render_minor` per node, in the order they were captured.
        minors = [int(m) for m in re.findall(r"^drm_render_minor\s+([0-9]+)\s*$", text, re.MULTILINE)]
        if len(minors) > _MAX_UNNAMED_KFD_NODES:
            raise RenderNodesError(
                f"{len(minors)} KFD nodes' properties without their node numbers: a shell glob lists nodes/10 "
                "before nodes/2, so their order is unknown; save the `grep -H` form, which names each node"
            )
    return {gpu: (minor,) for gpu, minor in enumerate(m for m in minors if m > 0)}


def _amd_smi_records(text: str) -> list[dict[str, object]] | None:
    """The GPU records of amd-smi output (JSON or text); None for another format."""
    documents = _json_documents(text)
    if documents is not None:
        records = _gpu_records(documents)
        if not records:
            raise RenderNodesError("the JSON lists no GPU (no record with `gpu`)")
        return records
    return _amd_smi_text(text) if re.search(r"^GPU:\s*\S+\s*$", text, re.MULTILINE) else None


def _uncommented(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def parse_render_nodes(text: str) -> RenderNodes:
    """HIP GPU index -> its render minor, from any supported format (see the module docstring)."""
    stripped = _uncommented(text)
    if (records := _amd_smi_records(stripped)) is not None:
        nodes = _from_amd_smi_records(records)
    elif re.search(r"amd\.com/gpu=\d+", stripped):
        raise RenderNodesError(
            "`amd-ctk cdi list` numbers GPUs by PCI address, not in HIP's order (KFD nodes), so its indices may "
            "name other GPUs than `gpus`, `gpuCount` and the topology file"
        )
    elif "drm_render_minor" in stripped:
        nodes = _kfd(stripped)
    else:
        raise RenderNodesError("no GPU render nodes found")
    if not nodes:
        raise RenderNodesError("no GPU has a render node")
    for gpu, (minor,) in sorted(nodes.items()):
        if not FIRST_RENDER_MINOR <= minor <= LAST_MINOR:
            raise RenderNodesError(
                f"GPU {gpu}: renderD{minor} is no render node (render minors are {FIRST_RENDER_MINOR}-191, then "
                f"192-{LAST_MINOR} once those are taken; lower minors are card and control nodes)"
            )
    if sorted(nodes) != list(range(len(nodes))):
        raise RenderNodesError(f"the GPU indices {sorted(nodes)} are not 0..{len(nodes) - 1}, as HIP numbers GPUs")
    return nodes


@functools.cache
def load_render_nodes(path: str) -> RenderNodes:
    """The map in a saved file, relative to the project directory (read once per run)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise RenderNodesError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    try:
        return parse_render_nodes(text)
    except RenderNodesError as error:
        raise RenderNodesError(f"{path}: {error}; capture it on the host with {CAPTURE}") from None


@functools.cache
def smi_renumbering(path: str) -> dict[int, int]:
    """amd-smi's own GPU index -> HIP's, for the GPUs where they differ, in a map load_render_nodes accepted (none
    for the KFD capture, which knows only HIP's order). amd-smi and rocm-smi number topology files their way."""
    records = _amd_smi_records(_uncommented(Path(path).read_text())) or []
    pairs = ((_index(r.get("gpu")), _index(r.get("hip_id"))) for r in records)
    return {gpu: hip for gpu, hip in pairs if gpu is not None and hip is not None and gpu != hip}
