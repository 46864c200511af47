"""Wiring of the workloads: `rocm-stack:training` and `rocm-stack:inference` onto Kubernetes and Docker partitions.

    hosts = build_docker_hosts(cfg, secrets)        # components/docker/hosts.py
    kubernetes = build_kubernetes_layer(cfg)       # components/k8s
    workloads = build_workloads(cfg, secrets, kubernetes, hosts)

A partition claimed by a workload is declared by the workload (its container runs the workload), so GpuHost
gets its host without those containers (`host_for_gpu_host`); the container is still the GpuHost's child
(components.docker.partitions.workload_container): a partition keeps its URN whatever runs in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schema import StackConfig, StackSecrets
from schema.docker import HostConfig, host_images, image_for
from schema.gpu_nodes import pod_floors
from schema.queues import SERVING_PRIORITY_CLASS, TRAINING_PRIORITY_CLASS
from schema.workloads import InferenceKubernetes, pod_tolerations
from schema.derived import kubernetes_gfx, partitions_claimed
from components.docker.checks import HostChecksArgs
from components.docker.partitions import Partition
from components import supply
from .gpu_check import GpuCheckArgs
from components.monitoring import kube_prometheus_stack_url
from .autoscaling import AutoscalerArgs
from . import training as training_module
from .training import DockerTraining, DockerTrainingArgs, TrainingJob, TrainingJobArgs
from .inference import DockerVllm, DockerVllmArgs, ProxyTls, VllmServer, VllmServerArgs
from .admission import ServingPolicy, ServingPolicyArgs

if TYPE_CHECKING:
    import pulumi

    from components.docker.gpu_host import GpuHost
    from components.k8s import KubernetesLayer


@dataclass
class Workloads:
    training_jobs: dict[str, TrainingJob] = field(default_factory=dict)
    docker_training: dict[str, DockerTraining] = field(default_factory=dict)
    vllm_servers: dict[str, VllmServer] = field(default_factory=dict)
    docker_vllm: dict[str, DockerVllm] = field(default_factory=dict)

    def outputs(self) -> dict[str, Any]:
        """What `pulumi stack output workloads` shows: where each workload runs."""
        return {
            "training": {
                name: {"kubernetes": job.object_name if job else None, "docker": sorted(d.containers) if d else []}
                for name, job, d in _pairs(self.training_jobs, self.docker_training)
            },
            "inference": {
                name: {
                    # The entry point: the router's Service where there is one.
                    "kubernetes": server.entry.metadata.name if server else None,
                    # Auto-named: a rotated key is a new Secret; clients in the cluster read its current name here.
                    "apiKeySecret": server.api_key.metadata.name if server and server.api_key else None,
                    "docker": sorted(d.containers) if d else [],
                }
                for name, server, d in _pairs(self.vllm_servers, self.docker_vllm)
            },
        }


def _autoscaler(cfg: StackConfig, served: InferenceKubernetes, kubernetes: KubernetesLayer) -> AutoscalerArgs | None:
    """The ScaledObject's settings of an autoscaled workload: the Prometheus KEDA queries (problems() requires one)."""
    if served.autoscaling is None:
        return None

    assert cfg.kubernetes is not None
    return AutoscalerArgs(
        scaling=served.autoscaling,
        environment=cfg.environment,
        prometheus_url=cfg.kubernetes.keda.prometheus_url or kube_prometheus_stack_url(),
        keda_ready=[kubernetes.keda] if kubernetes.keda is not None else [],
    )


def _pairs(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(name, a.get(name), b.get(name)) for name in sorted({*a, *b})]


def host_for_gpu_host(cfg: StackConfig, host: HostConfig) -> HostConfig:
    """The host as GpuHost should declare it: without the partitions that workloads run in."""
    claimed = partitions_claimed(cfg)
    kept = [c for c in host.containers if (host.name, c.name) not in claimed]
    return host if len(kept) == len(host.containers) else host.model_copy(update={"containers": kept})


def host_checks(cfg: StackConfig, host: HostConfig) -> HostChecksArgs | None:
    """The checks GpuHost declares for every partition of the host, each run in the image its container runs."""
    if not cfg.checks.enable:
        return None
    claimed = partitions_claimed(cfg)
    images = {
        c.name: claimed[(host.name, c.name)].image if (host.name, c.name) in claimed else c.image
        for c in host.containers
    }
    return HostChecksArgs(
        config=cfg.checks,
        environment=cfg.environment,
        host=host,
        partition_images=images,
        image_rocm={
            key: cfg.checks.rocm_version(key, host_images(host, cfg.images)[key]) for key in set(images.values())
        },
        # The partitions' own graces or their workloads' (a vLLM proxy takes its server's; the exporter's is 10 s).
        stop_grace_seconds=max(
            claimed[(host.name, c.name)].docker.stop_grace_seconds  # type: ignore[union-attr]
            if (host.name, c.name) in claimed
            else c.stop_grace_seconds
            for c in host.containers
        ),
    )


def _gpu_check(cfg: StackConfig, resource: str, files: Mapping[str, str]) -> GpuCheckArgs | None:
    if not cfg.checks.enable:
        return None
    return GpuCheckArgs(floors=pod_floors(cfg, resource), timeout_seconds=cfg.checks.timeout_seconds, files=files)


def _by_host(cfg: StackConfig, key: str, partitions: list[str]) -> dict[str, str]:
    """Host -> the reference of image `key` for that host's GPU family, for the hosts of `partitions`."""
    hosts = {host.name: host for host in cfg.hosts}
    return {name: host_images(hosts[name], cfg.images)[key] for name in sorted({p.split("/")[0] for p in partitions})}


def _kubernetes_image(cfg: StackConfig, key: str, node_selector: dict[str, str]) -> str:
    """The image of a Kubernetes workload: the reference for the GPU family its nodeSelector names."""
    image = image_for(cfg.images, key, kubernetes_gfx(node_selector))
    assert image is not None, "problems() requires the image of the nodeSelector's GPU family"
    return supply.image(image)


def build_workloads(
    cfg: StackConfig, secrets: StackSecrets, kubernetes: KubernetesLayer | None, gpu_hosts: Mapping[str, GpuHost]
) -> Workloads:
    """Declare every configured workload. `cfg` has passed the config's problems() checks."""
    workloads = Workloads()
    if not cfg.training and not cfg.inference:
        return workloads
    token = secrets.huggingface_token
    partitions = {
        f"{host.name}/{container.name}": Partition(host, container, gpu_hosts[host.name])
        for host in cfg.hosts
        for container in host.containers
    }

    files = training_module.program_files()
    # The GPU nodes' taints the workloads' pods tolerate unless they say otherwise.
    taints = cfg.kubernetes.gpu_node_taints if cfg.kubernetes is not None else []
    if cfg.training:
        for training in cfg.training:
            if training.kubernetes is not None:
                image = _kubernetes_image(cfg, training.image, training.kubernetes.node_selector)
                assert kubernetes is not None, "problems() requires rocm-stack:kubernetes for Kubernetes workloads"
                workloads.training_jobs[training.name] = TrainingJob(
                    training.name,
                    TrainingJobArgs(
                        training=training,
                        environment=cfg.environment,
                        image=image,
                        provider=kubernetes.provider,
                        namespace=kubernetes.namespace_name(training.kubernetes.namespace),
                        files=files,
                        gpu_ready=kubernetes.gpu_ready,
                        job_set_controller=kubernetes.job_set.release if kubernetes.job_set is not None else None,
                        secret_env=secrets.env_is_secret("training"),
                        gpu_check=_gpu_check(cfg, training.kubernetes.gpu_resource, files),
                        priority_class=TRAINING_PRIORITY_CLASS if kubernetes.kueue is not None else None,
                        queue_ready=kubernetes.kueue.ready if kubernetes.kueue is not None else [],
                        tolerations=pod_tolerations(training.kubernetes.tolerations, taints),
                    ),
                )
            if training.docker is not None:
                workloads.docker_training[training.name] = DockerTraining(
                    training.name,
                    DockerTrainingArgs(
                        training=training,
                        images=_by_host(cfg, training.image, training.docker.partitions),
                        security_profile=cfg.security_profile,
                        files=files,
                        partitions=[partitions[ref] for ref in training.docker.partitions],
                        secret_env=secrets.env_is_secret("hosts", "training"),
                    ),
                )

    if cfg.inference:
        # A new server's Deployment is admitted once the policy names it: the servers wait for its update.
        admitted = _serving_policy(cfg, kubernetes) if kubernetes is not None else []
        for inference in cfg.inference:
            if inference.kubernetes is not None:
                image = _kubernetes_image(cfg, inference.image, inference.kubernetes.node_selector)
                assert kubernetes is not None, "problems() requires rocm-stack:kubernetes for Kubernetes workloads"
                workloads.vllm_servers[inference.name] = VllmServer(
                    inference.name,
                    VllmServerArgs(
                        inference=inference,
                        environment=cfg.environment,
                        image=image,
                        provider=kubernetes.provider,
                        namespace=kubernetes.namespace_name(inference.kubernetes.namespace),
                        huggingface_token=token,
                        gpu_ready=[
                            *kubernetes.gpu_ready,
                            *(kubernetes.kueue.ready if kubernetes.kueue is not None else []),
                            *admitted,
                        ],
                        api_key=secrets.vllm_api_key,
                        secret_env=secrets.env_is_secret("inference"),
                        gpu_check=_gpu_check(cfg, inference.kubernetes.gpu_resource, files),
                        start_seconds=inference.replica_start_seconds(cfg.checks),
                        priority_class=SERVING_PRIORITY_CLASS if kubernetes.kueue is not None else None,
                        autoscaler=_autoscaler(cfg, inference.kubernetes, kubernetes),
                        leader_worker_set_controller=kubernetes.leader_worker_set.release
                        if kubernetes.leader_worker_set is not None
                        else None,
                        tolerations=pod_tolerations(inference.kubernetes.tolerations, taints),
                    ),
                )
            if inference.docker is not None:
                workloads.docker_vllm[inference.name] = DockerVllm(
                    inference.name,
                    DockerVllmArgs(
                        inference=inference,
                        images=_by_host(cfg, inference.image, inference.docker.partitions),
                        security_profile=cfg.security_profile,
                        partitions=[partitions[ref] for ref in inference.docker.partitions],
                        huggingface_token=token,
                        api_key=secrets.vllm_api_key,
                        tls=(
                            ProxyTls(secrets.vllm_tls_certificate, secrets.vllm_tls_key)
                            if secrets.vllm_tls_certificate is not None
                            else None
                        ),
                        secret_env=secrets.env_is_secret("hosts", "inference"),
                    ),
                )
    return workloads


SERVING_POLICY = "rocm-stack-serving"


def _serving_policy(cfg: StackConfig, kubernetes: KubernetesLayer) -> list[pulumi.Resource]:
    """The admission policy that keeps serving's labels to the stack's own pods (admission.py), and its binding;
    none without a vLLM server on Kubernetes."""

    namespaces, deployments, sets = set(), [], []
    for inference in cfg.inference:
        if (k8s := inference.kubernetes) is not None:
            namespaces.add(k8s.namespace)
            if k8s.multi_node:
                sets.append(inference.leader_worker_set_name)
            else:
                deployments.append(inference.name)
            if k8s.router is not None:
                deployments.append(f"{inference.name}-router")
    if not namespaces:
        return []
    policy = ServingPolicy(
        SERVING_POLICY,
        ServingPolicyArgs(
            provider=kubernetes.provider,
            namespaces=sorted(namespaces),
            names={"deployments": sorted(deployments), "leaderworkersets": sorted(sets)},
            depends_on=list(kubernetes.namespaces.values()),
        ),
    )
    return [policy.policy, policy.binding]
