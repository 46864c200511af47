"""The rules by which `rocm-stack diff` predicts what `pulumi up` does to each changed resource, in one table.

Each rule names its upstream source; the citations pin the facts. tools/impact.py applies them to two synth plans;
tests/test_impact_rules.py checks the same table against the upstream code at the
cited commits, where `make upstream` has fetched them (never copied into the repo).
Versions: pulumi-docker 5.2.0 built from kreuzwerker/terraform-provider-docker ("TFD") v4.5.0 with
terraform-plugin-sdk v2.40.1; pulumi-kubernetes 4.x (provider/pkg/provider/diff.go and provider.go as of July 2026,
after v4.32.0; the program pins the SDK 4.34.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from components.k8s.replacement import K8S_FORCE_NEW as K8S_FORCE_NEW  # its readers import it from here too


class Action(StrEnum):
    """What the engine does to one resource, in the order it does it."""

    CREATE = "create"
    DELETE = "delete"
    UPDATE = "update in place"
    REPLACE = "replace (create, then delete)"
    DELETE_REPLACE = "delete, then replace"
    REFUSED = "refused by the API server"


@dataclass(frozen=True)
class Rule:
    says: str
    source: str


RULES: dict[str, Rule] = {
    # The Pulumi engine.
    "pulumi.urn": Rule(
        "a resource is known by its URN (project, stack, parent types, type, name): another name or parent is a "
        "different resource, created, while the old URN is deleted after every create, unless the resource declares "
        "the old URN as an alias: then the engine finds the old state by it and moves it",
        "pulumi/pulumi sdk/go/common/resource/urn.go NewURN; pkg/resource/deploy/step_generator.go (deletes of "
        "resources the program no longer registers come last; getOldResource L655-704: the URN, then each alias)",
    ),
    "pulumi.delete-before-replace-option": Rule(
        "the resource option deleteBeforeReplace: a replacement deletes the old resource first",
        "pulumi/pulumi pkg/resource/deploy/step_generator.go (a DeleteBeforeReplace goal or provider diff)",
    ),
    "pulumi.replace-on-changes": Rule(
        "the resource option replaceOnChanges: a change under one of its paths is a replacement",
        "pulumi/pulumi pkg/resource/deploy/step_generator.go applyReplaceOnChanges",
    ),
    "pulumi.depends-on-order": Rule(
        "a resource is registered only once its dependsOn resources' steps are done (a replacement's delete, create "
        "and health wait); independent steps run in parallel, and a dependsOn edge alone never replaces the dependent",
        "pulumi 3.272.0 SDK sdk/python/lib/pulumi/runtime/resource.py prepare_resource and rpc.py _add_dependency "
        "(`await res.urn.future()`); pulumi/pulumi pkg/resource/deploy/source_eval.go L3039-3041, step_generator.go "
        "L3284-3291 @ 1b59498",
    ),
    "pulumi.ignore-changes": Rule(
        "the resource option ignoreChanges: before the provider's diff the engine resets each listed path of the new "
        "inputs to the state's value, so a change there alone calls no provider",
        "pulumi/pulumi pkg/resource/deploy/step_generator.go L1267 (processIgnoreChanges before Diff), "
        "processIgnoreChanges L3028-3046 (`path.Reset(oldInputs, ignoredInputs)`) @ v3.259.0",
    ),
    "pulumi.protect": Rule(
        "a protected resource is never deleted: its replacement or delete stops `pulumi up` with an error",
        "pulumi/pulumi pkg/resource/deploy/step_generator.go (protect check before a delete or replace)",
    ),
    "pulumi.retain-on-delete": Rule(
        "a resource with retainOnDelete is never deleted: its delete (also a replacement's) only drops it from the "
        "state; a component's retainOnDelete and protect pass on to the resources under it",
        "pulumi/pulumi pkg/resource/deploy/step.go DeleteStep.Apply L661-662 (`s.old.RetainOnDelete`: no provider "
        "Delete); source_eval.go inheritFromParent L2002-2013 (DeletedWith, Protect, RetainOnDelete, Provider)",
    ),
    "pulumi.unknown-output": Rule(
        "during a preview the outputs of a resource being replaced are unknown; an unknown value for a ForceNew "
        "attribute is a replacement, so every container using a replaced image (or attached to a replaced "
        "network) is replaced even when the new image (or network name) turns out the same",
        "hashicorp/terraform-plugin-sdk v2.40.1 helper/schema/schema.go (*Schema).finalizeDiff: "
        "`d.RequiresNew = d.Old != d.New || d.NewComputed`",
    ),
    # The Terraform bridge (pulumi-docker).
    "tfbridge.force-new": Rule(
        "a change of an attribute TFD marks ForceNew is a replacement (a map's keys, e.g. logOpts.max-size, by the "
        "map's ForceNew: terraform-plugin-sdk schema.go diffMap finalizes each with the map's schema)",
        "pulumi/pulumi-terraform-bridge pkg/tfbridge/provider.go (*Provider).Diff (RequiresNew -> replaces); "
        "TFD internal/provider/resource_docker_container.go, resource_docker_image.go, resource_docker_volume.go, "
        "resource_docker_network.go (components/docker/provider_schema.py: DOCKER_CONTAINER, DOCKER_REMOTE_IMAGE, "
        "DOCKER_VOLUME, DOCKER_NETWORK)",
    ),
    "tfbridge.not-force-new": Rule(
        "a change of an attribute TFD does not mark ForceNew is an update in place (what the update then does: "
        "tfd.container-update)",
        "pulumi/pulumi-terraform-bridge pkg/tfbridge/provider.go (*Provider).Diff (no RequiresNew -> an update); "
        "TFD internal/provider/resource_docker_container.go, resource_docker_image.go",
    ),
    "tfbridge.set-element": Rule(
        "a set (TypeSet: envs, labels, devices, volumes, uploads, ...) has no order, so reordering it is no change "
        "(nor is reordering `ports`, a list whose order TFD's DiffSuppressFunc ignores unless one internal port is "
        "published twice); a changed element of a set "
        "of blocks is one element removed and one added: a replacement when any attribute of the block is ForceNew",
        "hashicorp/terraform-plugin-sdk v2.40.1 helper/schema/set.go (elements keyed by their hash code), "
        "schema.go schemaMap.diffSet (old and new codes diffed attribute by attribute) and finalizeDiff "
        "(RequiresNew set before the NewRemoved return); TFD resource_docker_container.go L534 and L1192-1247 "
        "(suppressIfPortsDidNotChangeForMigrationV0ToV1); components/docker/provider_schema.py as_diffed, canonical",
    ),
    "pulumi-docker.container-delete-before-replace": Rule(
        "pulumi-docker replaces a Container by deleting the old one first (names are unique per daemon)",
        "pulumi/pulumi-docker provider/resources.go L112-115 (`DeleteBeforeReplace: true`); "
        "pulumi-terraform-bridge pkg/tfbridge/provider.go (*Provider).Diff (`res.Schema.DeleteBeforeReplace`)",
    ),
    "docker.name-unique": Rule(
        "Docker keeps one network and one volume per name: a second network of a name is refused, and a volume "
        "created under an existing name is that volume (its data and labels); so a create-first replacement that "
        "keeps the name fails at the network's create, and the new volume resource adopts the old volume, whose "
        "delete at the end of the run then removes it, or fails after 30 s while a container mounts it",
        "moby/moby v28.5.2 client/network_create.go L26-29 (CheckDuplicate below API 1.44; from 1.44 the daemon "
        "always checks); TFD internal/provider/resource_docker_network_funcs.go L75, resource_docker_volume.go "
        "L175, L362-386, L429-445 (remove by name, force, `volume is in use` retried 30 s); pulumi-docker "
        "provider/resources.go L133, L136 (no DeleteBeforeReplace for docker_network, docker_volume); measured: "
        "tests/e2e/test_e2e_corpus.py",
    ),
    "tfbridge.provider-config": Rule(
        "a change of a Docker provider's own inputs (host, sshOpts) updates the provider in place: nothing under "
        "it is replaced, and its resources are then addressed on the new endpoint by their old ids",
        "pulumi/pulumi-terraform-bridge pkg/tfbridge/provider.go configDiffer.DiffConfig (replace only for "
        "ForcesProviderReplace); pulumi/pulumi-docker provider/resources.go L94-107 sets none",
    ),
    # terraform-provider-docker's own code.
    "tfd.container-update": Rule(
        "TFD's update applies only restart, maxRetryCount, cpuShares, memory, memoryReservation, cpuSet, "
        "memorySwap and the block-IO limits to the running container (`docker update`, no restart), and starts it "
        "when mustRun turns true; any other updatable input is only written into the state: the running container "
        "keeps the old value until it is next replaced",
        "TFD internal/provider/resource_docker_container_funcs.go resourceDockerContainerUpdate L991-1077",
    ),
    "tfd.container-read-stopped": Rule(
        "a container declared with mustRun false that is found stopped is left alone: Read keeps the state's ports "
        "and mustRun, so nothing changes; with mustRun true Read stores a stopped container's published ports as "
        "none, and `ports` is ForceNew: the next `pulumi up` replaces it instead of starting it",
        "TFD internal/provider/resource_docker_container_funcs.go resourceDockerContainerRead L797-823; "
        "resource_docker_container.go L122-127 (must_run: 'If `false`, Terraform leaves the container alone'), "
        "L1193-1196 (ports of another length are never suppressed); measured: tests/e2e/test_e2e_stopped.py",
    ),
    "moby.update-keeps-unset": Rule(
        "a removed memory, memory swap, reservation, CPU shares or cpuset limit never reaches the running "
        "container: TFD's update sends 0 or an empty string for it (the block-IO sets not at all), which dockerd "
        "reads as unchanged; the limit stays and every refresh reads it back",
        "TFD internal/provider/resource_docker_container_funcs.go L1032-1068; moby/moby "
        "container/container_unix.go UpdateContainer L270-303 @ v28.5.2; measured: tests/e2e/test_e2e_limits.py",
    ),
    "tfd.container-delete": Rule(
        "deleting a container stops it with destroyGraceSeconds as the timeout (0 when unset: SIGKILL right after "
        "the stop signal), then removes it; a one-shot (attach) container is removed without a stop",
        "TFD internal/provider/resource_docker_container_funcs.go resourceDockerContainerDelete L1079-1098; "
        "moby daemon/stop.go (signal, wait the timeout, SIGKILL)",
    ),
    # pulumi-kubernetes.
    "k8s.identity": Rule(
        "a new metadata.name or metadata.namespace is a replacement (a Helm release: its name or namespace)",
        "pulumi/pulumi-kubernetes provider/pkg/provider/provider.go (*kubeProvider).Diff L1560; diff.go "
        "metadataForceNewProperties L207-212; helm_release.go L907",
    ),
    "k8s.force-new": Rule(
        "a change under a path pulumi-kubernetes lists for the kind (K8S_FORCE_NEW) is a replacement",
        "pulumi/pulumi-kubernetes provider/pkg/provider/diff.go forceNew (L45-205), matched by prefix "
        "(provider/pkg/openapi/match.go PatchPropertiesChanged)",
    ),
    "k8s.immutable": Rule(
        "the API server refuses an update that changes a field its update validation, the CRD's CEL rule "
        "(`self == oldSelf`) or an admission webhook marks immutable (each field with its source: IMMUTABLE); where "
        "the program declares the path replaceOnChanges the engine replaces the object instead (deleting it first "
        "where the name stays), else `pulumi up` fails at that object with the API server's error",
        "components/k8s/replacement.py IMMUTABLE (a source per row); pulumi/pulumi-kubernetes provider/pkg/provider/"
        "provider.go Diff L1645-1658 (its delete-first only for its own replacements, `len(replaces) > 0`)",
    ),
    "k8s.secret": Rule(
        "a Secret's type, data or stringData change is a replacement (the provider's enableSecretMutable is off)",
        "pulumi/pulumi-kubernetes provider/pkg/provider/diff.go L28-30",
    ),
    "k8s.configmap": Rule(
        "a ConfigMap's data or binaryData change is a replacement (the provider's enableConfigMapMutable is off)",
        "pulumi/pulumi-kubernetes provider/pkg/provider/diff.go L32-34; provider.go L696-708 (default off)",
    ),
    "k8s.configmap-mutable": Rule(
        "with the provider's enableConfigMapMutable on, a ConfigMap's data or binaryData change is a patch in place, "
        "unless the ConfigMap is declared immutable (then still a replacement)",
        "pulumi/pulumi-kubernetes provider/pkg/provider/diff.go L32 (`!k.enableConfigMapMutable || "
        'clients.IsImmutable(obj)`); provider.go L696-710 (the provider input, a string "true")',
    ),
    "k8s.update": Rule(
        "any other change is a patch of the live object; a Deployment or DaemonSet whose pod template changes "
        "rolls its pods (its controller's rolling update); a Helm release is upgraded (`helm upgrade`)",
        "pulumi/pulumi-kubernetes provider/pkg/provider/provider.go (*kubeProvider).Diff; helm_release.go Diff",
    ),
    "k8s.yaml-objects": Rule(
        "a yaml/v2 ConfigFile is built by the provider: each run reads its `file` again and declares every object "
        "in it under the ConfigFile, named `<ConfigFile>:<name>` (`<ConfigFile>:<namespace>/<name>`), so an object "
        "of the same name in a new version of the file keeps its URN and is diffed by its kind's rules (an object "
        "no longer in the file is deleted); those objects are not in the offline plan (synth reads no file)",
        "pulumi/pulumi-kubernetes provider/pkg/provider/yaml/v2/configfile.go Construct L54-132 (Parse, then "
        "Register under the component); yaml.go register L345-351 (the resource name)",
    ),
    "k8s.provider-config": Rule(
        "a Kubernetes provider whose kubeconfig, context or cluster points at another cluster is replaced, and so "
        "is every object under it; any other change of its inputs updates it in place",
        "pulumi/pulumi-kubernetes provider/pkg/provider/provider.go (*kubeProvider).DiffConfig L454-570",
    ),
    "k8s.autoname": Rule(
        "an object declared without metadata.name is named `<resource name>-<random suffix>` by the provider; an "
        "update keeps the name, but a replacement gets a new one (the engine checks the new inputs again without the "
        "old ones, so the provider names it afresh), is created before the old one is deleted, and every resource "
        "that reads the name is updated to the new one before that delete",
        "pulumi/pulumi-kubernetes provider/pkg/metadata/naming.go AssignNameIfAutonamable, AdoptOldAutonameIfUnnamed; "
        "provider.go (*kubeProvider).Check L1246-1274, Diff L1645-1657 (never delete-before-replace when autonamed) "
        "@ v4.32.0; pulumi/pulumi pkg/resource/deploy/step_generator.go L2004-2024 (Check again on replace, without the old inputs), "
        "L2033-2035 (CreateBeforeDelete: create, update the dependents, then delete) @ v3.259.0",
    ),
    "k8s.ssa-ignore-changes": Rule(
        "an update of an object with ignoreChanges: the server-side apply drops an ignored field that another field "
        "manager owns and Pulumi does not (the HPA's `kube-controller-manager` after a scale), else sends the live "
        "object's value of it, so the apply changes neither the value nor its owner",
        "pulumi/pulumi-kubernetes provider/pkg/await/await.go ssaUpdate L653 (handleSSAIgnoreFields before the "
        "apply), handleSSAIgnoreFields L716-800 (`theirFields.Has(pe) && !ourFields.Has(pe)` L763: "
        "RemoveNestedField; else NestedFieldCopy of the live value L786)",
    ),
    "k8s.delete-before-replace": Rule(
        "an object replaced under the same name and namespace is deleted first",
        "pulumi/pulumi-kubernetes provider/pkg/provider/provider.go (*kubeProvider).Diff L1645-1657",
    ),
    # What the offline plan cannot show.
    "synth.secret": Rule(
        "an input holding a Pulumi secret is `[secret]` in both plans: a new secret value alone does not show; "
        "Pulumi compares the real values, so a rotated secret acts as a change of that input",
        "tools/synth.py _redact; schema/stackfile.py SECRET_PLACEHOLDER (synth never sees a secret's value)",
    ),
}


# --- pulumi-kubernetes ------------------------------------------------------------------------------------------
# Its replacement paths per kind (K8S_FORCE_NEW) and the fields the API server refuses to change (IMMUTABLE) live with
# the program, which declares replaceOnChanges from them: components/k8s/replacement.py.
K8S_IDENTITY = (".metadata.name", ".metadata.namespace")
HELM_IDENTITY = (".name", ".namespace")  # helm_release.go L907
