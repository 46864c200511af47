"""The Kubernetes GPU gate (components/k8s/gpu_gate.py): gpucheck on every GPU node before the GPU workloads.

pulumi-kubernetes awaits a Job (pulumi_kubernetes 4.34.2 batch/v1/Job.py, the Job docstring): success when
".status.conditions' has a status of type 'Complete'", failure when one "of type 'Failed'" appears, and a time out
after 10 minutes unless customTimeouts say otherwise. Kubernetes marks a Job Failed once more pods failed than
backoffLimit allows, or when activeDeadlineSeconds passes (reason DeadlineExceeded; kubernetes.io/docs/concepts/
workloads/controllers/job/#job-termination-and-cleanup). So backoffLimit 0 fails `pulumi up` on the first node
that fails its check, and the deadline on pods that can never schedule.
"""

from __future__ import annotations

from conftest import stack_file
from k8s_validation import validate_object
from tools.synth import manifest_of, synthesize

P = "rocm-stack:"
JOB = "kubernetes:batch/v1:Job"


def gate_of(plan):
    (gate,) = [r for r in plan.of_type(JOB) if r["name"] == "gpu-gate"]
    return gate


def test_prod_gate_checks_all_gpus_of_every_fleet_node_one_pod_per_node(prod_plan):
    gate = gate_of(prod_plan)
    job = manifest_of(gate)
    validate_object(job)  # kubernetes_validate, strict
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (
        "Indexed",
        4,
        4,
        0,
    )  # gpuFleet.nodes
    assert spec["activeDeadlineSeconds"] == 900 + 900
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"amd.com/gpu": "8"}  # gpuFleet.gpusPerNode: the whole node
    assert container["command"][:6] == ["python3", "-m", "programs.gpucheck", "--expect-gpus", "8", "--json"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    assert pod["nodeSelector"] == {"feature.node.kubernetes.io/amd-gpu": "true"}  # the DeviceConfig's selector


def test_gate_runs_after_the_device_plugin_and_gpu_workloads_wait_for_it(prod_plan):
    gate = gate_of(prod_plan)
    (device_config,) = [r for r in prod_plan.resources if r["type"].endswith(":DeviceConfig")]
    assert device_config["urn"] in gate["depends_on"]
    gpu_workloads = [
        r
        for r in prod_plan.kubernetes_objects()
        if r["type"]
        in ("kubernetes:apps/v1:Deployment", "kubernetes:batch/v1:Job", "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet")
        and "amd.com/gpu" in str(r["inputs"])
        and r is not gate
    ]
    assert gpu_workloads
    for workload in gpu_workloads:
        # depends_on a component is depends_on its children: the gate's Job.
        assert gate["urn"] in workload["depends_on"], workload["name"]


def test_the_gate_runs_again_when_what_it_checks_changes(prod_plan):
    before = manifest_of(gate_of(prod_plan))["metadata"]["name"]
    config = stack_file("prod")
    config[P + "gpuFleet"]["nodes"] = 5
    config[P + "inference"][0]["kubernetes"]["gpus"] = 4
    after = manifest_of(gate_of(synthesize("prod", config)))["metadata"]["name"]
    assert before != after and before.startswith("gpu-gate-")


def test_no_gate_without_a_fleet_or_with_checks_off(dev_plan):
    assert not [r for r in dev_plan.of_type(JOB) if r["name"] == "gpu-gate"]  # dev has no gpuFleet
    config = stack_file("prod")
    config[P + "checks"] = {"enable": False}
    assert not [r for r in synthesize("prod", config).of_type(JOB) if r["name"] == "gpu-gate"]
