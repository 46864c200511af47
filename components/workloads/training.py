"""Distributed training of programs/train.py: a Job (one node) or a JobSet (several nodes) on Kubernetes,
containers on Docker partitions.

The rocm/pytorch image does not contain the program: its files (TRAINING_ENTRIES of programs/ and what they
import, read when the Pulumi program runs) are shipped as a ConfigMap on Kubernetes and as container uploads on
Docker, both at PROGRAM_DIR.
`programs/train.py` puts PROGRAM_DIR's parent on sys.path, so `import programs.*` finds them there.

Why one file: the Job, the JobSet and the Docker containers of one training share its pod template, its program
files, its checkpoints and its shutdown settings.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pulumi
import pulumi_docker as docker
from pulumi_kubernetes import Provider
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.batch import v1 as batch_v1
from pulumi_kubernetes.core import v1 as core_v1
from pulumi_kubernetes.meta import v1 as meta_v1
from pulumi_kubernetes.networking import v1 as networking_v1

from schema.docker import SecurityProfile
from schema.project import PROGRAMS
from schema.queues import KUEUE_QUEUE_LABEL
from schema.derived import pod_capabilities
from schema.workloads import (
    TORCHRUN_SHUTDOWN_ENV,
    HostPathStorage,
    Toleration,
    TrainingConfig,
    TrainingKubernetes,
)
from components.docker.partitions import Partition, WorkloadContainerArgs, pull_on_hosts, workload_container
from components.docker.checks import GPU_CHECK_PROGRAMS
from components.docker.programs import program_uploads
from components.k8s.replacement import replacement
from .gpu_check import GpuCheckArgs, gpu_check_container
from .pods import (
    AUTOMOUNT_SERVICE_ACCOUNT_TOKEN,
    POD_SECURITY,
    PROGRAM_DIR,
    env_secret,
    env_vars,
    ingress_policy,
    labels_of,
    pod_resources,
    program_config_map,
    program_digest,
    rccl_pod,
    security_context,
    shm_volume,
    storage_volume,
    tolerations_of,
)

PROGRAM_SOURCE = PROGRAMS
ENTRY = f"{PROGRAM_DIR}/train.py"
CHECKPOINT_MOUNT = "/checkpoints"
RENDEZVOUS_PORT = 29500
# torchrun's --node-rank from the environment, and the Indexed Job pod annotation holding the pod's index.
NODE_RANK_ENV = "PET_NODE_RANK"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# The pod-failure-policy rule "invalid settings" looks for this container's exit code 2, and only this container's
# ("containerName: Restricts the check for exit codes to the container with the specified name", batch/v1
# PodFailurePolicyOnExitCodesRequirement): a failed GPU check (gpu_check.GPU_CHECK_CONTAINER, which exits 2 on bad
# arguments too) counts toward backoffLimit like any failed pod: the Job retries it in a new pod.
SETTINGS_CHECK_CONTAINER = "check-settings"
INVALID_SETTINGS_EXIT_CODE = 2
# torchrun exits 1 whatever its workers exit with, so train.py's "exit 2 = invalid settings" is lost behind it.
# This check runs the program's own settings parser (argparse exits 2 on a bad TRAIN_* value) before torchrun.
SETTINGS_CHECK = (
    "import os, sys; sys.path.insert(0, sys.argv[1]); "
    "from programs.settings import parse_config; parse_config([], os.environ)"
)

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND = "JobSet"
# The JobSet's one replicated job: one Indexed Job of `nodes` pods.
WORKERS = "workers"
# Ready as soon as the object exists: `pulumi up` does not wait hours for the training to complete (the Job
# awaiter waits for condition Complete), nor for its pods to pass their GPU check (docs/operations.md: they wait
# for GPUs that other pods or a Kueue queue may hold, and a Failed Job awaited again never passes), and unlike
# `pulumi.com/skipAwait` it leaves the delete awaited, so a replacement is created only once the old object is
# gone. skipAwait on a batch/v1 Job also skips the delete wait (pulumi-kubernetes provider/pkg/metadata/
# overrides.go L176, L186-208 @ v4.32.0, "legacy types which support buggy skipAwait behavior during delete";
# pulumi/pulumi-kubernetes#3154: "racy"), and since 4.29.0 (#2926, client-side create) the new Job then fails
# with AlreadyExists while the old one is still terminating.
# waitFor: pulumi-kubernetes 4.18.0 CHANGELOG ("the resource will be considered ready when any value exists at
# the given path"). The SDK pins provider plugin 4.34.2.
AWAIT_CREATION = {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}


# What runs from PROGRAM_DIR in a training's pods and containers: train.py, the elastic rendezvous script, the default
# workload entry point (`programs.synthetic:build`, programs/settings.py TRAIN_ENTRYPOINT's default, loaded by name),
# and the GPU check of the pods' init container. Only these and what they import ship: a file that is not run there
# (the Docker hosts' preflight) must not change the program's digest and so replace every training.
TRAINING_ENTRIES = ("train.py", "rendezvous.py", "synthetic.py", *GPU_CHECK_PROGRAMS)


def _imported(text: str) -> set[str]:
    """The files of programs/ that a module's source imports (`from programs.X import ...`, `import programs.X`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        names.update(f"{m.split('.')[1]}.py" for m in modules if m.startswith("programs."))
    return names


def program_files(source: Path = PROGRAM_SOURCE) -> dict[str, str]:
    """The training program's Python files by name (what lands in PROGRAM_DIR): TRAINING_ENTRIES and what they
    import, transitively."""
    available = {path.name: path.read_text() for path in sorted(source.glob("*.py"))}
    missing = [name for name in TRAINING_ENTRIES if name not in available]
    if missing:
        raise FileNotFoundError(f"{source}: {', '.join(missing)} missing: the training program ships from there")
    files: dict[str, str] = {}
    pending = list(TRAINING_ENTRIES)
    while pending:
        name = pending.pop()
        if name not in files:
            files[name] = available[name]
            pending.extend(_imported(files[name]) & available.keys())
    return dict(sorted(files.items()))


# The pod condition an eviction (a node drain) or a preemption sets before the pod stops (kubernetes.io/docs/concepts/
# workloads/pods/disruptions/#pod-disruption-conditions).
DISRUPTION_TARGET = "DisruptionTarget"
# The Job's Failed condition message when a pod condition matches a FailJob rule: "Pod %s/%s has condition %v matching
# %v rule at index %d" (kubernetes pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy); JobSet rules match
# it as a regular expression (jobset v0.12.0 pkg/controllers/failure_policy.go ruleIsApplicable, anyMatchFound).
DISRUPTION_FAILURE_MESSAGE = f"has condition {DISRUPTION_TARGET} matching FailJob rule"


def rendezvous_host(job_set: str) -> str:
    """Pod 0 of the JobSet's one Job, through the headless Service the JobSet controller creates for it: pods
    resolve as <jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>, the subdomain defaulting to the JobSet's
    name (jobset_types.go Network.enableDNSHostnames/subdomain @ v0.12.0)."""
    return f"{job_set}-{WORKERS}-0-0.{job_set}"


def rendezvous_endpoint(job_set: str) -> str:
    return f"{rendezvous_host(job_set)}:{RENDEZVOUS_PORT}"


def torchrun_multinode(job_set: str, nodes: int, gpus_per_node: int) -> list[str]:
    """Static rendezvous, as JobSet's PyTorch example (site/static/examples/pytorch/cnn-mnist/mnist.yaml @ v0.12.0):
    each pod's node rank is its completion index (NODE_RANK_ENV), so node rank 0 hosts the TCP store because of its
    rank (static_tcp_rendezvous.py L65-74 @ torch 2.13), never because its own DNS name already resolved, which is
    how c10d rendezvous picks the host (c10d_rendezvous_backend.py L137-145, utils.py _matches_machine_hostname):
    pod 0 starting before the headless Service publishes it would join as a client and every pod would fail after
    the 60 s read timeout (L148). Every pod (pod 0 included: the store's own client) retries connecting to the name until
    the rendezvous timeout, 600 s (static_tcp_rendezvous.py L28, L121-124).

    No torchrun restarts (`--max-restarts 0`): a static rendezvous never tells the other nodes' agents that one
    node restarted its workers (num_nodes_waiting() is always 0, static_tcp_rendezvous.py L91-92; agent
    api.py L958-970) and reuses its store (L66), so restarted workers would wait for peers still in the old group.
    A failed worker fails its pod, and the JobSet's failurePolicy restarts every pod from the checkpoint."""
    return [
        "torchrun",
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(gpus_per_node),
        "--rdzv-backend",
        "static",
        "--master-addr",
        rendezvous_host(job_set),
        "--master-port",
        str(RENDEZVOUS_PORT),
        "--rdzv-id",
        job_set,
        "--max-restarts",
        "0",
        ENTRY,
    ]


# An elastic training's JobSet: the replicated job whose one CPU pod hosts the c10d rendezvous store
# (programs/rendezvous.py), at the c10d backend's default port (c10d_rendezvous_backend.py L32 @ torch 2.13).
RENDEZVOUS = "rendezvous"
C10D_PORT = 29400
RENDEZVOUS_PROGRAM = f"{PROGRAM_DIR}/rendezvous.py"
# torch 2.13 shares the agent's TCPStore with the workers by default, and that breaks growth: a rank-0 agent that
# already hosts it (`_shared_tcp_store_server`, dynamic_rendezvous.py L1209-1217) does not publish MASTER_ADDR again
# in the next round's key prefix (L1370-1375), so a node joining that round as rank >= 1 waits in
# RendezvousStoreInfo.build's store.get (rendezvous/api.py L102) until the 60 s read timeout and the round fails
# (measured here with three agents: role_info wait timeout). With sharing off every round's rank 0 publishes a
# fresh address (dynamic_rendezvous.py L1190-1203); see also pytorch/pytorch#135712.
ELASTIC_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def rendezvous_store_host(job_set: str) -> str:
    """The rendezvous pod (replicated job RENDEZVOUS) by its stable name on the JobSet's headless Service."""
    return f"{job_set}-{RENDEZVOUS}-0-0.{job_set}"


def rendezvous_store_command() -> list[str]:
    return ["python3", RENDEZVOUS_PROGRAM, "--port", str(C10D_PORT)]


def torchrun_elastic(job_set: str, min_nodes: int, max_nodes: int, gpus_per_node: int, max_restarts: int) -> list[str]:
    """c10d rendezvous for `--nnodes MIN:MAX`: every agent is a client (`is_host=false`, c10d_rendezvous_backend.py
    L139-146) of the store in the rendezvous pod, so losing any training pod, the first included, leaves the
    rendezvous standing (programs/rendezvous.py). Node ranks come from the rendezvous, not from the pod index.

    A worker failing (its peer's pod lost: the collective errors out) costs each surviving agent one of
    `max_restarts` and starts a new round with whoever is left (>= min_nodes); a new pod waiting to join makes
    the agents restart their workers without counting (agent/server/api.py L941-970). Either way the workers get
    SIGTERM, and train.py checkpoints the step it is at, or they died and the run resumes from the last checkpoint."""
    return [
        "torchrun",
        "--nnodes",
        f"{min_nodes}:{max_nodes}",
        "--nproc-per-node",
        str(gpus_per_node),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{rendezvous_store_host(job_set)}:{C10D_PORT}",
        "--rdzv-id",
        job_set,
        "--rdzv-conf",
        "is_host=false",
        "--max-restarts",
        str(max_restarts),
        ENTRY,
    ]


def node_rank_env() -> core_v1.EnvVarArgs:
    """torchrun reads every option from `PET_<OPTION>` when the flag is absent (torch/distributed/argparse_util.py
    env L45-46; --node-rank is `action=env`, run.py L620-627), so the pod's completion index becomes --node-rank
    without a shell. The Job controller writes the index into this annotation of each Indexed Job pod (it is what
    JOB_COMPLETION_INDEX is made from: kubernetes pkg/controller/job/indexed_job_utils.go
    addCompletionIndexEnvVariable; https://kubernetes.io/docs/tasks/job/indexed-parallel-processing-static/)."""
    return core_v1.EnvVarArgs(
        name=NODE_RANK_ENV,
        value_from=core_v1.EnvVarSourceArgs(
            field_ref=core_v1.ObjectFieldSelectorArgs(field_path=f"metadata.annotations['{COMPLETION_INDEX}']")
        ),
    )


def torchrun_standalone(gpus: int) -> list[str]:
    return ["torchrun", "--standalone", "--nproc-per-node", str(gpus), ENTRY]


@dataclass(frozen=True)
class TrainingJobArgs:
    training: TrainingConfig
    environment: str
    image: str
    provider: Provider
    namespace: pulumi.Input[str]
    """The namespace's name (its resource's output when the stack owns it, so objects wait for it)."""
    files: Mapping[str, str]
    gpu_ready: Sequence[pulumi.Resource] = ()
    """Objects that must exist before GPU pods can schedule (the GPU Operator's DeviceConfig, the device plugin)."""
    job_set_controller: pulumi.Resource | None = None
    """The JobSet controller's release when the stack installs it (multi-node training needs its CRD)."""
    secret_env: bool = False
    """`training` is a secret stack key (a nested `secure:` env value)."""
    gpu_check: GpuCheckArgs | None = None
    """gpucheck before the trainer on every pod's GPUs (gpu_check.py); None: `checks.enable` is off."""
    priority_class: str | None = None
    """The pods' PriorityClass (`kubernetes.queues`: training's, which Kueue takes as the job's priority)."""
    queue_ready: Sequence[pulumi.Resource] = ()
    """Kueue's release (when the stack installs it) and the PriorityClasses: a queued job created before Kueue's
    webhook runs would start unsuspended, outside the queue; a pod naming a missing PriorityClass is refused."""
    tolerations: Sequence[Toleration] = ()
    """The pods' tolerations (schema.workloads.pod_tolerations)."""


class TrainingJob(pulumi.ComponentResource):
    """`nodes` pods of `gpusPerNode` GPUs each: a Job for one node, a JobSet for several.

    A JobSet starts the pods together, gives them a headless Service (named after it) for the static rendezvous
    on pod 0 (torchrun_multinode), and restarts the whole set when any pod fails (failurePolicy, BlockingRecreate:
    all old pods are gone before new ones start); train.py resumes from the newest checkpoint. An Indexed Job cannot do that:
    it does not schedule its pods together, losing pod 0 (the rendezvous store) fails the others, and backoffLimit
    counts per pod. Pods evicted or lost with their node (condition DisruptionTarget) do not count as a failure:
    a one-node Job replaces the pod, a JobSet restarts all of them; invalid settings fail the run at once.
    """

    job: batch_v1.Job | CustomResource
    # metadata.name of the Job or JobSet (fixed: the workload's name).
    object_name: str
    program: core_v1.ConfigMap
    claim: core_v1.PersistentVolumeClaim | None
    # The environment as a Secret when `training` is a secret stack key (pods.env_secret).
    env_secret: core_v1.Secret | None

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:workloads:TrainingJob", name, None, opts)
        training, k8s = args.training, args.training.kubernetes
        assert k8s is not None, "TrainingJob needs training.kubernetes"
        labels = labels_of(name, "training")
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.object_name = name

        def metadata(object_name: str) -> meta_v1.ObjectMetaArgs:
            return meta_v1.ObjectMetaArgs(name=object_name, namespace=args.namespace, labels=labels)

        # A new program version replaces the job (its pod template names the new ConfigMap).
        self.program = program_config_map(f"{name}-program", args.files, args.namespace, labels, child)

        storage = k8s.effective_checkpoints(name, args.environment)
        # Checkpoints outlive the job (and a prod `pulumi destroy` of it) unless unprotected on purpose;
        # with a WaitForFirstConsumer class the claim binds only once the job's pods exist.
        checkpoints, self.claim = storage_volume(
            "checkpoints",
            storage,
            f"{name}-checkpoints",
            metadata(f"{name}-checkpoints"),
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=args.environment == "prod")),
        )

        # torchrun waits this long for its workers to checkpoint after forwarding SIGTERM (schema/workloads.py).
        env_map = training.program_env(CHECKPOINT_MOUNT) | {TORCHRUN_SHUTDOWN_ENV: str(k8s.torchrun_shutdown_seconds)}
        env_map |= rccl_pod(k8s.network).env or {}
        if training.elastic is not None:
            env_map |= ELASTIC_ENV
        self.env_secret = env_secret(f"{name}-env", env_map, args.namespace, labels, child) if args.secret_env else None
        template = self._pod_template(
            name,
            training,
            k8s,
            labels,
            args.image,
            args.files,
            checkpoints,
            env_vars(env_map, self.env_secret),
            args.gpu_check,
            args.priority_class,
            args.tolerations,
        )

        def failure_policy(on_disruption: str) -> batch_v1.PodFailurePolicyArgs:
            return batch_v1.PodFailurePolicyArgs(
                rules=[
                    batch_v1.PodFailurePolicyRuleArgs(
                        action="FailJob",
                        on_exit_codes=batch_v1.PodFailurePolicyOnExitCodesRequirementArgs(
                            container_name=SETTINGS_CHECK_CONTAINER, operator="In", values=[INVALID_SETTINGS_EXIT_CODE]
                        ),
                    ),
                    batch_v1.PodFailurePolicyRuleArgs(
                        action=on_disruption,
                        on_pod_conditions=[
                            batch_v1.PodFailurePolicyOnPodConditionsPatternArgs(type=DISRUPTION_TARGET, status="True")
                        ],
                    ),
                ]
            )

        object_metadata = meta_v1.ObjectMetaArgs(
            name=name,
            namespace=args.namespace,
            annotations=AWAIT_CREATION,
            labels={**labels, **({KUEUE_QUEUE_LABEL: k8s.queue_name} if k8s.queue_name else {})},
        )
        # A change the API server, JobSet's or Kueue's webhook refuses (the immutable spec fields, a new queue-name
        # on a running job) replaces the job, and its fixed name means the old one must go first. The new pods
        # resume from the checkpoints, which live outside the job.
        needs = pulumi.ResourceOptions(depends_on=[*args.gpu_ready, *args.queue_ready])
        if not k8s.uses_job_set:
            self.job = batch_v1.Job(
                name,
                metadata=object_metadata,
                spec=batch_v1.JobSpecArgs(
                    backoff_limit=k8s.backoff_limit,
                    active_deadline_seconds=k8s.active_deadline_seconds,
                    # A replacement pod starts only once the failed one is gone (its GPUs are free again).
                    pod_replacement_policy="Failed",
                    # An evicted pod (a drain) is replaced without counting: it resumes from the checkpoint.
                    pod_failure_policy=failure_policy("Ignore"),
                    template=template,
                ),
                opts=pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions.merge(replacement("batch/v1", "Job"), needs)
                ),
            )
            rendezvous = None
        else:
            elastic = training.elastic
            workers = batch_v1.JobTemplateSpecArgs(
                metadata=meta_v1.ObjectMetaArgs(labels=labels),
                spec=batch_v1.JobSpecArgs(
                    completion_mode="Indexed",
                    completions=k8s.nodes,
                    parallelism=k8s.nodes,
                    # Static: any failed pod fails its Job, which the JobSet's failurePolicy turns into a restart of
                    # all. Elastic: the Job replaces the failed pod while the others train on; it joins them again.
                    backoff_limit=k8s.backoff_limit if elastic else 0,
                    active_deadline_seconds=k8s.active_deadline_seconds,
                    pod_replacement_policy="Failed",
                    # Static: an evicted pod fails the Job at once, and the JobSet restarts every pod without
                    # counting (rule nodeDisruption): ignoring it would replace that one pod alone, while its peers,
                    # stopped with it at the same step, exit 0, so the replacement would wait for a rendezvous that
                    # never comes. Elastic: the peers' agents start a new round without it, and its replacement
                    # (not counted) joins the next one.
                    pod_failure_policy=failure_policy("Ignore" if elastic else "FailJob"),
                    # Elastic: train.py ends on every rank at the same step, and a pod that never got a node (or
                    # came back after the end, and resumed at the last step) must not hold the Job open: one
                    # succeeded index completes it, and the Job controller ends the rest ("Once the Job meets the
                    # SuccessPolicy, the lingering pods are terminated", batch/v1 JobSpec.successPolicy).
                    success_policy=batch_v1.SuccessPolicyArgs(rules=[batch_v1.SuccessPolicyRuleArgs(succeeded_count=1)])
                    if elastic
                    else None,
                    template=template,
                ),
            )
            invalid_settings = {
                "name": "invalidSettings",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
            }
            spec: dict[str, Any] = {
                # The controller creates the headless Service <name> (ClusterIP None, publishNotReadyAddresses:
                # pods rendezvous before they are Ready), owned by the JobSet (jobset_controller.go L790-830).
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                # "A restart is done by recreating all child jobs" (JobSet concepts doc); BlockingRecreate
                # deletes every old pod first, so no straggler joins the new rendezvous.
                "failurePolicy": {
                    "maxRestarts": k8s.backoff_limit,
                    "restartStrategy": "BlockingRecreate",
                    # Invalid settings fail the Job through its podFailurePolicy (reason PodFailurePolicy):
                    # restarting would only fail again.
                    "rules": [
                        {
                            "name": "nodeDisruption",
                            "action": "RestartJobSetAndIgnoreMaxRestarts",
                            "onJobFailureReasons": ["PodFailurePolicy"],
                            "onJobFailureMessagePatterns": [DISRUPTION_FAILURE_MESSAGE],
                        },
                        invalid_settings,
                    ],
                },
                "replicatedJobs": [{"name": WORKERS, "replicas": 1, "template": workers}],
            }
            if elastic:
                spec |= {
                    # The workers' Job retries its pods itself (backoffLimit); when it fails anyway, so does the run.
                    "failurePolicy": {"maxRestarts": 0, "rules": [invalid_settings]},
                    # Done when the workers are: the controller then deletes the still active rendezvous Job
                    # (jobset_controller.go L162-167 @ v0.12.0, "clean up active child jobs").
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": [WORKERS]},
                    "replicatedJobs": [
                        {
                            "name": RENDEZVOUS,
                            "replicas": 1,
                            "template": self._rendezvous_job(
                                k8s, labels, args.image, args.priority_class, args.tolerations
                            ),
                        },
                        # Created once the store's pod is Ready (dependsOn, jobset_types.go @ v0.12.0), so no agent
                        # starts against a store that is not listening yet.
                        {
                            "name": WORKERS,
                            "replicas": 1,
                            "template": workers,
                            "dependsOn": [{"name": RENDEZVOUS, "status": "Ready"}],
                        },
                    ],
                }
            self.job = CustomResource(
                name,
                api_version=JOBSET_API_VERSION,
                kind=JOBSET_KIND,
                metadata=object_metadata,
                spec=spec,
                # A JobSet's spec is immutable but for suspend and a few fields the stack does not declare (CEL
                # `self == oldSelf`, webhook ValidateUpdate): the provider would patch a custom resource in place.
                opts=pulumi.ResourceOptions.merge(
                    child,
                    pulumi.ResourceOptions.merge(
                        replacement(JOBSET_API_VERSION, JOBSET_KIND, {"spec": spec}),
                        pulumi.ResourceOptions.merge(
                            needs, pulumi.ResourceOptions(depends_on=list(filter(None, [args.job_set_controller])))
                        ),
                    ),
                ),
            )
            rendezvous = f"{rendezvous_store_host(name)}:{C10D_PORT}" if elastic else rendezvous_endpoint(name)
        # Only the training's own pods reach each other: c10d's rendezvous port and RCCL, whose socket and bootstrap
        # connections listen on ephemeral ports (so every TCP port). A one-node training accepts nothing.
        self.network_policy = ingress_policy(
            f"{name}-ingress",
            meta_v1.ObjectMetaArgs(name=name, namespace=args.namespace, labels=labels),
            labels,
            [
                networking_v1.NetworkPolicyIngressRuleArgs(
                    from_=[
                        networking_v1.NetworkPolicyPeerArgs(pod_selector=meta_v1.LabelSelectorArgs(match_labels=labels))
                    ]
                )
            ]
            if k8s.uses_job_set
            else [],
            child,
        )
        self.register_outputs(
            {
                "job": f"{'JobSet' if k8s.uses_job_set else 'Job'}/{name}",
                "rendezvous": rendezvous,
                # A claim when the storage is a PVC; else a hostPath, named by its path.
                "checkpoints": self.claim.metadata.name
                if self.claim is not None
                else cast(HostPathStorage, storage).path,
            }
        )

    def _rendezvous_job(
        self,
        k8s: TrainingKubernetes,
        labels: dict[str, str],
        image: str,
        priority_class: str | None,
        tolerations: Sequence[Toleration],
    ) -> batch_v1.JobTemplateSpecArgs:
        """One CPU pod running programs/rendezvous.py (the c10d store), Ready once it accepts connections. It may
        land on any node the training may (its tolerations); losing it ends the rendezvous: the agents fail, their
        pods are replaced, and all meet again at the replacement store from the newest checkpoint."""
        amounts = {"cpu": "1", "memory": "1Gi"}  # a TCPStore of a few keys; Guaranteed like the trainers
        store = core_v1.ContainerArgs(
            name=RENDEZVOUS,
            image=image,
            command=rendezvous_store_command(),
            ports=[core_v1.ContainerPortArgs(name="c10d", container_port=C10D_PORT)],
            readiness_probe=core_v1.ProbeArgs(tcp_socket=core_v1.TCPSocketActionArgs(port=C10D_PORT), period_seconds=5),
            resources=core_v1.ResourceRequirementsArgs(limits=amounts, requests=amounts),
            security_context=security_context(()),
            volume_mounts=[core_v1.VolumeMountArgs(name="program", mount_path=PROGRAM_DIR, read_only=True)],
        )
        return batch_v1.JobTemplateSpecArgs(
            metadata=meta_v1.ObjectMetaArgs(labels=labels),
            spec=batch_v1.JobSpecArgs(
                completions=1,
                parallelism=1,
                backoff_limit=k8s.backoff_limit,
                pod_replacement_policy="Failed",
                template=core_v1.PodTemplateSpecArgs(
                    metadata=meta_v1.ObjectMetaArgs(labels=labels),
                    spec=core_v1.PodSpecArgs(
                        restart_policy="Never",
                        priority_class_name=priority_class,
                        enable_service_links=False,
                        security_context=POD_SECURITY,
                        automount_service_account_token=AUTOMOUNT_SERVICE_ACCOUNT_TOKEN,
                        tolerations=tolerations_of(tolerations),
                        containers=[store],
                        volumes=[
                            core_v1.VolumeArgs(
                                name="program",
                                config_map=core_v1.ConfigMapVolumeSourceArgs(name=self.program.metadata.name),
                            )
                        ],
                    ),
                ),
            ),
        )

    def _pod_template(
        self,
        name: str,
        training: TrainingConfig,
        k8s: TrainingKubernetes,
        labels: dict[str, str],
        image: str,
        files: Mapping[str, str],
        checkpoints: core_v1.VolumeArgs,
        env: list[core_v1.EnvVarArgs],
        gpu_check: GpuCheckArgs | None,
        priority_class: str | None,
        tolerations: Sequence[Toleration],
    ) -> core_v1.PodTemplateSpecArgs:
        rccl = rccl_pod(k8s.network)
        program_mount = core_v1.VolumeMountArgs(name="program", mount_path=PROGRAM_DIR, read_only=True)
        resources = pod_resources(training.pod_requests())
        elastic = training.elastic
        static = k8s.uses_job_set and elastic is None
        if elastic is not None:
            command = torchrun_elastic(
                name, elastic.min_nodes, elastic.max_nodes, k8s.gpus_per_node, elastic.max_restarts
            )
        elif static:
            command = torchrun_multinode(name, k8s.nodes, k8s.gpus_per_node)
        else:
            command = torchrun_standalone(k8s.gpus_per_node)
        trainer = core_v1.ContainerArgs(
            name="trainer",
            image=image,
            command=command,
            env=[*env, node_rank_env()] if static else env,
            ports=[core_v1.ContainerPortArgs(name="c10d", container_port=RENDEZVOUS_PORT)] if static else None,
            resources=resources,
            security_context=security_context(pod_capabilities(k8s)),
            volume_mounts=[
                program_mount,
                core_v1.VolumeMountArgs(name="dshm", mount_path="/dev/shm"),
                core_v1.VolumeMountArgs(name="checkpoints", mount_path=CHECKPOINT_MOUNT),
            ],
        )
        # Same CPU and memory as the trainer (the pod's request is the larger of the two, so it stays the
        # trainer's): a container without them would make the pod Burstable instead of Guaranteed.
        trainer_amounts = cast(Mapping[str, str], resources.limits)  # pod_resources: requests equal limits
        check_settings = core_v1.ContainerArgs(
            name=SETTINGS_CHECK_CONTAINER,
            image=image,
            command=["python3", "-c", SETTINGS_CHECK, str(Path(PROGRAM_DIR).parent)],
            env=env,
            resources=core_v1.ResourceRequirementsArgs(
                limits={k: trainer_amounts[k] for k in ("cpu", "memory")},
                requests={k: trainer_amounts[k] for k in ("cpu", "memory")},
            ),
            security_context=security_context(()),
            volume_mounts=[program_mount],
        )
        annotations = {"rocm-stack/program-sha256": program_digest(files), **(rccl.annotations or {})}
        return core_v1.PodTemplateSpecArgs(
            # A new program version replaces the job; the run resumes from its checkpoints.
            metadata=meta_v1.ObjectMetaArgs(labels=labels, annotations=annotations),
            spec=core_v1.PodSpecArgs(
                restart_policy="Never",
                priority_class_name=priority_class,
                # A drain's eviction (GPU driver upgrade) or a deletion: time for train.py to checkpoint.
                termination_grace_period_seconds=k8s.termination_grace_period_seconds,
                enable_service_links=False,
                security_context=POD_SECURITY,
                automount_service_account_token=AUTOMOUNT_SERVICE_ACCOUNT_TOKEN,
                host_network=rccl.host_network,
                dns_policy=rccl.dns_policy,
                node_selector=k8s.node_selector or None,
                tolerations=tolerations_of(tolerations),
                # The settings first: a bad TRAIN_* value fails the run before any GPU work.
                init_containers=[
                    check_settings,
                    *(
                        [gpu_check_container(gpu_check, image, k8s.gpus_per_node, resources, "program")]
                        if gpu_check is not None
                        else []
                    ),
                ],
                containers=[trainer],
                volumes=[
                    core_v1.VolumeArgs(
                        name="program", config_map=core_v1.ConfigMapVolumeSourceArgs(name=self.program.metadata.name)
                    ),
                    shm_volume(training.shm_size),
                    checkpoints,
                ],
            ),
        )


@dataclass(frozen=True)
class DockerTrainingArgs:
    training: TrainingConfig
    images: Mapping[str, str]
    """Host -> the image reference for that host's GPU family (one key of `images`, schema.docker.host_images)."""
    partitions: Sequence[Partition]
    security_profile: SecurityProfile
    files: Mapping[str, str]
    secret_env: bool = False
    """`hosts` or `training` is a secret stack key: the containers' environments are secret."""


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
        # By reference (components/docker/programs.py): the state keeps no program text per partition.
        uploads = program_uploads(args.files, PROGRAM_DIR)
        images = pull_on_hosts(name, args.images, args.partitions, self)
        self.containers = {}
        for partition in args.partitions:
            host_dir = f"{placement.checkpoint_dir}/{name}/{partition.container.name}"
            self.containers[partition.ref] = workload_container(
                partition,
                WorkloadContainerArgs(
                    image=images[partition.host.name].image_id,
                    command=torchrun_standalone(partition.gpu_count),
                    env={
                        **training.program_env(CHECKPOINT_MOUNT),
                        TORCHRUN_SHUTDOWN_ENV: str(placement.torchrun_shutdown_seconds),
                    },
                    shm_size_bytes=int(training.shm_size),
                    security_profile=args.security_profile,
                    restart="on-failure",
                    max_retry_count=placement.max_retries,
                    stop_grace_seconds=placement.stop_grace_seconds,
                    volumes=[docker.ContainerVolumeArgs(host_path=host_dir, container_path=CHECKPOINT_MOUNT)],
                    uploads=uploads,
                    secret_env=args.secret_env,
                ),
                self,
            )
        self.register_outputs({"containers": {ref: c.name for ref, c in self.containers.items()}})
