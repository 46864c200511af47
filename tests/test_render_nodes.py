"""The GPU -> render-node map (domain/render_nodes.py) against the real formats (issue 21 defect 7).

Every sample's source is in tests/data/render_nodes/SOURCES.md; the KFD capture is run with the real shell on a
stand-in topology tree. A map is keyed by the index HIP uses, and a file that cannot say which render node is
which GPU's is refused, naming the file and the capture command, through the config error path (exit 2).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import refusal, stack_file
from domain.render_nodes import CAPTURE, RenderNodesError, load_render_nodes, parse_render_nodes

P = "rocm-stack:"
DATA = Path(__file__).parent / "data" / "render_nodes"


def amd_smi_json(*records: dict[str, object]) -> str:
    """`amd-smi list -e --json` records with the keys ROCm/rocm-systems projects/amdsmi/amdsmi_cli/subcommands/
    list_devices.py list_gpu stores (bdf, uuid, kfd_id, node_id, partition_id; with -e render, card, hsa_id,
    hip_id, hip_uuid), each given its own values."""
    base = {"bdf": "0000:23:00.0", "uuid": "N/A", "kfd_id": 1, "partition_id": 0, "card": "card0", "hip_uuid": "N/A"}
    return json.dumps([{**base, **record} for record in records], indent=4)


def test_the_map_is_keyed_by_hip_id_not_amd_smis_own_index():
    """amd-smi's `gpu` is its discovery order; HIP numbers GPUs in KFD node order, which amd-smi prints as
    `hip_id = kfd_node_id - smallest_kfd_gpu_node_id` (ROCm/rocm-systems PR #4406 review, amd_smi.cc
    amdsmi_get_gpu_enumeration_info). On a dual-GPU host the two were swapped (same PR: "HIP_VISIBLE_DEVICES=0 ...
    I end up getting 1 in dv_ind. vice-versa"). HIP's GPU 0 here is amd-smi's GPU 1, renderD128; keyed by `gpu`,
    partition GPU 0 would get the other GPU's node."""
    nodes = parse_render_nodes((DATA / "amd-smi-list-e_hip-order_ainic.json").read_text())
    assert nodes == {0: (128,), 1: (129,)}


def test_amd_smis_second_json_document_for_ai_nics_is_read_past():
    """With AMD AI NICs, `amd-smi list --json` prints the GPUs' list, then a second list for the NICs
    (list_devices.py list_ainic: its own print_output; amdsmi_logger.py _store_ainic_output_amdsmi keys
    `ai_nic`), so the file is two JSON documents (json.loads: "Extra data"). The NICs are no GPUs. The text
    form's `AI_NIC: 0` block (real output in ROCm/rocm-systems PR #3654) ends the GPU before it."""
    text = (DATA / "amd-smi-list-e_hip-order_ainic.json").read_text()
    with pytest.raises(json.JSONDecodeError, match="Extra data"):
        json.loads(text)
    assert len(parse_render_nodes(text)) == 2
    assert parse_render_nodes((DATA / "amd-smi-list-e_ainic.txt").read_text()) == {0: (128,)}
    with pytest.raises(RenderNodesError, match="what follows JSON document 2 is no JSON"):
        parse_render_nodes(text + "\nTraceback (most recent call last):\n")


@pytest.mark.parametrize(
    "record, why",
    [
        # list_devices.py: every enumeration field is "N/A" when amdsmi_get_gpu_enumeration_info fails.
        ({"gpu": 0, "node_id": 2, "render": "renderD128", "hsa_id": "N/A", "hip_id": "N/A"}, "hip_id 'N/A'"),
        ({"gpu": "N/A", "node_id": 2, "render": "renderD128", "hsa_id": 2, "hip_id": "N/A"}, "hip_id 'N/A'"),
        # amd_smi.cc: hip_id stays std::numeric_limits<uint32_t>::max() when amdsmi_get_gpu_kfd_info fails.
        ({"gpu": 0, "node_id": 2, "render": "renderD128", "hsa_id": 2, "hip_id": 4294967295}, "[4294967295] are not"),
        ({"gpu": 0, "node_id": 2, "render": "renderD128", "hsa_id": 2}, "no hip_id"),
    ],
)
def test_a_gpu_without_a_hip_index_is_refused_through_the_config_path(tmp_path, record, why):
    """A non-integer id ended in a ValueError traceback; now a refusal naming the key, the file and the capture."""
    saved = tmp_path / "box.render-nodes.json"
    saved.write_text(amd_smi_json(record))
    message = refusal(
        "dev", {P + "hosts": [{"name": "box", "gpus": 1, "gpuAccess": "renderNodes", "renderNodes": str(saved)}]}
    )
    assert message.startswith(f"{P}hosts[0].renderNodes: {saved}: ")
    assert why in message and f"capture it on the host with {CAPTURE}" in message


def test_two_gpus_with_one_hip_index_are_refused():
    text = amd_smi_json(
        {"gpu": 0, "node_id": 2, "render": "renderD128", "hsa_id": 2, "hip_id": 0},
        {"gpu": 1, "node_id": 3, "render": "renderD136", "hsa_id": 3, "hip_id": 0},
    )
    with pytest.raises(RenderNodesError, match="hip_id 0 is given to two GPUs"):
        parse_render_nodes(text)


@pytest.mark.parametrize("minor, accepted", [(0, False), (127, False), (128, True), (191, True), (192, True)])
def test_render_minors_are_the_kernels_render_range(minor, accepted):
    """Linux include/drm/drm_file.h: DRM_MINOR_RENDER = 2; drivers/gpu/drm/drm_drv.c drm_minor_alloc takes
    DRM_MINOR_LIMIT(t) = XA_LIMIT(64 * t, 64 * t + 63) ("minors 0-63 are primary nodes, 64-127 are control nodes,
    and 128-191 are render nodes"), then DRM_EXTENDED_MINOR_LIMIT = XA_LIMIT(192, (1 << MINORBITS) - 1) once a
    host has more than 64. So renderD0 or renderD127 is no render node (amd-smi prints renderD0 where it read
    no minor); mapping /dev/dri/renderD0 would hand the container nothing or another device."""
    text = amd_smi_json({"gpu": 0, "node_id": 2, "render": f"renderD{minor}", "hsa_id": 2, "hip_id": 0})
    if accepted:
        assert parse_render_nodes(text) == {0: (minor,)}
    else:
        with pytest.raises(RenderNodesError, match=f"GPU 0: renderD{minor} is no render node"):
            parse_render_nodes(text)


# Linux, mainline drivers/gpu/drm/drm_drv.c (the xarray minor allocation): "minors 0-63 are primary nodes, 64-127
# are control nodes, and 128-191 are render nodes. After reaching the limit, we're allocating minors dynamically";
# `#define DRM_MINOR_LIMIT(t) ... XA_LIMIT(64 * _t, 64 * _t + 63)`, `#define DRM_EXTENDED_MINOR_LIMIT XA_LIMIT(192,
# (1 << MINORBITS) - 1)`, and drm_minor_alloc falls back to the extended range only `if (r == -EBUSY && (type ==
# DRM_MINOR_PRIMARY || type == DRM_MINOR_RENDER))`; include/drm/drm_file.h enum drm_minor_type: DRM_MINOR_RENDER = 2;
# include/linux/kdev_t.h `#define MINORBITS 20`. So a render node is renderD128 .. renderD1048575, nothing else.
@pytest.mark.parametrize(
    "minor, accepted",
    [(64, False), (1048575, True), (1048576, False), (10**30, False)],
)
def test_render_minors_end_where_the_kernels_minor_numbers_end(minor, accepted):
    kfd = f"/sys/class/kfd/kfd/topology/nodes/1/properties:drm_render_minor {minor}\n"
    if accepted:
        assert parse_render_nodes(kfd) == {0: (minor,)}
        return
    with pytest.raises(RenderNodesError, match=f"GPU 0: renderD{minor} is no render node .*192-1048575"):
        parse_render_nodes(kfd)


@pytest.mark.parametrize(
    "text, why",
    [
        # int("²") raises ValueError although "²".isdigit(): a traceback on main.
        (amd_smi_json({"gpu": 0, "render": "renderD128", "hip_id": "²"}), "hip_id '²', not a HIP device index"),
        ("/sys/class/kfd/kfd/topology/nodes/²/properties:drm_render_minor 128\n", "KFD node '²' has"),
        ("/sys/class/kfd/kfd/topology/nodes/1/properties:drm_render_minor ¹²⁸\n", "drm_render_minor '¹²⁸'"),
        # Other scripts' digits: the kernel prints ASCII, int("١٢٨") would read 128.
        (amd_smi_json({"gpu": 0, "render": "renderD١٢٨", "hip_id": 0}), "has no render node ('renderD١٢٨')"),
        (amd_smi_json({"gpu": 0, "render": "renderD128", "hip_id": "gpu0"}), "hip_id 'gpu0', not a HIP device"),
        (amd_smi_json({"gpu": 0, "render": "renderD128", "hip_id": -1}), "are not 0..0"),
    ],
)
def test_a_non_numeric_gpu_id_is_a_refusal_naming_the_file_never_a_traceback(tmp_path, text, why):
    saved = tmp_path / "box.render-nodes.json"
    saved.write_text(text)
    message = refusal(
        "dev", {P + "hosts": [{"name": "box", "gpus": 1, "gpuAccess": "renderNodes", "renderNodes": str(saved)}]}
    )
    assert message.startswith(f"{P}hosts[0].renderNodes: {saved}: ") and why in message, message
    assert f"capture it on the host with {CAPTURE}" in message


def test_amd_ctk_cdi_list_is_refused_as_a_map():
    """`amd-ctk cdi list` names amd.com/gpu=<i> in the toolkit's PCI-address order (ROCm/container-toolkit
    internal/amdgpu/amdgpu.go GetAMDGPUsWithFS; internal/cdi/cdi.go GenerateSpec names device i), not HIP's KFD node
    order, so its indices are not the stack's."""
    with pytest.raises(RenderNodesError, match="numbers GPUs by PCI address, not in HIP's order"):
        parse_render_nodes((DATA / "amd-ctk-cdi-list.txt").read_text())


# --- the KFD topology capture, run with the real shell on a stand-in tree -------------------------------------

# An 8x MI300X host whose CPUs show 4 NUMA nodes (NPS4): KFD nodes 0-3 are CPUs (drm_render_minor 0), 4-11 the GPUs
# with render minors stepping by 8 (AMD, ROCm/legacy-rocm-build issue #4261: 128, 136, 144, 152 on nodes 2-5).
KFD_NODES = {node: 0 if node < 4 else 128 + 8 * (node - 4) for node in range(12)}
EXPECTED = {gpu: (128 + 8 * gpu,) for gpu in range(8)}


@pytest.fixture
def kfd_tree(tmp_path) -> Path:
    """<tmp>/nodes/<n>/properties as the kernel writes them (drivers/gpu/drm/amd/amdkfd/kfd_topology.c
    node_show: one "name value" pair a line), the lines around drm_render_minor as in the real capture
    kfd-properties_mi300a-4apu.txt."""
    for node, minor in KFD_NODES.items():
        folder = tmp_path / "nodes" / str(node)
        folder.mkdir(parents=True)
        cores, simds = (48, 0) if minor == 0 else (0, 304)
        folder.joinpath("properties").write_text(
            f"cpu_cores_count {cores}\nsimd_count {simds}\nlocation_id 0\ndomain 0\ndrm_render_minor {minor}\n"
            "hive_id 0\n"
        )
    return tmp_path


def _shell(command: str, root: Path) -> str:
    return subprocess.run(["sh", "-c", command, "sh", str(root)], capture_output=True, text=True, check=True).stdout


def test_a_globbed_concatenation_of_11_or_more_nodes_is_refused(kfd_tree):
    """The shell sorts a glob's names as strings: nodes/10 and nodes/11 come before nodes/2 (measured below), so
    `cat nodes/*/properties` of a 12-node host lists GPUs out of order and every GPU got another's node."""
    listed = _shell('for f in "$1"/nodes/*/properties; do echo "${f%/properties}"; done', kfd_tree)
    assert [Path(line).name for line in listed.split()][:4] == ["0", "1", "10", "11"]
    with pytest.raises(RenderNodesError, match="12 KFD nodes' properties without their node numbers"):
        parse_render_nodes(_shell('cat "$1"/nodes/*/properties', kfd_tree))
    # Up to 10 nodes (0-9) a glob is in node order: the concatenation stays accepted (the real 4-APU capture).
    assert parse_render_nodes((DATA / "kfd-properties_mi300a-4apu.txt").read_text()) == {0: (128,), 1: (136,)}


def test_the_documented_capture_sorts_numerically_and_the_parser_uses_the_node_numbers(kfd_tree):
    """The capture command of CAPTURE (docs/topology.md, hosts/README.md), run as written on the stand-in tree:
    `sort -V` orders nodes/2 before nodes/10; the parser reads each line's node number, so any line order maps the
    same (the `grep -H` lines are what the kernel's files hold, one per node)."""
    command = CAPTURE.split("KFD topology: `")[1].rstrip("`").replace("/sys/class/kfd/kfd/topology", '"$1"')
    captured = _shell(command, kfd_tree)
    assert [int(line.split("/nodes/")[1].split("/")[0]) for line in captured.splitlines()] == list(range(12))
    assert parse_render_nodes(captured) == EXPECTED
    assert parse_render_nodes("\n".join(reversed(captured.splitlines()))) == EXPECTED


def test_a_node_listed_twice_is_refused(kfd_tree):
    captured = _shell('grep -H drm_render_minor "$1"/nodes/*/properties "$1"/nodes/5/properties', kfd_tree)
    with pytest.raises(RenderNodesError, match="KFD node 5 is listed twice"):
        parse_render_nodes(captured)


def test_an_unreadable_map_names_the_file_and_the_capture(tmp_path):
    saved = tmp_path / "map.txt"
    saved.write_bytes(b"\xff\xfe")
    with pytest.raises(RenderNodesError, match=f"cannot read {saved}"):
        load_render_nodes(str(saved))
    saved = tmp_path / "other.txt"
    saved.write_text("nothing here\n")
    with pytest.raises(RenderNodesError) as error:
        load_render_nodes(str(saved))
    assert str(error.value) == f"{saved}: no GPU render nodes found; capture it on the host with {CAPTURE}"


def test_a_topology_file_is_refused_where_amd_smi_numbers_gpus_unlike_hip(tmp_path):
    """The topology file's GPU ids are amd-smi's (`amd-smi topology` rows) or rocm-smi's order, and HIP's can differ
    (PR #4406: rocm-smi's index 1 was HIP_VISIBLE_DEVICES=0 on a dual-GPU host): where the saved map shows it,
    placing by topology would weigh other GPUs than the partitions get. prod's gpu-node-1 with such a map."""
    records = json.loads((Path("hosts") / "mi300x-8gpu.render-nodes.json").read_text())
    records[0]["hip_id"], records[1]["hip_id"] = 1, 0
    records[0]["render"], records[1]["render"] = records[1]["render"], records[0]["render"]
    saved = tmp_path / "gpu-node-1.render-nodes.json"
    saved.write_text(json.dumps(records))
    assert load_render_nodes(str(saved)) == load_render_nodes("hosts/mi300x-8gpu.render-nodes.json")
    config = stack_file("prod")
    config[P + "hosts"][0]["renderNodes"] = str(saved)
    message = refusal("prod", config)
    assert message == (
        f"{P}hosts[0].topology: {saved} shows amd-smi numbering host 'gpu-node-1''s GPUs unlike HIP (amd-smi GPU 0 "
        "is HIP GPU 1, amd-smi GPU 1 is HIP GPU 0), and the topology hosts/mi300x-8gpu.showtopo.txt is in amd-smi's "
        "order, so placement would weigh other GPUs than the partitions get; remove `topology` (and numaCpus) and "
        "give each partition `gpus` by `hip_id`"
    )
