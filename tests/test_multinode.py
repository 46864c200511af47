"""Multi-node vLLM serving (issue 25 item 5): LeaderWorkerSet from its pinned chart, its vendored CRD, vLLM's multi-node
launch of the pinned 0.11.2, the Service on the leaders, and the config's checks.

The LeaderWorkerSet facts are read from the kubernetes-sigs/lws mirror at tag v0.10.0 (tests/upstream_go.py: skipped
where the mirror is absent; the citations still pin them). vLLM's are cited from the vllm-0.11.2 wheel's sources
(PyPI vllm==0.11.2, vllm-0.11.2-cp38-abi3-manylinux1_x86_64.whl, the image's version): no vLLM runs here.
"""

from __future__ import annotations

import copy
import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.workloads import multinode
from components.workloads.inference import PATCH_FORCE_ANNOTATION, REPLICAS_PATH
from schema.kubernetes import (
    LWS_CHART_VERSION,
    LWS_CRD,
    LWS_CRD_FILES,
    LWS_CRD_FILES_BY_VERSION,
    LWS_CRD_URL,
    LWS_NAMESPACE,
)
from tools.impact import Impact, predict
from tools.impact_rules import K8S_FORCE_NEW, Action
from tools.synth import Plan, manifest_of, synthesize
from tools.synth_diff import SynthPlan
from conftest import committed_plan, refused, stack_file
from k8s_validation import ManifestInvalid, stack_crds, validate_all, validate_object, yaml_documents
from upstream_go import Upstream, git_dir

DATA = Path(__file__).parent / "data" / "kubernetes"
LWS = Upstream("kubernetes-sigs/lws", "2161f38ff333f9e24d3c44adef7cd5d9787cac00")  # tag v0.10.0
PULUMI = Upstream("pulumi/pulumi", "1b5949891b3cefcb9974752b24a5ecef0acc86c8")  # July 2026, after v3.220.0
CRD_PATH = "charts/lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
CRDS = stack_crds()

P = "rocm-stack:"
LWS_TYPE = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
RELEASE = "kubernetes:helm.sh/v3:Release"
CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
SERVICE = "kubernetes:core/v1:Service"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
NAME = "big"
BIG = {
    "name": NAME,
    "model": "meta-llama/Llama-3.1-405B-Instruct",
    "tensorParallelSize": 8,
    "pipelineParallelSize": 2,
    "kubernetes": {
        "namespace": "ml",
        "nodes": 2,
        "modelCache": {"type": "pvc", "storageClass": "cephfs", "size": "2Ti"},
    },
}


def tree_at(ref: str, folder: str) -> list[str]:
    """File names under `folder` at `ref` (a commit or tag) of kubernetes-sigs/lws (git ls-tree)."""
    git = ["git", f"--git-dir={git_dir('kubernetes-sigs/lws', ref)}", "ls-tree", "--name-only", ref, folder]
    return [Path(line).name for line in subprocess.run(git, capture_output=True, check=True, text=True).stdout.split()]


@functools.cache
def vendored_crd() -> dict[str, Any]:
    """The vendored CRD, parsed once (1.3 MB)."""
    [crd] = yaml_documents(DATA / "leaderworkerset.x-k8s.io_leaderworkersets.yaml")
    return crd


def lines(path: str, first: int, last: int) -> str:
    return "\n".join(LWS.read(path).decode().splitlines()[first - 1 : last])


def config_with(big: dict[str, Any] | None = None, **lws: Any) -> dict[str, Any]:
    """The prod stack serving its model and `big` (two 2-node groups: prod's replicas 2) on 8 GPU nodes, without
    Kueue (a queued LeaderWorkerSet: tests/test_queues.py)."""
    config = stack_file("prod")
    del config[P + "kubernetes"]["queues"]
    config[P + "inference"].append(copy.deepcopy(big or BIG))
    config[P + "gpuFleet"]["nodes"] = 8
    if lws:
        config[P + "kubernetes"]["leaderWorkerSet"] = lws
    return config


@pytest.fixture(scope="module")
def plan() -> Plan:
    return synthesize("prod", config_with())


def lws_manifest(plan: Plan) -> dict[str, Any]:
    return copy.deepcopy(manifest_of(plan.get(LWS_TYPE, NAME)))


def containers(plan: Plan, role: str) -> dict[str, dict[str, Any]]:
    spec = lws_manifest(plan)["spec"]["leaderWorkerTemplate"][role]["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


# --- the pinned controller and its CRD ------------------------------------------------------------------------------


def test_the_vendored_crd_is_the_one_the_pinned_chart_carries():
    assert (DATA / "leaderworkerset.x-k8s.io_leaderworkersets.yaml").read_bytes() == LWS.read(CRD_PATH)
    # Chart <v> is charts/lws packaged at tag v<v> (hack/push-chart.sh L38-51); the stack applies its crds/ files.
    assert re.search(r'HELM} package --version "\$\{chart_version\}".* charts/lws', lines("hack/push-chart.sh", 51, 51))
    for file in LWS_CRD_FILES:
        url = LWS_CRD_URL.format(version=LWS_CHART_VERSION, file=file)
        tag, path = re.fullmatch(r"https://raw\.githubusercontent\.com/kubernetes-sigs/lws/(v[^/]+)/(.+)", url).groups()  # type: ignore[union-attr]
        assert tag == f"v{LWS_CHART_VERSION}" and LWS.read(path).startswith(b"apiVersion: apiextensions.k8s.io/v1")
    crd = vendored_crd()
    assert crd["metadata"]["name"] == LWS_CRD
    # The CRD names the webhook Service's namespace: the release goes there.
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["namespace"] == LWS_NAMESPACE


def test_helm_would_never_upgrade_the_crds_and_the_manager_needs_all_three():
    readme = LWS.read("charts/lws/README.md").decode()
    assert "Helm installs the\nfiles in that directory only during the initial `helm install`" in readme
    # The chart's crds/ holds exactly the three files the stack applies.
    listed = tree_at(LWS.commit, "charts/lws/crds/")
    assert sorted(listed) == sorted(LWS_CRD_FILES)
    main = lines("cmd/main.go", 207, 214)
    assert "DisaggregatedSetReconciler" in main and "os.Exit(1)" in main


def test_the_controller_is_a_pinned_release_applied_only_when_needed(plan: Plan):
    release = plan.get(RELEASE, "lws")
    inputs = release["inputs"]
    assert {k: inputs[k] for k in ("name", "chart", "version", "namespace", "createNamespace", "skipCrds")} == {
        "name": "lws",
        "chart": "oci://registry.k8s.io/lws/charts/lws",
        "version": "0.10.0",
        "namespace": "lws-system",
        "createNamespace": True,
        "skipCrds": True,
    }
    # The install doc of the tag: `helm install lws oci://registry.k8s.io/lws/charts/lws --version=$CHART_VERSION
    # --namespace lws-system`, CHART_VERSION=0.10.0; the chart's own values say `tag: main` (staging).
    install = lines("site/content/en/docs/installation/_index.md", 59, 63)
    assert "CHART_VERSION=0.10.0" in install and "oci://registry.k8s.io/lws/charts/lws" in install
    values = yaml.safe_load(LWS.read("charts/lws/values.yaml"))["image"]["manager"]
    assert values["tag"] == "main" and inputs["values"]["image"]["manager"] == {
        "repository": "registry.k8s.io/lws/lws",
        "tag": "v0.10.0",
        "pullPolicy": "IfNotPresent",
    }
    crds = {r["name"]: r for r in plan.of_type(CONFIG_FILE) if r["name"].startswith("lws-crds")}
    assert sorted(c["inputs"]["file"] for c in crds.values()) == sorted(
        LWS_CRD_URL.format(version="0.10.0", file=file) for file in LWS_CRD_FILES
    )
    assert all(c["retain_on_delete"] and c["protect"] for c in crds.values())
    assert {c["urn"] for c in crds.values()} <= set(release["depends_on"])
    assert release["urn"] in plan.get(LWS_TYPE, NAME)["depends_on"]
    # The committed prod stack serves on one node: no controller; a cluster with its own: none either.
    assert [r for r in committed_plan("prod").of_type(RELEASE) if r["name"] == "lws"] == []
    own = synthesize("prod", config_with(install=False))
    assert [r for r in own.of_type(RELEASE) if r["name"] == "lws"] == [] and own.of_type(LWS_TYPE)


def test_every_object_passes_the_vendored_crd_and_a_misspelled_field_fails(plan: Plan):
    objects = [manifest_of(r) for r in plan.kubernetes_objects()]
    assert validate_all(objects, CRDS) == len(objects)
    lws = lws_manifest(plan)
    lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "RecreateGroupOnRestart"
    with pytest.raises(ManifestInvalid, match="restartPolicy"):
        validate_object(lws, CRDS)
    lws = lws_manifest(plan)
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(ManifestInvalid, match="resource"):
        validate_object(lws, CRDS)


# --- the group: vLLM's launch, policies, Service ---------------------------------------------------------------------


def test_leader_and_workers_run_vllms_multi_node_launch(plan: Plan):
    """vLLM 0.11.2: `--master-addr`, `--master-port`, `--nnodes`/`-n`, `--node-rank`/`-r` (vllm/engine/arg_utils.py
    L757-760), `--headless` (vllm/entrypoints/openai/cli_args.py L258); nnodes > 1 needs the mp executor
    (vllm/config/parallel.py L599-602); a node rank > 0 runs headless workers joining master_addr:master_port
    (vllm/entrypoints/cli/serve.py L114-127; vllm/distributed/parallel_state.py L1180-1186); each node runs
    world_size // nnodes ranks (arg_utils.py L1466-1478)."""
    leader, worker = containers(plan, "leaderTemplate")["vllm"], containers(plan, "workerTemplate")["vllm"]
    serve = ["vllm", "serve", BIG["model"], "--host", "127.0.0.1", "--port", "8000"]
    parallel = ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]
    launch = ["--distributed-executor-backend", "mp", "--nnodes", "2"]
    assert leader["command"] == [*serve, *parallel, *launch, "--node-rank", "0", "--master-addr", "$(POD_IP)"]
    assert worker["command"] == [
        *serve,
        *parallel,
        *launch,
        "--node-rank",
        "$(LWS_WORKER_INDEX)",
        "--master-addr",
        "$(LWS_LEADER_ADDRESS)",
        "--headless",
    ]
    # LWS injects these into every container (pkg/utils/pod/pod_utils.go L144: LwsLeaderAddress; the constants'
    # names in leaderworkerset_types.go L67-75), `<leader pod>.<lws>.<namespace>` (pod_utils_test.go L114).
    types = LWS.read("api/leaderworkerset/v1/leaderworkerset_types.go").decode()
    for name in (multinode.LEADER_ADDRESS_ENV, multinode.WORKER_INDEX_ENV):
        assert f'string = "{name}"' in types
    assert 'expectedLwsLeaderAddress: "test-sample-0.test-sample.default"' in lines(
        "pkg/utils/pod/pod_utils_test.go", 114, 114
    )
    # Both know their own IP (VLLM_HOST_IP); the leader binds its queue on it (a DNS name cannot be bound).
    for container in (leader, worker):
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["VLLM_HOST_IP"]["value"] == "$(POD_IP)"
        names = [e["name"] for e in container["env"]]
        assert names.index("POD_IP") < names.index("VLLM_HOST_IP")  # $(VAR) refers to earlier variables only
        assert container["resources"]["limits"]["amd.com/gpu"] == "8"


def test_the_leader_is_the_one_node_pod_and_the_workers_only_compute(plan: Plan):
    leader, worker = containers(plan, "leaderTemplate"), containers(plan, "workerTemplate")
    assert set(leader) == {"gpucheck", "vllm", "proxy"} and set(worker) == {"gpucheck", "vllm"}
    assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(leader["vllm"])
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "ports"} & set(worker["vllm"])
    assert worker["gpucheck"] == leader["gpucheck"]


def test_group_policies_are_the_ones_vllm_needs(plan: Plan):
    spec = lws_manifest(plan)["spec"]
    template = spec["leaderWorkerTemplate"]
    assert (spec["replicas"], template["size"]) == (2, 2)
    # LeaderReady would create the workers only once the leader pod is Ready, which vLLM's leader is not before
    # its workers joined: a deadlock.
    assert spec["startupPolicy"] == "LeaderCreated"
    defer = lines("pkg/controllers/pod_controller.go", 143, 144)
    assert "LeaderReadyStartupPolicy && !podutils.IsPodReady(&pod)" in defer and "defer the creation" in defer
    # One pod restarted or deleted: the leader is deleted (foreground), taking the group's workers with it.
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    restart = lines("pkg/controllers/pod_controller.go", 204, 262)
    assert "podutils.ContainerRestarted(pod)" in restart and "metav1.DeletePropagationForeground" in restart
    assert spec["rolloutStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
    }
    # `pulumi up` waits for Available: every group ready and updated.
    assert lws_manifest(plan)["metadata"]["annotations"]["pulumi.com/waitFor"] == "condition=Available"
    available = lines("pkg/controllers/leaderworkerset_controller.go", 500, 501)
    assert "readyNonBurstWorkerCount == int(*lws.Spec.Replicas)" in available and "Available" in available


def test_the_service_reaches_the_leaders_and_the_group_reaches_itself(plan: Plan):
    selector = manifest_of(plan.get(SERVICE, f"{NAME}-service"))["spec"]["selector"]
    template_labels = lws_manifest(plan)["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]
    assert selector == {**template_labels, "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    # The pod webhook labels each pod with its worker index, 0 on the leader (leaderworkerset_types.go L43-45).
    types = LWS.read("api/leaderworkerset/v1/leaderworkerset_types.go").decode()
    assert f'WorkerIndexLabelKey string = "{multinode.WORKER_INDEX_LABEL}"' in types
    assert "The leader also\n// gets a workerIndex, and it is always set to 0." in types
    # Two policies (they add up): the group's pods reach each other on every port; the API port is the leaders'.
    group = manifest_of(plan.get(POLICY, f"{NAME}-ingress"))["spec"]
    assert group["podSelector"] == {"matchLabels": template_labels}
    assert group["ingress"] == [{"from": [{"podSelector": {"matchLabels": template_labels}}]}]
    api = manifest_of(plan.get(POLICY, f"{NAME}-api-ingress"))["spec"]
    assert api["podSelector"] == {"matchLabels": selector}
    assert [rule["ports"] for rule in api["ingress"]] == [[{"port": "http", "protocol": "TCP"}]]


def leader_address(lws: dict[str, Any], group: int) -> str:
    """LWS_LEADER_ADDRESS of the pods of group `group`, as the pod webhook sets it: `<lws>-<group index>.<pod
    subdomain>.<namespace>` (pkg/utils/pod/pod_utils.go L143-146). A StatefulSet pod's subdomain is its set's
    serviceName (kubernetes pkg/controller/statefulset/stateful_set_utils.go updateIdentity), which for the default
    subdomainPolicy Shared (set by the LWS webhook, pkg/webhooks/leaderworkerset_webhook.go L73-82) is the LWS's
    name, for the leaders' StatefulSet and each group's workers' (leaderworkerset_controller.go L846-848,
    pod_controller.go L432-440)."""
    assert "networkConfig" not in lws["spec"]  # defaulted to Shared
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    assert 'fmt.Sprintf("%s-%s.%s.%s", lwsName, groupIndex, pod.Spec.Subdomain, pod.ObjectMeta.Namespace)' in lines(
        "pkg/utils/pod/pod_utils.go", 145, 145
    )
    assert "subdomainPolicy := v1.SubdomainShared" in lines("pkg/webhooks/leaderworkerset_webhook.go", 75, 75)
    assert "WithServiceName(lws.Name)" in lines("pkg/controllers/leaderworkerset_controller.go", 848, 848)
    assert "serviceName = lws.Name" in lines("pkg/controllers/pod_controller.go", 434, 434)
    return f"{name}-{group}.{name}.{namespace}"


def test_the_leader_address_resolves_through_the_headless_service_only_the_controller_creates(plan: Plan):
    """The workers' `--master-addr` is LWS_LEADER_ADDRESS, whose DNS record only the headless Service of the LWS's
    name publishes. The controller creates that Service only where no Service of the name exists, whatever it selects
    (pkg/utils/controller/controller_utils.go L33-64: a Get, and a Create only on NotFound), called with the LWS's
    name (leaderworkerset_controller.go L213-220). So the stack's own API Service has the workload's name and the
    LeaderWorkerSet another (`<name>-lws`): with both named alike the address never resolved and `pulumi up` waited
    out the LeaderWorkerSet's create timeout."""
    lws = lws_manifest(plan)
    assert leader_address(lws, 0) == f"{NAME}-lws-0.{NAME}-lws.ml"
    created = lines("pkg/utils/controller/controller_utils.go", 36, 41)
    assert "k8sClient.Get(ctx, types.NamespacedName{Name: serviceName" in created
    assert "client.IgnoreNotFound(err) != nil" in created
    assert "CreateHeadlessServiceIfNotExists(ctx, r.Client, r.Scheme, lws, lws.Name," in lines(
        "pkg/controllers/leaderworkerset_controller.go", 215, 215
    )
    services = {
        (manifest_of(s)["metadata"]["namespace"], manifest_of(s)["metadata"]["name"]) for s in plan.of_type(SERVICE)
    }
    assert ("ml", lws["metadata"]["name"]) not in services
    assert ("ml", NAME) in services  # the API Service keeps the workload's name
    # The workers' command names the address (Kubernetes expands $(LWS_LEADER_ADDRESS) from the webhook's env).
    assert "$(LWS_LEADER_ADDRESS)" in containers(plan, "workerTemplate")["vllm"]["command"]


def test_replicas_are_groups_behind_a_scale_subresource_for_an_autoscaler():
    crd = vendored_crd()
    (version,) = crd["spec"]["versions"]
    assert version["subresources"]["scale"] == {
        "labelSelectorPath": ".status.hpaPodSelector",
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
    }


def test_the_budget_lets_one_group_down_at_most(plan: Plan):
    """Prod's budget keeps replicas - 1 serving: at most one pod of all groups is unavailable, so one group. A
    maxUnavailable needs pods whose controller has a scale: a group's pods are StatefulSets' (the LWS controller's
    worker StatefulSet per leader, pod_controller.go L385-386)."""
    pdb = manifest_of(plan.get(PDB, NAME + "-pdb"))["spec"]
    labels = lws_manifest(plan)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
    assert pdb == {"maxUnavailable": 1, "selector": {"matchLabels": labels}}
    assert "constructWorkerStatefulSetApplyConfiguration" in lines("pkg/controllers/pod_controller.go", 386, 386)


# --- the config's checks -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, key, words",
    [
        (
            {"kubernetes": {**BIG["kubernetes"], "nodes": 3}},
            "inference[1].kubernetes.nodes",
            "3 nodes x 5 GPUs is 15 GPUs per replica, but tensorParallelSize 8 x pipelineParallelSize 2 is a model "
            "copy of 16",
        ),
        (
            {"kubernetes": {**BIG["kubernetes"], "gpus": 4}},
            "inference[1].kubernetes.gpus",
            "2 nodes x 4 GPUs is 8 GPUs per replica, but tensorParallelSize 8 x pipelineParallelSize 2",
        ),
        ({"docker": {"partitions": ["gpu-node-1/train-a"]}}, "inference[1].kubernetes.nodes", "a Docker partition"),
        ({"extraArgs": ["--nnodes=3"]}, "inference[1].extraArgs[0]", "is derived from"),
        ({"kubernetes": {**BIG["kubernetes"], "nodes": 0}}, "inference[1].kubernetes.nodes", "must be at least 1"),
    ],
)
def test_a_replica_must_be_one_model_copy_over_its_nodes(change, key, words):
    message = refused(lambda: synthesize("prod", config_with({**BIG, **change})))
    assert key in message and words in message


def test_the_fleet_must_hold_every_pod_of_every_group():
    config = config_with()
    config[P + "gpuFleet"]["nodes"] = 4
    message = refused(lambda: synthesize("prod", config))
    # prod's two 8-GPU training pods and two groups of two 8-GPU pods.
    assert "6 Kubernetes pods each need more than half of a node's 8 GPUs" in message
    assert "the fleet has 32 (4 x 8)" in message


# --- day 2: what the next `pulumi up` does (tools.impact, the providers' rules; LWS's controller at v0.10.0) --------


def report(base: Plan, head: Plan) -> dict[tuple[str, str], Impact]:
    impacts = predict(SynthPlan.model_validate(base.to_json()), SynthPlan.model_validate(head.to_json())).impacts
    return {(i.type, i.name): i for i in impacts}


def lws_impact(base: Plan, head: Plan) -> Impact:
    impact = report(base, head)[(LWS_TYPE, NAME)]
    # A LeaderWorkerSet is patched in place, never replaced: pulumi-kubernetes replaces a custom resource only
    # when its name or namespace changes (diff.go forceNew lists no leaderworkerset.x-k8s.io kind).
    assert impact.action is Action.UPDATE and not impact.replaced_by and impact.rules == ["k8s.update"]
    assert not [key for key in K8S_FORCE_NEW if key[0] == "leaderworkerset.x-k8s.io"]
    return impact


def revision_fields() -> str:
    """What a LWS revision holds: a template or size change is a new revision, which the controller rolls out; the
    rest (replicas, rollout settings) is not (revision_utils.go getPatch L261-297 @ v0.10.0)."""
    patch = lines("pkg/utils/revision/revision_utils.go", 286, 295)
    assert 'specCopy["networkConfig"] = networkConfig' in patch
    assert 'specCopy["leaderWorkerTemplate"] = template' in patch
    return patch


def test_a_second_pulumi_up_of_an_unchanged_multi_node_stack_changes_nothing(plan: Plan):
    """A preview right after a deploy predicts no step: the LeaderWorkerSet, its Service, budget and the controller's
    CRDs are declared with the same inputs on every run (prod's own no-op check, tests/test_k8s_day2_gate.py, has no
    multi-node workload). What LWS's webhook defaults on top is not seen here (no cluster)."""
    assert report(plan, synthesize("prod", config_with())) == {}


def test_scenario_image_bump_rolls_one_whole_group_at_a_time(plan: Plan):
    config = config_with()
    config[P + "images"]["vllm"] = "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210@sha256:" + "1" * 64
    impact = lws_impact(synthesize("prod", config), plan)
    assert {path for path, _ in impact.updated} == {
        f"spec.leaderWorkerTemplate.{role}.spec.{kind}[0].image"
        for role in ("leaderTemplate", "workerTemplate")
        for kind in ("containers", "initContainers")
    }
    revision_fields()
    # The leader StatefulSet rolls its pods (partition moved one group at a time, rollingUpdateParameters); a
    # group's workers are a StatefulSet owned by its leader pod (pod_controller.go L174), so the garbage collector
    # deletes them with the old leader and the new leader's controller creates them anew: the whole group restarts.
    assert "setControllerReferenceWithStatefulSet(&pod, statefulSet" in lines(
        "pkg/controllers/pod_controller.go", 174, 174
    )
    steps = lines("api/leaderworkerset/v1/leaderworkerset_types.go", 319, 321)
    assert "the latter one will not start the update until the\n\t// former one(leader+workers) is ready" in steps


def test_scenario_size_two_to_three_is_an_update_that_recreates_each_group(plan: Plan):
    """`size` is mutable: the webhook's ValidateUpdate keeps only subGroupSize and subdomainPolicy from changing
    (pkg/webhooks/leaderworkerset_webhook.go L98-116 @ v0.10.0), and the CRD has no CEL rule on it. It is part of the
    revision (leaderWorkerTemplate), so each group is replaced by one of the new size, one at a time."""
    grown = {**BIG, "pipelineParallelSize": 3, "kubernetes": {**BIG["kubernetes"], "nodes": 3}}
    config = config_with(grown)
    config[P + "gpuFleet"]["nodes"] = 10  # two groups of three, the training's two pods, prod's llama
    impact = lws_impact(plan, synthesize("prod", config))
    updated = {path for path, _ in impact.updated}
    assert "spec.leaderWorkerTemplate.size" in updated
    # --pipeline-parallel-size 3 and --nnodes 3 of the leader's and the workers' `vllm serve`.
    assert {p for p in updated if ".command[" in p} == {
        f"spec.leaderWorkerTemplate.{role}.spec.containers[0].command[{i}]"
        for role in ("leaderTemplate", "workerTemplate")
        for i in (10, 14)
    }
    webhook = lines("pkg/webhooks/leaderworkerset_webhook.go", 98, 116)
    assert webhook.count("ValidateImmutableField") == 1 and "SubGroupSize" in webhook
    assert "x-kubernetes-validations" not in (DATA / "leaderworkerset.x-k8s.io_leaderworkersets.yaml").read_text()
    assert "leaderWorkerTemplate" in revision_fields()


def test_scenario_replicas_add_a_group_without_touching_the_others(plan: Plan):
    config = config_with()
    config[P + "gpuFleet"]["nodes"] = 10
    big = config[P + "inference"][-1]
    big["kubernetes"]["replicas"] = 3
    head = synthesize("prod", config)
    impacts = report(plan, head)
    assert {path for path, _ in lws_impact(plan, head).updated} == {"spec.replicas"}
    # The budget stays: prod keeps replicas - 1 serving, so still one pod (one group) may go down.
    assert (PDB, NAME + "-pdb") not in impacts
    # Not in the revision: no rollout; the leader StatefulSet gets the new replicas (a new group, its workers).
    assert '"replicas"' not in revision_fields()


def test_scenario_switching_from_one_node_to_a_group_replaces_the_deployment_and_keeps_the_service(plan: Plan):
    one_node = {**BIG, "pipelineParallelSize": 1, "kubernetes": {**BIG["kubernetes"], "nodes": 1}}
    impacts = report(synthesize("prod", config_with(one_node)), plan)
    assert impacts[(DEPLOYMENT, NAME)].action is Action.DELETE
    assert impacts[(LWS_TYPE, NAME)].action is Action.CREATE
    assert impacts[(RELEASE, "lws")].action is Action.CREATE
    # The Service keeps its name and ClusterIP: its selector moves to the leaders in place (only .spec.clusterIP
    # replaces a Service); the budget and the policy follow in place too.
    service = impacts[(SERVICE, f"{NAME}-service")]
    assert service.action is Action.UPDATE and not service.replaced_by
    assert ("spec.selector.leaderworkerset.sigs.k8s.io/worker-index", "k8s.update") in service.updated
    for kind, name in ((PDB, f"{NAME}-pdb"), (POLICY, f"{NAME}-ingress")):
        assert impacts[(kind, name)].action is Action.UPDATE and not impacts[(kind, name)].replaced_by
    # The engine deletes what the program no longer declares only after every create and update has finished
    # (pulumi/pulumi pkg/resource/deploy/deployment_executor.go L328-332: performPostSteps, GenerateDeletes, once the
    # program is done): the new group starts while the Deployment still holds its GPUs. On a fleet without room for
    # both, switch in two runs (docs/workloads.md).
    executor = PULUMI.read("pkg/resource/deploy/deployment_executor.go").decode().splitlines()
    assert "if seenNil && ex.asyncEventsExpected == 0 {" in executor[328 - 1]
    assert "GenerateDeletes(targetsOpt, excludesOpt)" in "\n".join(executor[480:490])


def test_an_autoscaled_multi_node_server_scales_its_groups_through_the_lws_scale_subresource():
    """KEDA's ScaledObject targets any resource with a scale subresource (its scaleTargetRef's apiVersion and kind);
    the LeaderWorkerSet's scales `.spec.replicas`, the groups, and selects the leaders (`.status.hpaPodSelector`,
    the CRD above), the pods whose vLLM queue the query reads through the Service. Pulumi leaves the count to it."""
    big = {**BIG, "kubernetes": {**BIG["kubernetes"], "autoscaling": {"maxReplicas": 3}}}
    config = config_with(big)
    config[P + "gpuFleet"]["nodes"] = 10
    plan = synthesize("prod", config)
    scaled = manifest_of(plan.get("kubernetes:keda.sh/v1alpha1:ScaledObject", f"{NAME}-scaler"))
    assert scaled["spec"]["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": f"{NAME}-lws",
    }
    lws = plan.get(LWS_TYPE, NAME)
    assert lws["ignore_changes"] == [REPLICAS_PATH] and manifest_of(lws)["spec"]["replicas"] == 2  # prod's minimum
    assert manifest_of(lws)["metadata"]["annotations"][PATCH_FORCE_ANNOTATION] == "true"
    assert validate_all([scaled, manifest_of(lws)], CRDS) == 2


def test_a_worker_stops_only_after_its_leader_stopped_answering(plan: Plan, tmp_path: Path):
    """The workers' preStop, run for real against a local stand-in leader: it waits while /health answers and returns
    once the leader is gone (its own preStop drained it); then the kubelet sends the worker SIGTERM."""
    (hook,) = [c for c in containers(plan, "workerTemplate").values() if "lifecycle" in c]
    command = hook["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python3", "-c"] and ":8080/health" in command[2]  # the leader's proxy port

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    leader = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=leader.serve_forever, daemon=True).start()
    script = command[2].replace(":8080/", f":{leader.server_port}/")
    # The address LWS gives the pod, whose DNS record is the headless Service's (test_the_leader_address_...); the
    # cluster's DNS is stood in for that one name only, by a resolver that knows nothing else.
    address = leader_address(lws_manifest(plan), 0)
    dns = tmp_path / "sitecustomize.py"
    dns.write_text(
        "import socket\n"
        "_resolve = socket.getaddrinfo\n"
        "def getaddrinfo(host, *args, **kwargs):\n"
        f"    if host != {address!r}:\n"
        "        raise socket.gaierror(socket.EAI_NONAME, 'Name or service not known')\n"
        "    return _resolve('127.0.0.1', *args, **kwargs)\n"
        "socket.getaddrinfo = getaddrinfo\n"
    )
    env = {**os.environ, multinode.LEADER_ADDRESS_ENV: address, "PYTHONPATH": str(tmp_path)}
    worker = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            worker.wait(timeout=2)  # the leader still answers: the worker keeps running
        leader.shutdown()
        leader.server_close()
        assert worker.wait(timeout=10) == 0
    finally:
        worker.kill()


def test_rdma_between_the_pods_of_a_group_as_for_a_training():
    """`network` as on a multi-node training (docs/workloads.md, RDMA between training nodes): the RDMA resource,
    IPC_LOCK, the Multus annotation and RCCL's variables on the leader and on every worker."""
    network = {"rdma": {"resource": "rdma/hca_shared_devices_a"}, "networks": "rdma-net", "interface": "net1"}
    plan = synthesize("prod", config_with({**BIG, "kubernetes": {**BIG["kubernetes"], "network": network}}))
    template = lws_manifest(plan)["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        assert template[role]["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/networks": "rdma-net"}
        vllm = containers(plan, role)["vllm"]
        assert vllm["resources"]["limits"]["rdma/hca_shared_devices_a"] == "1"
        assert "IPC_LOCK" in vllm["securityContext"]["capabilities"]["add"]
        env = {e["name"]: e.get("value") for e in vllm["env"]}
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "net1"
    assert validate_object(lws_manifest(plan), CRDS) is None


@pytest.mark.parametrize(
    "change, key, words",
    [
        (
            {"pipelineParallelSize": 1, "kubernetes": {**BIG["kubernetes"], "nodes": 1}},
            "inference[1].kubernetes.network",
            "a one-node vLLM replica has no traffic between pods",
        ),
        ({"rocmEnv": {"NCCL_SOCKET_IFNAME": "eth0"}}, "inference[1].rocmEnv.NCCL_SOCKET_IFNAME", "is set by"),
    ],
)
def test_network_refusals_name_the_key(change, key, words):
    network = {"rdma": {"resource": "rdma/hca_shared_devices_a"}, "interface": "net1"}
    big = {**BIG, **change}
    big["kubernetes"] = {**big["kubernetes"], "network": network}
    message = refused(lambda: synthesize("prod", config_with(big)))
    assert key in message and words in message


def test_the_crd_files_of_every_known_chart_version_are_its_crds_folder():
    for version, files in LWS_CRD_FILES_BY_VERSION.items():
        assert sorted(tree_at(f"v{version}", "charts/lws/crds/")) == sorted(files)
    message = refused(lambda: synthesize("prod", config_with(chartVersion="0.7.0")))
    assert "kubernetes.leaderWorkerSet.chartVersion" in message and "0.8.0, 0.9.0, 0.10.0" in message


def test_scenario_chart_bump_updates_the_release_and_crds_in_place_and_adds_the_new_one(plan: Plan):
    """0.9.0 -> 0.10.0: the two CRDs of both versions keep their URN (same ConfigFile, same object names) and are
    patched in place; 0.10.0's new one is created; the release is upgraded; no LeaderWorkerSet or pod is touched."""
    impacts = report(synthesize("prod", config_with(chartVersion="0.9.0")), plan)
    assert {key: i.action for key, i in impacts.items()} == {
        (RELEASE, "lws"): Action.UPDATE,
        (CONFIG_FILE, "lws-crds-leaderworkersets"): Action.UPDATE,
        (CONFIG_FILE, "lws-crds-disaggregatedsets"): Action.UPDATE,
        (CONFIG_FILE, "lws-crds-disaggregatedsetrolescalers"): Action.CREATE,
    }
    assert impacts[(RELEASE, "lws")].updated == [
        ("values.image.manager.tag", "k8s.update"),
        ("version", "k8s.update"),
    ]


def test_scenario_the_first_pulumi_up_after_the_rename_deletes_the_old_set_first_and_keeps_the_service(plan: Plan):
    """What the previous program declared (the LeaderWorkerSet named like the workload and its API Service, one
    NetworkPolicy with the API rule on every pod) against today's: the LeaderWorkerSet's new name is a new object
    (pulumi-kubernetes replaces on metadata.name, rule k8s.identity), deleted first (delete_before_replace: the old
    groups hold the GPUs the new ones need; the engine deletes a replaced resource only after every create and
    update otherwise, pulumi step_generator.go L2164, and the option overrides the provider's choice, L2043-2046).
    The API Service, its name and ClusterIP stay: clients see no change."""
    head = plan.to_json()
    base = copy.deepcopy(head)
    resources = []
    for resource in base["resources"]:
        inputs = resource["inputs"]
        if resource["type"] == LWS_TYPE:
            inputs["metadata"]["name"] = NAME
            resource["delete_before_replace"] = False
        elif resource["type"] == POLICY and resource["name"] == f"{NAME}-api-ingress":
            continue
        elif resource["type"] == POLICY and resource["name"] == f"{NAME}-ingress":
            api = next(r for r in head["resources"] if r["name"] == f"{NAME}-api-ingress")
            inputs["spec"]["ingress"] = [*api["inputs"]["spec"]["ingress"], *inputs["spec"]["ingress"]]
        resources.append(resource)
    base["resources"] = resources
    impacts = predict(SynthPlan.model_validate(base), SynthPlan.model_validate(head)).impacts
    by_key = {(i.type, i.name): i for i in impacts}
    lws = by_key[(LWS_TYPE, NAME)]
    assert lws.action is Action.DELETE_REPLACE and lws.replaced_by == [("metadata.name", "k8s.identity")]
    assert "pulumi.delete-before-replace-option" in lws.rules
    assert lws.meaning == f"deletes LeaderWorkerSet `ml/{NAME}`, then creates it as `ml/{NAME}-lws`"
    assert by_key[(POLICY, f"{NAME}-ingress")].action is Action.UPDATE
    assert by_key[(POLICY, f"{NAME}-api-ingress")].action is Action.CREATE
    assert set(by_key) == {(LWS_TYPE, NAME), (POLICY, f"{NAME}-ingress"), (POLICY, f"{NAME}-api-ingress")}
    generator = PULUMI.read("pkg/resource/deploy/step_generator.go").decode().splitlines()
    assert "if goal.DeleteBeforeReplace != nil {" in generator[2044 - 1]
    assert 'the delete step is generated "later" on, after all creates/updates finish' in generator[2164 - 1]


@pytest.mark.parametrize(
    "other, taken",
    [
        # A workload named like the set's headless Service (the LWS controller's).
        ({"name": f"{NAME}-lws", "model": "Qwen/Qwen2.5-0.5B-Instruct", "kubernetes": {"namespace": "ml"}}, "lws"),
        # A training whose JobSet's headless Service would be the big server's router Service.
        (
            {
                "name": f"{NAME}-router",
                "kubernetes": {
                    "namespace": "ml",
                    "nodes": 2,
                    "checkpoints": {"type": "pvc", "storageClass": "cephfs", "size": "1Ti"},
                },
            },
            "router",
        ),
    ],
)
def test_two_workloads_whose_services_share_a_name_are_refused(other, taken):
    """The LWS and JobSet controllers create their headless Service only where the name is free (above; jobset
    v0.12.0 jobset_controller.go L797-805): a second Service of the name, the stack's or a controller's, leaves one
    workload without its own."""
    config = config_with({**BIG, "kubernetes": {**BIG["kubernetes"], "router": {}}})
    config[P + ("training" if "nodes" in other["kubernetes"] else "inference")].append(other)
    config[P + "gpuFleet"]["nodes"] = 12
    message = refused(lambda: synthesize("prod", config))
    assert f"makes the Service '{NAME}-{taken}' in namespace 'ml'" in message, message
    assert "rename one workload" in message


def test_the_service_and_the_router_move_to_the_leaders_only_once_the_groups_are_up():
    """Switching a one-node server to groups changes the Service's and the router's selector (to the leaders) in the
    same run as the LeaderWorkerSet's create. Both depend on the workload: the SDK registers a resource only once its
    dependsOn URNs resolved (pulumi sdk prepare_resource, "all our dependencies must be finished"), the engine answers
    a registration once its step is done (pulumi/pulumi pkg/resource/deploy/source_eval.go L3039-3041), and the
    LeaderWorkerSet's step ends at its Available condition (multinode.WAIT_FOR): the old replicas keep serving until
    the groups are up, and on a fleet without room for them the run stops with the Service unchanged."""
    routed = {**BIG, "kubernetes": {**BIG["kubernetes"], "router": {}}}
    for config in (
        config_with(routed),
        config_with({**routed, "pipelineParallelSize": 1, "kubernetes": {**routed["kubernetes"], "nodes": 1}}),
    ):
        plan = synthesize("prod", config)
        [workload] = [r for r in plan.resources if r["type"] in (LWS_TYPE, DEPLOYMENT) and r["name"] == NAME]
        assert workload["urn"] in plan.get(SERVICE, f"{NAME}-service")["depends_on"]
        assert workload["urn"] in plan.get(DEPLOYMENT, f"{NAME}-router")["depends_on"]
    source_eval = PULUMI.read("pkg/resource/deploy/source_eval.go").decode().splitlines()
    assert source_eval[3038].strip() == "// Now block waiting for the operation to finish."
