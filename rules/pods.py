"""The rules on the Kubernetes layer: GPU pods, what a prod pod may reach of its node, pod hardening,
service-account tokens, network isolation, exposure, Pod Security levels, GPU Operator driver upgrades, and the
protection of the operator and the namespaces."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .containers import _gpu_limited, host_mount_problem
from .images import helm_repository_problem
from .plan import (
    CLUSTER_ROLE_BINDING,
    DAEMON_SET,
    DEVICE_CONFIG,
    Declared,
    GPU_RESOURCE,
    HELM_RELEASE,
    HELM_TYPES,
    JOBSET,
    LEADER_WORKER_SET,
    NAMESPACE,
    NETWORK_POLICY,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    SERVICE_ACCOUNT,
    _POD_SPEC_PATHS,
    _containers,
    _dig,
    _mapping,
    _sequence,
    pod_specs,
)

# The GPU Operator's chart and the cert-manager it needs (chart names as in their Helm repositories).
DEFAULT_PROTECTED_CHARTS = ("gpu-operator-charts", "cert-manager")


# --- Kubernetes GPU pods ----------------------------------------------------------------------------------


def gpu_pod_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A pod asking for amd.com/gpu sets it as a limit and mounts a memory-backed /dev/shm.

    Extended resources are granted by limits (a request must equal the limit), and the 64 MiB /dev/shm a
    container runtime gives by default is far too small for PyTorch data loaders and RCCL.
    """
    problems = []
    for pod, spec in pod_specs(resource_type, props):
        problems += _gpu_pod_problems(pod, spec)
    return problems


def _gpu_pod_problems(pod: str, spec: Mapping[str, Any]) -> list[str]:
    memory_volumes = {
        _mapping(v).get("name")
        for v in _sequence(spec.get("volumes"))
        if _dig(_mapping(v), ("emptyDir", "medium")) == "Memory"
    }
    problems = []
    for container in filter(_gpu_limited, _containers(spec)):
        where = f"{pod}GPU container '{container.get('name')}'"
        resources = _mapping(container.get("resources"))
        limit = _mapping(resources.get("limits")).get(GPU_RESOURCE)
        request = _mapping(resources.get("requests")).get(GPU_RESOURCE)
        if limit is None:
            problems.append(f"{where} requests {GPU_RESOURCE} without a limit: set resources.limits['{GPU_RESOURCE}']")
        elif request is not None and str(request) != str(limit):
            problems.append(f"{where} requests {request} {GPU_RESOURCE} but limits {limit}: they must be equal")
        shm_mounts = [
            m for m in map(_mapping, _sequence(container.get("volumeMounts"))) if m.get("mountPath") == "/dev/shm"
        ]
        if not any(m.get("name") in memory_volumes for m in shm_mounts):
            problems.append(
                f"{where} has no memory-backed /dev/shm: mount an emptyDir with medium: Memory "
                "(and a sizeLimit) at /dev/shm"
            )
    return problems


# --- what a prod pod may reach of its node (Kubernetes) ----------------------------------------------------


def _read_only_volumes(spec: Mapping[str, Any]) -> set[str]:
    """Volumes every container mounts read-only (and at least one mounts)."""
    mounts = [_mapping(m) for c in _containers(spec) for m in _sequence(c.get("volumeMounts"))]
    names = {m.get("name") for m in mounts}
    return {str(n) for n in names if all(m.get("readOnly") is True for m in mounts if m.get("name") == n)}


def pod_host_access_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every prod pod: no host PID or IPC namespace. Every pod but a DaemonSet's (the standalone device plugin and
    node labeller are privileged and mount /sys and /dev by upstream design): no privileged container, no hostPath
    of a system path (host_mount_problem: the Docker rule). hostNetwork is the RDMA opt-in of a training
    (`training[].kubernetes.network.hostNetwork`, privileged namespace only) and is not judged here."""
    problems = []
    for pod, spec in pod_specs(resource_type, props):
        for field, shares in (("hostPID", "processes (it can signal and ptrace them)"), ("hostIPC", "shared memory")):
            if spec.get(field) is True:
                problems.append(f"{pod}pod sets {field}: it would share the node's {shares}; prod never does")
        if resource_type == DAEMON_SET:
            continue
        read_only = _read_only_volumes(spec)
        for volume in map(_mapping, _sequence(spec.get("volumes"))):
            path = _dig(volume, ("hostPath", "path"))
            if path and (problem := host_mount_problem(str(path), volume.get("name") in read_only)):
                problems.append(f"{pod}volume '{volume.get('name')}': {problem}")
        for container in _containers(spec):
            if _dig(container, ("securityContext", "privileged")) is True:
                problems.append(
                    f"{pod}container '{container.get('name')}' runs privileged: every device and capability of the "
                    "node; prod never does"
                )
    return problems


def pod_hardening_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every prod pod but a DaemonSet's (see pod_host_access_problems) runs a seccomp profile (RuntimeDefault or a
    Localhost one: the kubelet's default is Unconfined), no container may escalate privileges (setuid binaries,
    file capabilities), and no service-account token is mounted unless the pod runs as an account of its own
    (token_holder_problems then checks what that account may do)."""
    if resource_type == DAEMON_SET:
        return []
    problems = []
    for pod, spec in pod_specs(resource_type, props):
        pod_seccomp = _dig(spec, ("securityContext", "seccompProfile", "type"))
        if spec.get("automountServiceAccountToken") is not False and _service_account(spec) == "default":
            problems.append(f"{pod}pod mounts a service-account token: set automountServiceAccountToken: false")
        for container in _containers(spec):
            where = f"{pod}container '{container.get('name')}'"
            context = _mapping(container.get("securityContext"))
            if (_dig(context, ("seccompProfile", "type")) or pod_seccomp) not in ("RuntimeDefault", "Localhost"):
                problems.append(f"{where} runs without a seccomp profile: set seccompProfile RuntimeDefault")
            if context.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where} may escalate privileges: set allowPrivilegeEscalation: false")
    return problems


def _service_account(spec: Mapping[str, Any]) -> str:
    return str(spec.get("serviceAccountName") or "default")


# What a token in a prod pod may be allowed to do: read (the router's pod discovery, components/workloads/router.py).
READ_VERBS = frozenset({"get", "list", "watch"})


def token_holder_problems(resources: Iterable[Declared]) -> list[tuple[str, str]]:
    """(message, urn) for each prod pod template that mounts a service-account token without being a reviewed
    reader: its account must be one the stack declares in the pod's namespace, bound by no ClusterRoleBinding, and
    only by the stack's RoleBindings to the stack's Roles whose every rule reads (READ_VERBS)."""
    resources = list(resources)

    def key(props: Mapping[str, Any]) -> tuple[Any, Any]:
        return _dig(props, ("metadata", "namespace")), _dig(props, ("metadata", "name"))

    accounts = {key(r.props) for r in resources if r.type == SERVICE_ACCOUNT}
    roles = {key(r.props): r.props for r in resources if r.type == ROLE}
    bindings = [r for r in resources if r.type in (ROLE_BINDING, CLUSTER_ROLE_BINDING)]
    problems = []
    for r in resources:
        namespace = _dig(r.props, ("metadata", "namespace"))
        for where, spec in pod_specs(r.type, r.props):
            if spec.get("automountServiceAccountToken") is False or _service_account(spec) == "default":
                continue  # refused or fine by pod_hardening_problems
            account = (namespace, _service_account(spec))
            pods = f"the pods of {r.type.rsplit(':', 1)[-1]} '{r.name}'" + (f" ({where.strip()})" if where else "")
            reasons = (
                [] if account in accounts else [f"its ServiceAccount '{account[1]}' is not one the stack declares"]
            )
            for binding in bindings:
                subjects = [_mapping(s) for s in _sequence(binding.props.get("subjects"))]
                if not any(
                    s.get("kind") == "ServiceAccount"
                    and s.get("name") == account[1]
                    and (s.get("namespace") or _dig(binding.props, ("metadata", "namespace"))) == namespace
                    for s in subjects
                ):
                    continue
                ref = _mapping(binding.props.get("roleRef"))
                role = roles.get((namespace, ref.get("name"))) if binding.type == ROLE_BINDING else None
                rules = [_mapping(rule) for rule in _sequence(role.get("rules"))] if role is not None else []
                if (
                    ref.get("kind") != "Role"
                    or role is None
                    or not all(set(_sequence(rule.get("verbs"))) <= READ_VERBS for rule in rules)
                ):
                    reasons.append(f"{binding.type.rsplit(':', 1)[-1]} '{binding.name}' grants more than reading")
            if reasons:
                problems.append(
                    (
                        f"{pods} mount a service-account token: " + "; ".join(reasons) + " (or set "
                        "automountServiceAccountToken: false)",
                        r.urn,
                    )
                )
    return problems


def _pod_labels(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, labels) of each pod template of a workload (not a bare Pod's own labels: the stack declares none)."""
    if resource_type == JOBSET:
        jobs = map(_mapping, _sequence(_dig(props, ("spec", "replicatedJobs"))))
        paths = [(f"replicated job '{j.get('name')}'", _dig(j, ("template", "spec", "template"))) for j in jobs]
    elif resource_type in _POD_SPEC_PATHS and resource_type != DAEMON_SET:
        paths = [("", _dig(props, _POD_SPEC_PATHS[resource_type][:-1]))]
    else:
        return []
    return [(where, _mapping(_dig(_mapping(template), ("metadata", "labels")))) for where, template in paths]


def unisolated_workloads(resources: Iterable[Declared]) -> list[tuple[str, str]]:
    """(message, urn) for each workload pod template no ingress NetworkPolicy selects (by matchLabels; by labels
    alone, since a namespace may be unknown during preview): such pods accept traffic from every pod."""
    resources = list(resources)
    selectors = [
        _mapping(_dig(r.props, ("spec", "podSelector", "matchLabels")))
        for r in resources
        if r.type == NETWORK_POLICY and "Ingress" in _sequence(_dig(r.props, ("spec", "policyTypes")))
    ]
    problems = []
    for r in resources:
        for where, labels in _pod_labels(r.type, r.props):
            if not any(all(labels.get(k) == v for k, v in selector.items()) for selector in selectors if selector):
                pods = f"the pods of {r.type.rsplit(':', 1)[-1]} '{r.name}'" + (f" ({where})" if where else "")
                problems.append((f"no ingress NetworkPolicy selects {pods}: they accept traffic from every pod", r.urn))
    return problems


# The Service annotation by which the program records the config's explicit opt-in to a LoadBalancer
# (`inference[].kubernetes.allowLoadBalancer`); its value is "true".
LOAD_BALANCER_OPT_IN = "rocm-stack/allow-load-balancer"


def load_balancer_problem(service_type: str | None, opted_in: bool) -> str | None:
    """Why prod refuses a Service type (None: allowed): a LoadBalancer publishes the port outside the cluster, to
    whatever the cloud's load balancer lets in; only with an explicit opt-in."""
    if service_type == "LoadBalancer" and not opted_in:
        return (
            "a LoadBalancer Service publishes the API outside the cluster: prod needs the explicit opt-in "
            "`allowLoadBalancer: true` (and a firewall in front), else use ClusterIP behind an ingress"
        )
    return None


def exposure_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Prod: a LoadBalancer Service only with the opt-in annotation; Helm charts only from https or OCI."""
    if resource_type == SERVICE:
        opted_in = _mapping(_dig(props, ("metadata", "annotations"))).get(LOAD_BALANCER_OPT_IN) == "true"
        problem = load_balancer_problem(_dig(props, ("spec", "type")), opted_in)
        return [problem] if problem else []
    if resource_type == HELM_RELEASE:
        urls = (_dig(props, ("repositoryOpts", "repo")), props.get("chart"))
        return [problem for url in urls if (problem := helm_repository_problem(url))]
    return []


# Pod Security Admission: the namespace label that sets the enforced level
# (https://kubernetes.io/docs/concepts/security/pod-security-admission/).
PSA_ENFORCE = "pod-security.kubernetes.io/enforce"


# Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/), baseline: added
# capabilities only "AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID,
# SETPCAP, SETUID, SYS_CHROOT"; no privileged container, no hostPath volume, no host namespaces (hostNetwork, hostPID,
# hostIPC), no hostPort. A pod needing any of these needs `privileged`, the only laxer level.
BASELINE_CAPABILITIES = frozenset(
    "AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE SETFCAP SETGID SETPCAP SETUID "
    "SYS_CHROOT".split()
)
# Strictest first.
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")


@dataclass(frozen=True)
class PodNeeds:
    """What of Pod Security's baseline a pod (or a workload's pods) would break."""

    capabilities: frozenset[str] = frozenset()
    host_paths: frozenset[str] = frozenset()
    host_network: bool = False
    host_pid_or_ipc: bool = False
    privileged: bool = False
    host_ports: bool = False

    def __or__(self, other: PodNeeds) -> PodNeeds:
        return PodNeeds(
            self.capabilities | other.capabilities,
            self.host_paths | other.host_paths,
            self.host_network or other.host_network,
            self.host_pid_or_ipc or other.host_pid_or_ipc,
            self.privileged or other.privileged,
            self.host_ports or other.host_ports,
        )

    def level(self) -> str:
        """The strictest Pod Security level that admits these needs: baseline, or privileged beyond it."""
        beyond = (
            self.privileged
            or self.host_network
            or self.host_pid_or_ipc
            or self.host_ports
            or bool(self.host_paths)
            or not self.capabilities <= BASELINE_CAPABILITIES
        )
        return "privileged" if beyond else "baseline"


def pod_needs(spec: Mapping[str, Any]) -> PodNeeds:
    """A pod spec's needs, read as Pod Security Admission reads them (every container kind)."""
    containers = [
        _mapping(c) for key in ("containers", "initContainers", "ephemeralContainers") for c in _sequence(spec.get(key))
    ]
    contexts = [_mapping(c.get("securityContext")) for c in containers]
    return PodNeeds(
        capabilities=frozenset(str(a) for ctx in contexts for a in _sequence(_dig(ctx, ("capabilities", "add")))),
        host_paths=frozenset(
            str(_dig(_mapping(v), ("hostPath", "path")))
            for v in _sequence(spec.get("volumes"))
            if _mapping(v).get("hostPath")
        ),
        host_network=spec.get("hostNetwork") is True,
        host_pid_or_ipc=spec.get("hostPID") is True or spec.get("hostIPC") is True,
        privileged=any(ctx.get("privileged") is True for ctx in contexts),
        host_ports=any(_mapping(port).get("hostPort") for c in containers for port in _sequence(c.get("ports"))),
    )


def workload_pod_specs(resource_type: str, props: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every pod template of a resource: pod_specs' and a LeaderWorkerSet's leader and worker templates."""
    if resource_type == LEADER_WORKER_SET:
        template = _mapping(_dig(props, ("spec", "leaderWorkerTemplate")))
        return [
            _mapping(_dig(template, (key, "spec"))) for key in ("leaderTemplate", "workerTemplate") if template.get(key)
        ]
    return [spec for _, spec in pod_specs(resource_type, props)]


def laxer_pod_security_problem(what: str, declared: str, needed: str) -> str | None:
    """`declared` (a namespace's enforced level, a workload's podSecurity) laxer than its pods need."""
    if declared not in POD_SECURITY_LEVELS or POD_SECURITY_LEVELS.index(declared) > POD_SECURITY_LEVELS.index(needed):
        return (
            f"{what} enforces Pod Security '{declared}' but its pods need only '{needed}': a laxer level lets anyone "
            f"who may create a pod there run it privileged, on the node's namespaces or with its files; use '{needed}'"
        )
    return None


def namespace_level_problems(resources: Iterable[Declared]) -> list[tuple[str, str]]:
    """(message, urn) for each namespace the stack creates whose enforced level is laxer than the pods the stack
    declares in it need. Namespaces a Helm release installs into are left out: its pods are not in the plan."""
    resources = list(resources)
    charted = {str(r.props.get("namespace")) for r in resources if r.type in HELM_TYPES}
    needs: dict[str, PodNeeds] = defaultdict(PodNeeds)
    for r in resources:
        namespace = str(_dig(r.props, ("metadata", "namespace")) or "default")
        for spec in workload_pod_specs(r.type, r.props):
            needs[namespace] = needs[namespace] | pod_needs(spec)
    problems = []
    for r in resources:
        name = str(_dig(r.props, ("metadata", "name")))
        level = _mapping(_dig(r.props, ("metadata", "labels"))).get(PSA_ENFORCE)
        if r.type != NAMESPACE or level is None or name in charted:
            continue
        problem = laxer_pod_security_problem(f"namespace '{name}'", str(level), needs[name].level())
        if problem:
            problems.append((problem, r.urn))
    return problems


def namespace_pod_security_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Prod: each namespace the stack creates states its Pod Security level, so the cluster's default (often
    baseline, or nothing) does not decide what its pods may do."""
    if resource_type != NAMESPACE:
        return []
    if _mapping(_dig(props, ("metadata", "labels"))).get(PSA_ENFORCE):
        return []
    name = _dig(props, ("metadata", "name"))
    return [f"namespace '{name}' has no {PSA_ENFORCE} label: label it with the Pod Security level its pods need"]


# --- GPU Operator driver upgrades (prod) ------------------------------------------------------------------


def driver_upgrade_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The operator cordons and drains each node before it upgrades the amdgpu driver there.

    Only when the operator manages the driver (`spec.driver.enable`, CRD default true); with the host's inbox
    driver there is no operator-driven upgrade.
    """
    if resource_type != DEVICE_CONFIG:
        return []
    driver = _mapping(_dig(props, ("spec", "driver")))
    if driver.get("enable", True) is False:
        return []
    upgrade = _mapping(driver.get("upgradePolicy"))
    where = "spec.driver.upgradePolicy"
    if upgrade.get("enable") is not True:
        return [
            f"{where}.enable is not true: driver upgrades would not cordon and drain nodes; enable the "
            "upgrade policy with a nodeDrainPolicy"
        ]
    problems = []
    drain = upgrade.get("nodeDrainPolicy")
    if not isinstance(drain, Mapping):
        problems.append(
            f"{where}.nodeDrainPolicy is not set: set it so workloads are evicted before the driver is replaced"
        )
    elif drain.get("force") is True:
        problems.append(
            f"{where}.nodeDrainPolicy.force is true: pods without a controller would be deleted "
            "for good; drain without force in prod"
        )
    if upgrade.get("maxParallelUpgrades", 1) == 0:
        problems.append(
            f"{where}.maxParallelUpgrades is 0 (every node at once): draining then has nowhere to "
            "move workloads; upgrade a bounded number of nodes at a time"
        )
    return problems


def unprotected(
    resources: Iterable[Declared], charts: Iterable[str] = DEFAULT_PROTECTED_CHARTS
) -> list[tuple[str, str]]:
    """(message, urn) for each namespace and operator/cert-manager Helm release without `protect`.

    Deleting a namespace deletes everything in it, and deleting the operator's release removes the driver
    and device plugin from every GPU node: in prod either needs an explicit unprotect first.
    """
    charts = set(charts)
    problems = []
    for r in resources:
        if r.protect:
            continue
        if r.type == NAMESPACE:
            problems.append((f"namespace '{r.name}' is not protected: declare it with protect=True in prod", r.urn))
        elif r.type in HELM_TYPES and r.props.get("chart") in charts:
            problems.append(
                (
                    f"Helm release '{r.name}' (chart {r.props.get('chart')}) is not protected: "
                    "declare it with protect=True in prod",
                    r.urn,
                )
            )
    return problems
