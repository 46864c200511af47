"""GPU partition modes on Docker hosts (issue 14, part 1): `hosts[].computePartition` / `memoryPartition`, validated
per model (domain/gpus.py), logical GPU counts, hierarchical placement, and the saved files matching the mode.

Upstream facts these tests rest on:
  * AMD SMI docs, ROCm/rocm-systems projects/amdsmi/docs/conceptual/partition.md (commit 0da2091b):
    - "Compatibility matrix" (MI300X): SPX+NPS1; DPX+NPS1/NPS2; QPX+NPS1/NPS4; CPX+NPS1/NPS4, "the number of memory
      partitions cannot exceed the number of compute partitions";
    - "How logical GPUs are numbered": "On an 8xMI300X system in CPX mode, 64 logical GPUs are reported (amd-smi IDs
      0-63)", the partitions of one GPU share its bus address (`0000:0c:00.0` through `.7`);
    - "In /dev/dri, each XCD partition appears as a separate render device. On an MI300X in CPX mode, render devices
      start at renderD128 and go up to renderD135 (one per XCD). The next physical GPU starts at renderD136";
    - `ROCR_VISIBLE_DEVICES=0,8,16,24` is "CPX partition 0" of four physical GPUs: logical GPU i is partition i % 8
      of physical GPU i // 8.
  * amdgpu driver, aqua_vanjaram.c `__aqua_vanjaram_get_px_mode_info` (amd-gfx patches "drm/amdgpu: Use compatible
    NPS mode info", 2025-05-09, and "Update supported modes for GC v9.5.0", 2025-07-22: on MI350 series QPX and CPX
    also take NPS2).
  * ROCm/amdgpu-docs docs/gpu-partitioning/index.rst compatibility matrix: DPX + NPS2 "NOT on MI300A or MI325";
    CPX + NPS4 "NA" on MI350 and MI355.
  * MI308X: 4 XCDs, CPX shows "32 instead of 8 on an 8x MI308X box" (ROCm/rocm-systems issue #8529).
"""

from __future__ import annotations

import time

import pytest

from conftest import gpu_containers, partition_of, refusal, render_nodes_of
from domain.gpus import MODELS, logical_per_gpu
from domain.topology import PlacementError, parse_topology, physical_gpu, place, place_partitioned
from schema import ConfigError, load
from schema.docker import PlacementLock, host_lock
from tools.synth import synthesize

P = "rocm-stack:"


def amd_smi_list_e(physical: int, per_gpu: int) -> str:
    """`amd-smi list -e` text (the record layout of tests/data/render_nodes/amd-smi-list-e_mi300x-cpx.txt, AMD's own
    CPX output) for a partitioned host, CONSTRUCTED here: no public capture of a whole 64-GPU host was found. Render
    minors follow the AMD SMI docs quoted above: 128 + 8 x physical GPU + partition."""
    records = []
    for gpu in range(physical * per_gpu):
        p, part = divmod(gpu, per_gpu)
        records.append(
            f"GPU: {gpu}\n    BDF: 0000:{0x0C + 0x10 * p:02x}:00.{part}\n    PARTITION_ID: {part}\n"
            f"    RENDER: renderD{128 + 8 * p + part}\n    HIP_ID: {gpu}\n"
        )
    return "\n".join(records)


def hops_topology(physical: int, per_gpu: int) -> str:
    """`rocm-smi --showtopo`-style hops table and NUMA nodes over the logical GPUs, CONSTRUCTED: all GPUs on one xGMI
    fabric report hops 1 (amd-smi docs, rocm-systems amdsmi-cli-tool.md "Interpreting hops and weight": "Two GPUs on
    the same xGMI fabric always report 1"); physical GPUs 0-3 on NUMA node 0, 4-7 on node 1 as on the prod hosts
    (hosts/README.md). No public capture gives the weight between partitions of one GPU, so none is assumed."""
    n = physical * per_gpu
    lines = [
        "============================ Hops between two GPUs =============================",
        "       " + "".join(f"GPU{j:<6}" for j in range(n)),
    ]
    lines += [f"GPU{i:<4}" + "".join(f"{int(i != j):<9}" for j in range(n)) for i in range(n)]
    lines += ["", "================================== Numa Nodes =================================="]
    lines += [f"GPU[{i}]\t\t: (Topology) Numa Node: {int(i // per_gpu >= physical // 2)}" for i in range(n)]
    lines += [f"GPU[{i}]\t\t: (Topology) Numa Affinity: {int(i // per_gpu >= physical // 2)}" for i in range(n)]
    return "\n".join(lines) + "\n"


def cpx_host(tmp_path, containers, **extra):
    nodes = tmp_path / "cpx.render-nodes.txt"
    nodes.write_text(amd_smi_list_e(8, 8))
    return {
        "name": "cpx",
        "gpus": 8,
        "gpuModel": "MI300X",
        "computePartition": "CPX",
        "memoryPartition": "NPS4",
        "gpuAccess": "renderNodes",
        "renderNodes": str(nodes),
        "containers": containers,
        **extra,
    }


# --- the model table ---------------------------------------------------------------------------------------------


def test_each_models_partition_modes_follow_amds_tables():
    pairs = {name: {str(m) for m in model.modes} for name, model in MODELS.items()}
    # AMD SMI compatibility matrix (MI300X).
    assert pairs["MI300X"] == {"SPX/NPS1", "DPX/NPS1", "DPX/NPS2", "QPX/NPS1", "QPX/NPS4", "CPX/NPS1", "CPX/NPS4"}
    # amdgpu-docs: DPX + NPS2 not on MI325.
    assert pairs["MI325X"] == pairs["MI300X"] - {"DPX/NPS2"}
    # GC 9.5.0 adds NPS2 to QPX and CPX; amdgpu-docs: CPX + NPS4 NA on MI350/MI355.
    assert (
        pairs["MI355X"]
        == pairs["MI350X"]
        == {"SPX/NPS1", "DPX/NPS1", "DPX/NPS2", "QPX/NPS1", "QPX/NPS2", "CPX/NPS1", "CPX/NPS2"}
    )
    # 4 XCCs: SPX/DPX/CPX (no QPX); no memory mode but NPS1 is sourced for MI308X.
    assert pairs["MI308X"] == {"SPX/NPS1", "DPX/NPS1", "CPX/NPS1"}
    assert pairs["MI250X"] == pairs["MI250"] == pairs["MI210"] == set()
    # Memory partitions never outnumber compute partitions.
    for model in MODELS.values():
        for mode in model.modes:
            assert int(mode.memory[3]) <= model.logical_per_gpu(mode.compute), (model.name, mode)
            assert mode.source


def test_logical_gpus_per_physical_gpu():
    assert [logical_per_gpu("MI300X", m) for m in (None, "SPX", "DPX", "QPX", "CPX")] == [1, 1, 2, 4, 8]
    assert logical_per_gpu("MI355X", "CPX") == 8
    assert logical_per_gpu("MI308X", "CPX") == 4  # 32 on an 8x MI308X (rocm-systems issue #8529)
    assert logical_per_gpu("other", None) == 1
    assert [physical_gpu(g, 8) for g in (0, 7, 8, 63)] == [0, 0, 1, 7]


# --- refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "key", "fragment"),
    [
        (
            {"computePartition": "DPX", "memoryPartition": "NPS4"},
            "computePartition",
            "DPX with NPS4 is not a partition mode of MI300X (memory partitions cannot outnumber compute partitions",
        ),
        (
            {"computePartition": "QPX", "memoryPartition": "NPS2"},
            "computePartition",
            "supported compute/memory pairs: SPX/NPS1, DPX/NPS1, DPX/NPS2, QPX/NPS1, QPX/NPS4, CPX/NPS1, CPX/NPS4",
        ),
        ({"memoryPartition": "NPS4"}, "memoryPartition", "SPX with NPS4 is not a partition mode of MI300X"),
        (
            {"gpuModel": "MI325X", "computePartition": "DPX", "memoryPartition": "NPS2"},
            "computePartition",
            "DPX with NPS2 is not a partition mode of MI325X",
        ),
        (
            {"gpuModel": "MI355X", "computePartition": "CPX", "memoryPartition": "NPS4"},
            "computePartition",
            "CPX with NPS4 is not a partition mode of MI355X",
        ),
        (
            {"gpuModel": "MI308X", "computePartition": "QPX"},
            "computePartition",
            "QPX with NPS1 is not a partition mode of MI308X",
        ),
        ({"gpuModel": "MI250X", "computePartition": "SPX"}, "computePartition", "MI250X GPUs have no partition modes"),
        (
            {"gpuModel": "other", "computePartition": "CPX"},
            "computePartition",
            "gpuModel 'other' has no known partition",
        ),
        ({"gpus": 16, "computePartition": "CPX"}, "computePartition", "16 GPUs in CPX show 128 logical GPUs"),
        (
            {"computePartition": "CPX", "containers": [{"name": "a", "gpuCount": 12}]},
            "containers[0].gpuCount",
            "12 logical GPUs would split a physical GPU: in CPX one MI300X shows 8; use at most 8",
        ),
        ({"computePartition": "XPX"}, "computePartition", "'SPX', 'DPX', 'QPX' or 'CPX'"),
    ],
)
def test_invalid_modes_are_refused_naming_the_key(extra, key, fragment):
    with pytest.raises(ConfigError) as error:
        load("dev", {P + "hosts": [{"name": "h", "gpus": 8, **extra}]})
    messages = [str(p) for p in error.value.problems]
    assert any(m.startswith(f"{P}hosts[0].{key}: ") and fragment in m for m in messages), messages


@pytest.mark.parametrize("mode", ["SPX/NPS1", "DPX/NPS2", "QPX/NPS4", "CPX/NPS1", "CPX/NPS4"])
def test_supported_mi300x_modes_load_with_their_logical_gpu_count(mode):
    compute, memory = mode.split("/")
    cfg = load("dev", {P + "hosts": [{"name": "h", "gpus": 8, "computePartition": compute, "memoryPartition": memory}]})
    assert cfg.hosts[0].gpus == 8
    assert cfg.hosts[0].logical_gpus == 8 * {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}[compute]


def test_indices_count_logical_gpus():
    cfg = load(
        "dev",
        {
            P + "hosts": [
                {"name": "h", "gpus": 8, "computePartition": "CPX", "containers": [{"name": "a", "gpus": [63]}]}
            ]
        },
    )
    assert cfg.hosts[0].containers[0].gpus == [63]
    with pytest.raises(
        ConfigError,
        match=r"hosts\[0\].containers\[0\].gpus\[0\]: GPU 64 is out of range: host 'h' "
        r"has 64 logical GPUs \(8 MI300X in CPX\) \(0..63\)",
    ):
        load(
            "dev",
            {
                P + "hosts": [
                    {"name": "h", "gpus": 8, "computePartition": "CPX", "containers": [{"name": "a", "gpus": [64]}]}
                ]
            },
        )


# --- the done-when: a CPX/NPS4 MI300X host with eight 8-GPU partitions --------------------------------------------


def test_cpx_nps4_host_puts_each_8_gpu_partition_on_one_physical_gpu(tmp_path):
    containers = [{"name": f"p{i}", "gpuCount": 8} for i in range(8)]
    config = {P + "hosts": [cpx_host(tmp_path, containers)]}
    placed = {c.name: c.gpus for c in load("dev", config).hosts[0].containers}
    for name, gpus in placed.items():
        assert len(gpus) == 8 and len({physical_gpu(g, 8) for g in gpus}) == 1, (name, gpus)
    assert sorted(g for gpus in placed.values() for g in gpus) == list(range(64))

    plan = synthesize("dev", config)
    nodes = {partition_of(c): render_nodes_of(c) for c in gpu_containers(plan)}
    assert len(nodes) == 8
    every = [n for ns in nodes.values() for n in ns]
    assert len(every) == 64 and len(set(every)) == 64  # disjoint render nodes
    for name, ns in nodes.items():
        # One physical GPU's eight partitions: renderD(128 + 8p) .. renderD(135 + 8p) (AMD SMI docs).
        minors = sorted(int(n.removeprefix("/dev/dri/renderD")) for n in ns)
        assert minors == list(range(minors[0], minors[0] + 8)) and (minors[0] - 128) % 8 == 0, (name, minors)


def test_cpx_topology_places_whole_physical_gpus_on_one_numa_node(tmp_path):
    topology = tmp_path / "cpx.showtopo.txt"
    topology.write_text(hops_topology(8, 8))
    containers = [
        {"name": "big-a", "gpuCount": 16},
        {"name": "big-b", "gpuCount": 16},
        {"name": "half", "gpuCount": 4},
        {"name": "pair-a", "gpuCount": 2},
        {"name": "pair-b", "gpuCount": 2},
        {"name": "one", "gpuCount": 1},
    ]
    host = cpx_host(tmp_path, containers, topology=str(topology), numaCpus={0: "0-95", 1: "96-191"})
    cfg = load("dev", {P + "hosts": [host]})
    placed = {c.name: c for c in cfg.hosts[0].containers}
    for name in ("big-a", "big-b"):  # two whole physical GPUs, both on one NUMA node, pinned to its CPUs
        physical = sorted({physical_gpu(g, 8) for g in placed[name].gpus})
        assert len(physical) == 2 and placed[name].gpus == list(range(8 * physical[0], 8 * physical[0] + 8)) + list(
            range(8 * physical[1], 8 * physical[1] + 8)
        )
        assert placed[name].cpuset in ("0-95", "96-191")
    for name in ("half", "pair-a", "pair-b", "one"):  # at most 8: on one physical GPU
        assert len({physical_gpu(g, 8) for g in placed[name].gpus}) == 1, (name, placed[name].gpus)
    # The small ones share one physical GPU (4 + 2 + 2 = 8 fills it; the 1 goes to the next).
    assert len({physical_gpu(g, 8) for n in ("half", "pair-a", "pair-b") for g in placed[n].gpus}) == 1


def test_partitioned_placement_packs_small_sets_and_stays_fast():
    topology = parse_topology(hops_topology(8, 8))
    sets = place_partitioned(topology, list(range(64)), [8, 4, 4, 2, 2, 2, 1, 1], 8)
    assert sets == [
        (0, 1, 2, 3, 4, 5, 6, 7),
        (8, 9, 10, 11),
        (12, 13, 14, 15),
        (16, 17),
        (18, 19),
        (20, 21),
        (22,),
        (23,),
    ]
    # Without a topology the same packing, lowest indices first.
    assert place_partitioned(None, list(range(64)), [8, 4, 4, 2, 2, 2, 1, 1], 8) == sets
    with pytest.raises(PlacementError, match="fits on no physical GPU"):
        place_partitioned(None, [0, 1, 2, 3, 8, 9, 10, 11], [8], 8)
    started = time.perf_counter()
    for sizes in ([8] * 8, [16, 16, 8, 8, 4, 4, 2, 2, 1, 1], [1] * 64, [32, 16, 8, 4, 2, 1, 1]):
        place_partitioned(topology, list(range(64)), sizes, 8)
    print(f"\n4 placements of 64 logical GPUs: {time.perf_counter() - started:.3f} s")


# --- saved files must match the mode -----------------------------------------------------------------------------


def test_render_nodes_saved_in_another_mode_are_refused_naming_both_files(tmp_path):
    host = cpx_host(
        tmp_path,
        [{"name": "a", "gpuCount": 8}],
        renderNodes="hosts/mi300x-8gpu.render-nodes.json",
        topology="hosts/mi300x-8gpu.showtopo.txt",
    )
    message = refusal("dev", {P + "hosts": [host]})
    assert (
        f"{P}hosts[0].renderNodes: hosts/mi300x-8gpu.render-nodes.json lists 8 GPUs but host 'cpx' shows 64 "
        "logical GPUs (8 MI300X in CPX): it was saved in another partition mode"
    ) in message
    assert "the topology hosts/mi300x-8gpu.showtopo.txt must match the mode too" in message
    assert (
        "`sudo amd-smi set -C CPX`; `sudo amd-smi set -M NPS4` and a driver reload) with `amd-smi topology "
        "--json > hosts/mi300x-8gpu.showtopo.txt` and `amd-smi list -e --json > "
        "hosts/mi300x-8gpu.render-nodes.json`"
    ) in message


def test_topology_saved_in_another_mode_is_refused_naming_both_files(tmp_path):
    host = cpx_host(tmp_path, [{"name": "a", "gpuCount": 8}], topology="hosts/mi300x-8gpu.showtopo.txt")
    message = refusal("dev", {P + "hosts": [host]})
    assert (
        f"{P}hosts[0].topology: the file describes 8 GPUs but host 'cpx' shows 64 logical GPUs (8 MI300X in "
        f"CPX): it was saved in another partition mode; the render-node map {host['renderNodes']} must match "
        "the mode too"
    ) in message


def test_an_unpartitioned_host_with_a_cpx_render_node_map_is_refused(tmp_path):
    nodes = tmp_path / "cpx.txt"
    nodes.write_text(amd_smi_list_e(8, 8))
    message = refusal(
        "dev", {P + "hosts": [{"name": "h", "gpus": 8, "gpuAccess": "renderNodes", "renderNodes": str(nodes)}]}
    )
    assert f"{P}hosts[0].renderNodes: {nodes} lists 64 GPUs but host 'h' shows 8 GPUs" in message


# --- the placement lock keeps logical indices --------------------------------------------------------------------


def test_lock_holds_logical_indices_and_a_mode_change_invalidates_it(tmp_path):
    config = {P + "hosts": [cpx_host(tmp_path, [{"name": "a", "gpuCount": 4}, {"name": "b", "gpuCount": 8}])]}
    cfg = load("dev", config, lock=PlacementLock(), place_unlocked=True)
    lock = PlacementLock(hosts={"cpx": host_lock(cfg.hosts[0], None)})
    assert lock.hosts["cpx"].compute_partition == "CPX"
    assert lock.hosts["cpx"].partitions == {"a": [8, 9, 10, 11], "b": [0, 1, 2, 3, 4, 5, 6, 7]}
    grown = {
        P + "hosts": [
            cpx_host(
                tmp_path, [{"name": "a", "gpuCount": 4}, {"name": "b", "gpuCount": 8}, {"name": "aa", "gpuCount": 4}]
            )
        ]
    }
    again = {c.name: c.gpus for c in load("dev", grown, lock=lock).hosts[0].containers}
    assert again["a"] == [8, 9, 10, 11] and again["b"] == list(range(8)) and again["aa"] == [12, 13, 14, 15]
    qpx = {P + "hosts": [{**config[P + "hosts"][0], "computePartition": "QPX", "memoryPartition": None}]}
    qpx[P + "hosts"][0].pop("renderNodes")
    qpx[P + "hosts"][0]["gpuAccess"] = "all"
    with pytest.raises(
        ConfigError,
        match=r"hosts\[0\].computePartition: host 'cpx' changed since its partitions "
        r"\['a', 'b'\] were locked .* \(computePartition CPX -> QPX\)",
    ):
        load("dev", qpx, lock=lock)


# --- topology: tables without information, unknown NUMA nodes ----------------------------------------------------

# A 4-GPU host where GPUs 0-2 and 1-3 are xGMI pairs: the weight table is all zeros, as ROCm 7.x `amd-smi topology`
# printed on MI355X (issue 14); amd-smi weighs each xGMI hop 15 (rocm-systems amdsmi-cli-tool.md, "Interpreting hops
# and weight", PR #7372), so zeros between distinct GPUs carry no information. The hops table does: 1 = xGMI, 2 = PCIe
# within a NUMA node (same section). CONSTRUCTED in the amd-smi text layout of tests/data/topology.
ZERO_WEIGHT = """WEIGHT TABLE:
             0000:0c:00.0 0000:22:00.0 0000:38:00.0 0000:5c:00.0
0000:0c:00.0 0            0            0            0
0000:22:00.0 0            0            0            0
0000:38:00.0 0            0            0            0
0000:5c:00.0 0            0            0            0

HOPS TABLE:
             0000:0c:00.0 0000:22:00.0 0000:38:00.0 0000:5c:00.0
0000:0c:00.0 0            2            1            2
0000:22:00.0 2            0            2            1
0000:38:00.0 1            2            0            2
0000:5c:00.0 2            1            2            0

LINK TYPE TABLE:
             0000:0c:00.0 0000:22:00.0 0000:38:00.0 0000:5c:00.0
0000:0c:00.0 SELF         PCIE         XGMI         PCIE
0000:22:00.0 PCIE         SELF         PCIE         XGMI
0000:38:00.0 XGMI         PCIE         SELF         PCIE
0000:5c:00.0 PCIE         XGMI         PCIE         SELF
"""


def test_an_all_zero_weight_table_falls_back_to_hops_then_link_type():
    topology = parse_topology(ZERO_WEIGHT)
    assert place(topology, [2, 2]) == [(0, 2), (1, 3)]
    without_hops = topology.model_copy(update={"hops": None})
    assert place(without_hops, [2, 2]) == [(0, 2), (1, 3)]  # XGMI < PCIE
    without_either = without_hops.model_copy(update={"link_type": None})
    assert place(without_either, [2, 2]) == [(0, 1), (2, 3)]  # nothing known: lowest indices


def test_unknown_or_unlisted_numa_nodes_are_reported(tmp_path):
    # rocm-smi prints -1 where the kernel does not know a GPU's NUMA node (rocm_smi_lib: "Numa Node: -1").
    text = hops_topology(2, 1).replace("Numa Node: 1", "Numa Node: -1").replace("Numa Affinity: 1", "Numa Affinity: -1")
    unknown = tmp_path / "unknown.txt"
    unknown.write_text(text)
    base = {"name": "h", "gpus": 2, "containers": [{"name": "a", "gpuCount": 1}, {"name": "b", "gpuCount": 1}]}
    message = refusal("dev", {P + "hosts": [{**base, "topology": str(unknown), "numaCpus": {0: "0-7"}}]})
    assert f"{P}hosts[0].topology: {unknown} gives no NUMA node (-1 or none) for GPU(s) [1]" in message
    known = tmp_path / "known.txt"
    known.write_text(hops_topology(2, 1))
    message = refusal("dev", {P + "hosts": [{**base, "topology": str(known), "numaCpus": {0: "0-7"}}]})
    assert (
        f"{P}hosts[0].numaCpus: GPU(s) [1] are on NUMA node(s) [1] ({known}), which numaCpus does not list" in message
    )
    # Without numaCpus nothing is pinned, so nothing is lost: the host loads.
    assert load("dev", {P + "hosts": [{**base, "topology": str(unknown)}]}).hosts[0].containers[0].gpus == [0]


def test_a_partitioned_hosts_gpu_check_applies_no_whole_gpu_floor(tmp_path):
    """AMD's 600 TFLOP/s / 100 GB/s floors are for whole MI300X GPUs (CVS preflight_config.json, schema/checks.py);
    a CPX partition has one of the GPU's eight XCDs (AMD SMI partition.md), so its check has no floor."""
    whole = {"name": "whole", "gpus": 8, "gpuModel": "MI300X", "containers": [{"name": "p0", "gpus": [0, 1]}]}
    config = {
        P + "hosts": [cpx_host(tmp_path, [{"name": "p0", "gpus": list(range(8))}]), whole],
        P + "checks": {"enforceFloors": True},
    }
    commands = {
        c["name"]: c["inputs"]["command"]
        for c in synthesize("dev", config).of_type("docker:index/container:Container")
        if c["name"].endswith("-gpucheck")
    }
    assert "--min-tflops" not in commands["cpx-p0-gpucheck"] and "--min-busbw" not in commands["cpx-p0-gpucheck"]
    spx = commands["whole-p0-gpucheck"]
    assert spx[spx.index("--min-tflops") + 1] == "600" and spx[spx.index("--min-busbw") + 1] == "100"
