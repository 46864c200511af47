"""Training and inference workloads as the program declares them (tools.synth), validated like an API server.

Every Kubernetes object passes kubernetes-validate (strict, 1.30); the shipped training program is run from
the ConfigMap's files; config errors are refused with messages naming their key; names are stable.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.workloads import proxy
from schema.docker import PROXY_IMAGE
from schema.workloads import INFERENCE_ROCM_ENV, InferenceConfig, merged_env
from components.workloads.inference import DOCKER_TOKEN_FILE, MODEL_CACHE_MOUNT
from tools.synth import SECRET, Plan, ProgramRefused, autoname, manifest_of, synthesize, upload_text
from components.workloads import training
from components.workloads.training import PROGRAM_DIR, SETTINGS_CHECK, WORKERS, program_files
from conftest import CONTAINER, REMOTE_IMAGE, env_of, partition_of, refused, render_nodes_of, stack_file
from k8s_validation import ManifestInvalid, stack_crds, validate_all, validate_object

DATA = Path(__file__).parent / "data"
# Built once: the JobSet CRD's strict schema is large.
CRDS = stack_crds()

P = "rocm-stack:"
TOKEN = {P + "huggingfaceToken": "hf_test_token"}

JOB = "kubernetes:batch/v1:Job"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
SERVICE = "kubernetes:core/v1:Service"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
SECRET_KIND = "kubernetes:core/v1:Secret"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
WORKLOAD_COMPONENTS = (
    "rocm-stack:workloads:TrainingJob",
    "rocm-stack:workloads:VllmServer",
    "rocm-stack:workloads:DockerTraining",
    "rocm-stack:workloads:DockerVllm",
)


def _own_namespace(config: dict[str, Any], namespace: str) -> None:
    """The committed stack's Kubernetes section (or a minimal one), owning `namespace` too."""
    kubernetes = config.setdefault(P + "kubernetes", {})
    if config[P + "environment"] == "prod":
        kubernetes.setdefault("provider", {"context": "gpu-prod"})
    if namespace not in kubernetes.setdefault("namespaces", []):
        kubernetes["namespaces"].append(namespace)


def dev_config() -> dict[str, Any]:
    """One workstation of 2 GPUs: a training partition and a serving partition; a local cluster."""
    config = stack_file("dev")
    config[P + "hosts"] = [
        {
            "name": "workstation",
            "gpus": 2,
            "containers": [{"name": "train", "gpus": [0]}, {"name": "serve", "gpus": [1]}],
        }
    ]
    _own_namespace(config, "ml")
    config[P + "training"] = [
        {
            "name": "tiny",
            "steps": 200,
            "checkpointEvery": 20,
            "kubernetes": {
                "namespace": "ml",
                "nodes": 2,
                "gpusPerNode": 1,
                "checkpoints": {"type": "pvc", "size": "10Gi"},
            },
            "docker": {"partitions": ["workstation/train"]},
        }
    ]
    config[P + "inference"] = [
        {
            "name": "chat",
            "model": "Qwen/Qwen2.5-0.5B-Instruct",
            "kubernetes": {"namespace": "ml"},
            "docker": {"partitions": ["workstation/serve"]},
        }
    ]
    return config


def prod_config() -> dict[str, Any]:
    """The committed prod fleet; workloads claim some partitions (which then drop the keys a workload decides)."""
    config = stack_file("prod")
    claimed = {
        ("gpu-node-1", "train-a"),
        ("gpu-node-2", "train-a"),
        ("gpu-node-3", "serve-b"),
        ("gpu-node-4", "serve-b"),
    }
    for host in config[P + "hosts"]:
        for container in host["containers"]:
            if (host["name"], container["name"]) in claimed:
                for key in ("image", "command", "shmSize", "ports", "restart"):
                    container.pop(key, None)
    _own_namespace(config, "ml")
    config[P + "gpuFleet"] = {"nodes": 4, "gpusPerNode": 8}
    config[P + "training"] = [
        {
            "name": "llm-pretrain",
            "steps": 100000,
            "checkpointEvery": 500,
            "shmSize": "64GiB",
            "rcclEnv": {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": None},
            "kubernetes": {
                "namespace": "ml",
                "nodes": 2,
                "gpusPerNode": 8,
                "nodeSelector": {"amd.com/gpu.product-name": "AMD_Instinct_MI300X"},
                "checkpoints": {"type": "pvc", "storageClass": "cephfs", "size": "2Ti"},
                # Prod's queues quote every GPU: every GPU workload is queued.
                "queueName": "pretrain",
            },
            "docker": {"partitions": ["gpu-node-1/train-a", "gpu-node-2/train-a"]},
        }
    ]
    config[P + "inference"] = [
        {
            "name": "llama",
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "tensorParallelSize": 2,
            "revision": "0e9e39f249a16976918f6564b8830bc894c89659",
            "extraArgs": ["--max-model-len", "8192"],
            "kubernetes": {
                "namespace": "ml",
                "gpus": 4,
                "modelCache": {"type": "pvc", "storageClass": "cephfs", "size": "500Gi"},
                "queueName": "serving",
            },
            "docker": {"partitions": ["gpu-node-3/serve-b", "gpu-node-4/serve-b"], "publishedPort": 8001},
        }
    ]
    return config


def synth(stack: str, config: dict[str, Any], secrets: dict[str, str] | None = None) -> Plan:
    return synthesize(stack, config, secrets=secrets)


def refusal(stack: str, config: dict[str, Any], secrets: dict[str, str] | None = TOKEN) -> str:
    return refused(lambda: synth(stack, config, secrets))


@pytest.fixture(scope="module")
def dev() -> Plan:
    return synth("dev", dev_config(), TOKEN)


@pytest.fixture(scope="module")
def prod() -> Plan:
    return synth("prod", prod_config(), TOKEN)


def manifest(plan: Plan, type_token: str, name: str) -> dict[str, Any]:
    return copy.deepcopy(manifest_of(plan.get(type_token, name)))


def pod_spec(plan: Plan, type_token: str, name: str) -> dict[str, Any]:
    return manifest(plan, type_token, name)["spec"]["template"]["spec"]


def env_dict(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def docker_container(plan: Plan, name: str) -> dict[str, Any]:
    return plan.get(CONTAINER, name)


def partition_containers(plan: Plan) -> dict[str, dict[str, Any]]:
    """Containers of GPU partitions (GpuHost's own and workloads', all its children), not other concerns' (e.g.
    exporters)."""
    return {
        c["name"]: c
        for c in plan.of_type(CONTAINER)
        if not c["inputs"].get("attach") and "$rocm-stack:docker:GpuHost::" in c["parent"]
    }


# The primary render nodes of an 8x MI300X host: MI300-class GPUs reserve 8 render minors each (ROCm/k8s-gpu-dra-driver
# issue #20, a real MI300X host: renderD128, renderD136, renderD144 for consecutive GPUs).
MI300X_RENDER_NODES = [f"/dev/dri/renderD{128 + 8 * i}" for i in range(8)]


def gpus_of_partition(plan: Plan, host: str, partition: str) -> list[str]:
    """The partition's 4 GPUs' render nodes: disjoint from, and together with, the host's other partition all 8."""
    containers = partition_containers(plan)
    mine = render_nodes_of(containers[f"{host}-{partition}"])
    [other] = [
        render_nodes_of(c)
        for name, c in containers.items()
        if name.startswith(f"{host}-") and name != f"{host}-{partition}"
    ]
    assert sorted(mine + other) == MI300X_RENDER_NODES and len(mine) == 4
    return mine


def workload_objects(plan: Plan) -> list[dict[str, Any]]:
    """The Kubernetes objects the workload components declare."""
    return [
        manifest_of(r)
        for r in plan.kubernetes_objects()
        if any(f"${kind}::" in r["parent"] for kind in WORKLOAD_COMPONENTS)
    ]


# --- every Kubernetes object is valid --------------------------------------------------------------------------


@pytest.mark.parametrize("plan_name", ["dev", "prod"])
def test_every_manifest_passes_strict_validation(plan_name, request):
    """Built-in kinds strictly (kubernetes-validate); the JobSet against the vendored CRD of JobSet v0.12.0 made
    strict, and its embedded Job template against the built-in batch/v1 Job schema (tests/k8s_validation.py)."""
    plan = request.getfixturevalue(plan_name)
    objects = workload_objects(plan)
    for obj in objects:
        if obj["kind"] == "Secret":
            # The token never reaches synth output: the manifest says the payload is hidden.
            assert "stringData" not in obj
            assert obj["metadata"]["annotations"]["rocm-stack/synth"] == "stringData hold a secret, not shown"
    kinds = {o["kind"] for o in objects}
    assert {"JobSet", "Service", "ConfigMap", "PersistentVolumeClaim", "Deployment", "Secret"} <= kinds
    assert validate_all(objects, CRDS) == len(objects)


def test_a_misspelled_jobset_field_is_caught(prod):
    """kubernetes-validate skips custom resources: the JobSet is checked against its CRD, nothing silently."""
    jobset = manifest(prod, JOBSET, "llm-pretrain")
    validate_object(jobset, CRDS)
    jobset["spec"]["failurePolicy"]["maxRestart"] = jobset["spec"]["failurePolicy"].pop("maxRestarts")
    with pytest.raises(ManifestInvalid, match="maxRestart"):
        validate_object(jobset, CRDS)
    jobset = manifest(prod, JOBSET, "llm-pretrain")
    jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "memory"
    ] = "lots"
    with pytest.raises(ManifestInvalid, match="memory"):
        validate_object(jobset, CRDS)


# --- training on Kubernetes ------------------------------------------------------------------------------------


def job_spec(plan: Plan, name: str) -> dict[str, Any]:
    """The batch/v1 JobSpec a training runs: the JobSet's one replicated Job, or the plain Job's."""
    jobsets = [r for r in plan.of_type(JOBSET) if r["name"] == name]
    if jobsets:
        [replicated] = manifest_of(jobsets[0])["spec"]["replicatedJobs"]
        return copy.deepcopy(replicated["template"]["spec"])
    return manifest(plan, JOB, name)["spec"]


def training_pod(plan: Plan, name: str) -> dict[str, Any]:
    return job_spec(plan, name)["template"]["spec"]


def test_multi_node_training_is_a_jobset_of_one_indexed_job(prod):
    """JobSet v1alpha2 (kubernetes-sigs/jobset v0.12.0): one replicated job (replicas 1) whose Job runs `nodes`
    Indexed pods, as upstream's PyTorch example (site/static/examples/pytorch/cnn-mnist/mnist.yaml: parallelism =
    completions = 4, backoffLimit 0). An Indexed Job alone does not start its pods together, and losing pod 0
    (the c10d store) fails the others."""
    jobset = manifest(prod, JOBSET, "llm-pretrain")
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and jobset["metadata"]["namespace"] == "ml"
    [replicated] = jobset["spec"]["replicatedJobs"]
    assert (replicated["name"], replicated["replicas"]) == ("workers", 1)
    spec = replicated["template"]["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    # A failed pod fails its Job at once, so the JobSet's failurePolicy restarts the whole set.
    assert spec["backoffLimit"] == 0 and spec["template"]["spec"]["restartPolicy"] == "Never"
    # No plain Job: the GPU check is an init container of each pod (tests/test_k8s_day2_gate.py).
    assert prod.of_type(JOB) == []


def test_a_failed_pod_restarts_the_whole_set_from_the_checkpoint(prod):
    """failurePolicy: "A JobSet failure is counted when ANY of its child Jobs fail. maxRestarts defines how many
    times to automatically restart the JobSet. A restart is done by recreating all child jobs" (site/content/en/
    docs/concepts/_index.md L174-177 @ v0.12.0); BlockingRecreate: "Ensures that all Jobs (and their Pods) from
    the previous iteration are deleted before creating new Jobs" (jobset_types.go L497-508), so no old pod joins
    the new rendezvous. train.py resumes from CHECKPOINT_DIR on the PVC. Invalid settings fail the Job through
    its podFailurePolicy (Job failure reason PodFailurePolicy): FailJobSet, no restart."""
    policy = manifest(prod, JOBSET, "llm-pretrain")["spec"]["failurePolicy"]
    assert policy == {
        "maxRestarts": 6,
        "restartStrategy": "BlockingRecreate",
        "rules": [
            {
                "name": "nodeDisruption",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": ["has condition DisruptionTarget matching FailJob rule"],
            },
            {"name": "invalidSettings", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]},
        ],
    }
    env = env_dict(training_pod(prod, "llm-pretrain")["containers"][0])
    assert env["CHECKPOINT_DIR"] == "/checkpoints"


def test_jobset_names_pass_the_jobset_webhooks_checks(prod):
    """pkg/webhooks/jobset_webhook.go @ v0.12.0 L234-253: the longest job name `<jobset>-<replicatedJob>-<index>`
    and pod name `GenPodName(...) + "-abcde"` (placement.go L20-21: `%s-%s-%s-%s`) must be DNS-1035 labels of at
    most 63 characters ("JobSet name is too long, pod names generated for this JobSet will exceed 63
    characters"); failure policy rule names must match `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$` (L416-418).
    Checked for the longest workload name and node count the config accepts."""
    import re

    from schema.workloads import TrainingKubernetes

    longest_name = "a" * 40  # WorkloadName: at most 40 characters
    max_nodes = next(m.le for m in TrainingKubernetes.model_fields["nodes"].metadata if hasattr(m, "le"))
    job_name = f"{longest_name}-{WORKERS}-0"
    pod_name = f"{longest_name}-{WORKERS}-0-{max_nodes - 1}-abcde"
    dns1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
    for name in (job_name, pod_name):
        assert len(name) <= 63 and dns1035.fullmatch(name), name
    for rule in manifest(prod, JOBSET, "llm-pretrain")["spec"]["failurePolicy"]["rules"]:
        assert re.fullmatch(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?", rule["name"]) and len(rule["name"]) <= 128
    with pytest.raises(ProgramRefused, match="at most 40 characters"):
        synth("prod", _set(prod_config(), "training[0].name", "a" * 41), TOKEN)


def test_training_creation_is_not_awaited_but_its_deletion_is(prod):
    """pulumi-kubernetes provider/pkg/metadata/overrides.go L176, L186-208 @ v4.32.0: with
    `pulumi.com/skipAwait: "true"` a batch/v1 Job ("legacy types which support buggy skipAwait behavior during
    delete", see pulumi/pulumi-kubernetes#3154: "racy") is not awaited on delete either, and since 4.29.0 (#2926)
    the replacement's create fails with AlreadyExists while the old Job is still being deleted (foreground by
    default). `pulumi.com/waitFor: "jsonpath={.metadata.uid}"` (4.18.0 CHANGELOG: "ready when any value exists at
    the given path") returns once the object exists and keeps the delete awaited; delete-before-replace since the
    name is fixed; a JobSet's spec is immutable (CEL `self == oldSelf`), so any change is a replacement."""
    jobset = prod.get(JOBSET, "llm-pretrain")
    plan = synth("prod", _set(prod_config(), "training[0].kubernetes.nodes", 1), TOKEN)
    job = plan.get(JOB, "llm-pretrain")
    for resource in (jobset, job):
        annotations = manifest_of(resource)["metadata"]["annotations"]
        assert "pulumi.com/skipAwait" not in annotations
        assert annotations["pulumi.com/waitFor"] == "jsonpath={.metadata.uid}"
        assert resource["delete_before_replace"] is True
    # and a new Kueue queue is a new job (Kueue refuses the label change on a running one: tests/test_queues.py)
    # (each immutable field a replacement: tests/test_k8s_immutable.py)
    for resource in (jobset, job):
        assert 'metadata.labels["kueue.x-k8s.io/queue-name"]' in resource["replace_on_changes"]
    assert "spec.replicatedJobs" in jobset["replace_on_changes"]


def test_one_node_training_is_a_plain_job_with_torchrun_standalone():
    plan = synth("prod", _set(prod_config(), "training[0].kubernetes.nodes", 1), TOKEN)
    job = manifest(plan, JOB, "llm-pretrain")
    assert job["spec"]["backoffLimit"] == 6 and "completionMode" not in job["spec"]
    [trainer] = job["spec"]["template"]["spec"]["containers"]
    assert trainer["command"] == [
        "torchrun",
        "--standalone",
        "--nproc-per-node",
        "8",
        "/opt/rocm-stack/programs/train.py",
    ]
    # No JobSet, no JobSet controller.
    assert not plan.of_type(JOBSET)
    assert "jobset" not in [r["name"] for r in plan.of_type("kubernetes:helm.sh/v3:Release")]


def test_torchrun_rendezvous_on_pod_zero_behind_the_jobsets_headless_service(prod):
    """The JobSet controller creates the headless Service `<subdomain>` (default: the JobSet's name;
    ClusterIP None, publishNotReadyAddresses true) owned by the JobSet (jobset_controller.go L790-830 @ v0.12.0);
    pods resolve as <jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain> (jobset_types.go L378-394). The
    stack declares no Service of its own for it (a second one of that name would clash).

    Static rendezvous with the node rank from the pod's completion index, as JobSet's own PyTorch example
    (site/static/examples/pytorch/cnn-mnist/mnist.yaml L23-38 @ v0.12.0: MASTER_ADDR `pytorch-workers-0-0.pytorch`,
    RANK from fieldPath `metadata.annotations['batch.kubernetes.io/job-completion-index']`, `torchrun ...
    --node_rank=$RANK` through bash). Here torchrun reads PET_NODE_RANK itself (torch 2.13
    distributed/argparse_util.py L45-46: `env_name = f"PET_{dest.upper()}"`; run.py L620-627 --node-rank
    `action=env`), so no shell. tests/e2e/test_e2e_rendezvous.py runs this command form on CPU."""
    pod = training_pod(prod, "llm-pretrain")
    [trainer] = pod["containers"]
    assert trainer["command"] == [
        "torchrun",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "8",
        "--rdzv-backend",
        "static",
        "--master-addr",
        "llm-pretrain-workers-0-0.llm-pretrain",
        "--master-port",
        "29500",
        "--rdzv-id",
        "llm-pretrain",
        "--max-restarts",
        "0",
        "/opt/rocm-stack/programs/train.py",
    ]
    rank = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env_dict(trainer)["PET_NODE_RANK"] == rank
    network = manifest(prod, JOBSET, "llm-pretrain")["spec"]["network"]
    assert network == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert [s["metadata"]["name"] for s in workload_objects(prod) if s["kind"] == "Service"] == ["llama"]


def test_torchrun_itself_reads_the_rendered_command_and_the_node_rank_from_the_environment(prod, monkeypatch):
    """torch 2.13's own launcher parses the trainer's command with PET_NODE_RANK set as the downward API sets it:
    static rendezvous on pod 0's name, this pod's rank from the environment, no torchrun restarts
    (run.py config_from_args L890-893: `rdzv_configs["rank"] = args.node_rank` for static)."""
    from torch.distributed import run

    [trainer] = training_pod(prod, "llm-pretrain")["containers"]
    monkeypatch.setenv("PET_NODE_RANK", "1")
    args = run.get_args_parser().parse_args(trainer["command"][1:])
    config, _, entry = run.config_from_args(args)
    assert (config.rdzv_backend, config.rdzv_endpoint) == ("static", "llm-pretrain-workers-0-0.llm-pretrain:29500")
    assert config.rdzv_configs["rank"] == 1 and (config.min_nodes, config.max_nodes) == (2, 2)
    assert config.max_restarts == 0 and entry == ["-u", "/opt/rocm-stack/programs/train.py"]


def test_c10d_rendezvous_would_let_pod_zero_miss_hosting_before_its_name_resolves(monkeypatch):
    """Why not c10d: without `is_host` its backend decides once whether this process hosts the store, by matching
    the endpoint's host to this machine (torch 2.13 c10d_rendezvous_backend.py L137-145, utils.py
    _matches_machine_hostname L117-165), and a non-host only connects (L154-183), for read_timeout 60 s (L148).
    Pod 0's hostname is `<jobset>-workers-0-0`, its FQDN in /etc/hosts (kubelet) has the namespace and cluster
    domain, and the endpoint's name resolves only once the headless Service publishes the pod: torch's own check
    answers False before that, so no pod would host the store."""
    import socket

    from torch.distributed.elastic.rendezvous import utils

    host = training.rendezvous_host("llm-pretrain")
    pod_ip = "10.244.1.7"
    published: list[str] = []

    def getaddrinfo(name, *args, **kwargs):
        if name == "llm-pretrain-workers-0-0":  # /etc/hosts
            fqdn = "llm-pretrain-workers-0-0.llm-pretrain.ml.svc.cluster.local"
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, fqdn, (pod_ip, 0))]
        if name == host and published:
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (pod_ip, 0))]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(utils.socket, "gethostname", lambda: "llm-pretrain-workers-0-0")
    monkeypatch.setattr(utils.socket, "getaddrinfo", getaddrinfo)
    assert not utils._matches_machine_hostname(host)  # before the DNS record exists: a client, like the others
    published.append(host)
    assert utils._matches_machine_hostname(host)  # a moment later it would have been the host


def test_the_node_failure_tolerations_of_the_docs_reach_the_vllm_pods():
    """docs/kubernetes.md "Node life cycle": a shorter toleration of `unreachable`/`not-ready` starts a vLLM
    replacement sooner than the 300 s the DefaultTolerationSeconds admission plugin gives pods without one ("adds
    default tolerations for every pod that tolerate taints `notReady:NoExecute` and `unreachable:NoExecute`, with
    tolerationSeconds of 300s. If the pod already specifies a toleration for [them] ... the plugin won't touch
    it", k8s.io/kubernetes plugin/pkg/admission/defaulttolerationseconds). The docs' YAML, as written, renders."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "kubernetes.md").read_text()
    section = docs[docs.index("## Node life cycle") : docs.index("## Protection")]
    example = section[
        section.index("```yaml\n") + len("```yaml\n") : section.index("```", section.index("```yaml") + 7)
    ]
    tolerations = yaml.safe_load(example)["tolerations"]
    config = prod_config()
    config[P + "inference"][0]["kubernetes"]["tolerations"] = tolerations
    pod = pod_spec(synth("prod", config, TOKEN), DEPLOYMENT, "llama")
    assert pod["tolerations"] == tolerations
    assert {(t["key"], t["tolerationSeconds"]) for t in pod["tolerations"] if t["effect"] == "NoExecute"} == {
        ("node.kubernetes.io/unreachable", 60),
        ("node.kubernetes.io/not-ready", 60),
    }


def test_jobset_controller_is_a_pinned_release_or_declared_present(prod):
    """JobSet's install doc (site/content/en/docs/installation/_index.md L57 @ v0.12.0): `helm install jobset
    oci://registry.k8s.io/jobset/charts/jobset --version 0.12.0 --create-namespace --namespace=jobset-system`.
    The chart's values say `tag: main` of a staging registry (charts/jobset/values.yaml); the published chart's
    image (hack/helm-chart-package.sh L48) is pinned explicitly."""
    release = prod.get("kubernetes:helm.sh/v3:Release", "jobset")
    inputs = release["inputs"]
    assert {k: inputs[k] for k in ("name", "chart", "version", "namespace", "createNamespace")} == {
        "name": "jobset",
        "chart": "oci://registry.k8s.io/jobset/charts/jobset",
        "version": "0.12.0",
        "namespace": "jobset-system",
        "createNamespace": True,
    }
    chart_image = yaml.safe_load((DATA / "kubernetes" / "jobset-values.yaml").read_text())["image"]
    assert set(inputs["values"]["image"]) <= set(chart_image) and chart_image["tag"] == "main"
    assert inputs["values"]["image"]["tag"] == "v0.12.0"
    assert release["urn"] in prod.get(JOBSET, "llm-pretrain")["depends_on"]
    # A cluster that runs JobSet already: no release, the JobSet still declared.
    config = prod_config()
    config[P + "kubernetes"]["jobSet"] = {"install": False}
    plan = synth("prod", config, TOKEN)
    assert "jobset" not in [r["name"] for r in plan.of_type("kubernetes:helm.sh/v3:Release")]
    assert plan.of_type(JOBSET)


def test_kueue_queue_label_on_the_jobset():
    """Kueue: "The target local queue should be specified in the `metadata.labels` section of the JobSet
    configuration" (kubernetes-sigs/kueue site/content/en/docs/tasks/run/jobsets.md). Without `kubernetes.queues`
    the name is the cluster's own queue, taken as given."""
    config = prod_config()
    del config[P + "kubernetes"]["queues"]
    plan = synth("prod", _set(config, "training[0].kubernetes.queueName", "gpu-queue"), TOKEN)
    assert manifest(plan, JOBSET, "llm-pretrain")["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert (
        "kueue.x-k8s.io/queue-name"
        not in manifest_of(plan.get(JOBSET, "llm-pretrain"))["spec"]["replicatedJobs"][0]["template"]["spec"][
            "template"
        ]["metadata"]["labels"]
    )


def test_training_pods_get_gpus_shm_env_and_placement(prod):
    pod = training_pod(prod, "llm-pretrain")
    [trainer] = pod["containers"]
    assert trainer["resources"]["limits"]["amd.com/gpu"] == trainer["resources"]["requests"]["amd.com/gpu"] == "8"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "65536Mi"}
    mounts = {m["mountPath"]: m["name"] for m in trainer["volumeMounts"]}
    assert mounts["/dev/shm"] == "dshm" and mounts["/checkpoints"] == "checkpoints"
    env = env_dict(trainer)
    assert env["TRAIN_STEPS"] == "100000" and env["CHECKPOINT_EVERY"] == "500"
    assert env["CHECKPOINT_DIR"] == "/checkpoints" and env["TRAIN_BACKEND"] == "nccl"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "NCCL_DEBUG" not in env  # `null` removed the default
    assert pod["nodeSelector"] == {"amd.com/gpu.product-name": "AMD_Instinct_MI300X"}
    # Unset tolerations: those of the GPU nodes' taints (prod's amd.com/gpu=present:PreferNoSchedule).
    assert pod["tolerations"] == [
        {"key": "amd.com/gpu", "operator": "Equal", "value": "present", "effect": "PreferNoSchedule"}
    ]
    assert pod["enableServiceLinks"] is False


def _qos_class(pod: dict[str, Any]) -> str:
    """The pod's QoS class by the rules of https://kubernetes.io/docs/concepts/workloads/pods/pod-qos/:
    Guaranteed when every container (init containers too) has CPU and memory limits equal to its requests;
    BestEffort when no container has any CPU or memory request or limit ("Containers in a Pod can request other
    resources (not CPU or memory) and still be classified as BestEffort"); Burstable otherwise."""
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    amounts = [
        {
            (kind, k): c.get("resources", {}).get(kind, {}).get(k)
            for kind in ("requests", "limits")
            for k in ("cpu", "memory")
        }
        for c in containers
    ]
    if all(v is None for a in amounts for v in a.values()):
        return "BestEffort"
    if all(
        None not in a.values() and all(a["requests", k] == a["limits", k] for k in ("cpu", "memory")) for a in amounts
    ):
        return "Guaranteed"
    return "Burstable"


def _mebibytes(quantity: str) -> int:
    assert quantity.endswith("Mi"), quantity
    return int(quantity[:-2])


def test_gpu_pods_are_guaranteed_and_their_memory_holds_shm_and_working_set(prod):
    """A pod with only `amd.com/gpu` is BestEffort and "the kubelet prefers to evict BestEffort Pods"
    (pod-qos docs). A memory-backed emptyDir counts against memory: "files you write count against the memory
    limit of the container that wrote them" (https://kubernetes.io/docs/concepts/storage/volumes/#emptydir), so
    the limit is the working set (`memory`, default 64GiB) plus shmSize (64GiB in prod)."""
    for pod, shm_mib in ((training_pod(prod, "llm-pretrain"), 65536), (pod_spec(prod, DEPLOYMENT, "llama"), 16384)):
        assert _qos_class(pod) == "Guaranteed"
        memory = _mebibytes(pod["containers"][0]["resources"]["limits"]["memory"])
        assert memory == 65536 + shm_mib
        dshm = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert _mebibytes(dshm["emptyDir"]["sizeLimit"]) == shm_mib < memory
    # What a GPU-only pod was before: BestEffort by the same rules.
    assert _qos_class({"containers": [{"resources": {"limits": {"amd.com/gpu": "8"}}}]}) == "BestEffort"
    plan = synth(
        "prod",
        _set(_set(prod_config(), "training[0].kubernetes.cpu", "96"), "training[0].kubernetes.memory", "512GiB"),
        TOKEN,
    )
    limits = training_pod(plan, "llm-pretrain")["containers"][0]["resources"]["limits"]
    assert (limits["cpu"], limits["memory"]) == ("96", f"{512 * 1024 + 65536}Mi")


def test_sys_nice_only_where_a_workload_asks_for_numa_binding(prod):
    """The runtime's default seccomp profile allows mbind/set_mempolicy only with CAP_SYS_NICE (containerd
    contrib/seccomp/seccomp_default.go `case "CAP_SYS_NICE":` ... "mbind", "set_mempolicy", since v1.7.0; moby
    profiles/seccomp/default.json `"includes": {"caps": ["CAP_SYS_NICE"]}`), as on the Docker hosts. Pod Security
    baseline allows only AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP,
    SETGID, SETPCAP, SETUID, SYS_CHROOT (https://kubernetes.io/docs/concepts/security/pod-security-standards/): so
    SYS_NICE only with `numaBinding`, whose namespace is then privileged (issue 34 item 2)."""
    for pod in (training_pod(prod, "llm-pretrain"), pod_spec(prod, DEPLOYMENT, "llama")):
        assert pod["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False}
    config = _set(prod_config(), "training[0].kubernetes.numaBinding", True)
    plan = synth("prod", config, TOKEN)
    assert training_pod(plan, "llm-pretrain")["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"add": ["SYS_NICE"]},
    }
    assert pod_spec(plan, DEPLOYMENT, "llama")["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False
    }


RDMA = {
    "rdma": {"resource": "rdma/hca_shared_devices_a", "count": 1},
    "interface": "net1",
    "networks": "rdma-net",
    "ibHca": "mlx5_0,mlx5_1",
    "ibGidIndex": 3,
}


def test_rdma_network_for_rccl_across_nodes():
    """Mellanox/k8s-rdma-shared-dev-plugin: resource `<resourcePrefix>/<resourceName>` (prefix default "rdma",
    README example "hca_shared_devices_a"; example/test-hca-pod.yaml adds IPC_LOCK and limits
    `rdma/hca_shared_devices_a: 1`). IPC_LOCK lifts the memlock limit for memory registration ("This limit is not
    enforced if the process is privileged (CAP_IPC_LOCK)", man 2 mlock). RCCL reads NCCL_SOCKET_IFNAME
    (src/misc/socket.cc), NCCL_IB_HCA (src/transport/net_ib.cc L415), NCCL_IB_GID_INDEX (net_ib.cc L83, default
    -1 = auto); Gloo GLOO_SOCKET_IFNAME (PyTorch distributed docs). Multus reads `k8s.v1.cni.cncf.io/networks`."""
    config = _set(prod_config(), "training[0].rcclEnv", {})
    plan = synth("prod", _set(config, "training[0].kubernetes.network", RDMA), TOKEN)
    validate_all(workload_objects(plan), CRDS)
    template = job_spec(plan, "llm-pretrain")["template"]
    [trainer] = template["spec"]["containers"]
    assert trainer["resources"]["limits"]["rdma/hca_shared_devices_a"] == "1"
    assert trainer["resources"]["requests"]["rdma/hca_shared_devices_a"] == "1"
    assert trainer["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    env = env_dict(trainer)
    assert {k: env[k] for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX")} == {
        "NCCL_SOCKET_IFNAME": "net1",
        "GLOO_SOCKET_IFNAME": "net1",
        "NCCL_IB_HCA": "mlx5_0,mlx5_1",
        "NCCL_IB_GID_INDEX": "3",
    }
    assert template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net"
    # Host networking instead: the node's NICs, cluster DNS kept for the JobSet's pod names.
    host = {**RDMA, "hostNetwork": True, "interface": "ens1f0"}
    del host["networks"], host["ibGidIndex"]
    plan = synth("prod", _set(config, "training[0].kubernetes.network", host), TOKEN)
    pod = training_pod(plan, "llm-pretrain")
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert "NCCL_IB_GID_INDEX" not in env_dict(pod["containers"][0])  # RCCL picks a RoCEv2 GID itself


def test_checkpoints_on_pvc_in_prod_and_hostpath_by_default_in_dev(prod):
    claim = prod.get(PVC, "llm-pretrain-checkpoints")
    assert claim["protect"] is True
    assert manifest_of(claim)["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "cephfs",
        "resources": {"requests": {"storage": "2Ti"}},
    }
    volumes = {v["name"]: v for v in training_pod(prod, "llm-pretrain")["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "llm-pretrain-checkpoints"}

    config = dev_config()
    del config[P + "training"][0]["kubernetes"]["checkpoints"]
    config[P + "training"][0]["kubernetes"]["nodes"] = 1
    plan = synth("dev", config, TOKEN)
    assert "PersistentVolumeClaim" not in {o["kind"] for o in workload_objects(plan)}
    volumes = {v["name"]: v for v in training_pod(plan, "tiny")["volumes"]}
    assert volumes["checkpoints"]["hostPath"] == {
        "path": "/var/lib/rocm-stack/checkpoints/tiny",
        "type": "DirectoryOrCreate",
    }


def test_pod_failure_policy_restarts_the_set_on_lost_nodes_and_fails_fast_on_invalid_settings(prod):
    """A JobSet's evicted pod fails its Job (FailJob), which the JobSet's nodeDisruption rule turns into a restart
    of every pod that does not count (test_k8s_day2_upgrade.py pins why, and the message the rule matches)."""
    spec = job_spec(prod, "llm-pretrain")
    assert spec["podReplacementPolicy"] == "Failed"
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[1] == {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    fail_job = next(r for r in rules if r["action"] == "FailJob")
    assert fail_job["onExitCodes"] == {"containerName": "check-settings", "operator": "In", "values": [2]}
    check, gpucheck = spec["template"]["spec"]["initContainers"]
    assert (check["name"], gpucheck["name"]) == ("check-settings", "gpucheck")  # the settings first: no GPU work
    trainer_env = env_dict(spec["template"]["spec"]["containers"][0])
    assert env_dict(check) == {k: v for k, v in trainer_env.items() if k != "PET_NODE_RANK"}  # torchrun's own


def test_program_ships_as_configmap_mounted_where_torchrun_runs_it(prod):
    files = program_files()
    config_map = manifest(prod, CONFIG_MAP, "llm-pretrain-program")
    assert config_map["data"] == files and "train.py" in files and "checkpoint.py" in files
    # Named after the program's content and immutable: a new version is a new object, never an in-place edit
    # under running pods (the Pulumi resource name stays `llm-pretrain-program`).
    from components.workloads.training import program_digest

    assert config_map["metadata"]["name"] == f"llm-pretrain-program-{program_digest(files)[:10]}"
    assert config_map["immutable"] is True
    pod = training_pod(prod, "llm-pretrain")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["program"]["configMap"]["name"] == config_map["metadata"]["name"]
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["program"] == {"name": "program", "mountPath": PROGRAM_DIR, "readOnly": True}


def mount_config_map(data: dict[str, str], mount: Path) -> None:
    """The layout the kubelet gives a ConfigMap volume: each key a symlink through `..data` into a timestamped dir."""
    payload = mount / "..2026_01_01_00_00_00.000000001"
    payload.mkdir(parents=True)
    for name, text in data.items():
        (payload / name).write_text(text)
        (mount / name).symlink_to(Path("..data") / name)
    (mount / "..data").symlink_to(payload.name)


def test_shipped_program_runs_and_its_settings_check_exits_2_on_bad_settings(prod, tmp_path):
    """What the init container and the trainer run, from the ConfigMap's files alone (CPU, gloo)."""
    program = tmp_path / "rocm-stack" / "programs"
    mount_config_map(manifest(prod, CONFIG_MAP, "llm-pretrain-program")["data"], program)
    pod = training_pod(prod, "llm-pretrain")
    check = pod["initContainers"][0]
    assert check["command"][:3] == ["python3", "-c", SETTINGS_CHECK]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env_dict(check)}
    run = {"cwd": tmp_path, "capture_output": True, "text": True, "timeout": 120}

    ok = subprocess.run([sys.executable, "-c", SETTINGS_CHECK, str(program.parent)], env=env, **run)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [sys.executable, "-c", SETTINGS_CHECK, str(program.parent)], env={**env, "TRAIN_STEPS": "0"}, **run
    )
    assert bad.returncode == 2 and "TRAIN_STEPS" in bad.stderr

    cpu = {
        **env,
        "TRAIN_BACKEND": "gloo",
        "TRAIN_STEPS": "2",
        "CHECKPOINT_EVERY": "1",
        "CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "TRAIN_PRECISION": "fp32",
    }
    trained = subprocess.run([sys.executable, str(program / "train.py")], env=cpu, **run)
    assert trained.returncode == 0, trained.stderr
    assert len(list((tmp_path / "ckpt").glob("ckpt-000000002-*.pt"))) == 1


def test_new_program_version_changes_the_pod_template(prod, dev):
    digests = {
        job_spec(p, n)["template"]["metadata"]["annotations"]["rocm-stack/program-sha256"]
        for p, n in ((prod, "llm-pretrain"), (dev, "tiny"))
    }
    assert len(digests) == 1  # same program in both stacks
    from components.workloads.training import program_digest

    files = program_files()
    assert digests == {program_digest(files)}
    assert program_digest({**files, "train.py": files["train.py"] + "\n"}) not in digests


def test_training_waits_for_the_gpu_layer(prod):
    job = prod.get(JOBSET, "llm-pretrain")
    device_config = next(r for r in prod.resources if r["type"] == "kubernetes:amd.com/v1alpha1:DeviceConfig")
    # Its pods check their GPUs themselves (init container gpucheck); the job needs only the DeviceConfig to exist.
    assert device_config["urn"] in job["depends_on"]


# --- training on Docker partitions -----------------------------------------------------------------------------


def test_docker_training_runs_standalone_per_partition(prod):
    for host in ("gpu-node-1", "gpu-node-2"):
        c = docker_container(prod, f"{host}-train-a")
        i = c["inputs"]
        assert c["provider"].endswith(f"pulumi:providers:docker::{host}")
        assert i["name"] == "train-a"
        assert i["command"] == [
            "torchrun",
            "--standalone",
            "--nproc-per-node",
            "4",
            "/opt/rocm-stack/programs/train.py",
        ]
        env = env_of(c)
        # Only its own render nodes: the container sees its 4 GPUs as 0..3, so no visibility variable.
        assert gpus_of_partition(prod, host, "train-a") and not {"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"} & set(
            env
        )
        assert env["CHECKPOINT_DIR"] == "/checkpoints" and env["TRAIN_STEPS"] == "100000"
        assert (i["restart"], i["maxRetryCount"], i["mustRun"]) == ("on-failure", 5, False)
        assert i["volumes"] == [
            {"hostPath": "/var/lib/rocm-stack/checkpoints/llm-pretrain/train-a", "containerPath": "/checkpoints"}
        ]
        assert i["shmSize"] == 64 * 1024


def test_docker_workload_containers_get_rocm_access_of_the_security_profile(prod, dev):
    for plan, caps, opts in (
        (prod, ["SYS_NICE"], ["no-new-privileges:true"]),
        (dev, ["SYS_PTRACE"], ["seccomp=unconfined"]),
    ):
        for name in (
            ("gpu-node-1-train-a", "gpu-node-3-serve-b") if plan is prod else ("workstation-train", "workstation-serve")
        ):
            i = docker_container(plan, name)["inputs"]
            devices = [d["hostPath"] for d in i["devices"]]
            # prod: renderNodes isolation; dev: one workstation, all of /dev/dri.
            assert devices[0] == "/dev/kfd" and (len(devices) == 5 if plan is prod else devices[1:] == ["/dev/dri"])
            # Root containers need no supplementary group (never a name: the image's /etc/group resolves it).
            assert ("groupAdds" not in i, i["ipcMode"]) == (True, "private")
            assert (i["capabilities"]["adds"], i["securityOpts"]) == (caps, opts)


def test_docker_workload_containers_are_pinned_to_their_numa_node_like_gpu_host_containers(prod):
    containers = partition_containers(prod)
    for host, claimed in (("gpu-node-1", "train-a"), ("gpu-node-3", "serve-b")):
        mine, other = (
            containers[f"{host}-{name}"]["inputs"].get("cpuSet")
            for name in (claimed, {"train-a": "serve-b", "serve-b": "train-a"}[claimed])
        )
        # prod's numaCpus: one NUMA node per 4-GPU partition
        assert {mine, other} == {"0-95,192-287", "96-191,288-383"}


def test_docker_training_uploads_the_same_program(prod):
    """By reference: each file's path in the project and its SHA-256, which the provider reads at create
    (components/docker/programs.py); the same files as the Kubernetes ConfigMap's."""
    uploads = docker_container(prod, "gpu-node-1-train-a")["inputs"]["uploads"]
    assert {u["file"]: upload_text(u) for u in uploads} == {
        f"{PROGRAM_DIR}/{name}": text for name, text in program_files().items()
    }
    assert {u["source"] for u in uploads} == {f"programs/{name}" for name in program_files()}
    assert not any("content" in u for u in uploads)


def test_the_training_program_ships_what_it_runs_and_nothing_the_hosts_run(tmp_path):
    """The shipped files alone import: train.py, the rendezvous script, the default entry point and gpucheck, from a
    folder holding only them (as PROGRAM_DIR does in the image). The Docker hosts' preflight is not among them: its
    edits changed the program's digest and replaced every training JobSet (seen on prod's first up after issue 35)."""
    shipped = program_files()
    assert "preflight.py" not in shipped and (Path(training.PROGRAM_SOURCE) / "preflight.py").is_file()
    (tmp_path / "programs").mkdir()
    for name, text in shipped.items():
        (tmp_path / "programs" / name).write_text(text)
    modules = ", ".join(f"programs.{Path(name).stem}" for name in training.TRAINING_ENTRIES)
    run = subprocess.run(
        [sys.executable, "-c", f"import {modules}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr


def test_claimed_partitions_stay_children_of_their_host_and_name_their_workload(prod):
    containers = partition_containers(prod)
    assert len(containers) == 8  # still one container per partition
    assert all(c["parent"].rsplit("::", 1)[-1] == str(partition_of(c)).split("/")[0] for c in containers.values())
    workload = {name: [a["parent"].rsplit("::", 1)[-1] for a in c["aliases"]] for name, c in containers.items()}
    assert workload["gpu-node-1-train-a"] == workload["gpu-node-2-train-a"] == ["llm-pretrain"]
    assert workload["gpu-node-3-serve-b"] == workload["gpu-node-4-serve-b"] == ["llama"]
    assert workload["gpu-node-1-serve-b"] == []  # the GpuHost's own shell
    assert containers["gpu-node-1-serve-b"]["inputs"]["command"] == ["sleep", "infinity"]


def test_workload_images_are_pinned_and_pulled_on_their_hosts(prod):
    images = {r["name"]: r for r in prod.of_type(REMOTE_IMAGE)}
    assert images["gpu-node-1-llm-pretrain"]["inputs"]["name"].startswith("rocm/pytorch:rocm")
    assert images["gpu-node-3-llama"]["inputs"]["name"].startswith("rocm/vllm:rocm")
    assert images["gpu-node-3-llama"]["provider"].endswith("pulumi:providers:docker::gpu-node-3")
    assert all(i["inputs"]["keepLocally"] for i in images.values())


# --- inference on Kubernetes -----------------------------------------------------------------------------------


def test_vllm_deployment_serves_the_model_with_tensor_and_data_parallel_ranks(prod):
    deployment = manifest(prod, DEPLOYMENT, "llama")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    pod = deployment["spec"]["template"]["spec"]
    # prod has the API key: vLLM listens on the pod's loopback behind the proxy sidecar (test_vllm_proxy.py).
    [server, sidecar] = pod["containers"]
    assert sidecar["name"] == "proxy" and sidecar["image"] == PROXY_IMAGE
    assert sidecar["ports"] == [{"name": "http", "containerPort": 8080}] and "ports" not in server
    assert server["image"].startswith("rocm/vllm:rocm")
    assert server["command"] == [
        "vllm",
        "serve",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "2",
        "--data-parallel-size",
        "2",
        "--disable-nccl-for-dp-synchronization",
        "--revision",
        "0e9e39f249a16976918f6564b8830bc894c89659",
        "--max-model-len",
        "8192",
    ]
    assert server["resources"]["limits"]["amd.com/gpu"] == server["resources"]["requests"]["amd.com/gpu"] == "4"
    assert pod["enableServiceLinks"] is False


def test_vllm_replicas_spread_over_nodes(prod, dev):
    """maxSkew 1 over kubernetes.io/hostname: with a disruption budget strictly (DoNotSchedule), so one node's
    drain or loss never takes every replica; without one only preferred ("ScheduleAnyway tells the scheduler to
    schedule the pod in any location, but giving higher precedence to topologies that would help reduce the
    skew", core/v1 TopologySpreadConstraint; https://kubernetes.io/docs/concepts/scheduling-eviction/
    topology-spread-constraints/)."""
    labels = manifest(prod, DEPLOYMENT, "llama")["spec"]["template"]["metadata"]["labels"]
    assert pod_spec(prod, DEPLOYMENT, "llama")["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": labels},
        }
    ]
    [constraint] = pod_spec(dev, DEPLOYMENT, "chat")["topologySpreadConstraints"]
    assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"


def test_vllm_rocm_environment_and_token_from_the_secret(prod):
    pod = pod_spec(prod, DEPLOYMENT, "llama")
    env = env_dict(pod["containers"][0])
    assert {k: env[k] for k in INFERENCE_ROCM_ENV} == INFERENCE_ROCM_ENV
    assert env["NCCL_MIN_NCHANNELS"] == "112"  # several GPUs per replica
    assert env["HF_HOME"] == MODEL_CACHE_MOUNT
    # Auto-named (tests/test_k8s_day2_secrets.py): the mock engine's name stands in for the provider's.
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": autoname("llama-hf-token"), "key": "token"}}
    secret = prod.get(SECRET_KIND, "llama-hf-token")
    assert secret["inputs"]["stringData"] == SECRET and secret["inputs"]["type"] == "Opaque"
    assert manifest_of(secret)["metadata"]["namespace"] == "ml"


def test_single_gpu_server_gets_no_multi_gpu_rccl_setting(dev):
    env = env_dict(pod_spec(dev, DEPLOYMENT, "chat")["containers"][0])
    assert "NCCL_MIN_NCHANNELS" not in env and env["VLLM_ROCM_USE_AITER"] == "1"


def test_vllm_probes_health_and_startup_allows_model_download(dev):
    """Ready = the model is served (GET /v1/models lists it); alive = the server answers /health (a busy engine
    must not be restarted). Without an API key both are plain httpGet probes."""
    [server] = pod_spec(dev, DEPLOYMENT, "chat")["containers"]
    assert server["readinessProbe"]["httpGet"] == {"path": "/v1/models", "port": "http"}
    for probe in ("startupProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/health", "port": "http"}
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800
    assert server["ports"] == [{"name": "http", "containerPort": 8000}]


def test_prod_vllm_requires_the_api_key_from_a_pulumi_secret(prod):
    """vLLM's server requires `Authorization: Bearer <key>` on every path under /v1 when VLLM_API_KEY (or
    --api-key) is set, and on nothing else (vllm/entrypoints/openai/api_server.py build_app: `if token :=
    envs.VLLM_API_KEY or args.api_key:` ... `if not url_path.startswith("/v1"): return await call_next(request)`).
    So /health stays a plain probe, and the /v1/models readiness check sends the key from the container's env
    (an httpGet probe's headers are literal: the key would sit in the Deployment)."""
    pod = pod_spec(prod, DEPLOYMENT, "llama")
    [server, sidecar] = pod["containers"]
    assert env_dict(server)["VLLM_API_KEY"] == {"secretKeyRef": {"name": autoname("llama-api-key"), "key": "api-key"}}
    secret = prod.get(SECRET_KIND, "llama-api-key")
    assert secret["inputs"]["stringData"] == SECRET
    readiness = server["readinessProbe"]
    assert "httpGet" not in readiness
    check = readiness["exec"]["command"]
    assert check[:2] == ["python3", "-c"] and "/v1/models" in check[2] and "VLLM_API_KEY" in check[2]
    # vLLM listens on 127.0.0.1: the kubelet probes /health through the sidecar's port (a number: a named port
    # resolves among the probed container's own ports, and vLLM has none).
    assert server["livenessProbe"]["httpGet"] == server["startupProbe"]["httpGet"] == {"path": "/health", "port": 8080}
    # The sidecar reads the rendered nginx.conf and the key's map file of the same Secret, both 0400, in one dir.
    [mount] = [m for m in sidecar["volumeMounts"] if m["name"] == "proxy-config"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "proxy-config"]
    assert mount["mountPath"] == proxy.CONFIG_DIR and volume["projected"]["defaultMode"] == 0o400
    config_source, key_source = volume["projected"]["sources"]
    assert key_source["secret"] == {
        "name": autoname("llama-api-key"),
        "items": [{"key": proxy.API_KEY_MAP, "path": proxy.API_KEY_MAP}],
    }
    config_map = manifest(prod, CONFIG_MAP, "llama-proxy")
    assert config_source["configMap"]["name"] == config_map["metadata"]["name"]
    assert config_map["data"][proxy.CONFIG_FILE] == proxy.nginx_config(8080, "127.0.0.1:8000", proxy.POD_OPEN_PATHS)
    # The check itself, against a stand-in server that answers like vLLM's middleware.
    _run_models_check(check[2])
    # Prod without the secret is refused, and so is an empty one (Docker's start script refuses it too).
    config = prod_config()
    del config[P + "vllmApiKey"]
    assert "rocm-stack:vllmApiKey: prod serves llama on Kubernetes" in refusal("prod", config)
    assert "rocm-stack:vllmApiKey: is empty" in refusal("prod", prod_config(), secrets={**TOKEN, P + "vllmApiKey": ""})


def _run_models_check(code: str) -> None:
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            ok = self.path == "/v1/models" and self.headers.get("Authorization") == "Bearer k3y"
            self.send_response(200 if ok else 401)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code = code.replace("127.0.0.1:8000", f"127.0.0.1:{server.server_port}")
        run = {"capture_output": True, "text": True, "timeout": 30}
        assert subprocess.run([sys.executable, "-c", code], env={"VLLM_API_KEY": "k3y"}, **run).returncode == 0
        assert subprocess.run([sys.executable, "-c", code], env={"VLLM_API_KEY": "wrong"}, **run).returncode != 0
    finally:
        server.shutdown()


def test_vllm_rollout_timeouts_allow_one_start_per_replica_on_update(monkeypatch):
    """2 replicas replaced one at a time, each allowed its old pod's drain (terminationGracePeriodSeconds 120 s), its
    GPU check (checks.timeoutSeconds, 900 s) and 1800 s to start: an update may take 2 x 47 min."""
    import components.workloads.inference

    timeouts: dict[str, Any] = {}
    real = components.workloads.inference.apps_v1.Deployment

    class Recording(real):  # a class still: VllmServer's annotations name it (`apps_v1.Deployment | None`)
        def __init__(self, name: str, *args: Any, opts: Any = None, **kwargs: Any) -> None:
            timeouts[name] = opts.custom_timeouts
            super().__init__(name, *args, opts=opts, **kwargs)

    monkeypatch.setattr(components.workloads.inference.apps_v1, "Deployment", Recording)
    synth("prod", prod_config(), TOKEN)
    assert (timeouts["llama"].create, timeouts["llama"].update) == ("55m", "104m")


def test_vllm_service_and_model_cache(prod, dev):
    service = manifest(prod, SERVICE, "llama-service")
    pod_labels = manifest(prod, DEPLOYMENT, "llama")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http"}]
    assert manifest(prod, PVC, "llama-model-cache")["spec"]["resources"] == {"requests": {"storage": "500Gi"}}
    volumes = {v["name"]: v for v in pod_spec(dev, DEPLOYMENT, "chat")["volumes"]}
    assert volumes["model-cache"]["hostPath"]["path"] == "/var/lib/rocm-stack/huggingface"
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"


def test_pod_disruption_budget_in_prod_only(prod, dev):
    pdb = manifest(prod, PDB, "llama-pdb")
    assert pdb["spec"]["minAvailable"] == 1
    pod_labels = manifest(prod, DEPLOYMENT, "llama")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert "PodDisruptionBudget" not in {o["kind"] for o in workload_objects(dev)}


def test_no_token_no_secret_for_an_open_model():
    plan = synth("dev", dev_config())
    assert "Secret" not in {o["kind"] for o in workload_objects(plan)}
    env = env_dict(pod_spec(plan, DEPLOYMENT, "chat")["containers"][0])
    assert "HF_TOKEN" not in env
    assert "HF_TOKEN_PATH" not in env_of(docker_container(plan, "workstation-serve"))


# --- inference on Docker partitions ----------------------------------------------------------------------------


def test_docker_vllm_publishes_its_port_and_checks_health(prod):
    c = docker_container(prod, "gpu-node-3-serve-b")
    i = c["inputs"]
    # prod's API key: the proxy publishes the port (tests/test_vllm_proxy.py), vLLM nothing (the pack's rule); vLLM
    # is in the proxy's network namespace, on its loopback (tests/e2e/test_e2e_neighbours.py).
    assert "ports" not in i and "networksAdvanced" not in i
    assert i["networkMode"] == "container:gpu-node-3-serve-b-proxy-id"
    assert i["command"][i["command"].index("--host") + 1] == "127.0.0.1"
    proxy = docker_container(prod, "gpu-node-3-serve-b-proxy")["inputs"]
    assert proxy["ports"] == [{"internal": 8080, "external": 8001, "ip": "0.0.0.0", "protocol": "tcp"}]
    # prod's API key: `sh -c` reads the uploaded key file into VLLM_API_KEY, then execs `vllm serve`.
    assert i["command"][:2] == ["sh", "-c"] and i["command"][4:7] == [
        "vllm",
        "serve",
        "meta-llama/Llama-3.1-8B-Instruct",
    ]
    assert i["command"][i["command"].index("--data-parallel-size") + 1] == "2"  # 4 GPUs / TP 2
    assert "/health" in " ".join(i["healthcheck"]["tests"])
    assert (i["restart"], i["mustRun"]) == ("unless-stopped", False)  # a person's stop is kept (test_impact_limits.py)
    # The partition's own cache (test_shm_and_logs.py).
    assert i["volumes"] == [{"hostPath": "/var/lib/rocm-stack/huggingface/serve-b", "containerPath": MODEL_CACHE_MOUNT}]
    env = env_of(c)
    assert gpus_of_partition(prod, "gpu-node-3", "serve-b") and not {
        "HIP_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
    } & set(env)
    # The token is a file upload (secret); the environment stays readable in previews.
    assert env["HF_TOKEN_PATH"] == DOCKER_TOKEN_FILE and "HF_TOKEN" not in env
    assert i["uploads"] == SECRET


# --- config errors ---------------------------------------------------------------------------------------------

_DELETE = object()


def _set(config: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy with `training[0].kubernetes.nodes`-style path (relative to rocm-stack:) set, or deleted."""
    config = copy.deepcopy(config)
    parts = dotted.replace("]", "").replace("[", ".").split(".")
    parts[0] = P + parts[0]
    node: Any = config
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    key = int(parts[-1]) if isinstance(node, list) else parts[-1]
    if value is _DELETE:
        del node[key]
    else:
        node[key] = value
    return config


BAD = {
    "tp-does-not-divide-k8s-gpus": (
        "prod",
        "inference[0].kubernetes.gpus",
        3,
        "inference[0].kubernetes.gpus: tensorParallelSize 2 does not divide the 3 GPUs",
    ),
    "tp-does-not-divide-partition": (
        "dev",
        "inference[0].tensorParallelSize",
        2,
        "inference[0].docker.partitions[0]: tensorParallelSize 2 does not divide the 1",
    ),
    "tp-does-not-divide-sized-partition": (
        "prod",
        "inference[0].tensorParallelSize",
        8,
        "inference[0].docker.partitions[0]: tensorParallelSize 8 does not divide "
        "the 4 GPU(s) of partition 'gpu-node-3/serve-b'",
    ),
    "fleet-too-few-nodes": (
        "prod",
        "training[0].kubernetes.nodes",
        5,
        "training[0].kubernetes.nodes: 5 nodes, but gpuFleet has 4",
    ),
    "fleet-too-few-gpus-per-node": (
        "prod",
        "gpuFleet.gpusPerNode",
        4,
        "training[0].kubernetes.gpusPerNode: 8 GPUs per pod, but gpuFleet nodes have 4",
    ),
    "fleet-total": (
        "prod",
        "inference[0].kubernetes.replicas",
        5,
        "rocm-stack:gpuFleet: the Kubernetes workloads need 36 GPUs together, the fleet has 32",
    ),
    "prod-needs-fleet": ("prod", "gpuFleet", _DELETE, "rocm-stack:gpuFleet: prod runs GPU workloads on Kubernetes"),
    "name-clash": (
        "prod",
        "inference[0].name",
        "llm-pretrain",
        "inference[0].name: 'llm-pretrain' is already the name of training[0]",
    ),
    "unknown-partition": (
        "prod",
        "training[0].docker.partitions[1]",
        "gpu-node-9/train-a",
        "training[0].docker.partitions[1]: no partition 'gpu-node-9/train-a'",
    ),
    "partition-claimed-twice": (
        "prod",
        "inference[0].docker.partitions[0]",
        "gpu-node-1/train-a",
        "inference[0].docker.partitions[0]: partition 'gpu-node-1/train-a' already runs training 'llm-pretrain'",
    ),
    "claimed-partition-sets-command": (
        "prod",
        "hosts[0].containers[0].command",
        ["sleep", "infinity"],
        "hosts[0].containers[0].command: partition 'gpu-node-1/train-a' runs training",
    ),
    "hostpath-checkpoints-in-prod": (
        "prod",
        "training[0].kubernetes.checkpoints",
        {"type": "hostPath", "path": "/x"},
        "training[0].kubernetes.checkpoints: a hostPath is lost",
    ),
    "rwo-checkpoints-multinode": (
        "dev",
        "training[0].kubernetes.checkpoints.accessMode",
        "ReadWriteOnce",
        "training[0].kubernetes.checkpoints.accessMode: ReadWriteOnce cannot be mounted by the 2 pods",
    ),
    "pdb-blocks-drains": (
        "prod",
        "inference[0].kubernetes.minAvailable",
        2,
        "inference[0].kubernetes.minAvailable: 2 of 2 replica(s) must stay up",
    ),
    # upgrademgr.go @ v1.5.1 L787-818 (drain helper, timeout = nodeDrainPolicy.timeoutSeconds), L630-650 and
    # L892-897 (a Drain-Failed node uses up maxUnavailableNodes: the rollout stops).
    "drain-shorter-than-vllm-start": (
        "prod",
        "kubernetes.gpuOperator.deviceConfig.driver.upgradePolicy.nodeDrainPolicy.timeoutSeconds",
        300,
        "nodeDrainPolicy.timeoutSeconds: 300s is shorter than the 2820s a replica of inference 'llama' may take to "
        "stop and start again (its grace, inference[0].kubernetes.terminationGracePeriodSeconds, its GPU check, "
        "checks.timeoutSeconds, then inference[0].startupTimeoutSeconds)",
    ),
    # The GPU check runs as an init container before vLLM (components/workloads/gpu_check.py): a replica back
    # from eviction first spends up to checks.timeoutSeconds (900) there, then startupTimeoutSeconds (1800); the
    # evicted one first finishes its requests (terminationGracePeriodSeconds, 120).
    "drain-shorter-than-vllm-check-and-start": (
        "prod",
        "kubernetes.gpuOperator.deviceConfig.driver.upgradePolicy.nodeDrainPolicy.timeoutSeconds",
        2700,
        "nodeDrainPolicy.timeoutSeconds: 2700s is shorter than the 2820s",
    ),
    "drain-grace-cuts-vllm-requests": (
        "prod",
        "kubernetes.gpuOperator.deviceConfig.driver.upgradePolicy.nodeDrainPolicy.gracePeriodSeconds",
        60,
        "nodeDrainPolicy.gracePeriodSeconds: 60s cuts the 120s vLLM pods of inference 'llama' get to finish their "
        "requests (inference[0].kubernetes.terminationGracePeriodSeconds): use -1",
    ),
    "spread-replicas-exceed-nodes": (
        "prod",
        "inference[0].kubernetes.replicas",
        5,
        "inference[0].kubernetes.replicas: 5 replicas are spread one per node, but gpuFleet has 4",
    ),
    # Removed with static rendezvous (c7836a3): a stack that still sets it learns what replaced it.
    "torchrun-max-restarts-removed": (
        "prod",
        "training[0].kubernetes.maxRestarts",
        3,
        "training[0].kubernetes: maxRestarts is no longer used: a failed worker fails its pod",
    ),
    "memory-not-a-size": ("prod", "training[0].kubernetes.memory", "lots", "training[0].kubernetes.memory"),
    "cpu-not-a-quantity": (
        "prod",
        "inference[0].kubernetes.cpu",
        "eight",
        "inference[0].kubernetes.cpu: 'eight' is not a Kubernetes quantity",
    ),
    "rdma-on-baseline": (
        "prod",
        "training[0].kubernetes",
        {
            "namespace": "ml",
            "nodes": 2,
            "gpusPerNode": 8,
            "podSecurity": "baseline",
            "network": RDMA,
            "checkpoints": {"type": "pvc", "size": "1Ti"},
        },
        "training[0].kubernetes.podSecurity: 'baseline' forbids what the pods need",
    ),
    "rdma-env-contradiction": (
        "prod",
        "training[0].kubernetes.network",
        RDMA,
        "training[0].rcclEnv.NCCL_SOCKET_IFNAME: is set by rocm-stack",
    ),
    "rdma-one-node": (
        "dev",
        "training[0].kubernetes",
        {"namespace": "ml", "network": RDMA},
        "training[0].kubernetes.network: a one-node training has no traffic between pods",
    ),
    "rdma-bad-resource": (
        "prod",
        "training[0].kubernetes.network",
        {**RDMA, "rdma": {"resource": "hca"}},
        "training[0].kubernetes.network.rdma.resource: expected an extended resource",
    ),
    "rdma-host-and-multus": (
        "prod",
        "training[0].kubernetes.network",
        {**RDMA, "hostNetwork": True},
        "training[0].kubernetes.network.networks: a hostNetwork pod has no secondary networks",
    ),
    "managed-vllm-flag": (
        "prod",
        "inference[0].extraArgs[0]",
        "--tensor-parallel-size=4",
        "inference[0].extraArgs[0]: '--tensor-parallel-size=4' is derived",
    ),
    "managed-vllm-flag-snake-case": (
        "prod",
        "inference[0].extraArgs[0]",
        "--tensor_parallel_size",
        "inference[0].extraArgs[0]: '--tensor_parallel_size' is derived",
    ),
    "managed-env": (
        "prod",
        "training[0].env",
        {"CHECKPOINT_DIR": "/elsewhere"},
        "training[0].env.CHECKPOINT_DIR: is set by rocm-stack",
    ),
    "claimed-partition-env-redirects-checkpoints": (
        "prod",
        "hosts[0].containers[0].env",
        {"CHECKPOINT_DIR": "/tmp"},
        "hosts[0].containers[0].env.CHECKPOINT_DIR: partition "
        "'gpu-node-1/train-a' runs training 'llm-pretrain', for which "
        "rocm-stack sets this",
    ),
    "namespace-not-owned": (
        "prod",
        "training[0].kubernetes.namespace",
        "research",
        "training[0].kubernetes.namespace: namespace 'research' is not created by this stack",
    ),
    "no-kubernetes-section": (
        "dev",
        "kubernetes",
        _DELETE,
        "training[0].kubernetes: runs on Kubernetes but `rocm-stack:kubernetes` is not",
    ),
    "runs-nowhere": (
        "dev",
        "inference[0]",
        {"name": "idle", "model": "Qwen/Qwen2.5-0.5B-Instruct"},
        "rocm-stack:inference[0]: runs nowhere",
    ),
    "unknown-image": ("dev", "training[0].image", "jax", "training[0].image: unknown image 'jax'"),
    "port-clash": (
        "prod",
        "hosts[2].containers[0].ports",
        [{"internal": 9000, "external": 8001}],
        "inference[0].docker.partitions[0]: host port 8001 of 'gpu-node-3' is already published",
    ),
    "port-clash-with-exporter": (
        "prod",
        "inference[0].docker.publishedPort",
        5000,
        "inference[0].docker.partitions[0]: host port 5000 of 'gpu-node-3' is already "
        "published by the GPU metrics exporter",
    ),
    "bad-model-id": (
        "dev",
        "inference[0].model",
        "not a model",
        "inference[0].model: expected a Hugging Face repository id 'org/name' (got 'not a model')",
    ),
    "bad-workload-name": (
        "dev",
        "training[0].name",
        "9lives",
        "training[0].name: expected lowercase letters, digits and '-', starting with a letter, at most 40 characters",
    ),
}


def test_tolerations_follow_the_gpu_node_taints_unless_set():
    """Unset, a workload's pods tolerate each taint of `kubernetes.gpuNodeTaints` as the GPU layer's DaemonSets do (one
    definition, GpuNodeTaint.toleration); set, exactly what is given, refused where it misses a NoSchedule or NoExecute
    taint (the scheduler filters those: kubernetes pkg/scheduler/framework/plugins/helper/taint.go)."""
    config = _set(prod_config(), "kubernetes.gpuNodeTaints", [{"key": "amd.com/gpu", "effect": "NoExecute"}])
    config = _set(config, "kubernetes.gpuOperator.deviceConfig.driver.upgradePolicy.rebootRequired", False)
    plan = synth("prod", config, TOKEN)
    assert training_pod(plan, "llm-pretrain")["tolerations"] == [
        {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoExecute"}
    ]
    explicit = _set(config, "training[0].kubernetes.tolerations", [{"key": "amd.com/gpu", "effect": "NoSchedule"}])
    assert (
        "training[0].kubernetes.tolerations: does not tolerate the GPU node taint amd.com/gpu=:NoExecute "
        "(kubernetes.gpuNodeTaints[0])"
    ) in refusal("prod", explicit)


def test_a_toleration_of_another_value_does_not_tolerate_a_no_schedule_taint():
    config = _set(prod_config(), "kubernetes.gpuNodeTaints[0].effect", "NoSchedule")
    config = _set(config, "kubernetes.gpuOperator.deviceConfig.driver.upgradePolicy.rebootRequired", False)
    config = _set(
        config, "inference[0].kubernetes.tolerations", [{"key": "amd.com/gpu", "operator": "Equal", "value": "yes"}]
    )
    assert "inference[0].kubernetes.tolerations: does not tolerate the GPU node taint" in refusal("prod", config)


def test_a_prefer_no_schedule_taint_needs_no_toleration():
    """PreferNoSchedule only lowers a node's score: the scheduler's TaintToleration filter looks at NoSchedule and
    NoExecute taints alone (kubernetes pkg/scheduler/framework/plugins/helper/taint.go DoNotScheduleTaintsFilterFunc:
    "PodToleratesNodeTaints is only interested in NoSchedule and NoExecute taints")."""
    assert stack_file("prod")[P + "kubernetes"]["gpuNodeTaints"][0]["effect"] == "PreferNoSchedule"
    config = _set(prod_config(), "inference[0].kubernetes.tolerations", [{"key": "other", "operator": "Exists"}])
    synth("prod", config, TOKEN)


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_is_refused_naming_the_key(case):
    stack, path, value, expected = BAD[case]
    config = _set(dev_config() if stack == "dev" else prod_config(), path, value)
    message = refusal(stack, config)
    assert expected in message, message


def test_a_port_docker_publishes_on_a_random_host_port_clashes_with_no_workload():
    """`ports: [{internal: 8080}]` publishes on a free ephemeral host port, not on 8080."""
    config = _set(prod_config(), "hosts[2].containers[0].ports", [{"internal": 8080}])
    plan = synth("prod", config, TOKEN)
    assert docker_container(plan, "gpu-node-3-serve-b-proxy")["inputs"]["ports"][0]["external"] == 8001


@pytest.mark.parametrize(
    "change",
    [
        {},  # meta-llama/* is gated: known without saying so
        {"model": "Qwen/Qwen2.5-7B-Instruct", "gated": True},
    ],
)
def test_gated_model_requires_the_huggingface_token(change):
    config = prod_config()
    config.pop(P + "huggingfaceToken", None)  # a committed stack may hold one
    config[P + "inference"][0].update(change)
    message = refusal("prod", config, secrets=None)
    assert "rocm-stack:huggingfaceToken: inference 'llama' serves the gated model" in message
    assert "pulumi config set --secret huggingfaceToken" in message


def test_pods_that_fit_the_fleet_in_sum_but_not_node_by_node_are_refused():
    """4 nodes x 8 GPUs: 2 training pods of 8 and 3 serving pods of 5 are 31 GPUs, but 5 pods need a node each."""
    config = prod_config()
    config[P + "inference"][0].update(tensorParallelSize=1)
    config[P + "inference"][0]["kubernetes"].update(gpus=5, replicas=3)
    message = refusal("prod", config)
    assert (
        "rocm-stack:gpuFleet: 5 Kubernetes pods each need more than half of a node's 8 GPUs, so no two share "
        "a node, but the fleet has 4 nodes"
    ) in message, message
    assert "together" not in message  # 31 of 32 GPUs: the sum alone fits


def test_a_replica_too_big_for_the_fleet_names_tensor_parallel_size_when_gpus_is_not_set():
    config = _set(dev_config(), "gpuFleet", {"nodes": 2, "gpusPerNode": 1})
    config[P + "inference"][0]["tensorParallelSize"] = 2
    message = refusal("dev", config)
    assert "rocm-stack:inference[0].tensorParallelSize: 2 GPUs per pod, but gpuFleet nodes have 1" in message, message


def test_several_problems_are_reported_at_once():
    config = _set(_set(prod_config(), "inference[0].kubernetes.gpus", 3), "training[0].kubernetes.nodes", 5)
    message = refusal("prod", config)
    assert "inference[0].kubernetes.gpus" in message and "training[0].kubernetes.nodes" in message


# --- stable names ----------------------------------------------------------------------------------------------


def _by_urn(plan: Plan) -> dict[str, dict[str, Any]]:
    return {r["urn"]: r["inputs"] for r in plan.resources}


def test_adding_a_workload_renames_and_changes_nothing_else(dev):
    config = dev_config()
    config[P + "training"].append(
        {"name": "second", "kubernetes": {"namespace": "ml", "nodes": 1, "checkpoints": {"type": "pvc", "size": "1Gi"}}}
    )
    config[P + "inference"].insert(
        0, {"name": "embed", "model": "BAAI/bge-small-en-v1.5", "kubernetes": {"namespace": "ml"}}
    )
    before, after = _by_urn(dev), _by_urn(synth("dev", config, TOKEN))
    # The serving admission policy names the stack's Deployments (components/workloads/admission.py): it gains embed's.
    [policy] = [urn for urn in before if urn.endswith("ValidatingAdmissionPolicy::rocm-stack-serving")]
    assert "'embed'" in str(after.pop(policy)) and "'embed'" not in str(before.pop(policy))
    assert before.items() <= after.items()
    added = {urn.rsplit("::", 1)[-1] for urn in after.keys() - before.keys()}
    assert added and all(name.startswith(("second", "embed")) for name in added)


def test_reordering_workloads_renames_nothing():
    config = dev_config()
    config[P + "training"].append(
        {"name": "second", "kubernetes": {"namespace": "ml", "nodes": 1, "checkpoints": {"type": "pvc", "size": "1Gi"}}}
    )
    reordered = copy.deepcopy(config)
    reordered[P + "training"].reverse()
    assert _by_urn(synth("dev", config, TOKEN)) == _by_urn(synth("dev", reordered, TOKEN))


def test_no_workloads_declares_none_and_gpu_host_keeps_its_containers():
    config = {key: value for key, value in dev_config().items() if key not in (P + "training", P + "inference")}
    plan = synth("dev", config)
    assert not [r for r in plan.resources if r["type"].startswith("rocm-stack:workloads:")]
    containers = partition_containers(plan)
    assert sorted(containers) == ["workstation-serve", "workstation-train"]
    assert all("$rocm-stack:docker:GpuHost::workstation" in c["parent"] for c in containers.values())


# --- config model ----------------------------------------------------------------------------------------------


def test_env_maps_merge_over_defaults_and_null_removes():
    assert merged_env({"A": "1", "B": "2"}, {"B": None, "C": "3"}) == {"A": "1", "C": "3"}
    inference = InferenceConfig.model_validate(
        {"name": "x", "model": "a/b", "rocmEnv": {"VLLM_ROCM_USE_AITER": None, "NCCL_MIN_NCHANNELS": 64}}
    )
    env = inference.server_env(gpus=8)
    assert "VLLM_ROCM_USE_AITER" not in env and env["NCCL_MIN_NCHANNELS"] == "64"
