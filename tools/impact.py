"""What `pulumi up` will do to a running platform, predicted from two synth plans by the providers' own rules.

For each resource the synth diff (tools/synth_diff.py) finds added, removed or changed, the engine's action
(create, delete, update in place, replace, delete-then-replace) with the rules it follows (tools/impact_rules.py,
each with its upstream source), and what it means in plain words: which container stops, for how long, which GPU
check runs again, which change never reaches the running container.

Why one file: each resource kind's prediction (Docker containers, images, networks, Kubernetes objects, Helm
releases) ends in the one report and its Markdown; the rules they apply are tools/impact_rules.py's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from components.docker.checks import CHECK_LABEL
from components.docker.provider_schema import (
    CONTAINER,
    DOCKER_LIVE_UPDATES,
    DOCKER_UNREMOVABLE,
    DOCKER_SCHEMAS,
    MAP,
    NETWORK,
    REMOTE_IMAGE,
    SET_OF_BLOCKS,
    VOLUME,
)
from components.k8s.replacement import Immutable, group_of, rows, value_at
from components.workloads.inference import HEALTH_LABEL
from components.monitoring.docker_host import ONE_SHOT, PROMETHEUS_FILES
from rules import MONITORING_LABEL, PARTITION_LABEL
from schema.types import quantity_value
from tools.impact_rules import HELM_IDENTITY, K8S_FORCE_NEW, K8S_IDENTITY, RULES, Action
from tools.synth import SECRET, autoname, autonamed, mock_id
from tools.synth_diff import Key, PlanDiff, PlannedResource, SynthPlan, cell, diff, matched

DOCKER_PROVIDER = "pulumi:providers:docker"
K8S_PROVIDER = "pulumi:providers:kubernetes"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
YAML_FILE = "kubernetes:yaml/v2:ConfigFile"
TRAINING = "rocm-stack:workloads:DockerTraining"
VLLM = "rocm-stack:workloads:DockerVllm"

# Which input decided, and by which rule: ("image", "tfbridge.force-new").
Reason = tuple[str, str]


class Impact(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: str
    name: str
    action: Action | None  # None: no rule covers this type or input (see `pulumi preview`)
    replaced_by: list[Reason] = []  # the inputs that make it a replacement, with their rules
    updated: list[Reason] = []  # the inputs updated in place, with their rules
    rules: list[str]  # every rule the action follows, RULES keys
    meaning: str  # on the running platform, in plain words
    stops_container: bool = False  # a running (not one-shot) container is stopped
    fails: bool = False  # `pulumi up` fails at this step (rule docker.name-unique)
    runs_check: bool = False  # a GPU check or preflight container is created or replaced: it runs


class SecretInput(BaseModel):
    """A resource whose inputs hold a Pulumi secret: a new value of it is invisible offline (rule synth.secret)."""

    model_config = ConfigDict(frozen=True)

    type: str
    name: str
    paths: list[str]
    if_rotated: Action
    # What a rotation does next: the readers of a replaced auto-named object's new name (rule k8s.autoname).
    then: list[Impact] = []


class Roll(BaseModel):
    """How the replaced servers of one Docker vLLM workload stop: in steps, each next one once the one before is
    healthy again (the dependsOn chain of inference[].docker.maxUnavailable, components/workloads/inference.py
    ROLLING; rule pulumi.depends-on-order)."""

    model_config = ConfigDict(frozen=True)

    workload: str
    steps: list[list[str]]  # partitions (`host/container`) that stop together, step by step
    grace_seconds: int  # the longest stop grace of a step's old containers
    wait_seconds: int  # the longest health wait of a step's new containers (the provider's waitTimeout)
    if_rotated: bool = False  # the roll of a secret's rotation, which the plans cannot see


class ImpactReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    stack: str
    impacts: list[Impact]
    secrets: list[SecretInput]
    rolls: list[Roll] = []

    @property
    def containers_stopped(self) -> list[Impact]:
        return [i for i in self.impacts if i.stops_container]


# --- one input path against one provider's rules -------------------------------------------------------------


def _docker_input(type_token: str, path: str) -> tuple[bool, str] | None:
    """(replaces, rule) of a changed input path of a Docker resource; None when TFD's schema has no such input."""
    schema = DOCKER_SCHEMAS[type_token]
    parts = re.sub(r"\[\d+\]", "", path).split(".")
    for depth in range(1, len(parts)):
        attribute = schema.get(".".join(parts[:depth]))
        if attribute is not None and attribute.kind == MAP:  # its keys (`logOpts.max-size`) are no attributes
            parts = parts[:depth]
            break
    key = ".".join(parts)
    if key not in schema:
        return None
    for depth in range(1, len(parts) + 1):  # an element of a set of blocks, or the whole set
        block = ".".join(parts[:depth])
        if schema[block].kind == SET_OF_BLOCKS:
            fields = [a for p, a in schema.items() if p.startswith(block + ".") and p.count(".") == depth]
            return any(a.force_new for a in fields), "tfbridge.set-element"
    force_new = schema[key].force_new
    return force_new, "tfbridge.force-new" if force_new else "tfbridge.not-force-new"


def _k8s_path(path: str) -> list[str]:
    return [re.sub(r"\[\d+\]", "[*]", part) for part in path.split(".")]


def _matches(path: str, patterns: Iterable[str]) -> bool:
    """A changed path under a listed path (or a whole list or object that contains one) (match.go, by prefix)."""
    changed = _k8s_path(path)
    for pattern in patterns:
        # A quoted key (`metadata.labels["kueue.x-k8s.io/queue-name"]`, Pulumi's property-path syntax for a key with
        # dots) reads as the changed paths write it: dotted, unquoted.
        listed = re.sub(r'\["([^"]*)"\]', r".\1", pattern).lstrip(".").split(".")
        common = min(len(listed), len(changed))
        if [p.removesuffix("[*]") for p in listed[:common]] == [c.removesuffix("[*]") for c in changed[:common]]:
            return True
    return False


def _quantity(value: Any) -> Any:
    """A Kubernetes quantity ("2Ti") as a number (schema.types.quantity_value, the stack's one reader)."""
    return quantity_value(str(value))


def _refusing(old: PlannedResource, new: PlannedResource, path: str) -> list[Immutable]:
    """The IMMUTABLE rows of the live object (the old inputs: what the API server compares with) that a change at
    `path` breaks (rule k8s.immutable)."""
    if not new.type.startswith("kubernetes:") or new.type == HELM_RELEASE:
        return []
    found = []
    for row in rows(str(old.inputs.get("apiVersion", "")), str(old.inputs.get("kind", "")), old.inputs):
        if not _matches(path, [row.path]):
            continue
        if row.refused == "a decrease":
            before, after = value_at(old.inputs, row.path), value_at(new.inputs, row.path)
            if before is None or after is None or _quantity(after) >= _quantity(before):
                continue
        found.append(row)
    return found


def _k8s_input(resource: PlannedResource, path: str, mutable_config_maps: frozenset[str]) -> tuple[bool, str]:
    if resource.type == HELM_RELEASE:
        return (True, "k8s.identity") if _matches(path, HELM_IDENTITY) else (False, "k8s.update")
    if _matches(path, K8S_IDENTITY):
        return True, "k8s.identity"
    group = group_of(str(resource.inputs.get("apiVersion", "")))
    kind = str(resource.inputs.get("kind", ""))
    listed = K8S_FORCE_NEW.get((group, kind))
    if listed and _matches(path, listed[0]):
        if kind == "ConfigMap" and resource.provider in mutable_config_maps and not resource.inputs.get("immutable"):
            return False, "k8s.configmap-mutable"
        return True, {"Secret": "k8s.secret", "ConfigMap": "k8s.configmap"}.get(kind, "k8s.force-new")
    return False, "k8s.update"


def _input_rule(
    resource: PlannedResource, path: str, mutable_config_maps: frozenset[str] = frozenset()
) -> tuple[bool, str] | None:
    """(replaces, rule) of one changed input path; None when no rule covers it. `mutable_config_maps`: the URNs of
    the Kubernetes providers with enableConfigMapMutable on. A change the API server refuses is an update here:
    `_changed` tells it apart (rule k8s.immutable)."""
    if any(_matches(path, [p]) for p in resource.replace_on_changes):
        return True, "pulumi.replace-on-changes"
    if resource.type in DOCKER_SCHEMAS:
        return _docker_input(resource.type, path)
    if resource.type == DOCKER_PROVIDER:
        return False, "tfbridge.provider-config"
    if resource.type == K8S_PROVIDER:
        return path.split(".")[0] in ("kubeconfig", "context", "cluster"), "k8s.provider-config"
    if resource.type.startswith("kubernetes:"):
        return _k8s_input(resource, path, mutable_config_maps)
    return None


# --- the engine's action ---------------------------------------------------------------------------------------


def _replacement(old: PlannedResource, new: PlannedResource) -> tuple[Action, list[str]]:
    """Create-before-delete, unless the program, the provider or the object's fixed name needs the delete first."""
    if new.delete_before_replace:
        return Action.DELETE_REPLACE, ["pulumi.delete-before-replace-option"]
    if new.type == CONTAINER:
        return Action.DELETE_REPLACE, ["pulumi-docker.container-delete-before-replace"]
    metadata = new.inputs.get("metadata") or {}
    old_metadata = old.inputs.get("metadata") or {}
    if (
        new.type.startswith("kubernetes:")
        and new.type != HELM_RELEASE
        and metadata.get("name")
        and (metadata.get("name"), metadata.get("namespace"))
        == (old_metadata.get("name"), old_metadata.get("namespace"))
    ):
        return Action.DELETE_REPLACE, ["k8s.delete-before-replace"]
    return Action.REPLACE, []


def _type_and_name(urn: str | None) -> tuple[str, str]:
    parts = (urn or "").split("::", 3)  # urn:pulumi:STACK::PROJECT::QUALIFIED$TYPE::NAME
    if len(parts) != 4:
        return "", ""
    return parts[2].rsplit("$", 1)[-1], parts[3]


def _declared_by(resource: PlannedResource) -> tuple[str, str]:
    """(type, name) of the component that declared a resource: its parent, except a workload's container, which is
    its host's GpuHost's child (components/docker/partitions.py) and names the workload as its former parent (alias)."""
    for alias in resource.aliases:
        declared_by = _type_and_name(alias.parent)
        if declared_by[0] in (TRAINING, VLLM):
            return declared_by
    return _type_and_name(resource.parent)


def _labels(resource: PlannedResource) -> dict[str, str]:
    labels = resource.inputs.get("labels")
    if not isinstance(labels, list):
        return {}
    return {label["label"]: label["value"] for label in labels if isinstance(label, dict) and "label" in label}


def _stops(old: PlannedResource) -> bool:
    """Whether deleting this container stops a running one: not a one-shot container, which has exited (an attached
    check, waited for; the monitoring host's writers, restart "no": Docker leaves an exited one so)."""
    return old.type == CONTAINER and not old.inputs.get("attach") and _labels(old).get(MONITORING_LABEL) not in ONE_SHOT


def _host(resource: PlannedResource) -> str:
    return (resource.provider or "").rsplit("::", 1)[-1]


def _stop(old: PlannedResource) -> str:
    """How TFD stops the running container it deletes: the grace of the state being deleted (the old inputs)."""
    grace = old.inputs.get("destroyGraceSeconds") or 0
    if not grace:
        return "no grace: killed at once"
    signal = old.inputs.get("stopSignal") or "SIGTERM"
    return f"{signal}, grace {grace} s, then killed"


def _container_role(resource: PlannedResource) -> str:
    """What a container is to the platform, in words: `training \\`tiny\\` on workstation/train`."""
    labels = _labels(resource)
    partition = labels.get(PARTITION_LABEL)
    check = labels.get(CHECK_LABEL)
    component, workload = _declared_by(resource)
    if labels.get(HEALTH_LABEL):
        return f"the health check of vLLM server `{workload}` on `{labels[HEALTH_LABEL]}`"
    if check == "gpucheck":
        return f"the GPU check of `{partition}`"
    if check:
        return f"the {check} of host `{_host(resource)}`"
    if component == TRAINING:
        return f"training `{workload}` on `{partition}`"
    if component == VLLM:
        return f"vLLM server `{workload}` on `{partition}`"
    if component == "rocm-stack:monitoring:DockerExporter":
        return f"the GPU metrics exporter on `{_host(resource)}`"
    if labels.get(MONITORING_LABEL):
        return f"the stack's {labels[MONITORING_LABEL]} on `{_host(resource)}`"
    if partition:
        return f"the shell of partition `{partition}`"
    return f"container `{resource.inputs.get('name', resource.name)}` on `{_host(resource)}`"


def _container_meaning(action: Action, old: PlannedResource | None, new: PlannedResource | None) -> str:
    resource = new or old
    assert resource is not None
    role = _container_role(resource)
    labels = _labels(resource)
    if labels.get(HEALTH_LABEL):
        if action is Action.DELETE:
            return f"removes {role} (an exited one-shot container)"
        # It fails `pulumi up` until it passes (components/workloads/inference.py HEALTH_WAIT).
        return f"{'re-runs' if old else 'runs'} {role}: waits for its /health, up to {resource.inputs['command'][-1]} s"
    if labels.get(CHECK_LABEL):
        if action is Action.DELETE:
            return f"removes {role} (an exited one-shot container)"
        # It runs before the partition's container is touched (that depends on it), on the GPUs it holds.
        return (
            f"re-runs {role} while the partition's current container still runs on its GPUs" if old else f"runs {role}"
        )
    if action is Action.CREATE:
        return f"starts {role}"
    if labels.get(MONITORING_LABEL) in ONE_SHOT and action is Action.DELETE:
        return f"removes {role} (an exited one-shot container)"
    if labels.get(MONITORING_LABEL) == PROMETHEUS_FILES and action is not Action.DELETE:
        # A one-shot container (components/monitoring/docker_host.py): its replacement is Prometheus's reload.
        return (
            f"replaces {role}: it writes the new alert rules and scrape targets into their volume, and the running "
            "Prometheus reloads them (SIGHUP): Prometheus is not restarted"
        )
    if labels.get(MONITORING_LABEL) in ONE_SHOT:
        return f"replaces {role}, an exited one-shot container: it runs once more"
    assert old is not None
    stop = _stop(old)
    if action is Action.DELETE:
        return f"stops and removes {_container_role(old)} ({stop})"
    assert new is not None
    if _container_role(old) != role:  # e.g. a partition's shell becomes a workload's container
        return f"replaces {_container_role(old)} ({stop}) by {role}"
    component, _ = _declared_by(new)
    if component == TRAINING:
        lost = "" if old.inputs.get("destroyGraceSeconds") else ", losing the steps since"
        after = f"training stops ({stop}) and resumes from its newest checkpoint{lost}"
    elif component == VLLM:
        wait = new.inputs.get("waitTimeout")
        drain = "" if old.inputs.get("destroyGraceSeconds") else ", in-flight requests fail"
        after = f"it stops serving ({stop}{drain}) until the new container is healthy" + (
            f" (pulumi up waits up to {wait} s)" if wait else ""
        )
    else:
        after = f"it stops ({stop}) and starts again"
    return f"replaces {role}: {after}"


def _removed_limits(old: PlannedResource, new: PlannedResource) -> list[str]:
    """Limits the update applies live that the new inputs drop: TFD sends 0 or "" for them, which dockerd reads as
    "unchanged" (rule moby.update-keeps-unset)."""
    return [p for p in DOCKER_UNREMOVABLE if old.inputs.get(p) and not new.inputs.get(p)]


def _update_meaning(old: PlannedResource, resource: PlannedResource, updated: list[Reason]) -> tuple[str, list[str]]:
    if resource.type == CONTAINER:
        paths = sorted({path.split(".")[0].split("[")[0] for path, _ in updated})
        removed = _removed_limits(old, resource)
        live = [p for p in paths if p in DOCKER_LIVE_UPDATES and p not in removed]
        state_only = [p for p in paths if p not in DOCKER_LIVE_UPDATES and p != "mustRun"]
        parts, rules = [], ["tfd.container-update"]
        if live:
            parts.append(f"`docker update` of {', '.join(f'`{p}`' for p in live)}, no restart")
        if removed:
            parts.append(
                f"{', '.join(f'`{p}`' for p in removed)} removed: dockerd keeps the running container's limit (the "
                "update sends 0 or an empty cpuset, which it reads as unchanged), and every refresh reads it back: "
                "replace the container (`pulumi up --replace <its URN>`) to remove it"
            )
            rules.append("moby.update-keeps-unset")
        if "mustRun" in paths:
            parts.append(
                "starts it if stopped"
                if resource.inputs.get("mustRun")
                else "from now on a container stopped by hand stays stopped: `pulumi up` neither starts nor replaces "
                "it (tfd.container-read-stopped)"
            )
            rules += [] if resource.inputs.get("mustRun") else ["tfd.container-read-stopped"]
        if state_only:
            parts.append(
                f"{', '.join(f'`{p}`' for p in state_only)} only recorded in the state: the running container keeps "
                "the old value until it is next replaced"
            )
        return f"{_container_role(resource)}: {'; '.join(parts)}", rules
    if resource.type == DOCKER_PROVIDER:
        return (
            f"the Docker endpoint of `{resource.name}` changes; its containers are not moved (the same daemon must "
            "answer there)",
            [],
        )
    kind = resource.inputs.get("kind")
    if kind in ("Deployment", "DaemonSet", "StatefulSet") and any(p.startswith("spec.template") for p, _ in updated):
        return f"rolls the pods of {kind} `{_k8s_name(resource)}`", []
    if resource.type == HELM_RELEASE:
        return f"`helm upgrade` of release `{resource.inputs.get('name', resource.name)}`", []
    return f"patches {kind or resource.type} `{_k8s_name(resource)}` in place", []


def _k8s_name(resource: PlannedResource) -> str:
    metadata = resource.inputs.get("metadata") or {}
    name = metadata.get("name") or resource.name
    return f"{metadata['namespace']}/{name}" if metadata.get("namespace") else str(name)


def _meaning(action: Action, old: PlannedResource | None, new: PlannedResource | None) -> str:
    resource = new or old
    assert resource is not None
    if resource.type == CONTAINER:
        return _container_meaning(action, old, new)
    if resource.type == REMOTE_IMAGE:
        if action is Action.DELETE:
            return f"forgets image `{resource.inputs.get('name')}` on `{_host(resource)}` (kept on the host)"
        return f"pulls `{resource.inputs.get('name')}` on `{_host(resource)}`"
    if resource.type == VOLUME:
        if action is Action.DELETE:
            if resource.retain_on_delete:
                return f"forgets volume `{resource.inputs.get('name')}` on `{_host(resource)}`: retainOnDelete keeps it, and its data, on the host"
            return f"deletes volume `{resource.inputs.get('name')}` on `{_host(resource)}`"
        if old and new and _keeps_name(action, old, new):
            kept = (
                "retainOnDelete keeps it"
                if old.retain_on_delete
                else "its delete removes that very volume once no container mounts it, and fails `pulumi up` after "
                "30 s while one does"
            )
            return (
                f"creates volume `{new.inputs.get('name')}` on `{_host(resource)}` create-first under the same name: "
                f"Docker answers with the existing volume (its data, its old labels), then deletes the old one: {kept}"
            )
        replaced = f", then deletes `{old.inputs.get('name')}` once no container uses it" if old and new else ""
        return f"creates volume `{resource.inputs.get('name')}` on `{_host(resource)}`{replaced}"
    if resource.type == NETWORK:
        name, host = resource.inputs.get("name"), _host(resource)
        if action is Action.DELETE:
            return f"deletes network `{name}` on `{host}` once no container is attached to it"
        if old is not None and new is not None and _keeps_name(action, old, new):
            return (
                f"**`pulumi up` fails here**: the network is replaced create-first, and Docker refuses a second "
                f"network named `{name}` on `{host}`; nothing attached to it changes. Declare it deleteBeforeReplace, "
                "or rename it"
            )
        if old is not None and new is not None:
            # pulumi-docker declares no DeleteBeforeReplace for docker_network (resources.go L133): create first.
            return (
                f"creates network `{name}` on `{host}` before deleting `{old.inputs.get('name')}`; every container "
                "attached to it is replaced"
            )
        return f"creates network `{name}` on `{host}`"
    verb = {
        Action.CREATE: "creates",
        Action.DELETE: "deletes",
        Action.REPLACE: "replaces",
        Action.DELETE_REPLACE: "deletes and re-creates",
    }.get(action, "changes")
    what = resource.inputs.get("kind") or resource.type.rsplit(":", 1)[-1]
    if resource.type.startswith("pulumi:providers:"):
        what = f"the {what} provider"
    # A new name is a new object: the engine deletes a replaced resource after every create and update of the run
    # unless it deletes it first (pulumi/pulumi pkg/resource/deploy/step_generator.go, "the delete step is
    # generated "later" on, after all creates/updates finish").
    if old is not None and new is not None and resource.type != HELM_RELEASE and _k8s_name(old) != _k8s_name(new):
        if action is Action.DELETE_REPLACE:
            return f"deletes {what} `{_k8s_name(old)}`, then creates it as `{_k8s_name(new)}`"
        if action is Action.REPLACE:
            return f"creates {what} `{_k8s_name(new)}`, then deletes `{_k8s_name(old)}` once the whole run has finished"
    suffix = ""
    if what == "Job" and action in (Action.REPLACE, Action.DELETE_REPLACE):
        suffix = ": its pods stop and run again"
        if _declared_by(resource)[0] == "rocm-stack:workloads:TrainingJob":
            suffix += " (the training resumes from its newest checkpoint)"
    if what == "Secret" and action in (Action.REPLACE, Action.DELETE_REPLACE):
        suffix = ": running pods keep the old value until they restart"
    if what == "PriorityClass" and action is Action.DELETE_REPLACE:
        # kubernetes plugin/pkg/admission/priority: a pod's priority is resolved from its class at its creation.
        suffix = (
            ": running pods keep the priority they were created with; a pod created while it is gone is refused, "
            "and Kueue keeps the priority each queued job had when its Workload was created"
        )
    if what == "LocalQueue" and action is Action.DELETE_REPLACE:
        # kueue v0.19.2 localqueue_controller.go L263-280 (no finalizer: the delete only drops it from the caches);
        # workload_controller.go L2082-2084 (QuotaReserved False, "LocalQueue <name> doesn't exist").
        suffix = (
            ': nothing waits for the delete; its pending jobs show "LocalQueue ... doesn\'t exist" until the new '
            "one exists, then queue in its ClusterQueue; admitted jobs keep running"
        )
    name = resource.inputs.get("name") if resource.type == HELM_RELEASE else _k8s_name(resource)
    return f"{verb} {what} `{name or resource.name}`{suffix}"


def _keeps_name(action: Action, old: PlannedResource, new: PlannedResource) -> bool:
    """A Docker network or volume replaced create-first under the name it had (rule docker.name-unique)."""
    return (
        new.type in (NETWORK, VOLUME)
        and action is Action.REPLACE
        and bool(new.inputs.get("name"))
        and new.inputs.get("name") == old.inputs.get("name")
    )


def _runs_check(action: Action, resource: PlannedResource) -> bool:
    labels = _labels(resource)
    return (
        resource.type == CONTAINER
        and bool(labels.get(CHECK_LABEL) or labels.get(HEALTH_LABEL))
        and (action is not Action.DELETE)
    )


def _mutable_config_maps(plan: SynthPlan) -> frozenset[str]:
    """The Kubernetes providers whose ConfigMaps update in place (their input enableConfigMapMutable, which the
    provider reads as the string "true": provider.go L696-710)."""
    return frozenset(
        r.urn
        for r in plan.resources
        if r.type == K8S_PROVIDER and str(r.inputs.get("enableConfigMapMutable", "")).lower() == "true"
    )


def _changed(
    old: PlannedResource, new: PlannedResource, paths: tuple[str, ...], mutable_config_maps: frozenset[str]
) -> Impact | None:
    """None when only the engine's bookkeeping (protect, dependsOn) or ignored paths changed: no provider call."""
    replaced_by: list[Reason] = []
    updated: list[Reason] = []
    unknown: list[str] = []
    refused: list[tuple[str, Immutable]] = []  # updates the API server refuses
    immutable = False
    ignored = False
    for path in paths:
        if path == "parent":
            if old.urn in {alias.urn for alias in new.aliases}:
                continue  # the engine finds the old state by the alias (pulumi.urn): the move alone calls no provider
            replaced_by.append((path, "pulumi.urn"))
        elif path in ("protect", "retain_on_delete", "depends_on"):
            continue  # the engine's own bookkeeping: no provider call
        elif any(_matches(path, [p]) for p in new.ignore_changes):
            ignored = True  # reset to the state's value before the diff: no change of its own
        else:
            rule = _input_rule(new, path, mutable_config_maps)
            if rule is None:
                unknown.append(path)
                continue
            (replaced_by if rule[0] else updated).append((path, rule[1]))
            # The API server's rule matters where the program replaces (replaceOnChanges) or nobody does.
            rows_broken = [] if rule[0] and rule[1] != "pulumi.replace-on-changes" else _refusing(old, new, path)
            immutable = immutable or bool(rows_broken)
            if rows_broken and not rule[0]:
                refused += [(path, row) for row in rows_broken]
    rules = sorted(
        {rule for _, rule in replaced_by + updated}
        | ({"pulumi.ignore-changes"} if ignored else set())
        | ({"k8s.immutable"} if immutable else set())
    )
    if unknown:
        return Impact(
            type=new.type,
            name=new.name,
            action=None,
            rules=rules,
            meaning=f"no rule for {', '.join(f'`{p}`' for p in unknown)}: see `pulumi preview`",
        )
    if not replaced_by and not updated:
        return None
    if refused and not replaced_by:
        return Impact(
            type=new.type,
            name=new.name,
            action=Action.REFUSED,
            updated=[(path, "k8s.immutable") for path, _ in refused],
            rules=sorted({"k8s.immutable"} | ({"pulumi.ignore-changes"} if ignored else set())),
            meaning=_refusal(new, refused),
        )
    if replaced_by:
        action, how = _replacement(old, new)
        meaning = _meaning(action, old, new)
        if any(rule == "pulumi.urn" for _, rule in replaced_by):
            action, how = Action.REPLACE, []
            if new.type == CONTAINER:
                meaning += (
                    "; the new container is created while the old one, deleted at the end, still holds the Docker "
                    "name: `pulumi up` fails there unless the move is declared as an alias"
                )
        removed = _removed_limits(old, new) if new.type == CONTAINER else []
        if removed and any(rule == "pulumi.replace-on-changes" for _, rule in replaced_by):
            how.append("moby.update-keeps-unset")
            meaning += (
                f"; replaced, not updated, to remove its {', '.join(f'`{p}`' for p in removed)}: `docker update` "
                "cannot remove a limit"
            )
        if _keeps_name(action, old, new):
            how.append("docker.name-unique")
        if new.protect or old.protect:
            how.append("pulumi.protect")
            meaning += "; it is protected: `pulumi up` stops with an error instead"
        return Impact(
            type=new.type,
            name=new.name,
            action=action,
            replaced_by=replaced_by,
            updated=updated,
            rules=sorted({*rules, *how}),
            meaning=meaning,
            stops_container=_stops(old),
            runs_check=_runs_check(action, new),
            fails=new.type == NETWORK and _keeps_name(action, old, new),
        )
    meaning, how = _update_meaning(old, new, updated)
    if new.ignore_changes and new.type.startswith("kubernetes:") and new.type != HELM_RELEASE:
        how.append("k8s.ssa-ignore-changes")  # the ignored paths keep their live values
    return Impact(
        type=new.type,
        name=new.name,
        action=Action.UPDATE,
        updated=updated,
        rules=sorted({*rules, *how}),
        meaning=meaning,
    )


def _refusal(resource: PlannedResource, refused: list[tuple[str, Immutable]]) -> str:
    kind = resource.inputs.get("kind") or resource.type
    fields = "; ".join(
        f"`{path}` ({row.refused} is refused: {row.source}{'; not replaced: ' + row.note if row.note else ''})"
        for path, row in refused
    )
    return f"the API server refuses the patch of {kind} `{_k8s_name(resource)}`, so `pulumi up` fails there: {fields}"


# A resource whose replacement makes a container's ForceNew input unknown in the preview, and that input.
_READ_BY_CONTAINERS = {REMOTE_IMAGE: "image", NETWORK: "networksAdvanced"}
# A container's inputs that name another container by its ID (`container:<ID>`, ForceNew): the vLLM server in its
# proxy's network namespace and its health check in the server's, the files writer in Prometheus's PID namespace.
_JOINS = ("networkMode", "pidMode")


def _propagate_replacements(
    impacts: dict[Key, Impact], before: dict[Key, PlannedResource], after: dict[Key, PlannedResource]
) -> None:
    """A replaced image's id, a replaced network's name or a replaced container's ID is unknown in the preview, and
    a container's `image`, `networksAdvanced`, `networkMode` and `pidMode` are ForceNew: every container created from
    it, attached to it or joining its namespaces is replaced, whatever else changed (rule pulumi.unknown-output). A
    network whose create fails (rule docker.name-unique) stops the run before anything attached to it."""
    replacing = [
        key
        for key, impact in impacts.items()
        if impact.action in (Action.REPLACE, Action.DELETE_REPLACE) and key in after and not impact.fails
    ]
    replaced = {after[key].urn: _READ_BY_CONTAINERS[key[0]] for key in replacing if key[0] in _READ_BY_CONTAINERS}
    joined = {f"container:{mock_id(after[key].name)}" for key in replacing if key[0] == CONTAINER}
    # To a fixed point: a container replaced here is joined in turn (a vLLM server's health check joins the server,
    # which joins its proxy).
    grew = True
    while grew:
        grew = False
        for key, container in after.items():
            reads = [replaced[urn] for urn in container.depends_on if urn in replaced]
            reads += [path for path in _JOINS if container.inputs.get(path) in joined]
            current = impacts.get(key)
            reasons = [(path, "pulumi.unknown-output") for path in reads]
            if key[0] != CONTAINER or key not in before or set(reasons) <= set(current.replaced_by if current else []):
                continue
            old = before[key]
            action, how = _replacement(old, container)
            replaced_by = list(dict.fromkeys([*(current.replaced_by if current else []), *reasons]))
            meaning = _meaning(action, old, container)
            if {path for path, _ in replaced_by} == {"image"}:
                # `pulumi up` diffs the container once the image is pulled, with its real id (the step generator
                # runs again during the update, the new outputs known).
                meaning += (
                    "; if the pulled image has the id the container runs (a new tag of the same digest), `pulumi up` "
                    "leaves it running: only the preview cannot know"
                )
            impacts[key] = Impact(
                type=container.type,
                name=container.name,
                action=action,
                replaced_by=replaced_by,
                updated=current.updated if current else [],
                rules=sorted(
                    {*(current.rules if current else []), "pulumi.unknown-output", "tfbridge.force-new", *how}
                ),
                meaning=meaning,
                stops_container=_stops(old),
                runs_check=_runs_check(action, container),
            )
            joined.add(f"container:{mock_id(container.name)}")
            grew = True


def _rolls(head: SynthPlan, replaced: set[str], old: dict[str, PlannedResource], if_rotated: bool) -> list[Roll]:
    """The steps in which `pulumi up` replaces the Docker vLLM containers whose URNs are `replaced`. The engine
    registers a resource only once its dependsOn resources' steps are done (ROLLING), unchanged ones at once, so a
    container's step is one more than the latest step among what it waits for, through unchanged containers too.
    `old`: the base plan's containers by URN (their grace stops them)."""
    containers = {r.urn: r for r in head.resources if r.type == CONTAINER and _declared_by(r)[0] == VLLM}
    done: dict[str, int] = {}

    def step(urn: str) -> int:
        if urn not in done:
            waits = [step(d) for d in containers[urn].depends_on if d in containers]
            done[urn] = max(waits, default=0) + (urn in replaced)
        return done[urn]

    by_workload: dict[str, dict[int, list[PlannedResource]]] = {}
    for urn in sorted(replaced & containers.keys()):
        by_workload.setdefault(_declared_by(containers[urn])[1], {}).setdefault(step(urn), []).append(containers[urn])
    rolls = []
    for workload, steps in sorted(by_workload.items()):
        servers = [r for n in sorted(steps) for r in steps[n] if _labels(r).get(PARTITION_LABEL)]
        rolls.append(
            Roll(
                workload=workload,
                # A server's proxy comes one step before its vLLM, which joins the proxy's network namespace: the
                # step of the partition's server is its vLLM's (the proxies' steps name no partition).
                steps=[
                    partitions
                    for n in sorted(steps)
                    if (
                        partitions := sorted(
                            _labels(r)[PARTITION_LABEL] for r in steps[n] if _labels(r).get(PARTITION_LABEL)
                        )
                    )
                ],
                grace_seconds=max(
                    (int(old.get(r.urn, r).inputs.get("destroyGraceSeconds") or 0) for r in servers), default=0
                ),
                wait_seconds=max((int(r.inputs.get("waitTimeout") or 0) for r in servers), default=0),
                if_rotated=if_rotated,
            )
        )
    return rolls


def _roll_words(roll: Roll) -> str:
    steps = "; then ".join(", ".join(f"`{p}`" for p in step) for step in roll.steps)
    together = "all at once" if len(roll.steps) == 1 else f"in {len(roll.steps)} steps"
    return (
        f"vLLM `{roll.workload}` {'would stop' if roll.if_rotated else 'stops'} {together}: {steps}. Each step is "
        f"down from its SIGTERM (grace up to {roll.grace_seconds} s) until its new containers are healthy (up to "
        f"{roll.wait_seconds} s); the next step starts only then, and the servers not in it keep serving"
    )


def _secret_paths(value: Any, path: str = "") -> Iterator[str]:
    if value == SECRET:
        yield path or "(value)"
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from _secret_paths(child, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _secret_paths(child, f"{path}[{index}]")


def _paths_holding(value: Any, wanted: str, path: str = "") -> Iterator[str]:
    if value == wanted:
        yield path
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from _paths_holding(child, wanted, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths_holding(child, wanted, f"{path}[{index}]")


def _renamed_readers(plan: SynthPlan, replaced: PlannedResource) -> list[Impact]:
    """What the engine does to every resource that reads the name of an auto-named object being replaced: the
    replacement has a new name, so each input holding it changes (rule k8s.autoname)."""
    name = autoname(replaced.name)
    mutable_config_maps = _mutable_config_maps(plan)
    found = []
    for reader in plan.resources:
        paths = tuple(sorted(set(_paths_holding(reader.inputs, name))))
        impact = _changed(reader, reader, paths, mutable_config_maps) if paths and reader is not replaced else None
        if impact is not None:
            found.append(impact.model_copy(update={"rules": sorted({*impact.rules, "k8s.autoname"})}))
    return found


def _secrets(plan: SynthPlan) -> list[SecretInput]:
    found = []
    mutable_config_maps = _mutable_config_maps(plan)
    for resource in plan.resources:
        paths = sorted(set(_secret_paths(resource.inputs)))
        if not paths:
            continue
        rules = [_input_rule(resource, path, mutable_config_maps) for path in paths]
        then: list[Impact] = []
        if any(rule and rule[0] for rule in rules):
            action, _ = _replacement(resource, resource)
            if autonamed(resource.type, resource.inputs):
                then = _renamed_readers(plan, resource)
        else:
            action = Action.UPDATE
        found.append(SecretInput(type=resource.type, name=resource.name, paths=paths, if_rotated=action, then=then))
    return found


def _yaml_file(action: Action, old: PlannedResource | None, new: PlannedResource | None) -> Impact:
    """A ConfigFile's objects are not in the plan (rule k8s.yaml-objects): what the engine does to them, by the
    file and the options they take from the ConfigFile."""
    resource = new or old
    assert resource is not None
    file = f"`{resource.inputs.get('file')}`"
    rules = ["k8s.yaml-objects"]
    updated: list[Reason] = []
    if action is Action.CREATE:
        meaning = f"creates the objects of {file}"
    elif action is Action.DELETE:
        meaning = f"deletes the objects of {file}"
    else:
        assert old is not None
        updated = [("file", "k8s.yaml-objects")]
        rules.append("k8s.update")
        meaning = (
            f"reads {file} (was `{old.inputs.get('file')}`): each object of the same name keeps its URN and is "
            "patched in place, unless a changed path is one its kind is replaced by (K8S_FORCE_NEW; a "
            "CustomResourceDefinition has none)"
        )
    if resource.retain_on_delete:
        rules.append("pulumi.retain-on-delete")
        meaning += "; retainOnDelete: no object of it is ever deleted from the cluster"
        if action is Action.DELETE:
            meaning = f"forgets the objects of {file}: retainOnDelete keeps them in the cluster"
    if action is Action.DELETE and resource.protect:
        rules.append("pulumi.protect")
        meaning += "; they are protected: `pulumi up` stops with an error instead"
    return Impact(
        type=resource.type, name=resource.name, action=action, updated=updated, rules=sorted(rules), meaning=meaning
    )


def predict(base: SynthPlan, head: SynthPlan, plan_diff: PlanDiff | None = None) -> ImpactReport:
    result = plan_diff or diff(base, head)
    before, after = matched(base, head)
    impacts: dict[Key, Impact] = {}
    for key in result.added:
        new = after[key]
        if new.custom:
            impacts[key] = Impact(
                type=new.type,
                name=new.name,
                action=Action.CREATE,
                rules=["pulumi.urn"],
                meaning=_meaning(Action.CREATE, None, new),
                runs_check=_runs_check(Action.CREATE, new),
            )
        elif new.type == YAML_FILE:
            impacts[key] = _yaml_file(Action.CREATE, None, new)
    for key in result.removed:
        old = before[key]
        if old.type == YAML_FILE:
            impacts[key] = _yaml_file(Action.DELETE, old, None)
        elif old.custom:
            impacts[key] = Impact(
                type=old.type,
                name=old.name,
                action=Action.DELETE,
                rules=[
                    "pulumi.urn",
                    *(["tfd.container-delete"] if old.type == CONTAINER else []),
                    *(["pulumi.retain-on-delete"] if old.retain_on_delete else []),
                ],
                meaning=_meaning(Action.DELETE, old, None)
                + ("; it is protected: `pulumi up` stops with an error instead" if old.protect else ""),
                stops_container=_stops(old),
            )
    # The provider as it will be when the object is diffed: the head plan's (a provider update comes first).
    mutable_config_maps = _mutable_config_maps(head)
    for change in result.changed:
        old, new = before[change.key], after[change.key]
        if new.type == YAML_FILE and "file" in change.paths:
            impacts[change.key] = _yaml_file(Action.UPDATE, old, new)
        elif new.custom:
            impact = _changed(old, new, change.paths, mutable_config_maps)
            if impact is not None:
                impacts[change.key] = impact
    _propagate_replacements(impacts, before, after)
    for key, impact in impacts.items():
        if impact.stops_container and "tfd.container-delete" not in impact.rules:
            impacts[key] = impact.model_copy(update={"rules": sorted({*impact.rules, "tfd.container-delete"})})
    ordered = [impacts[key] for key in sorted(impacts, key=lambda k: (not impacts[k].stops_container, k))]
    assert all(rule in RULES for impact in ordered for rule in impact.rules)
    old_by_urn = {r.urn: r for r in before.values()}
    stopped = {after[key].urn for key, impact in impacts.items() if impact.stops_container and key in after}
    secrets = _secrets(head)
    rotated = {
        r.urn
        for r in head.resources
        for s in secrets
        if (r.type, r.name) == (s.type, s.name) and s.if_rotated in (Action.REPLACE, Action.DELETE_REPLACE)
    }
    rolls = _rolls(head, stopped, old_by_urn, False) + _rolls(head, rotated, old_by_urn, True)
    return ImpactReport(stack=head.stack, impacts=ordered, secrets=secrets, rolls=rolls)


# --- Markdown -----------------------------------------------------------------------------------------------------


def _because(impact: Impact) -> str:
    if impact.action in (Action.CREATE, Action.DELETE):
        return f"{'new' if impact.action is Action.CREATE else 'no longer declared'} (pulumi.urn)"
    reasons = impact.replaced_by or impact.updated
    by_path: dict[str, list[str]] = {}
    for path, rule in reasons:
        by_path.setdefault(path, []).append(rule)
    return ", ".join(f"`{cell(path)}` ({', '.join(rules)})" for path, rules in by_path.items())


def _short_type(type_token: str) -> str:
    return (
        f"Provider {type_token.removeprefix('pulumi:providers:')}"
        if type_token.startswith("pulumi:providers:")
        else type_token.rsplit(":", 1)[-1]
    )


def _rotation(secret: SecretInput) -> str:
    paths = ", ".join(f"`{p}`" for p in secret.paths)
    then = "".join(
        f", then {impact.action.value if impact.action else 'changes'}: {impact.meaning}" for impact in secret.then
    )
    return f"{secret.if_rotated.value} `{secret.name}` ({paths}){then}"


def to_markdown(report: ImpactReport, max_rows: int) -> str:
    lines = ["#### What `pulumi up` does to the running platform", ""]
    stopped = report.containers_stopped
    if not report.impacts:
        lines.append("Nothing: no resource the engine manages changes. No running container changes.")
    else:
        checks = [i for i in report.impacts if i.runs_check]
        failing = [i for i in report.impacts if i.fails]
        if failing:
            lines += [
                "**`pulumi up` fails at " + ", ".join(f"`{i.name}`" for i in failing) + "**: Docker refuses a second "
                "network of the same name, and the provider replaces a network create-first (see the rows below).",
                "",
            ]
        refused = [i for i in report.impacts if i.action is Action.REFUSED]
        if refused:
            lines += [
                f"**`pulumi up` fails: the API server refuses {len(refused)} change(s)** of "
                + ", ".join(f"`{i.name}`" for i in refused)
                + " (fields it keeps immutable; see the rows below).",
                "",
            ]
        lines.append(
            (
                f"**{len(stopped)} running container(s) stop**: " + ", ".join(f"`{i.name}`" for i in stopped) + "."
                if stopped
                else "**No running container changes.**"
            )
            + (f" {len(checks)} check(s) run: " + ", ".join(f"`{i.name}`" for i in checks) + "." if checks else "")
        )
        lines += ["", "| Action | Resource | Because | On the running platform |", "| --- | --- | --- | --- |"]
        for impact in report.impacts[:max_rows]:
            action = impact.action.value if impact.action else "**not predicted**"
            lines.append(
                f"| {action} | `{_short_type(impact.type)}` `{cell(impact.name)}` | {_because(impact)} | "
                f"{cell(impact.meaning)} |"
            )
        if len(report.impacts) > max_rows:
            lines += ["", f"... and {len(report.impacts) - max_rows} more: see `impact.json` in the synth artifact."]
    if report.secrets:
        lines += [
            "",
            f"Not visible offline (`synth.secret`): {len(report.secrets)} resource(s) take a Pulumi secret, which both "
            "plans show as `[secret]`; if one was rotated, `pulumi up` will "
            + "; ".join(_rotation(s) for s in report.secrets)
            + ".",
        ]
    for roll in report.rolls:
        lines += ["", ("If rotated: " if roll.if_rotated else "") + _roll_words(roll) + " (`pulumi.depends-on-order`)."]
    then = [impact for s in report.secrets for impact in s.then]
    used = sorted(
        {rule for impact in [*report.impacts, *then] for rule in impact.rules}
        | ({"synth.secret"} if report.secrets else set())
        | ({"pulumi.depends-on-order"} if report.rolls else set())
    )
    if used:
        lines += ["", "<details><summary>Rules</summary>", ""]
        lines += [f"- `{rule}`: {RULES[rule].says}. Source: {RULES[rule].source}." for rule in used]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
