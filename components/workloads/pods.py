"""Pod-spec pieces the Kubernetes workloads (TrainingJob, VllmServer) share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_kubernetes.apps import v1 as apps_v1
from pulumi_kubernetes.core import v1 as core_v1
from pulumi_kubernetes.meta import v1 as meta_v1
from pulumi_kubernetes.networking import v1 as networking_v1

from components.docker.programs import program_digest
from components.k8s.replacement import replacement
from rules import LOAD_BALANCER_OPT_IN
from schema.docker import PROXY_IMAGE
from schema.workloads import MIB, EmptyDirStorage, HostPathStorage, PvcStorage, Toleration, TrainingNetwork
from components import supply
from . import proxy

# Multus attaches the secondary networks named in this pod annotation.
MULTUS_NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# The pod port an API Service sends to (the NetworkPolicy opens this one).
SERVICE_TARGET_PORT = "http"
# The key Secret's entries: the key itself (VLLM_API_KEY) beside the proxy's map file (proxy.API_KEY_MAP).
API_KEY_KEY = "api-key"
PROXY_RESOURCES = {"cpu": "500m", "memory": "128Mi"}
# Where a pod finds programs/*.py (the image contract of programs/: their parent directory is on sys.path).
PROGRAM_DIR = "/opt/rocm-stack/programs"


def app_labels(app: str) -> dict[str, str]:
    """Labels every workload of one kind carries (`vllm`, `training`): what a ServiceMonitor selects."""
    return {"app.kubernetes.io/name": app, "app.kubernetes.io/managed-by": "rocm-stack"}


def labels_of(name: str, app: str) -> dict[str, str]:
    """Selector labels of one workload (workload names are unique): stable, so Services and PDBs keep matching."""
    return {**app_labels(app), "app.kubernetes.io/instance": name}


def secret_env_var(name: str, secret: core_v1.Secret, key: str) -> core_v1.EnvVarArgs:
    """`name` read from `key` of `secret`, referred to by the Secret's output name (a new name rolls the pods)."""
    return core_v1.EnvVarArgs(
        name=name,
        value_from=core_v1.EnvVarSourceArgs(
            secret_key_ref=core_v1.SecretKeySelectorArgs(name=secret.metadata.name, key=key)
        ),
    )


def env_vars(env: Mapping[str, str], secret: core_v1.Secret | None = None) -> list[core_v1.EnvVarArgs]:
    """A container's `env`: the values inline, or with `secret` (env_secret of the same map) references into it."""
    if secret is None:
        return [core_v1.EnvVarArgs(name=k, value=v) for k, v in sorted(env.items())]
    return [secret_env_var(k, secret, k) for k in sorted(env)]


def auto_named_secret(
    resource_name: str,
    string_data: Mapping[str, pulumi.Input[str]],
    namespace: pulumi.Input[str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> core_v1.Secret:
    """A Secret a pod reads (env or volume), named by the provider: `<resource_name>-<random suffix>`. A change of
    its data replaces it (pulumi/pulumi-kubernetes#1772, #3164: `enableSecretMutable` off by default), and a
    replacement gets a new name: the engine checks the new inputs again without the old ones, so the provider
    autonames afresh (pulumi/pulumi pkg/resource/deploy/step_generator.go L2004-2024 @ v3.259.0;
    pulumi-kubernetes provider/pkg/metadata/naming.go AssignNameIfAutonamable), creates it before the old one is
    deleted and updates every reader first (step_generator.go L2033-2035). The pod spec refers to the name, so
    the pods roll and read the new value; under a fixed name the pods would keep the old value until some restart,
    and the old Secret would be deleted first (delete-before-replace). Never a digest of the value in the pod
    spec: anyone who can read the Deployment could test guesses of a short key against it."""
    return core_v1.Secret(
        resource_name,
        metadata=meta_v1.ObjectMetaArgs(namespace=namespace, labels=dict(labels)),
        type="Opaque",
        string_data=pulumi.Output.secret(string_data),
        opts=opts,
    )


def env_secret(
    resource_name: str,
    env: Mapping[str, str],
    namespace: pulumi.Input[str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> core_v1.Secret:
    """The environment of a workload declared under a secret stack key (StackSecrets.secret_sections), as a
    Kubernetes Secret (auto_named_secret): inline, the values would sit in the pod spec and make the whole spec a
    secret in `pulumi preview`."""
    return auto_named_secret(resource_name, dict(env), namespace, labels, opts)


def pod_resources(requests: Mapping[str, str]) -> core_v1.ResourceRequirementsArgs:
    """Requests (schema.workloads.pod_requests) equal to limits for every resource: Guaranteed QoS, evicted last. A
    pod asking only for `amd.com/gpu` is BestEffort ("Containers in a Pod can request other resources (not CPU or
    memory) and still be classified as BestEffort", https://kubernetes.io/docs/concepts/workloads/pods/pod-qos/) and
    "the kubelet prefers to evict BestEffort Pods". Memory covers the memory-backed /dev/shm: "files you write count
    against the memory limit of the container that wrote them"
    (https://kubernetes.io/docs/concepts/storage/volumes/#emptydir). Extended resources (GPUs, RDMA) cannot be
    overcommitted anyway."""
    return core_v1.ResourceRequirementsArgs(limits=dict(requests), requests=dict(requests))


def security_context(capabilities: Sequence[str]) -> core_v1.SecurityContextArgs:
    """Every GPU container: no privilege escalation (no setuid gains, the Kubernetes form of the Docker hosts'
    hardened `no-new-privileges`), and the capabilities its workload needs (schema.workloads.pod_capabilities:
    SYS_NICE with numaBinding, IPC_LOCK with RDMA), none by default."""
    return core_v1.SecurityContextArgs(
        allow_privilege_escalation=False,
        capabilities=core_v1.CapabilitiesArgs(add=list(capabilities)) if capabilities else None,
    )


# Every workload pod: the container runtime's default seccomp profile (the kubelet's default is Unconfined unless
# it runs with --seccomp-default: https://kubernetes.io/docs/tutorials/security/seccomp/). Allowed at every Pod
# Security level (baseline forbids only Unconfined).
POD_SECURITY = core_v1.PodSecurityContextArgs(seccomp_profile=core_v1.SeccompProfileArgs(type="RuntimeDefault"))
# No workload talks to the API server: no service-account token in the pods.
AUTOMOUNT_SERVICE_ACCOUNT_TOKEN = False


def shm_volume(size_bytes: int) -> core_v1.VolumeArgs:
    """/dev/shm as RAM of the given size: a container's own /dev/shm is 64 MiB, far too small for RCCL."""
    return core_v1.VolumeArgs(
        name="dshm", empty_dir=core_v1.EmptyDirVolumeSourceArgs(medium="Memory", size_limit=f"{size_bytes // MIB}Mi")
    )


def tolerations_of(tolerations: Sequence[Toleration]) -> list[core_v1.TolerationArgs] | None:
    return [
        core_v1.TolerationArgs(
            key=t.key, operator=t.operator, value=t.value, effect=t.effect, toleration_seconds=t.toleration_seconds
        )
        for t in tolerations
    ] or None


def storage_volume(
    volume_name: str,
    storage: PvcStorage | HostPathStorage | EmptyDirStorage,
    claim_name: str,
    metadata: meta_v1.ObjectMetaArgs,
    opts: pulumi.ResourceOptions,
) -> tuple[core_v1.VolumeArgs, core_v1.PersistentVolumeClaim | None]:
    """The pod volume for a storage setting, and the PersistentVolumeClaim it needs (declared here) if any."""
    if isinstance(storage, HostPathStorage):
        return core_v1.VolumeArgs(
            name=volume_name, host_path=core_v1.HostPathVolumeSourceArgs(path=storage.path, type="DirectoryOrCreate")
        ), None
    if isinstance(storage, EmptyDirStorage):
        return core_v1.VolumeArgs(
            name=volume_name, empty_dir=core_v1.EmptyDirVolumeSourceArgs(size_limit=storage.size_limit)
        ), None
    claim = core_v1.PersistentVolumeClaim(
        claim_name,
        metadata=metadata,
        spec=core_v1.PersistentVolumeClaimSpecArgs(
            access_modes=[storage.access_mode],
            storage_class_name=storage.storage_class,
            resources=core_v1.VolumeResourceRequirementsArgs(requests={"storage": storage.size}),
        ),
        opts=pulumi.ResourceOptions.merge(opts, replacement("v1", "PersistentVolumeClaim")),
    )
    return core_v1.VolumeArgs(
        name=volume_name,
        persistent_volume_claim=(core_v1.PersistentVolumeClaimVolumeSourceArgs(claim_name=claim.metadata.name)),
    ), claim


def program_config_map(
    resource_name: str,
    files: Mapping[str, str],
    namespace: pulumi.Input[str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> core_v1.ConfigMap:
    """programs/*.py files for a pod's PROGRAM_DIR. Named after their content and immutable: a new version is a
    new ConfigMap, so running pods never see files change under them, and the pod template that mounts it changes
    (its pods are replaced, or rolled); Pulumi deletes the old one after the new one is in use."""
    return core_v1.ConfigMap(
        resource_name,
        metadata=meta_v1.ObjectMetaArgs(
            name=f"{resource_name}-{program_digest(files)[:10]}", namespace=namespace, labels=dict(labels)
        ),
        data=dict(files),
        immutable=True,
        opts=opts,
    )


def ingress_policy(
    resource_name: str,
    metadata: meta_v1.ObjectMetaArgs,
    pod_labels: Mapping[str, str],
    rules: list[networking_v1.NetworkPolicyIngressRuleArgs],
    opts: pulumi.ResourceOptions,
) -> networking_v1.NetworkPolicy:
    """Only `rules` reach the pods of `pod_labels` ("If any NetworkPolicy selects a Pod for ingress, the Pod only
    accepts the traffic one of them allows", https://kubernetes.io/docs/concepts/services-networking/network-policies/);
    their own traffic out is left alone. Enforced only by a CNI that implements NetworkPolicy (Calico, Cilium, ...):
    elsewhere the object is accepted and ignored."""
    return networking_v1.NetworkPolicy(
        resource_name,
        metadata=metadata,
        spec=networking_v1.NetworkPolicySpecArgs(
            pod_selector=meta_v1.LabelSelectorArgs(match_labels=dict(pod_labels)),
            policy_types=["Ingress"],
            ingress=rules,
        ),
        opts=opts,
    )


def namespace_peer(namespace: str) -> networking_v1.NetworkPolicyPeerArgs:
    """Every pod of a namespace, by the label the API server sets on each (kubernetes.io/metadata.name, since 1.22)."""
    return networking_v1.NetworkPolicyPeerArgs(
        namespace_selector=meta_v1.LabelSelectorArgs(match_labels={"kubernetes.io/metadata.name": namespace})
    )


@dataclass(frozen=True)
class RcclPod:
    """What `network` (RDMA for RCCL between the pods of a multi-node training or vLLM replica) adds to each pod besides
    its RDMA resource (schema.workloads.pod_requests) and IPC_LOCK (schema.workloads.pod_capabilities): the Multus annotation or the node's network (a hostNetwork pod still
    resolves pod names through cluster DNS with ClusterFirstWithHostNet), and RCCL's variables."""

    annotations: dict[str, str] | None = None
    host_network: bool | None = None
    dns_policy: str | None = None
    env: dict[str, str] | None = None


def rccl_pod(network: TrainingNetwork | None) -> RcclPod:
    if network is None:
        return RcclPod()
    return RcclPod(
        annotations={MULTUS_NETWORKS_ANNOTATION: network.networks} if network.networks is not None else None,
        host_network=network.host_network or None,
        dns_policy="ClusterFirstWithHostNet" if network.host_network else None,
        env=network.env(),
    )


def proxy_container(port: int, lifecycle: core_v1.LifecycleArgs) -> core_v1.ContainerArgs:
    """The nginx sidecar: the pod's only listener on the pod network. Its master starts as root to read the key
    file (0400) and drops its worker to nginx's user: CHOWN, SETUID and SETGID are all it keeps; it writes only its
    runtime emptyDir. Its volumes: proxy_pod_volumes."""
    return core_v1.ContainerArgs(
        name="proxy",
        image=supply.image(PROXY_IMAGE),
        command=proxy.proxy_command(),
        ports=[core_v1.ContainerPortArgs(name="http", container_port=port)],
        # Requests = limits: the pod stays Guaranteed (its GPU container's QoS, pods.pod_resources).
        resources=core_v1.ResourceRequirementsArgs(requests=PROXY_RESOURCES, limits=PROXY_RESOURCES),
        security_context=core_v1.SecurityContextArgs(
            allow_privilege_escalation=False,
            read_only_root_filesystem=True,
            capabilities=core_v1.CapabilitiesArgs(drop=["ALL"], add=["CHOWN", "SETUID", "SETGID"]),
        ),
        volume_mounts=[
            core_v1.VolumeMountArgs(name="proxy-config", mount_path=proxy.CONFIG_DIR, read_only=True),
            core_v1.VolumeMountArgs(name="proxy-runtime", mount_path=proxy.RUNTIME_DIR),
        ],
        # Its preStop (autoscaling.proxy_drain_hook) holds nginx until the server behind it has stopped.
        lifecycle=lifecycle,
    )


def proxy_pod_volumes(config: core_v1.ConfigMap, api_key: core_v1.Secret) -> list[core_v1.VolumeArgs]:
    """The sidecar's configuration with the key map of `api_key` (0400, one projected volume) and its runtime
    emptyDir."""
    return [
        core_v1.VolumeArgs(
            name="proxy-config",
            projected=core_v1.ProjectedVolumeSourceArgs(
                default_mode=0o400,
                sources=[
                    core_v1.VolumeProjectionArgs(
                        config_map=core_v1.ConfigMapProjectionArgs(
                            name=config.metadata.name,
                            items=[core_v1.KeyToPathArgs(key=proxy.CONFIG_FILE, path=proxy.CONFIG_FILE)],
                        )
                    ),
                    core_v1.VolumeProjectionArgs(
                        secret=core_v1.SecretProjectionArgs(
                            name=api_key.metadata.name,
                            items=[core_v1.KeyToPathArgs(key=proxy.API_KEY_MAP, path=proxy.API_KEY_MAP)],
                        )
                    ),
                ],
            ),
        ),
        core_v1.VolumeArgs(name="proxy-runtime", empty_dir=core_v1.EmptyDirVolumeSourceArgs(size_limit="1Gi")),
    ]


def api_ingress(
    service_type: str, clients: Sequence[Mapping[str, str]] | None, metrics_namespace: str
) -> networking_v1.NetworkPolicyIngressRuleArgs:
    """Who reaches a pod's API port (the Service's target): the pods of `clients` (label sets; None: every pod of the
    namespace) and the monitoring namespace (metrics on the same port), or anyone where the Service publishes it
    beyond the cluster (NodePort, LoadBalancer)."""
    peers = [
        networking_v1.NetworkPolicyPeerArgs(pod_selector=meta_v1.LabelSelectorArgs(match_labels=dict(client)))
        for client in clients or [{}]
    ]
    return networking_v1.NetworkPolicyIngressRuleArgs(
        from_=None if service_type != "ClusterIP" else [*peers, namespace_peer(metrics_namespace)],
        ports=[networking_v1.NetworkPolicyPortArgs(port=SERVICE_TARGET_PORT, protocol="TCP")],
    )


def api_service(
    resource_name: str,
    metadata: meta_v1.ObjectMetaArgs,
    selector: Mapping[str, str],
    service_type: str,
    allow_load_balancer: bool,
    port: int,
    opts: pulumi.ResourceOptions,
) -> core_v1.Service:
    """The API's Service: `port` to the pods' `http` port."""
    return core_v1.Service(
        resource_name,
        metadata=meta_v1.ObjectMetaArgs(
            name=metadata.name,
            namespace=metadata.namespace,
            labels=metadata.labels,
            # The config's opt-in, where the pack sees it (prod refuses a LoadBalancer without it).
            annotations={LOAD_BALANCER_OPT_IN: "true"} if allow_load_balancer else None,
        ),
        spec=core_v1.ServiceSpecArgs(
            type=service_type,
            selector=dict(selector),
            ports=[core_v1.ServicePortArgs(name="http", port=port, target_port=SERVICE_TARGET_PORT)],
        ),
        opts=opts,
    )


def rolling_update(max_surge: int, max_unavailable: int) -> apps_v1.DeploymentStrategyArgs:
    return apps_v1.DeploymentStrategyArgs(
        type="RollingUpdate",
        rolling_update=apps_v1.RollingUpdateDeploymentArgs(max_surge=max_surge, max_unavailable=max_unavailable),
    )
