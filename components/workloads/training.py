"""Distributed training of programs/train.py: an Indexed Job on Kubernetes, containers on Docker partitions.

The rocm/pytorch image does not contain the program: its files (programs/*.py, read when the Pulumi program
runs) are shipped as a ConfigMap on Kubernetes and as container uploads on Docker, both at PROGRAM_DIR.
`programs/train.py` puts PROGRAM_DIR's parent on sys.path, so `import programs.*` finds them there.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_docker as docker
from pulumi_kubernetes import Provider
from pulumi_kubernetes.batch import v1 as batch_v1
from pulumi_kubernetes.core import v1 as core_v1
from pulumi_kubernetes.meta import v1 as meta_v1

from schema.docker import SecurityProfile
from schema.workloads import TrainingConfig
from components.docker.partitions import Partition, WorkloadContainerArgs, pull_on_hosts, workload_container
from .pods import gpu_resources, labels_of, shm_volume, storage_volume, tolerations_of

PROGRAM_SOURCE = Path(__file__).resolve().parents[2] / "programs"
PROGRAM_DIR = "/opt/rocm-stack/programs"
ENTRY = f"{PROGRAM_DIR}/train.py"
CHECKPOINT_MOUNT = "/checkpoints"
RENDEZVOUS_PORT = 29500
# The pod-failure-policy rule "invalid settings" looks for this container's exit code 2.
SETTINGS_CHECK_CONTAINER = "check-settings"
INVALID_SETTINGS_EXIT_CODE = 2
# torchrun exits 1 whatever its workers exit with, so train.py's "exit 2 = invalid settings" is lost behind it.
# This check runs the program's own settings parser (argparse exits 2 on a bad TRAIN_* value) before torchrun.
SETTINGS_CHECK = (
    "import os, sys; sys.path.insert(0, sys.argv[1]); "
    "from programs.settings import parse_config; parse_config([], os.environ)"
)


def program_files(source: Path = PROGRAM_SOURCE) -> dict[str, str]:
    """The training program's Python files by name (what lands in PROGRAM_DIR)."""
    files = {path.name: path.read_text() for path in sorted(source.glob("*.py"))}
    if "train.py" not in files:
        raise FileNotFoundError(f"{source}/train.py is missing: the training program ships from there")
    return files


def program_digest(files: Mapping[str, str]) -> str:
    digest = hashlib.sha256()
    for name, text in sorted(files.items()):
        digest.update(f"{name}\0{text}\0".encode())
    return digest.hexdigest()


def torchrun_multinode(name: str, service: str, nodes: int, gpus_per_node: int, max_restarts: int) -> list[str]:
    # Every pod runs the same command; c10d rendezvous on pod 0's stable DNS name assigns the ranks.
    return ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(gpus_per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{name}-0.{service}:{RENDEZVOUS_PORT}",
            "--rdzv-id", name, "--max-restarts", str(max_restarts), ENTRY]


def torchrun_standalone(gpus: int) -> list[str]:
    return ["torchrun", "--standalone", "--nproc-per-node", str(gpus), ENTRY]


@dataclass(frozen=True)
class TrainingJobArgs:
    training: TrainingConfig
    environment: str
    image: str
    provider: Provider
    # The namespace's name (its resource's output when the stack owns it, so objects wait for it).
    namespace: pulumi.Input[str]
    files: Mapping[str, str]
    # Objects that must exist before GPU pods can schedule (the GPU Operator's DeviceConfig, the device plugin).
    gpu_ready: Sequence[pulumi.Resource] = ()


class TrainingJob(pulumi.ComponentResource):
    """`nodes` pods (an Indexed Job) of `gpusPerNode` GPUs each, found by each other through a headless Service.

    Failure handling: a pod lost with its node (condition DisruptionTarget: drain, preemption, taint eviction)
    is replaced without counting toward backoffLimit; the surviving pods' torchrun re-rendezvous with it
    (--max-restarts) and train.py resumes from the newest checkpoint. Invalid settings fail the Job at once.
    """

    job: batch_v1.Job
    service: core_v1.Service
    program: core_v1.ConfigMap
    claim: core_v1.PersistentVolumeClaim | None

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:workloads:TrainingJob", name, None, opts)
        training, k8s = args.training, args.training.kubernetes
        assert k8s is not None, "TrainingJob needs training.kubernetes"
        labels = labels_of(name, "training")
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)

        def metadata(object_name: str) -> meta_v1.ObjectMetaArgs:
            return meta_v1.ObjectMetaArgs(name=object_name, namespace=args.namespace, labels=labels)

        self.service = core_v1.Service(
            f"{name}-rendezvous",
            metadata=metadata(name),
            spec=core_v1.ServiceSpecArgs(
                cluster_ip="None",
                selector=labels,
                # Pods rendezvous before they are Ready: their DNS names must resolve from the start.
                publish_not_ready_addresses=True,
                ports=[core_v1.ServicePortArgs(name="c10d", port=RENDEZVOUS_PORT, target_port=RENDEZVOUS_PORT)],
            ),
            opts=child,
        )
        # Named after its content and immutable: a new program version is a new ConfigMap, so pods of the
        # running Job never see files change under them; Pulumi replaces the Job, then deletes the old one.
        self.program = core_v1.ConfigMap(
            f"{name}-program", metadata=metadata(f"{name}-program-{program_digest(args.files)[:10]}"),
            data=dict(args.files), immutable=True, opts=child)

        storage = k8s.effective_checkpoints(name, args.environment)
        # Checkpoints outlive the Job (and a prod `pulumi destroy` of it) unless unprotected on purpose;
        # with a WaitForFirstConsumer class the claim binds only once the Job's pods exist.
        checkpoints, self.claim = storage_volume(
            "checkpoints", storage, f"{name}-checkpoints", metadata(f"{name}-checkpoints"),
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=args.environment == "prod")))

        env = [core_v1.EnvVarArgs(name=k, value=v)
               for k, v in sorted(training.program_env(CHECKPOINT_MOUNT).items())]
        program_mount = core_v1.VolumeMountArgs(name="program", mount_path=PROGRAM_DIR, read_only=True)
        trainer = core_v1.ContainerArgs(
            name="trainer",
            image=args.image,
            command=torchrun_multinode(name, name, k8s.nodes, k8s.gpus_per_node, k8s.max_restarts),
            env=env,
            ports=[core_v1.ContainerPortArgs(name="c10d", container_port=RENDEZVOUS_PORT)],
            resources=gpu_resources(k8s.gpus_per_node),
            volume_mounts=[
                program_mount,
                core_v1.VolumeMountArgs(name="dshm", mount_path="/dev/shm"),
                core_v1.VolumeMountArgs(name="checkpoints", mount_path=CHECKPOINT_MOUNT),
            ],
        )
        check_settings = core_v1.ContainerArgs(
            name=SETTINGS_CHECK_CONTAINER,
            image=args.image,
            command=["python3", "-c", SETTINGS_CHECK, str(Path(PROGRAM_DIR).parent)],
            env=env,
            volume_mounts=[program_mount],
        )
        self.job = batch_v1.Job(
            name,
            metadata=meta_v1.ObjectMetaArgs(
                name=name, namespace=args.namespace, labels=labels,
                # A training run takes hours: `pulumi up` declares it and returns instead of awaiting completion.
                annotations={"pulumi.com/skipAwait": "true"},
            ),
            spec=batch_v1.JobSpecArgs(
                completion_mode="Indexed",
                completions=k8s.nodes,
                parallelism=k8s.nodes,
                backoff_limit=k8s.backoff_limit,
                active_deadline_seconds=k8s.active_deadline_seconds,
                # A replacement pod starts only once the failed one is gone: never two pods named <job>-0.
                pod_replacement_policy="Failed",
                pod_failure_policy=batch_v1.PodFailurePolicyArgs(rules=[
                    batch_v1.PodFailurePolicyRuleArgs(
                        action="FailJob",
                        on_exit_codes=batch_v1.PodFailurePolicyOnExitCodesRequirementArgs(
                            container_name=SETTINGS_CHECK_CONTAINER, operator="In",
                            values=[INVALID_SETTINGS_EXIT_CODE]),
                    ),
                    batch_v1.PodFailurePolicyRuleArgs(
                        action="Ignore",
                        on_pod_conditions=[batch_v1.PodFailurePolicyOnPodConditionsPatternArgs(
                            type="DisruptionTarget", status="True")],
                    ),
                ]),
                template=core_v1.PodTemplateSpecArgs(
                    metadata=meta_v1.ObjectMetaArgs(
                        labels=labels,
                        # A new program version replaces the Job; the run resumes from its checkpoints.
                        annotations={"rocm-stack/program-sha256": program_digest(args.files)},
                    ),
                    spec=core_v1.PodSpecArgs(
                        restart_policy="Never",
                        # Indexed Job pods are named <job>-<index>: with this subdomain, <job>-0.<service> resolves.
                        subdomain=name,
                        enable_service_links=False,
                        node_selector=k8s.node_selector or None,
                        tolerations=tolerations_of(k8s.tolerations),
                        init_containers=[check_settings],
                        containers=[trainer],
                        volumes=[
                            core_v1.VolumeArgs(name="program", config_map=core_v1.ConfigMapVolumeSourceArgs(
                                name=self.program.metadata.name)),
                            shm_volume(training.shm_size),
                            checkpoints,
                        ],
                    ),
                ),
            ),
            # spec.template is immutable: any change replaces the Job, and its fixed name means the old one must
            # go first. The new pods resume from the checkpoints, which live outside the Job.
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                depends_on=[self.service, *args.gpu_ready], delete_before_replace=True)),
        )
        self.register_outputs({
            "job": self.job.metadata.name,
            "rendezvous": f"{name}-0.{name}:{RENDEZVOUS_PORT}",
            "checkpoints": self.claim.metadata.name if self.claim is not None else storage.path,
        })


@dataclass(frozen=True)
class DockerTrainingArgs:
    training: TrainingConfig
    image: str
    partitions: Sequence[Partition]
    security_profile: SecurityProfile
    files: Mapping[str, str]


class DockerTraining(pulumi.ComponentResource):
    """One independent single-node run (`torchrun --standalone`) per claimed partition, on the partition's GPUs.

    Docker restarts a failed run (on-failure, up to maxRetries) and train.py resumes from the checkpoints in
    the partition's host directory. A finished run stays exited: `mustRun` is off, so the next `pulumi up`
    does not start it again.
    """

    containers: dict[str, docker.Container]

    def __init__(self, name: str, args: DockerTrainingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:workloads:DockerTraining", name, None, opts)
        training, placement = args.training, args.training.docker
        assert placement is not None, "DockerTraining needs training.docker"
        uploads = [docker.ContainerUploadArgs(file=f"{PROGRAM_DIR}/{file}", content=text)
                   for file, text in sorted(args.files.items())]
        images = pull_on_hosts(name, args.image, args.partitions, self)
        self.containers = {}
        for partition in args.partitions:
            on_host = pulumi.ResourceOptions(parent=self, provider=partition.provider)
            host_dir = f"{placement.checkpoint_dir}/{name}/{partition.container.name}"
            self.containers[partition.ref] = workload_container(partition, WorkloadContainerArgs(
                image=images[partition.host.name].image_id,
                command=torchrun_standalone(partition.gpu_count),
                env=training.program_env(CHECKPOINT_MOUNT),
                shm_size_bytes=int(training.shm_size),
                security_profile=args.security_profile,
                restart="on-failure",
                max_retry_count=placement.max_retries,
                must_run=False,
                volumes=[docker.ContainerVolumeArgs(host_path=host_dir, container_path=CHECKPOINT_MOUNT)],
                uploads=uploads,
            ), on_host)
        self.register_outputs({"containers": {ref: c.name for ref, c in self.containers.items()}})
