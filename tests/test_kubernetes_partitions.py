"""GPU partitioning on Kubernetes: partition profiles as the Device Config Manager's ConfigMap, the DeviceConfig's
`configManager`, the device plugin's `mixed` resource naming (operator and standalone), and workloads that request
a partition resource.

Upstream facts, with their sources:
- gpu-operator v1.5.1 (commit 858cf255) docs/dcm/device-config-manager-configmap.md L9-13: with
  `spec.configManager.config.name` set the operator mounts that ConfigMap (and does not create it) under
  /etc/config-manager/, "usually as config.json"; L21-62 the format (`gpu-config-profiles` -> name ->
  `skippedGPUs.ids`, `profiles[]` of `computePartition`, `memoryPartition`, `numGPUsAssigned`); L123-130
  "Sum of numGPUsAssigned + len(skippedGPUs) = TotalGPUCount", ids from 0 to total - 1.
- gpu-operator v1.5.1 docs/dcm/applying-partition-profiles.rst L229: a node takes a profile through the label
  `dcm.amd.com/gpu-config-profile=<name>`; L10-12 the operands must not tolerate `amd-dcm`.
- gpu-operator v1.5.1 docs/device_plugin/device-plugin.md L96-135: `single` reports every GPU or partition as
  amd.com/gpu (8 CPX/NPS4 GPUs: `amd.com/gpu: 64`); `mixed` by mode (`amd.com/cpx_nps4: 64`; 5 SPX/NPS1 + 3 CPX/NPS1
  GPUs: `amd.com/spx_nps1: 5`, `amd.com/cpx_nps1: 24`); "These different naming styles of resources, for example,
  amd.com/cpx_nps1 should be followed when requesting for resources in a pod spec".
- ROCm/k8s-device-plugin v1.31.0.9 cmd/k8s-device-plugin/main.go L110: the flag `-resource_naming_strategy`,
  default "single"; Dockerfile L33 the image's command line is a CMD without ENTRYPOINT.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from domain.gpus import MODELS
from tools.synth import Plan, manifest_of, synthesize
from conftest import refused, stack_without_kubernetes
from k8s_validation import CrdSchemas, validate_all, validate_object

DATA = Path(__file__).parent / "data" / "kubernetes"
CRDS = CrdSchemas.from_files(DATA / "deviceconfig-crd.yaml")
P = "rocm-stack:"
DEVICE_CONFIG = "kubernetes:amd.com/v1alpha1:DeviceConfig"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
JOB = "kubernetes:batch/v1:Job"
PROD_PROVIDER = {"context": "gpu-prod"}

# AMD's documented DCM ConfigMap (device-config-manager-configmap.md L28-62), `gpuClientSystemdServices` left out: it
# names host systemd units DCM stops while partitioning, and without it DCM stops none (ROCm/device-config-manager
# pkg/config_manager/configmanager.go L822-825 @ fe98bda: `serviceList := []string{}; if services.List != nil`).
AMD_EXAMPLE_CONFIG = {
    "gpu-config-profiles": {
        "cpx-profile": {
            "skippedGPUs": {"ids": []},
            "profiles": [{"computePartition": "CPX", "memoryPartition": "NPS4", "numGPUsAssigned": 8}],
        },
        "spx-profile": {
            "skippedGPUs": {"ids": []},
            "profiles": [{"computePartition": "SPX", "memoryPartition": "NPS1", "numGPUsAssigned": 8}],
        },
    },
}
PROFILES = {
    "cpx-profile": {"gpuModel": "MI300X", "computePartition": "CPX", "memoryPartition": "NPS4", "gpus": 8, "nodes": 2},
    "spx-profile": {"gpuModel": "MI300X", "computePartition": "SPX", "memoryPartition": "NPS1", "gpus": 8},
}
DCM = {
    "partitionProfiles": PROFILES,
    "gpuOperator": {
        "deviceConfig": {"configManager": {"enable": True}, "devicePlugin": {"resourceNamingStrategy": "mixed"}}
    },
}


def synth(stack: str, kubernetes: dict[str, Any], **keys: Any) -> Plan:
    config = stack_without_kubernetes(stack)
    config[P + "monitoring"] = {"enabled": False}
    config[P + "kubernetes"] = kubernetes
    config.update({P + key: value for key, value in keys.items()})
    return synthesize(stack, config)


def refusal(stack: str, kubernetes: dict[str, Any], **keys: Any) -> list[str]:
    return [line.strip() for line in refused(lambda: synth(stack, kubernetes, **keys)).splitlines()]


def one(plan: Plan, type_: str, name: str | None = None) -> dict[str, Any]:
    [resource] = [r for r in plan.of_type(type_) if name is None or manifest_of(r)["metadata"]["name"] == name]
    return resource


@pytest.fixture(scope="module")
def dcm_plan() -> Plan:
    return synth("dev", DCM)


# --- operator mode: DCM and its ConfigMap ------------------------------------------------------------------


def test_profiles_become_amds_documented_dcm_config(dcm_plan):
    config_map = manifest_of(one(dcm_plan, CONFIG_MAP, "rocm-stack-dcm-config"))
    validate_object(config_map)  # kubernetes_validate, strict
    assert config_map["metadata"]["namespace"] == "kube-amd-gpu"  # the DeviceConfig's namespace
    assert list(config_map["data"]) == ["config.json"]
    assert json.loads(config_map["data"]["config.json"]) == AMD_EXAMPLE_CONFIG


def test_profile_keys_are_those_of_the_charts_own_dcm_config():
    """The chart's default DCM config (vendored values.yaml `defaultDCMConfigMap`) spells a profile entry with the
    same keys."""
    values = yaml.safe_load((DATA / "gpu-operator-values.yaml").read_text())
    upstream = json.loads(values["defaultDCMConfigMap"]["data"]["config.json"])["gpu-config-profiles"]
    upstream_keys = {key for profile in upstream.values() for entry in profile["profiles"] for key in entry}
    ours = json.loads(manifest_of(one(synth("dev", DCM), CONFIG_MAP, "rocm-stack-dcm-config"))["data"]["config.json"])
    our_keys = {
        key for profile in ours["gpu-config-profiles"].values() for entry in profile["profiles"] for key in entry
    }
    assert our_keys == upstream_keys == {"computePartition", "memoryPartition", "numGPUsAssigned"}


def test_device_config_enables_dcm_on_that_config_map_and_passes_the_crd(dcm_plan):
    resource = one(dcm_plan, DEVICE_CONFIG)
    obj = manifest_of(resource)
    validate_object(obj, CRDS)  # the vendored v1.5.1 CRD, strict: every field below exists there
    manager = obj["spec"]["configManager"]
    assert manager == {
        "enable": True,
        "image": "docker.io/rocm/device-config-manager:v1.5.1",
        "config": {"name": "rocm-stack-dcm-config"},
        "upgradePolicy": {"upgradeStrategy": "RollingUpdate", "maxUnavailable": 1},
    }
    # CRD: devicePluginArguments "supported flag values: {"resource_naming_strategy": {"single", "mixed"}}"
    # (deviceconfig-crd.yaml L231-237).
    assert obj["spec"]["devicePlugin"]["devicePluginArguments"] == {"resource_naming_strategy": "mixed"}
    # DCM's pod does not come up without its ConfigMap (docs/dcm/device-config-manager.md L55).
    assert one(dcm_plan, CONFIG_MAP, "rocm-stack-dcm-config")["urn"] in resource["depends_on"]


def test_dcm_tolerates_the_gpu_node_taints_and_takes_its_own_selector():
    taint = {"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}
    kubernetes = copy.deepcopy(DCM)
    kubernetes["gpuNodeTaints"] = [taint]
    kubernetes["gpuOperator"]["deviceConfig"]["configManager"] |= {
        "selector": {"dcm": "on"},
        "configMapName": "partitions",
        "upgradePolicy": {"upgradeStrategy": "OnDelete"},
    }
    plan = synth("dev", kubernetes)
    obj = manifest_of(one(plan, DEVICE_CONFIG))
    validate_object(obj, CRDS)
    manager = obj["spec"]["configManager"]
    assert manager["configManagerTolerations"] == [
        {"key": "amd.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    assert manager["selector"] == {"dcm": "on"}
    assert manager["config"] == {"name": "partitions"}
    assert manager["upgradePolicy"]["upgradeStrategy"] == "OnDelete"
    assert manifest_of(one(plan, CONFIG_MAP, "partitions"))


def test_misspelled_config_manager_field_is_caught_by_the_crd(dcm_plan):
    obj = manifest_of(one(dcm_plan, DEVICE_CONFIG))
    obj["spec"]["configManager"]["configMap"] = obj["spec"]["configManager"].pop("config")
    with pytest.raises(AssertionError, match="configMap"):
        validate_object(obj, CRDS)


def test_partitioning_is_off_by_default():
    plan = synth("dev", {})
    spec = manifest_of(one(plan, DEVICE_CONFIG))["spec"]
    assert "configManager" not in spec and "devicePluginArguments" not in spec["devicePlugin"]
    assert not [r for r in plan.of_type(CONFIG_MAP) if "dcm" in r["name"]]
    plugin = one(synth("dev", {"mode": "device-plugin"}), DAEMON_SET, "amdgpu-device-plugin-daemonset")
    assert "command" not in manifest_of(plugin)["spec"]["template"]["spec"]["containers"][0]  # the image's own


def test_profiles_without_dcm_describe_nodes_partitioned_elsewhere():
    plan = synth("dev", {"partitionProfiles": PROFILES})
    assert "configManager" not in manifest_of(one(plan, DEVICE_CONFIG))["spec"]
    assert not [r for r in plan.of_type(CONFIG_MAP) if "dcm" in r["name"]]


# --- standalone device plugin -------------------------------------------------------------------------------


def test_standalone_device_plugin_takes_the_mixed_flag_after_the_images_own_command():
    plan = synth("dev", {"mode": "device-plugin", "devicePlugin": {"resourceNamingStrategy": "mixed"}})
    obj = manifest_of(one(plan, DAEMON_SET, "amdgpu-device-plugin-daemonset"))
    validate_object(obj)
    (container,) = obj["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [
        "./k8s-device-plugin",
        "-logtostderr=true",
        "-stderrthreshold=INFO",
        "-v=5",
        "-resource_naming_strategy=mixed",
    ]


def test_device_plugin_mode_runs_workloads_on_partitions_made_outside_the_stack():
    """No DCM in device-plugin mode: the profiles describe the nodes (a standalone DCM or amd-smi partitioned them)
    for the fleet check, the pods' GPU check and the resource names."""
    kubernetes = {
        "mode": "device-plugin",
        "devicePlugin": {"resourceNamingStrategy": "mixed"},
        "partitionProfiles": {"cpx": PROFILES["cpx-profile"]},
    }
    plan = synth("dev", kubernetes, training=_training(gpusPerNode=64, gpuResource="amd.com/cpx_nps4"))
    validate_all([manifest_of(r) for r in plan.kubernetes_objects()], CRDS)
    assert not plan.of_type(DEVICE_CONFIG) and not [r for r in plan.of_type(CONFIG_MAP) if "dcm" in r["name"]]
    check = pod_check(plan, "shard")
    assert check["resources"]["limits"]["amd.com/cpx_nps4"] == "64" and check["command"][3:5] == ["--expect-gpus", "64"]
    lines = refusal("dev", kubernetes, training=_training(nodes=3, gpusPerNode=64, gpuResource="amd.com/cpx_nps4"))
    assert any(
        line.startswith(f"{P}training[0].kubernetes.nodes: 3 nodes, but kubernetes.partitionProfiles.cpx has 2")
        for line in lines
    ), lines


# --- resource names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compute", "memory", "gpus", "resource", "count"),
    [
        ("CPX", "NPS4", 8, "amd.com/cpx_nps4", 64),  # device-plugin.md L118-122
        ("SPX", "NPS1", 5, "amd.com/spx_nps1", 5),  # L124-128
        ("CPX", "NPS1", 3, "amd.com/cpx_nps1", 24),  # L124-129
    ],
)
def test_mixed_resource_names_and_counts_are_the_device_plugins(compute, memory, gpus, resource, count):
    from schema.kubernetes import PartitionProfile

    profile = PartitionProfile(gpu_model="MI300X", compute_partition=compute, memory_partition=memory, gpus=gpus)
    assert (profile.resource_name("mixed"), profile.logical_gpus_per_node) == (resource, count)
    assert profile.resource_name("single") == "amd.com/gpu"  # L101-111: `amd.com/gpu: 64` for 8 CPX/NPS4 GPUs


def _training(**kubernetes: Any) -> list[dict[str, Any]]:
    return [{"name": "shard", "kubernetes": {"namespace": "default", "checkpoints": {"type": "pvc"}, **kubernetes}}]


def test_a_workload_requests_its_partition_resource_and_the_fleet_counts_partitions():
    plan = synth(
        "dev",
        DCM,
        training=_training(gpusPerNode=8, gpuResource="amd.com/cpx_nps4"),
        inference=[
            {"name": "chat", "model": "Qwen/Qwen2.5-0.5B-Instruct", "kubernetes": {"gpuResource": "amd.com/cpx_nps4"}}
        ],
    )
    objects = [manifest_of(r) for r in plan.kubernetes_objects()]
    validate_all(objects, CRDS)
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "shard")
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"]["amd.com/cpx_nps4"] == resources["requests"]["amd.com/cpx_nps4"] == "8"
    assert "amd.com/gpu" not in resources["limits"]
    server = next(o for o in objects if o["kind"] == "Deployment")
    assert server["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["amd.com/cpx_nps4"] == "1"


def test_the_fleet_is_checked_per_resource():
    # 2 CPX/NPS4 nodes offer 64 partitions each: 3 pods of 64 cannot all run, 2 can.
    lines = refusal("dev", DCM, training=_training(nodes=3, gpusPerNode=16, gpuResource="amd.com/cpx_nps4"))
    assert (
        f"{P}training[0].kubernetes.nodes: 3 nodes, but kubernetes.partitionProfiles.cpx-profile has 2: the job "
        "can never start"
    ) in lines, lines
    synth("dev", DCM, training=_training(nodes=2, gpusPerNode=16, gpuResource="amd.com/cpx_nps4"))
    # The unpartitioned nodes (gpuFleet) do not count for the partition resource, nor the partitions for amd.com/gpu.
    lines = refusal("dev", DCM, gpuFleet={"nodes": 1, "gpusPerNode": 8}, training=_training(nodes=2, gpusPerNode=8))
    assert f"{P}training[0].kubernetes.nodes: 2 nodes, but gpuFleet has 1: the job can never start" in lines, lines


def test_under_single_naming_partitioned_nodes_offer_amd_com_gpu_too():
    """device-plugin.md L101-111: `single` reports the 64 partitions of a CPX/NPS4 node as amd.com/gpu."""
    single = copy.deepcopy(DCM)
    del single["gpuOperator"]["deviceConfig"]["devicePlugin"]
    fleet = {"nodes": 1, "gpusPerNode": 8}
    synth("dev", single, gpuFleet=fleet, training=_training(nodes=3, gpusPerNode=8))
    lines = refusal("dev", single, gpuFleet=fleet, training=_training(nodes=4, gpusPerNode=8))
    assert (
        f"{P}training[0].kubernetes.nodes: 4 nodes, but gpuFleet and kubernetes.partitionProfiles.cpx-profile "
        "together have 3: the job can never start"
    ) in lines, lines


# --- each pod's GPU check runs on its partitions ------------------------------------------------------------


def pod_check(plan: Plan, name: str) -> dict[str, Any]:
    """The gpucheck init container of a one-node training (a Job) or a vLLM Deployment named `name`."""
    (workload,) = [
        r for r in plan.kubernetes_objects() if r["name"] == name and r["type"].endswith((":Job", ":Deployment"))
    ]
    return next(
        c for c in manifest_of(workload)["spec"]["template"]["spec"]["initContainers"] if c["name"] == "gpucheck"
    )


def test_a_pod_on_partitions_checks_its_resource_without_the_whole_gpu_floors():
    plan = synth(
        "prod",
        {**DCM, "provider": PROD_PROVIDER},
        gpuFleet={"nodes": 3, "gpusPerNode": 8},
        checks={"enforceFloors": True},
        training=_training(gpusPerNode=16, gpuResource="amd.com/cpx_nps4"),
        inference=[{"name": "chat", "model": "Qwen/Qwen2.5-0.5B-Instruct", "kubernetes": {"replicas": 1}}],
    )
    check = pod_check(plan, "shard")
    assert check["resources"]["limits"]["amd.com/cpx_nps4"] == "16"
    # A CPX partition has an eighth of a GPU's compute: the whole-GPU floors (600 TFLOP/s) do not apply.
    assert check["command"][3:5] == ["--expect-gpus", "16"] and "--min-tflops" not in check["command"]
    # amd.com/gpu: whole GPUs of the fleet, whose model gpuFleet does not name ("other": no floor by default).
    assert "--min-tflops" not in pod_check(plan, "chat")["command"]


def test_a_pod_on_an_spx_profile_keeps_the_models_floors():
    kubernetes = copy.deepcopy(DCM) | {"provider": PROD_PROVIDER}
    kubernetes["partitionProfiles"] = {"whole": PROFILES["spx-profile"] | {"nodes": 1}}
    plan = synth(
        "prod",
        kubernetes,
        checks={"enforceFloors": True},
        training=_training(gpusPerNode=8, gpuResource="amd.com/spx_nps1"),
    )
    command = pod_check(plan, "shard")["command"]
    assert command[command.index("--min-tflops") + 1] == "600"  # MI300X, schema/checks.py DEFAULT_FLOORS


def test_under_single_naming_amd_com_gpu_may_be_a_partition_so_no_floor():
    kubernetes = {"provider": PROD_PROVIDER, "partitionProfiles": {"cpx": PROFILES["cpx-profile"]}}
    floors = {"other": {"minTflops": 500}}
    plan = synth(
        "prod",
        kubernetes,
        gpuFleet={"nodes": 2, "gpusPerNode": 8},
        checks={"enforceFloors": True, "floors": floors},
        training=_training(gpusPerNode=8),
    )
    assert "--min-tflops" not in pod_check(plan, "shard")["command"]
    del kubernetes["partitionProfiles"]
    plan = synth(
        "prod",
        kubernetes,
        gpuFleet={"nodes": 2, "gpusPerNode": 8},
        checks={"enforceFloors": True, "floors": floors},
        training=_training(gpusPerNode=8),
    )
    assert pod_check(plan, "shard")["command"][-2:] == ["--min-tflops", "500"]


# --- refusals name the key -----------------------------------------------------------------------------------


def _profile(**fields: Any) -> dict[str, Any]:
    return {
        "partitionProfiles": {
            "p": {"gpuModel": "MI300X", "computePartition": "CPX", "memoryPartition": "NPS4", "gpus": 8, **fields}
        }
    }


PP = "kubernetes.partitionProfiles.p"
GD = "kubernetes.gpuOperator.deviceConfig"
BAD = {
    # MI300X: SPX+NPS1, DPX+NPS1/NPS2, QPX+NPS1/NPS4, CPX+NPS1/NPS4 (domain/gpus.py, with its sources).
    "CPX/NPS2 on MI300X": (
        _profile(memoryPartition="NPS2"),
        f"{PP}.memoryPartition",
        "MI300X does not support CPX/NPS2; it supports SPX/NPS1, DPX/NPS1",
    ),
    "QPX on MI308X": (
        _profile(gpuModel="MI308X", computePartition="QPX", memoryPartition="NPS1"),
        f"{PP}.computePartition",
        "MI308X does not support QPX/NPS1",
    ),
    "a GPU without partition modes": (_profile(gpuModel="MI250X"), f"{PP}.gpuModel", "no partition modes"),
    "unknown mode": (_profile(computePartition="TPX"), f"{PP}.computePartition", "'SPX', 'DPX', 'QPX' or 'CPX'"),
    "skipped id beyond the node": (
        _profile(gpus=6, skippedGpus=[0, 8]),
        f"{PP}.skippedGpus[1]",
        "GPU id 8 is not on a node of 8 GPUs",
    ),
    "skipped id twice": (_profile(gpus=6, skippedGpus=[1, 1]), f"{PP}.skippedGpus[1]", "listed twice"),
    "more than 64 GPUs on a node": (_profile(gpus=16), f"{PP}.gpus", "128 GPUs on a node, more than the 64"),
    "profile name no label value": (
        {"partitionProfiles": {"CPX_NPS4": _profile()["partitionProfiles"]["p"]}},
        "kubernetes.partitionProfiles.CPX_NPS4",
        "lowercase letters, digits and '-'",
    ),
    "DCM without profiles": (
        {"gpuOperator": {"deviceConfig": {"configManager": {"enable": True}}}},
        f"{GD}.configManager.enable",
        "declare at least one",
    ),
    "operands tolerating amd-dcm": (
        {**DCM, "gpuNodeTaints": [{"key": "amd-dcm", "value": "up", "effect": "NoExecute"}]},
        "kubernetes.gpuNodeTaints[0]",
        "must not tolerate it",
    ),
    "unknown naming strategy": (
        {"mode": "device-plugin", "devicePlugin": {"resourceNamingStrategy": "partition"}},
        "kubernetes.devicePlugin.resourceNamingStrategy",
        "'single' or 'mixed'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_partition_config_is_refused_naming_the_key(case):
    kubernetes, path, explanation = BAD[case]
    lines = refusal("dev", kubernetes)
    assert any(line.startswith(f"{P}{path}: ") and explanation in line for line in lines), lines


def test_unpinned_dcm_image_is_refused_in_prod():
    kubernetes = copy.deepcopy(DCM) | {"provider": PROD_PROVIDER}
    kubernetes["gpuOperator"]["deviceConfig"]["configManager"]["image"] = "rocm/device-config-manager:latest"
    lines = refusal("prod", kubernetes)
    assert any(line.startswith(f"{P}{GD}.configManager.image: ") and "not pinned" in line for line in lines), lines


def test_a_partition_resource_nothing_advertises_is_refused():
    single = copy.deepcopy(DCM)
    del single["gpuOperator"]["deviceConfig"]["devicePlugin"]
    lines = refusal("dev", single, training=_training(gpuResource="amd.com/cpx_nps4"))
    assert any(
        line.startswith(f"{P}training[0].kubernetes.gpuResource: ")
        and "resourceNamingStrategy single" in line
        and f"{GD}.devicePlugin.resourceNamingStrategy to mixed" in line
        for line in lines
    ), lines
    lines = refusal("dev", DCM, training=_training(gpuResource="amd.com/cpx_nps1"))
    assert any(
        line.startswith(f"{P}training[0].kubernetes.gpuResource: ")
        and "CPX/NPS1" in line
        and "amd.com/cpx_nps4, amd.com/spx_nps1" in line
        for line in lines
    ), lines
    lines = refusal("dev", DCM, training=_training(gpuResource="amd.com/CPX_NPS4"))
    assert any(
        line.startswith(f"{P}training[0].kubernetes.gpuResource: expected amd.com/gpu or a partition") for line in lines
    ), lines


def test_every_supported_mode_has_a_mixed_resource_name_the_pattern_accepts():
    """Each model's modes (domain/gpus.py) make a resource name a workload may request."""
    from schema.kubernetes import PartitionProfile
    from schema.workloads import TrainingKubernetes

    for model in MODELS.values():
        for mode in model.modes:
            profile = PartitionProfile(
                gpu_model=model.name, compute_partition=mode.compute, memory_partition=mode.memory, gpus=8
            )
            TrainingKubernetes(gpu_resource=profile.resource_name("mixed"))
