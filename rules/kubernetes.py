"""The catalogue's rules on the Kubernetes layer: what a pod may reach of its node, pod hardening, Pod Security
labels, GPU pods' limits and /dev/shm, driver upgrades that drain, service-account tokens, network isolation,
exposure and protection."""

from __future__ import annotations

from typing import Any

from . import (
    DEVICE_CONFIG,
    HELM_RELEASE,
    NAMESPACE,
    NETWORK_POLICY,
    PSA_ENFORCE,
    SERVICE,
    driver_upgrade_problems,
    exposure_problems,
    gpu_pod_problems,
    namespace_level_problems,
    namespace_pod_security_problems,
    pod_hardening_problems,
    pod_host_access_problems,
    token_holder_problems,
    unisolated_workloads,
    unprotected,
)
from .rule import EVERY_ENVIRONMENT, PROD, Declared, Example, Rule

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
VLLM = "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210@sha256:" + "e7" * 32
HARDENED = {"allowPrivilegeEscalation": False}


def deployment(name: str = "llama", volumes: tuple[dict[str, Any], ...] = (), **container: Any) -> dict[str, Any]:
    """A workload's Deployment in namespace `ml` as the program declares it (hardened, GPU limit, memory /dev/shm)."""
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/instance": name}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [
                        {
                            "name": "vllm",
                            "image": VLLM,
                            "securityContext": HARDENED,
                            "resources": {"limits": {"amd.com/gpu": 1}},
                            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                            **container,
                        }
                    ],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, *volumes],
                },
            }
        },
    }


def inference(**kubernetes: Any) -> dict[str, Any]:
    """Prod's stack config of one vLLM server on Kubernetes, with `kubernetes` keys of its own."""
    return {
        "kubernetes": {"provider": {"context": "gpu-prod"}, "namespaces": ["ml"]},
        "hosts": [],
        "gpuFleet": {"nodes": 4, "gpusPerNode": 8},
        "vllmApiKey": {"secure": "v1:REPLACE-ME"},
        "inference": [
            {
                "name": "llama",
                "model": "Qwen/Qwen2.5-0.5B-Instruct",
                "kubernetes": {"namespace": "ml", "gpus": 1, **kubernetes},
            }
        ],
    }


PROD_POD_HOST_ACCESS = Rule(
    id="prod-pod-host-access",
    statement="In prod no pod shares the node's PID or IPC namespace, and no workload pod runs privileged or mounts a "
    "system path of its node.",
    reason="The Docker rule's system paths, for a hostPath volume (rules `host_mount_problem`: a pod that writes the "
    "node's / owns the node); hostPID lets a pod signal and ptrace the node's processes, hostIPC read their shared "
    "memory (kubernetes.io/docs/concepts/security/pod-security-standards/, Baseline: 'Sharing the host namespaces "
    "must be disallowed'). DaemonSets are judged on host namespaces only: the standalone device plugin is privileged "
    "by upstream design (ROCm/k8s-device-plugin k8s-ds-amdgpu-dp.yaml).",
    environments=PROD,
    config_keys=("inference[].kubernetes.modelCache.path", "training[].kubernetes.checkpoints.path"),
    plan_fields=("pod templates' hostPID, hostIPC, volumes[].hostPath, containers[].securityContext.privileged",),
    check=pod_host_access_problems,
    scope="resource",
    passing=(
        Example(
            "a model cache under /srv",
            inference(modelCache={"type": "hostPath", "path": "/srv/hf"}),
            (Declared(DEPLOYMENT, "llama", deployment(volumes=({"name": "cache", "hostPath": {"path": "/srv/hf"}},))),),
        ),
    ),
    failing=(
        Example(
            "a model cache at the node's /",
            inference(modelCache={"type": "hostPath", "path": "/"}),
            (Declared(DEPLOYMENT, "llama", deployment(volumes=({"name": "cache", "hostPath": {"path": "/"}},))),),
        ),
    ),
)

PROD_POD_HARDENING = Rule(
    id="prod-pod-hardening",
    statement="In prod every workload pod runs a seccomp profile, without privilege escalation or, under the default "
    "service account, a service-account token.",
    reason="The kubelet's default seccomp profile is Unconfined (kubernetes.io/docs/tutorials/security/seccomp/); "
    "allowPrivilegeEscalation lets setuid binaries and file capabilities raise a process's privileges; a token "
    "under the default account hands the API server's credentials to a pod that never calls it. The program always "
    "sets them (components/workloads/pods.py).",
    environments=PROD,
    config_keys=(),
    plan_fields=(
        "pod templates' securityContext.seccompProfile, containers[].securityContext.allowPrivilegeEscalation",
        "automountServiceAccountToken, serviceAccountName",
    ),
    check=pod_hardening_problems,
    scope="resource",
    passing=(Example("as the program declares it", {}, (Declared(DEPLOYMENT, "llama", deployment()),)),),
    failing=(
        Example(
            "a container that may escalate", None, (Declared(DEPLOYMENT, "llama", deployment(securityContext={})),)
        ),
    ),
)

PROD_EXPOSURE = Rule(
    id="prod-exposure",
    statement="In prod a LoadBalancer Service needs the explicit opt-in, and Helm charts come over https or OCI.",
    reason="A LoadBalancer publishes the port outside the cluster, to whatever the cloud's load balancer lets in "
    "(kubernetes.io/docs/concepts/services-networking/service/#loadbalancer); the opt-in "
    "`allowLoadBalancer: true` is recorded as the Service annotation `rocm-stack/allow-load-balancer`. Over plain "
    "http anyone on the path can swap a chart: Helm verifies no signature unless asked (`helm install --verify`).",
    environments=PROD,
    config_keys=(
        "inference[].kubernetes.serviceType",
        "inference[].kubernetes.allowLoadBalancer",
        "kubernetes.gpuOperator.repository",
        "kubernetes.certManager.repository",
        "monitoring.kubePrometheusStack.repository",
    ),
    plan_fields=("Service spec.type, metadata.annotations", "Release repositoryOpts.repo, chart"),
    check=exposure_problems,
    scope="resource",
    passing=(
        Example(
            "a LoadBalancer opted in",
            inference(serviceType="LoadBalancer", allowLoadBalancer=True),
            (
                Declared(
                    SERVICE,
                    "llama",
                    {
                        "metadata": {"annotations": {"rocm-stack/allow-load-balancer": "true"}},
                        "spec": {"type": "LoadBalancer"},
                    },
                ),
            ),
        ),
    ),
    failing=(
        Example(
            "a LoadBalancer without the opt-in",
            inference(serviceType="LoadBalancer"),
            (Declared(SERVICE, "llama", {"spec": {"type": "LoadBalancer"}}),),
        ),
    ),
)

PROD_NAMESPACES_POD_SECURITY = Rule(
    id="prod-namespaces-pod-security",
    statement="In prod every namespace the stack creates carries its Pod Security Admission enforce level.",
    reason="Without the label the cluster's default decides what its pods may do (often baseline, which refuses the "
    "GPU layer's privileged DaemonSets, or nothing) "
    "(kubernetes.io/docs/concepts/security/pod-security-admission/). The program labels every namespace it creates "
    "(schema.derived.namespace_pod_security).",
    environments=PROD,
    config_keys=(),
    plan_fields=(f"Namespace metadata.labels['{PSA_ENFORCE}']",),
    check=namespace_pod_security_problems,
    scope="resource",
    passing=(
        Example(
            "labelled baseline",
            {},
            (Declared(NAMESPACE, "ml", {"metadata": {"name": "ml", "labels": {PSA_ENFORCE: "baseline"}}}),),
        ),
    ),
    failing=(Example("no label", None, (Declared(NAMESPACE, "ml", {"metadata": {"name": "ml"}}),)),),
)


def namespace(level: str) -> Declared:
    """Namespace `ml` as the program declares it, enforcing Pod Security `level`."""
    return Declared(NAMESPACE, "ml", {"metadata": {"name": "ml", "labels": {PSA_ENFORCE: level}}})


PROD_NAMESPACES_POD_SECURITY_AS_NEEDED = Rule(
    id="prod-namespaces-pod-security-as-needed",
    statement="In prod no namespace the stack creates enforces a Pod Security level laxer than the pods it declares "
    "there need (privileged only for capabilities beyond baseline's, hostPath, host namespaces or ports).",
    reason="A namespace's enforce level admits every pod anyone may create there, not only the stack's: `privileged` "
    "lets them run privileged, on the node's namespaces or with its files (kubernetes.io/docs/concepts/security/"
    "pod-security-standards/: Baseline allows added capabilities only 'AUDIT_WRITE, CHOWN, ... SYS_CHROOT', no "
    "hostPath volume, no host namespaces, no hostPort). The program derives each level from the pods it declares "
    "there (schema/derived.py namespace_pod_security), and a workload's `podSecurity` must name what its pods need, "
    "so no config asks for a laxer one; the pack guards the plan. Namespaces a Helm release installs into are left "
    "out: their pods are not in the plan.",
    environments=PROD,
    config_keys=(),
    plan_fields=(f"Namespace metadata.labels['{PSA_ENFORCE}']", "pod templates in that namespace"),
    check=namespace_level_problems,
    scope="stack",
    passing=(
        Example(
            "baseline for pods that need baseline",
            {},
            (namespace("baseline"), Declared(DEPLOYMENT, "llama", deployment())),
        ),
    ),
    failing=(
        Example(
            "privileged for pods that need baseline",
            None,
            (namespace("privileged"), Declared(DEPLOYMENT, "llama", deployment())),
        ),
    ),
)


GPU_PODS_LIMITS_AND_SHM = Rule(
    id="gpu-pods-limits-and-shm",
    statement="Pods asking for amd.com/gpu set it as a limit and mount a memory-backed /dev/shm.",
    reason="Extended resources are granted by limits, and a request must equal the limit "
    "(kubernetes.io/docs/concepts/configuration/manage-resources-containers/#extended-resources); the 64 MiB "
    "/dev/shm a container runtime gives is far too small for PyTorch's DataLoader workers and RCCL. The program "
    "always declares both (components/workloads/pods.py).",
    environments=EVERY_ENVIRONMENT,
    config_keys=(),
    plan_fields=("containers[].resources.limits/requests['amd.com/gpu']", "volumes[].emptyDir.medium, volumeMounts"),
    check=gpu_pod_problems,
    scope="resource",
    passing=(Example("a limit and a memory /dev/shm", {}, (Declared(DEPLOYMENT, "llama", deployment()),)),),
    failing=(
        Example(
            "no /dev/shm",
            None,
            (Declared(DEPLOYMENT, "llama", deployment(volumeMounts=[])),),
        ),
    ),
)

GPU_OPERATOR_DRAINS = Rule(
    id="gpu-operator-drains-before-driver-upgrade",
    statement="In prod the GPU Operator cordons and drains nodes, a bounded number at a time, before a driver upgrade.",
    reason="Replacing the amdgpu driver under running workloads kills them; the operator drains a node first only "
    "with `spec.driver.upgradePolicy.enable` and a nodeDrainPolicy (ROCm/gpu-operator docs/upgrades/driver.md); "
    "`force` deletes pods without a controller for good, and maxParallelUpgrades 0 upgrades every node at once. The "
    "program declares the upgrade policy (components/k8s/gpu_operator.py).",
    environments=PROD,
    config_keys=(),
    plan_fields=("DeviceConfig spec.driver.enable, spec.driver.upgradePolicy",),
    check=driver_upgrade_problems,
    scope="resource",
    passing=(
        Example(
            "one node at a time, drained",
            {},
            (
                Declared(
                    DEVICE_CONFIG,
                    "gpu",
                    {
                        "spec": {
                            "driver": {
                                "upgradePolicy": {
                                    "enable": True,
                                    "maxParallelUpgrades": 1,
                                    "nodeDrainPolicy": {"force": False, "timeoutSeconds": 300},
                                }
                            }
                        }
                    },
                ),
            ),
        ),
    ),
    failing=(
        Example(
            "no upgrade policy",
            None,
            (Declared(DEVICE_CONFIG, "gpu", {"spec": {"driver": {"enable": True}}}),),
        ),
    ),
)

PROD_SERVICE_ACCOUNT_TOKENS = Rule(
    id="prod-service-account-tokens-read-only",
    statement="In prod a pod mounts a service-account token only as an account of the stack's own that may only read "
    "(get, list, watch) through the stack's Roles.",
    reason="A mounted token acts with every permission its account is bound to "
    "(kubernetes.io/docs/concepts/security/service-accounts/); the only pods that need one are the router's, to "
    "watch the pods of their namespace (components/workloads/router.py).",
    environments=PROD,
    config_keys=(),
    plan_fields=(
        "pod templates' serviceAccountName",
        "ServiceAccount",
        "Role rules",
        "RoleBinding, ClusterRoleBinding",
    ),
    check=token_holder_problems,
    scope="stack",
    passing=(Example("no token", {}, (Declared(DEPLOYMENT, "llama", deployment()),)),),
    failing=(
        Example(
            "a token of an account the stack does not declare",
            None,
            (
                Declared(
                    DEPLOYMENT,
                    "llama",
                    {
                        "metadata": {"name": "llama", "namespace": "ml"},
                        "spec": {"template": {"spec": {"serviceAccountName": "admin", "containers": []}}},
                    },
                ),
            ),
        ),
    ),
)

PROD_WORKLOADS_NETWORK_ISOLATED = Rule(
    id="prod-workloads-network-isolated",
    statement="In prod an ingress NetworkPolicy selects every workload's pods.",
    reason="A pod no NetworkPolicy selects accepts traffic from every pod of the cluster "
    "(kubernetes.io/docs/concepts/services-networking/network-policies/: 'By default, a pod is non-isolated for "
    "ingress'). The program declares one per workload (components/workloads).",
    environments=PROD,
    config_keys=(),
    plan_fields=("NetworkPolicy spec.podSelector.matchLabels, policyTypes", "pod templates' metadata.labels"),
    check=unisolated_workloads,
    scope="stack",
    passing=(
        Example(
            "selected by its policy",
            {},
            (
                Declared(DEPLOYMENT, "llama", deployment()),
                Declared(
                    NETWORK_POLICY,
                    "llama",
                    {
                        "spec": {
                            "podSelector": {"matchLabels": {"app.kubernetes.io/instance": "llama"}},
                            "policyTypes": ["Ingress"],
                        }
                    },
                ),
            ),
        ),
    ),
    failing=(Example("no policy", None, (Declared(DEPLOYMENT, "llama", deployment()),)),),
)

PROD_PROTECTED = Rule(
    id="prod-operator-and-namespaces-protected",
    statement="In prod the GPU Operator and cert-manager Helm releases and the namespaces are protected.",
    reason="Deleting a namespace deletes everything in it, and deleting the operator's release removes the driver "
    "and device plugin from every GPU node; `protect` makes the engine refuse either until it is unprotected "
    "(www.pulumi.com/docs/iac/concepts/options/protect/). The program protects them in prod.",
    environments=PROD,
    config_keys=(),
    plan_fields=("Namespace, Release (chart) protect",),
    check=unprotected,
    scope="stack",
    passing=(Example("protected", {}, (Declared(NAMESPACE, "ml", {"metadata": {"name": "ml"}}, protect=True),)),),
    failing=(
        Example(
            "an unprotected operator release",
            None,
            (Declared(HELM_RELEASE, "amd-gpu-operator", {"chart": "gpu-operator-charts"}),),
        ),
    ),
    config_schema={
        "charts": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Helm charts whose releases must be protected",
        }
    },
)

RULES = (
    PROD_POD_HOST_ACCESS,
    PROD_POD_HARDENING,
    PROD_EXPOSURE,
    PROD_NAMESPACES_POD_SECURITY,
    PROD_NAMESPACES_POD_SECURITY_AS_NEEDED,
    GPU_PODS_LIMITS_AND_SHM,
    GPU_OPERATOR_DRAINS,
    PROD_SERVICE_ACCOUNT_TOKENS,
    PROD_WORKLOADS_NETWORK_ISOLATED,
    PROD_PROTECTED,
)
