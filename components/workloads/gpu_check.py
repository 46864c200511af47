"""programs/gpucheck.py as an init container of every Kubernetes GPU pod (training Job and JobSet pods, vLLM
Deployment pods): each start of each pod, on any node (one that joined later, one whose driver was upgraded: the
upgrade drains it and its pods start again through the check), checks the very GPUs the pod was given, and the
workload starts only once they passed.

Why not a gate Job of its own (issue 22): a Job that holds every GPU of the fleet's nodes cannot schedule while the
workloads hold them, so any change to it deadlocked `pulumi up`; and a Failed Job is only awaited again by the next
`pulumi up`, never run again. The init container never needs a GPU its pod does not get anyway.

Why the check sees the app container's GPUs: the kubelet allocates a pod's init containers first, keeps their
devices as reusable, and allocates an app container "from reusableDevices list first" (kubernetes/kubernetes
pkg/kubelet/cm/devicemanager/manager.go @ 7510f32, ManagerImpl.Allocate and devicesToAllocate; added by
kubernetes/kubernetes#56818 for #56022, v1.9). The check requests exactly the app container's resources, so the
reusable set is exactly the app container's count and it takes those devices and no other. AMD's own init-container
test runner warns "the initContainer and workload container might not be assigned the same GPUs" (ROCm/gpu-operator
docs/test/pre-start-job-test.md L12 @ v1.5.1): its example requests a count of its own, and counts that differ leave
the app container some devices the check never saw; its workaround, "both initContainer and workload containers
request all GPUs on the same node" (L14), is the equal-count case. A restartable init container (a sidecar) keeps its
devices (kubernetes/kubernetes#120461), so this one is a plain init container. Its runner's RVS recipes "are not
compatible with partitioned GPUs" (L8); gpucheck checks whatever the pod's resource is (a whole GPU or a partition).

Cost: none in scheduling. A pod's effective request is the larger of any init container's and the sum of its app
containers' ("Resource sharing within containers", kubernetes.io/docs/concepts/workloads/pods/init-containers/), and
equal requests and limits on every container keep the pod Guaranteed (pods.pod_resources).

A failure: the workload never starts on those GPUs. A Deployment's pod (restartPolicy Always) restarts the init
container with back-off until it passes ("If a Pod's init container fails, the kubelet repeatedly restarts that init
container until it succeeds", same page); a Job's pod (restartPolicy Never) fails and the Job counts it toward its
backoffLimit (training.TrainingJob: the check is no "invalid settings").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from pulumi_kubernetes.core import v1 as core_v1

from schema.checks import GpuFloors
from components.docker.checks import GPU_CHECK_PROGRAMS
from .pods import PROGRAM_DIR, security_context
from components.docker.checks import gpucheck_command

GPU_CHECK_CONTAINER = "gpucheck"


@dataclass(frozen=True)
class GpuCheckArgs:
    floors: GpuFloors
    """Of the nodes that advertise the pod's resource (schema.gpu_nodes.pod_floors)."""
    timeout_seconds: int
    files: Mapping[str, str]
    """programs/ files by name (training.program_files): GPU_CHECK_PROGRAMS at least."""

    @property
    def programs(self) -> dict[str, str]:
        """The files the check needs, for a pod that ships no other program."""
        return {name: self.files[name] for name in GPU_CHECK_PROGRAMS}


def gpu_check_container(
    check: GpuCheckArgs, image: str, gpus: int, resources: core_v1.ResourceRequirementsArgs, program_volume: str
) -> core_v1.ContainerArgs:
    """The check in the workload's own image (the ROCm user space the workload runs, as on Docker) with `resources`,
    the app container's own, and the volume of programs/ mounted at PROGRAM_DIR."""

    return core_v1.ContainerArgs(
        name=GPU_CHECK_CONTAINER,
        image=image,
        command=gpucheck_command(gpus, check.floors, check.timeout_seconds),
        env=[core_v1.EnvVarArgs(name="PYTHONPATH", value=str(PurePosixPath(PROGRAM_DIR).parent))],
        resources=resources,
        security_context=security_context(()),
        volume_mounts=[
            core_v1.VolumeMountArgs(name=program_volume, mount_path=PROGRAM_DIR, read_only=True),
            # RCCL's all-reduce between the pod's GPUs goes through /dev/shm: the pod's memory-backed one.
            core_v1.VolumeMountArgs(name="dshm", mount_path="/dev/shm"),
        ],
    )
