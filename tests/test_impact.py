"""The change-impact preview of `rocm-stack diff` (tools/impact.py) on day-2 scenarios.

Each scenario is a before/after pair of stacks run through the real program (tools.synth.synthesize); each predicted
action is asserted with the rule it follows, a key of tools/impact_rules.RULES, whose facts
tests/test_impact_rules.py checks against the providers' own source. Plans are synthesized once per module.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.workloads import inference
from tools import lock as lock_tool
from tools.impact import ImpactReport, Impact, predict, to_markdown
from tools.impact_rules import RULES, Action
from tools.synth import ROOT, Plan, synthesize
from tools.synth_diff import SynthPlan
from conftest import (
    CONTAINER,
    DOCKER_PROVIDER,
    REMOTE_IMAGE,
    gpu_containers,
    shell_partitions,
    stack_file,
    swapped_partitions,
    synth_with,
)

P = "rocm-stack:"
JOB = "kubernetes:batch/v1:Job"
# During `pulumi up` the container registers once the image's outputs are known (the SDK awaits them: pulumi 3.272.0
# sdk/python/lib/pulumi/runtime/resource.py prepare_resource) and the engine diffs those real inputs against the state
# (pulumi/pulumi pkg/resource/deploy/step_generator.go generateSteps): an unchanged id is no diff.
SAME_IMAGE = (
    "; if the pulled image has the id the container runs (a new tag of the same digest), `pulumi up` leaves it "
    "running: only the preview cannot know"
)
NEW_PYTORCH = "rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.9.0"


def report_of(base: Plan | dict[str, Any], head: Plan | dict[str, Any]) -> ImpactReport:
    def plan(p: Plan | dict[str, Any]) -> SynthPlan:
        return SynthPlan.model_validate(p.to_json() if isinstance(p, Plan) else p)

    return predict(plan(base), plan(head))


def by_name(report: ImpactReport) -> dict[tuple[str, str], Impact]:
    return {(i.type, i.name): i for i in report.impacts}


def stop_words(container: dict[str, Any]) -> str:
    """How the running container is stopped, from its own inputs (rule tfd.container-delete): the grace another
    change may give it, else none."""
    inputs = container["inputs"]
    grace = inputs.get("destroyGraceSeconds")
    return (
        f"{inputs.get('stopSignal', 'SIGTERM')}, grace {grace} s, then killed" if grace else "no grace: killed at once"
    )


# --- scenarios on the shipped dev stack ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def image_bump(dev_plan: Plan) -> tuple[Plan, Plan, ImpactReport]:
    head = synth_with("dev", images={"pytorch": NEW_PYTORCH})
    return dev_plan, head, report_of(dev_plan, head)


def test_image_bump_replaces_the_training_container_and_reruns_its_check(image_bump):
    base, head, report = image_bump
    impacts = by_name(report)
    # TFD resource_docker_image.go L36-40: `name` is ForceNew; an image is replaced create-first (no
    # DeleteBeforeReplace for docker_image in pulumi-docker resources.go).
    image = impacts[(REMOTE_IMAGE, "workstation-pytorch")]
    assert image.action is Action.REPLACE and image.replaced_by == [("name", "tfbridge.force-new")]
    assert image.meaning == f"pulls `{NEW_PYTORCH}` on `workstation`"

    train = impacts[(CONTAINER, "workstation-train")]
    assert train.action is Action.DELETE_REPLACE and train.stops_container
    assert ("image", "pulumi.unknown-output") in train.replaced_by
    assert {"pulumi-docker.container-delete-before-replace", "tfd.container-delete"} <= set(train.rules)
    assert train.meaning == (
        "replaces training `tiny` on `workstation/train`: training stops "
        f"({stop_words(base.get(CONTAINER, 'workstation-train'))}) and resumes from its newest checkpoint"
        + (
            ""
            if base.get(CONTAINER, "workstation-train")["inputs"].get("destroyGraceSeconds")
            else ", losing the steps since"
        )
        + SAME_IMAGE
    )
    check = impacts[(CONTAINER, "workstation-train-gpucheck")]
    assert check.action is Action.DELETE_REPLACE and not check.stops_container
    assert check.meaning.startswith("re-runs the GPU check of `workstation/train`")
    # The Kubernetes Job's pod template is immutable (diff.go `var job`: .spec.template), and the program asks for
    # the delete first.
    job = impacts[(JOB, "tiny")]
    assert job.action is Action.DELETE_REPLACE
    assert {rule for _, rule in job.replaced_by} == {"k8s.force-new"}
    assert "pulumi.delete-before-replace-option" in job.rules
    # The vLLM server runs another image: untouched.
    assert [i.name for i in report.containers_stopped] == ["workstation-train"]
    assert (CONTAINER, "workstation-serve") not in impacts


def test_a_replaced_image_replaces_its_containers_even_when_the_plan_shows_the_same_image_id(image_bump):
    """In a real preview the new image's id is unknown until it is pulled: the containers are replaced whatever id
    it turns out to have (pulumi.unknown-output). Here the head plan keeps the old id on the container."""
    base, head, _ = image_bump
    edited = copy.deepcopy(head.to_json())
    old_id = base.get(CONTAINER, "workstation-train")["inputs"]["image"]
    for resource in edited["resources"]:
        if resource["type"] == CONTAINER and resource["name"] == "workstation-train":
            resource["inputs"]["image"] = old_id
    train = by_name(report_of(base, edited))[(CONTAINER, "workstation-train")]
    assert train.action is Action.DELETE_REPLACE and train.replaced_by == [("image", "pulumi.unknown-output")]
    assert train.meaning.endswith(SAME_IMAGE)


def test_env_change_replaces_only_the_container_whose_environment_changed(dev_plan):
    config = stack_file("dev")
    config[P + "training"][0]["steps"] = 300
    report = report_of(dev_plan, synthesize("dev", config))
    impacts = by_name(report)
    train = impacts[(CONTAINER, "workstation-train")]
    # TFD resource_docker_container.go L590: `env` is ForceNew (a set of strings: each element inherits it).
    assert train.action is Action.DELETE_REPLACE
    assert {rule for _, rule in train.replaced_by} == {"tfbridge.force-new"}
    assert all(path.startswith("envs") for path, _ in train.replaced_by)
    assert (CONTAINER, "workstation-train-gpucheck") not in impacts
    assert impacts[(JOB, "tiny")].action is Action.DELETE_REPLACE  # the env of an immutable pod template
    assert [i.name for i in report.containers_stopped] == ["workstation-train"]


def test_health_check_interval_change_updates_in_place_and_reaches_no_running_container(dev_plan, monkeypatch):
    """TFD marks no healthcheck attribute ForceNew (L1045-1091) and its update applies none of them
    (resourceDockerContainerUpdate): the change is only written into the state."""
    monkeypatch.setattr(inference, "HEALTH_INTERVAL_SECONDS", 10)
    report = report_of(dev_plan, synthesize("dev"))
    serve = by_name(report)[(CONTAINER, "workstation-serve")]
    assert serve.action is Action.UPDATE and not report.containers_stopped
    assert ("healthcheck.interval", "tfbridge.not-force-new") in serve.updated
    assert "tfd.container-update" in serve.rules
    assert "`healthcheck`" in serve.meaning and "only recorded in the state" in serve.meaning
    assert "**No running container changes.**" in to_markdown(report, 50)


# --- scenarios on the shipped prod stack -----------------------------------------------------------------------


def test_api_key_rotation_is_invisible_offline_and_said_so(prod_plan):
    """A secret is `[secret]` in both plans (synth never sees its value): the plans are equal, and the report names
    what a rotation replaces: the vLLM containers (their key is an uploaded file: `upload` is ForceNew) and the
    Kubernetes Secret (k8s.secret), whose new name rolls the Deployment (tests/test_k8s_day2_secrets.py)."""
    rotated = synthesize("prod", secrets={P + "vllmApiKey": "rotated-key-0123456789abcdef012345"})
    assert json.dumps(rotated.to_json(), sort_keys=True) == json.dumps(prod_plan.to_json(), sort_keys=True)
    report = report_of(prod_plan, rotated)
    assert report.impacts == []
    secrets = {s.name: s for s in report.secrets}
    served = [c["name"] for c in prod_plan.of_type(CONTAINER) if c["inputs"].get("uploads") == "[secret]"]
    # Each vLLM server and its proxy (components/workloads/proxy.py) hold the key as a file, and the monitoring
    # host's scrape-token writer its token (tests/test_monitoring_host.py).
    assert sorted(served) == [
        "gpu-node-1-prometheus-token",
        "gpu-node-3-serve-b",
        "gpu-node-3-serve-b-proxy",
        "gpu-node-4-serve-b",
        "gpu-node-4-serve-b-proxy",
    ]
    assert all(
        secrets[name].if_rotated is Action.DELETE_REPLACE and secrets[name].paths == ["uploads"] for name in served
    )
    assert secrets["llama-api-key"].type == "kubernetes:core/v1:Secret"
    assert secrets["llama-api-key"].if_rotated is Action.REPLACE and secrets["llama-api-key"].then
    markdown = to_markdown(report, 50)
    assert "Not visible offline (`synth.secret`)" in markdown and f"`{served[0]}`" in markdown


def test_gpu_check_threshold_change_reruns_every_check_and_stops_no_workload(prod_plan):
    config = stack_file("prod")
    config[P + "checks"] = {"floors": {"MI300X": {"minTflops": 650, "minBusbw": 100}}}
    report = report_of(prod_plan, synthesize("prod", config))
    checks = [i for i in report.impacts if i.type == CONTAINER and i.meaning.startswith("re-runs the GPU check")]
    assert len(checks) == len(gpu_containers(prod_plan)) == 8
    # TFD L163 `command` is ForceNew (the new --min-tflops), and L50 `name` (a check is named by a digest of what it
    # runs, components/docker/checks.py).
    assert all(
        i.action is Action.DELETE_REPLACE
        and i.replaced_by == [("command[9]", "tfbridge.force-new"), ("name", "tfbridge.force-new")]
        for i in checks
    )
    assert all(i.runs_check for i in checks)
    assert [i for i in report.impacts if i not in checks] == [] and not report.containers_stopped


# --- scenarios that change the fleet ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real program with a stack of our own (`demo`): every entry of the repository linked but stacks/."""
    directory = tmp_path_factory.mktemp("project")
    for entry in ROOT.iterdir():
        if entry.name != "stacks":
            (directory / entry.name).symlink_to(entry)
    (directory / "stacks").mkdir()
    return directory


def box(*partitions: tuple[str, int]) -> dict[str, Any]:
    return {
        P + "environment": "prod",
        # A Docker-only prod stack runs the monitoring host (on `box`), whose Grafana needs its password.
        P + "grafanaAdminPassword": {"secure": "v1:REPLACE-ME"},
        P + "hosts": [
            {
                "name": "box",
                "docker": {"host": "ssh://deploy@box.example.internal"},
                "gpus": 8,
                "gpuModel": "MI300X",
                "topology": "hosts/mi300x-8gpu.showtopo.txt",
                "gpuAccess": "renderNodes",
                "renderNodes": "hosts/mi300x-8gpu.render-nodes.json",
                "containers": [{"name": name, "gpuCount": count} for name, count in partitions],
            }
        ],
    }


def locked_synth(project: Path, config: dict[str, Any]) -> Plan:
    """`make lock STACK=demo` (tools/lock.py) after the stack file changed, then the synth, as a change is made."""
    (project / "stacks" / "Pulumi.demo.yaml").write_text(yaml.safe_dump({"config": config}))
    assert lock_tool.main(["--stack", "demo", "--project-dir", str(project)]) == 0
    return synthesize("demo", project_dir=project)


def test_a_new_partition_with_the_placement_lock_starts_it_and_restarts_nothing(project):
    base = locked_synth(project, box(("train", 4), ("serve", 2)))
    head = locked_synth(project, box(("train", 4), ("serve", 2), ("a-new", 2)))  # unlocked, it would take GPUs 0-1
    report = report_of(base, head)
    impacts = by_name(report)
    assert impacts[(CONTAINER, "box-a-new")].action is Action.CREATE
    assert impacts[(CONTAINER, "box-a-new")].meaning == "starts the shell of partition `box/a-new`"
    assert impacts[(CONTAINER, "box-a-new-gpucheck")].meaning == "runs the GPU check of `box/a-new`"
    assert not report.containers_stopped and (CONTAINER, "box-train") not in impacts
    assert {i.action for i in report.impacts} == {Action.CREATE}
    assert all(i.rules == ["pulumi.urn"] for i in report.impacts)  # a new URN is a create
    assert [i.name for i in report.impacts if i.runs_check] == ["box-a-new-gpucheck"]


def test_a_second_partition_on_a_host_switches_the_first_to_private_ipc_and_replaces_it(project):
    """In prod, partitions beside others get a private IPC namespace (issue 21 defect 4), and `ipc_mode` is ForceNew
    (TFD L1111): splitting a single-partition host restarts its partition once, whatever the lock keeps."""
    base = locked_synth(project, box(("train", 4)))
    assert base.get(CONTAINER, "box-train")["inputs"]["ipcMode"] == "host"
    report = report_of(base, locked_synth(project, box(("train", 4), ("a-new", 2))))
    train = by_name(report)[(CONTAINER, "box-train")]
    assert train.action is Action.DELETE_REPLACE and train.replaced_by == [
        ("ipcMode", "tfbridge.force-new"),
        ("securityOpts", "tfbridge.force-new"),  # with host IPC it declares the label=disable dockerd adds
    ]
    assert [i.name for i in report.containers_stopped] == ["box-train"]


def test_without_the_lock_a_new_partition_moves_and_restarts_the_others():
    """The counterfactual (dev has no lock): in name order `a-new` takes GPUs 0-1 and `train` moves; `envs` is
    ForceNew (L590), so the running partition is replaced onto other GPUs."""

    def plan(*partitions: tuple[str, int]) -> Plan:
        host = {"name": "workstation", "gpus": 4, "containers": [{"name": n, "gpuCount": c} for n, c in partitions]}
        return synth_with("dev", hosts=[host], training=None, inference=None)

    report = report_of(plan(("train", 2)), plan(("train", 2), ("a-new", 2)))
    train = by_name(report)[(CONTAINER, "workstation-train")]
    assert train.action is Action.DELETE_REPLACE and train.stops_container
    assert ("envs", "tfbridge.force-new") in train.replaced_by


def assert_replaced_in_place(impact: Impact, old_role: str, new_role: str, old: dict[str, Any]) -> None:
    """One URN whatever the partition runs (components/docker/partitions.py): the engine diffs the old state against
    the new inputs, ForceNew inputs differ, and pulumi-docker replaces a container delete-first (resources.go
    L112-115 `DeleteBeforeReplace: true`, test_impact_rules.py), so the Docker name is free when the new one is
    created. Never `pulumi.urn`: no create of another URN beside the old container."""
    assert impact.action is Action.DELETE_REPLACE and impact.stops_container
    assert "parent" not in {path for path, _ in impact.replaced_by}
    # A shell runs under Docker's init, which replaceOnChanges makes a replacement too (components/docker/stop.py).
    assert {rule for _, rule in impact.replaced_by} <= {
        "tfbridge.force-new",
        "tfbridge.set-element",
        "pulumi.replace-on-changes",
    }
    assert any(path.split("[")[0] == "command" for path, _ in impact.replaced_by)  # a new program runs there
    assert {"pulumi-docker.container-delete-before-replace", "tfd.container-delete"} <= set(impact.rules)
    assert "pulumi.urn" not in impact.rules
    assert impact.meaning == f"replaces {old_role} ({stop_words(old)}) by {new_role}"


def test_giving_a_partition_a_workload_replaces_its_shell_delete_first(dev_plan):
    """The partition's shell (declared by GpuHost) becomes the training's container (declared by DockerTraining, a
    child of the same GpuHost): same URN, so a delete-then-replace, not a create that meets the shell's Docker name."""
    base = synthesize("dev", shell_partitions("dev"))
    impacts = by_name(report_of(base, dev_plan))
    assert_replaced_in_place(
        impacts[(CONTAINER, "workstation-train")],
        "the shell of partition `workstation/train`",
        "training `tiny` on `workstation/train`",
        base.get(CONTAINER, "workstation-train"),
    )
    assert_replaced_in_place(
        impacts[(CONTAINER, "workstation-serve")],
        "the shell of partition `workstation/serve`",
        "vLLM server `qwen-small` on `workstation/serve`",
        base.get(CONTAINER, "workstation-serve"),
    )


def test_taking_a_workload_away_replaces_its_container_by_the_shell_delete_first(dev_plan):
    head = synthesize("dev", shell_partitions("dev"))
    impacts = by_name(report_of(dev_plan, head))
    assert_replaced_in_place(
        impacts[(CONTAINER, "workstation-train")],
        "training `tiny` on `workstation/train`",
        "the shell of partition `workstation/train`",
        dev_plan.get(CONTAINER, "workstation-train"),
    )


def test_moving_partitions_between_workloads_replaces_each_container_delete_first(dev_plan):
    """The training and the vLLM server swap partitions: each container changes workload, none changes URN."""
    impacts = by_name(report_of(dev_plan, synthesize("dev", swapped_partitions())))
    assert_replaced_in_place(
        impacts[(CONTAINER, "workstation-train")],
        "training `tiny` on `workstation/train`",
        "vLLM server `qwen-small` on `workstation/train`",
        dev_plan.get(CONTAINER, "workstation-train"),
    )
    assert_replaced_in_place(
        impacts[(CONTAINER, "workstation-serve")],
        "vLLM server `qwen-small` on `workstation/serve`",
        "training `tiny` on `workstation/serve`",
        dev_plan.get(CONTAINER, "workstation-serve"),
    )


def test_adding_a_host_to_a_host_group_creates_its_resources_and_touches_no_other(dev_plan):
    template = {
        "docker": {"host": "ssh://deploy@{name}.example.internal"},
        "gpus": 2,
        "containers": [{"name": "x", "gpus": [0]}, {"name": "y", "gpus": [1]}],
    }

    def plan(count: int) -> Plan:
        return synth_with("dev", hostGroups=[{"template": template, "namePattern": "node-{index}", "count": count}])

    report = report_of(plan(2), plan(3))
    assert report.impacts and {i.action for i in report.impacts} == {Action.CREATE}
    created = {(i.type, i.name) for i in report.impacts}
    assert (DOCKER_PROVIDER, "node-2") in created and (CONTAINER, "node-2-x") in created
    assert all("node-2" in name for _, name in created)
    assert not report.containers_stopped


# --- single rules, on edited plans -----------------------------------------------------------------------------


def edited(plan: Plan, type_token: str, name: str, change: Any) -> dict[str, Any]:
    copy_ = copy.deepcopy(plan.to_json())
    change(next(r for r in copy_["resources"] if r["type"] == type_token and r["name"] == name))
    return copy_


def test_a_changed_label_value_replaces_through_the_set_rule(dev_plan):
    head = edited(dev_plan, CONTAINER, "workstation-serve", lambda r: r["inputs"]["labels"][0].update(value="x/y"))
    serve = by_name(report_of(dev_plan, head))[(CONTAINER, "workstation-serve")]
    assert serve.action is Action.DELETE_REPLACE and serve.replaced_by == [("labels", "tfbridge.set-element")]
    grace = stop_words(dev_plan.get(CONTAINER, "workstation-serve"))
    assert serve.meaning.startswith(f"replaces vLLM server `qwen-small` on `workstation/serve` ({grace}")


def test_a_cpuset_change_replaces_the_partition_and_is_live_only_without_the_option(dev_plan):
    """A partition's limits replace it (components/docker/gpu_host.py LIMITS_REPLACE); a container without the
    option gets the change by `docker update`."""
    head = edited(dev_plan, CONTAINER, "workstation-train", lambda r: r["inputs"].update(cpuSet="0-3"))
    train = by_name(report_of(dev_plan, head))[(CONTAINER, "workstation-train")]
    assert train.action is Action.DELETE_REPLACE and train.replaced_by == [("cpuSet", "pulumi.replace-on-changes")]
    base = edited(dev_plan, CONTAINER, "workstation-train", lambda r: r.update(replace_on_changes=[]))
    head = copy.deepcopy(base)
    next(r for r in head["resources"] if r["name"] == "workstation-train")["inputs"].update(cpuSet="0-3")
    train = by_name(report_of(base, head))[(CONTAINER, "workstation-train")]
    assert train.action is Action.UPDATE and not train.stops_container
    assert "`docker update` of `cpuSet`, no restart" in train.meaning


def test_the_grace_of_the_container_being_deleted_is_named(dev_plan):
    base = edited(dev_plan, CONTAINER, "workstation-train", lambda r: r["inputs"].update(destroyGraceSeconds=300))
    head = copy.deepcopy(base)
    next(r for r in head["resources"] if r["name"] == "workstation-train")["inputs"]["command"].append("--x")
    train = by_name(report_of(base, head))[(CONTAINER, "workstation-train")]
    assert "training stops (SIGTERM, grace 300 s, then killed) and resumes from its newest checkpoint" in train.meaning


def test_a_new_docker_endpoint_updates_the_provider_and_replaces_nothing(dev_plan):
    head = edited(dev_plan, DOCKER_PROVIDER, "workstation", lambda r: r["inputs"].update(host="ssh://other"))
    report = report_of(dev_plan, head)
    assert [(i.name, i.action, i.rules) for i in report.impacts] == [
        ("workstation", Action.UPDATE, ["tfbridge.provider-config"])
    ]


def test_a_new_parent_is_a_new_urn_and_the_docker_name_clash_is_named(dev_plan):
    head = edited(
        dev_plan,
        CONTAINER,
        "workstation-serve",
        lambda r: r.update(parent="urn:pulumi:dev::rocm-stack::pulumi:pulumi:Stack$rocm-stack:docker:Other::x"),
    )
    serve = by_name(report_of(dev_plan, head))[(CONTAINER, "workstation-serve")]
    assert serve.action is Action.REPLACE and serve.replaced_by == [("parent", "pulumi.urn")]
    assert "unless the move is declared as an alias" in serve.meaning


def test_an_input_no_rule_covers_is_not_predicted(dev_plan):
    head = edited(dev_plan, CONTAINER, "workstation-serve", lambda r: r["inputs"].update(futureInput=1))
    serve = by_name(report_of(dev_plan, head))[(CONTAINER, "workstation-serve")]
    assert serve.action is None and "`futureInput`" in serve.meaning
    assert "**not predicted**" in to_markdown(report_of(dev_plan, head), 50)


def test_every_rule_named_in_a_report_is_in_the_table(image_bump):
    assert {rule for i in image_bump[2].impacts for rule in i.rules} <= RULES.keys()


def test_a_map_key_is_decided_by_the_maps_force_new(dev_plan):
    """`logOpts` is a map (TFD L894, ForceNew): diffMap finalizes each key with the map's schema."""
    head = edited(dev_plan, CONTAINER, "workstation-serve", lambda r: r["inputs"]["logOpts"].update({"max-size": "1g"}))
    serve = by_name(report_of(dev_plan, head))[(CONTAINER, "workstation-serve")]
    assert serve.action is Action.DELETE_REPLACE and serve.replaced_by == [("logOpts.max-size", "tfbridge.force-new")]
