"""The Kubernetes GPU gate: programs/gpucheck.py on every GPU node of `gpuFleet` and of each partition profile's
`nodes`, after the device plugin and before the GPU workloads, as one Indexed Job each that `pulumi up` awaits.

Why a Job of our own and not the GPU Operator's test runner (DeviceConfig `spec.testRunner`): the runner runs RVS
recipes that "aren't compatible with partitioned GPUs" (ROCm/gpu-operator docs/test/auto-unhealthy-device-test.md
L8 @ 6df13c1), its default mode only reacts to GPUs the exporter reports unhealthy and publishes Events (it gates
nothing), and its one gating mode, an init container in each workload pod, has the known issue that "the
initContainer and workload container might not be assigned the same GPUs" (docs/test/pre-start-job-test.md L12).
gpucheck counts the GPUs a pod is given, checks a bf16 product and an RCCL all-reduce over all of them, whatever the
partition mode, with the same program the Docker partitions run.

How the Job also waits for `amd.com/gpu` on the expected nodes: `completions` = `parallelism` = gpuFleet.nodes pods,
each requesting all `gpusPerNode` GPUs of a node, with a required pod anti-affinity on kubernetes.io/hostname
(never two on one node). The Job completes only once that many distinct nodes each had that many GPUs allocatable
and passed the check. pulumi-kubernetes awaits a Job (pulumi_kubernetes 4.34.2 batch/v1/Job.py docstring: success
when "'.status.conditions' has a status of type 'Complete'", failure on "type 'Failed'", time out after 10 minutes
unless customTimeouts say otherwise); `activeDeadlineSeconds` turns pods that can never schedule (too few GPU
nodes) into a Failed Job with reason DeadlineExceeded instead of an endless wait.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.batch import v1 as batch_v1
from pulumi_kubernetes.core import v1 as core_v1
from pulumi_kubernetes.meta import v1 as meta_v1

from domain.gpus import MODELS

from schema.checks import GpuFloors
from schema.docker import image_for
from schema.kubernetes import PARTITION_PROFILE_LABEL
from schema.workloads import GpuFleet
from .tolerations import toleration_args

if TYPE_CHECKING:
    from schema import StackConfig

    from . import KubernetesLayer

PROGRAM_PARENT = "/opt/rocm-stack"
GATE_PROGRAMS = ("__init__.py", "gpucheck.py")
# Pods may wait for the device plugin to advertise the GPUs (a DeviceConfig is a custom resource: Pulumi does not
# await the operator's rollout of it) before gpucheck itself runs.
SCHEDULING_ALLOWANCE_SECONDS = 900
SHM_BYTES = 16 * 1024**3


@dataclass(frozen=True)
class GpuGateArgs:
    fleet: GpuFleet
    image: str
    provider: Provider
    namespace: pulumi.Input[str]
    floors: GpuFloors
    timeout_seconds: int
    files: dict[str, str]
    """programs/*.py by file name (components.workloads.training.program_files)."""
    gpu_resource_name: str = "amd.com/gpu"
    tolerations: tuple[Mapping[str, str], ...] = ()
    """Tolerations of the GPU nodes' taints (KubernetesConfig.gpu_tolerations())."""
    node_selector: dict[str, str] | None = None
    without_label: str | None = None
    """A node label the checked nodes must not carry (the partition profile label, for the gpuFleet gate)."""
    gpu_ready: tuple[pulumi.Resource, ...] = ()
    """What must be up before: the DeviceConfig or the device plugin DaemonSet."""


def gate_command(args: GpuGateArgs) -> list[str]:
    from components.docker.checks import gpucheck_command

    return gpucheck_command(args.fleet.gpus_per_node, args.floors, args.timeout_seconds)


class GpuGate(pulumi.ComponentResource):
    """Resources GPU workloads depend on instead of the device plugin alone: `job` has passed on every node."""

    job: batch_v1.Job

    def __init__(self, name: str, args: GpuGateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:GpuGate", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        files = {file: args.files[file] for file in GATE_PROGRAMS}
        command = gate_command(args)
        # Any change (program, command, fleet, image) makes a new Job: the gate runs again before the workloads.
        digest = hashlib.sha256(
            repr((sorted(files.items()), command, args.fleet, args.image, args.gpu_resource_name)).encode()
        ).hexdigest()[:10]
        labels = {
            "app.kubernetes.io/name": "gpu-gate",
            "app.kubernetes.io/managed-by": "rocm-stack",
            "rocm-stack/gate": digest,
        }
        program = core_v1.ConfigMap(
            f"{name}-program",
            metadata=meta_v1.ObjectMetaArgs(name=f"{name}-{digest}", namespace=args.namespace, labels=labels),
            data=files,
            immutable=True,
            opts=child,
        )
        deadline = args.timeout_seconds + SCHEDULING_ALLOWANCE_SECONDS
        gpus = str(args.fleet.gpus_per_node)
        self.job = batch_v1.Job(
            name,
            metadata=meta_v1.ObjectMetaArgs(name=f"{name}-{digest}", namespace=args.namespace, labels=labels),
            spec=batch_v1.JobSpecArgs(
                completion_mode="Indexed",
                completions=args.fleet.nodes,
                parallelism=args.fleet.nodes,
                # A node that fails its check fails the gate: no retry elsewhere would hide it.
                backoff_limit=0,
                active_deadline_seconds=deadline,
                template=core_v1.PodTemplateSpecArgs(
                    metadata=meta_v1.ObjectMetaArgs(labels=labels),
                    spec=core_v1.PodSpecArgs(
                        restart_policy="Never",
                        enable_service_links=False,
                        node_selector=args.node_selector or None,
                        tolerations=toleration_args(args.tolerations) or None,
                        affinity=core_v1.AffinityArgs(
                            node_affinity=_without(args.without_label),
                            pod_anti_affinity=core_v1.PodAntiAffinityArgs(
                                required_during_scheduling_ignored_during_execution=[
                                    core_v1.PodAffinityTermArgs(
                                        label_selector=meta_v1.LabelSelectorArgs(match_labels=labels),
                                        topology_key="kubernetes.io/hostname",
                                    )
                                ]
                            ),
                        ),
                        containers=[
                            core_v1.ContainerArgs(
                                name="gpucheck",
                                image=args.image,
                                command=command,
                                env=[core_v1.EnvVarArgs(name="PYTHONPATH", value=PROGRAM_PARENT)],
                                resources=core_v1.ResourceRequirementsArgs(
                                    limits={args.gpu_resource_name: gpus},
                                    requests={args.gpu_resource_name: gpus, "cpu": "4", "memory": "16Gi"},
                                ),
                                volume_mounts=[
                                    core_v1.VolumeMountArgs(
                                        name="program", mount_path=f"{PROGRAM_PARENT}/programs", read_only=True
                                    ),
                                    core_v1.VolumeMountArgs(name="dshm", mount_path="/dev/shm"),
                                ],
                            )
                        ],
                        volumes=[
                            core_v1.VolumeArgs(
                                name="program", config_map=core_v1.ConfigMapVolumeSourceArgs(name=program.metadata.name)
                            ),
                            core_v1.VolumeArgs(
                                name="dshm",
                                empty_dir=core_v1.EmptyDirVolumeSourceArgs(
                                    medium="Memory", size_limit=f"{SHM_BYTES // 1024**2}Mi"
                                ),
                            ),
                        ],
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=list(args.gpu_ready),
                    custom_timeouts=pulumi.CustomTimeouts(
                        create=f"{math.ceil(deadline / 60) + 5}m", update=f"{math.ceil(deadline / 60) + 5}m"
                    ),
                ),
            ),
        )
        self.register_outputs({"job": self.job.metadata.name})


def _without(label: str | None) -> core_v1.NodeAffinityArgs | None:
    if label is None:
        return None
    return core_v1.NodeAffinityArgs(
        required_during_scheduling_ignored_during_execution=core_v1.NodeSelectorArgs(
            node_selector_terms=[
                core_v1.NodeSelectorTermArgs(
                    match_expressions=[core_v1.NodeSelectorRequirementArgs(key=label, operator="DoesNotExist")]
                )
            ]
        )
    )


def gate_gpu_workloads(kubernetes: KubernetesLayer, cfg: StackConfig) -> KubernetesLayer:
    """The layer with the gates in front of its GPU workloads: they wait for them instead of the device plugin alone.
    One gate for `gpuFleet` (the nodes without a partition profile) and one per partition profile with `nodes`
    (its label's nodes, its resource); none with `checks.enable` off."""
    if not cfg.checks.enable or cfg.kubernetes is None:
        return kubernetes
    from components.workloads.training import program_files

    config = cfg.kubernetes
    operator = config.mode == "operator"
    partitioned = {name: profile for name, profile in sorted(config.partition_profiles.items()) if profile.nodes}
    selector = dict(config.gpu_operator.device_config.selector if operator else config.device_plugin.node_selector)

    def gate(
        name: str,
        fleet: GpuFleet,
        image: str | None,
        floors: GpuFloors,
        resource: str,
        node_selector: dict[str, str],
        without_label: str | None = None,
    ) -> GpuGate:
        assert image is not None, "problems() requires images.pytorch for every gated GPU family"
        return GpuGate(
            name,
            GpuGateArgs(
                fleet=fleet,
                image=image,
                provider=kubernetes.provider,
                namespace=kubernetes.cluster.namespace_name(
                    config.gpu_operator.namespace if operator else config.device_plugin.namespace
                ),
                floors=floors,
                timeout_seconds=cfg.checks.timeout_seconds,
                files=program_files(),
                gpu_resource_name=resource,
                tolerations=tuple(config.gpu_tolerations()),
                node_selector=node_selector,
                without_label=without_label,
                gpu_ready=tuple(kubernetes.gpu_ready),
            ),
        )

    gates = []
    if cfg.gpu_fleet is not None:
        # gpuFleet names no GPU model: floors apply where the config gives them for "other". Under `single` naming
        # a partitioned node offers amd.com/gpu too: its profile's own gate checks it.
        # Nodes of any family: `pytorch` must be one reference for every family (schema problems).
        gates.append(
            gate(
                "gpu-gate",
                cfg.gpu_fleet,
                image_for(cfg.images, "pytorch", None),
                cfg.checks.floors_for("other", cfg.environment),
                kubernetes.gpu_resource_name,
                selector,
                PARTITION_PROFILE_LABEL if partitioned else None,
            )
        )
    for name, profile in partitioned.items():
        gates.append(
            gate(
                f"gpu-gate-{name}",
                GpuFleet(nodes=profile.nodes, gpus_per_node=profile.logical_gpus_per_node),
                image_for(cfg.images, "pytorch", MODELS[profile.gpu_model].gfx),
                cfg.checks.floors_for(profile.gpu_model, cfg.environment, profile.compute_partition),
                profile.resource_name(config.resource_naming_strategy),
                {**selector, PARTITION_PROFILE_LABEL: name},
            )
        )
    return replace(kubernetes, gpu_ready=gates) if gates else kubernetes
