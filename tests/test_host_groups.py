"""Host groups (`rocm-stack:hostGroups`, issue 14 part 3): a fleet described once expands to exactly the hosts
written out, growing it renames nothing, and a member's problem names where its value was written."""

from __future__ import annotations

import copy
import re
import shutil
from typing import Any

import pytest
import yaml

from schema import ConfigError, load
from schema.docker import SHELL_COMMAND, PlacementLock
from tools import lock as lock_tool
from tools.synth import ROOT, rendered_files, synthesize
from conftest import stack_file

P = "rocm-stack:"
TOPOLOGY = "hosts/mi300x-8gpu.showtopo.txt"
RENDER_NODES = "hosts/mi300x-8gpu.render-nodes.json"

# prod's host, as a template: reached by name over ssh, placed by its topology, pinned to its NUMA node's CPUs,
# renderNodes isolation.
TEMPLATE: dict[str, Any] = {
    "docker": {"host": "ssh://deploy@{name}.example.internal", "sshOpts": ["-o", "StrictHostKeyChecking=yes"]},
    "gpus": 8,
    "gpuModel": "MI300X",
    "topology": TOPOLOGY,
    "gpuAccess": "renderNodes",
    "renderNodes": RENDER_NODES,
    "numaCpus": {0: "0-95,192-287", 1: "96-191,288-383"},
    "containers": [
        {"name": "train-a", "gpuCount": 4},
        {"name": "serve-b", "image": "vllm", "gpuCount": 4, "command": ["sleep", "infinity"], "shmSize": "64GiB"},
    ],
}


def written_out(name: str, template: dict[str, Any] = TEMPLATE) -> dict[str, Any]:
    """A member as a user would write it under `hosts`."""
    host = {"name": name, **copy.deepcopy(template)}
    host["docker"]["host"] = host["docker"]["host"].replace("{name}", name)
    return host


def dev_with(**keys: Any) -> dict[str, Any]:
    config = stack_file("dev")
    config.update({P + key: value for key, value in keys.items()})
    return config


def problems(config: dict[str, Any], stack: str = "dev", **kwargs: Any) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        load(stack, config, lock=kwargs.pop("lock", PlacementLock()), **kwargs)
    return str(refused.value).splitlines()


def test_a_group_gives_the_plan_of_its_members_written_out():
    # 8 members prove what 128 did (each member is expanded alike), in a sixteenth of the time; indices 97..104
    # cross from two significant digits to three, where the pattern's padding matters.
    names = [f"gpu-node-{i:03d}" for i in range(97, 105)]
    workstation = stack_file("dev")[P + "hosts"]
    # Checks and monitoring off: they add resources per host, not anything a group changes (seconds saved).
    lean = {"checks": {"enable": False}, "monitoring": {"enabled": False}}
    group = dev_with(
        hostGroups=[{"template": TEMPLATE, "namePattern": "gpu-node-{index:03d}", "start": 97, "count": 8}], **lean
    )
    hosts = dev_with(hosts=workstation + [written_out(name) for name in names], **lean)
    by_group, by_hosts = synthesize("dev", group), synthesize("dev", hosts)
    assert len([r for r in by_group.resources if r["type"] == "rocm-stack:docker:GpuHost"]) == 9
    assert by_group.to_json() == by_hosts.to_json()
    assert rendered_files(by_group) == rendered_files(by_hosts)


def test_members_by_name_with_overrides_are_the_hosts_written_out():
    # A 4-GPU member drops the template's 8-GPU topology and render-node map (a map listing GPUs the host does not
    # have is another host's, refused), so it shares all of /dev/dri.
    small = {
        "gpus": 4,
        "topology": None,
        "numaCpus": None,
        "renderNodes": None,
        "gpuAccess": "all",
        "containers": [{"name": "solo", "gpus": [0, 1]}],
    }
    group = {
        "template": TEMPLATE,
        "members": ["alpha", "beta", "gamma"],
        "overrides": {"beta": small, "gamma": {"docker": {"host": "tcp://10.0.0.7:2376"}}},
    }
    beta = {
        "name": "beta",
        **{k: v for k, v in written_out("beta").items() if k not in ("topology", "numaCpus", "renderNodes")},
        "gpus": 4,
        "gpuAccess": "all",
        "containers": small["containers"],
    }
    gamma = written_out("gamma")
    gamma["docker"]["host"] = "tcp://10.0.0.7:2376"  # a mapping is merged: sshOpts stay the template's
    workstation = stack_file("dev")[P + "hosts"]
    expected = load("dev", dev_with(hosts=workstation + [written_out("alpha"), beta, gamma]), lock=PlacementLock())
    cfg = load("dev", dev_with(hostGroups=[group]), lock=PlacementLock())
    assert cfg.hosts == expected.hosts and len(cfg.hosts) == 4
    assert cfg.hosts[3].docker.ssh_opts == ["-o", "StrictHostKeyChecking=yes"]


def test_growing_a_group_adds_hosts_and_renames_nothing():
    def plan(count: int, members: list[str]):
        return synthesize(
            "dev",
            dev_with(
                hostGroups=[
                    {"template": TEMPLATE, "namePattern": "node-{index}", "count": count},
                    {
                        "template": {"gpus": 2, "containers": [{"name": "x", "gpus": [0]}, {"name": "y", "gpus": [1]}]},
                        "members": members,
                    },
                ]
            ),
        )

    before, after = plan(2, ["ws-b", "ws-d"]), plan(4, ["ws-a", "ws-b", "ws-c", "ws-d"])
    before_hosts = {r["name"] for r in before.of_type("rocm-stack:docker:GpuHost")}
    after_hosts = {r["name"] for r in after.of_type("rocm-stack:docker:GpuHost")}
    assert after_hosts - before_hosts == {"node-2", "node-3", "ws-a", "ws-c"}
    assert before_hosts <= after_hosts
    after_by_urn = {r["urn"]: r for r in after.resources}
    assert {r["urn"] for r in before.resources} <= set(after_by_urn)
    # Every container and image that existed is declared with the same inputs: nothing is replaced.
    for resource in before.resources:
        if resource["type"].startswith("docker:"):
            assert after_by_urn[resource["urn"]]["inputs"] == resource["inputs"], resource["urn"]


def test_a_template_problem_is_named_once_at_the_template_with_the_members_it_hits():
    template = {**TEMPLATE, "gpus": 99}
    found = problems(
        dev_with(
            hostGroups=[
                {"template": template, "namePattern": "n-{index:02d}", "count": 5, "overrides": {"n-03": {"gpus": 8}}}
            ]
        )
    )
    assert found == [
        "rocm-stack:hostGroups[0].template.gpus: member 'n-00': must be at most 64 (got 99) "
        "(and 3 other member(s) alike)"
    ]


def test_a_member_problem_names_its_override_and_every_host_rule_applies():
    def refused(override: dict[str, Any]) -> list[str]:
        return problems(
            dev_with(
                hostGroups=[
                    {"template": TEMPLATE, "namePattern": "n-{index}", "count": 3, "overrides": {"n-1": override}}
                ]
            )
        )

    assert refused({"docker": {"host": "http://n-1"}}) == [
        "rocm-stack:hostGroups[0].overrides.n-1.docker.host: expected unix:///path/to/docker.sock, "
        "ssh://user@host[:port] or tcp://host:port (got 'http://n-1')"
    ]
    # A cross-field rule of docker.problems, on a member: the gpuCount sizes must fit the host's GPUs.
    assert refused({"containers": [{"name": "a", "gpuCount": 4}, {"name": "b", "gpuCount": 8}]}) == [
        "rocm-stack:hostGroups[0].overrides.n-1.containers: the gpuCount sizes [4, 8] need 12 GPUs but host 'n-1' has 8"
    ]


def test_a_member_name_the_host_rules_refuse_names_the_pattern():
    found = problems(dev_with(hostGroups=[{"template": TEMPLATE, "namePattern": "Node-{index}", "count": 3}]))
    assert found == [
        "rocm-stack:hostGroups[0].namePattern: member 'Node-0': expected lowercase letters, digits "
        "and '-', at most 63 characters, starting and ending with a letter or digit (got 'Node-0') "
        "(and 2 other member(s) alike)"
    ]


def test_a_name_declared_twice_is_refused_between_hosts_and_groups_and_between_groups():
    found = problems(
        dev_with(
            hostGroups=[
                {"template": TEMPLATE, "members": ["a", "workstation"]},
                {"template": TEMPLATE, "namePattern": "{index}", "count": 3, "start": 0},
                {"template": TEMPLATE, "members": ["2", "a"]},
            ]
        )
    )
    assert found == [
        "rocm-stack:hostGroups[0].members[1]: member 1 of the group is named 'workstation', which hosts[0] "
        "already is; a host is declared once: remove it from one of them",
        "rocm-stack:hostGroups[2].members[0]: member 0 of the group is named '2', which hostGroups[1]'s member 2 "
        "already is; a host is declared once: remove it from one of them",
        "rocm-stack:hostGroups[2].members[1]: member 1 of the group is named 'a', which hostGroups[0]'s member 0 "
        "already is; a host is declared once: remove it from one of them",
    ]


@pytest.mark.parametrize(
    "group, key, message",
    [
        ({"namePattern": "n-{index}"}, "hostGroups[0]", "`namePattern` and `count` go together"),
        (
            {"members": ["a"], "namePattern": "n-{index}", "count": 2},
            "hostGroups[0]",
            "name the members with `members` or with `namePattern` and `count`, not both",
        ),
        ({}, "hostGroups[0]", "a group needs members"),
        ({"namePattern": "n-{i}", "count": 2}, "hostGroups[0].namePattern", "one `{index}` or zero-padded"),
        ({"namePattern": "n-{index}-{index}", "count": 2}, "hostGroups[0].namePattern", "one `{index}`"),
        ({"namePattern": "n-{index}", "count": 0}, "hostGroups[0].count", "must be at least 1"),
        ({"namePattern": "n-{index}", "count": "4"}, "hostGroups[0].count", "expected a number, got the text '4'"),
        ({"members": ["a"], "template": {"name": "x"}}, "hostGroups[0].template", "a template has no `name`"),
        (
            {"members": ["a"], "overrides": {"b": {"gpus": 2}}},
            "hostGroups[0]",
            "overrides name 'b', which is not a member",
        ),
        ({"members": ["A"]}, "hostGroups[0].members[0]", "expected lowercase letters"),
        (
            {"members": ["a"], "temlpate": {}},
            "hostGroups[0].temlpate",
            "unknown key; expected one of: count, members, namePattern, overrides, start, template",
        ),
    ],
)
def test_a_malformed_group_is_refused_naming_the_key(group, key, message):
    found = problems(dev_with(hostGroups=[group]))
    assert any(line.startswith(f"rocm-stack:{key}: ") and message in line for line in found), found


def test_the_placement_lock_holds_group_members(tmp_path):
    (tmp_path / "stacks").mkdir()
    (tmp_path / "hosts").mkdir()
    shutil.copy(ROOT / TOPOLOGY, tmp_path / TOPOLOGY)
    shutil.copy(ROOT / RENDER_NODES, tmp_path / RENDER_NODES)

    def config(count: int) -> dict[str, Any]:
        return {
            P + "environment": "prod",
            P + "security": {"profile": "hardened"},
            P + "hostGroups": [{"template": TEMPLATE, "namePattern": "node-{index}", "count": count}],
            P + "monitoring": {"host": False},  # no Grafana, whose password is beside the point
        }

    def write(count: int) -> None:
        (tmp_path / "stacks" / "Pulumi.fleet.yaml").write_text(yaml.safe_dump({"config": config(count)}))

    # prod without a lock: each member's partitions are refused, said once at the template.
    found = problems(config(3), stack="fleet")
    assert len(found) == 2 and all(
        re.match(
            r"rocm-stack:hostGroups\[0\]\.template\.containers\[[01]\]\.gpuCount: member 'node-0': partition "
            r"'node-0/(train-a|serve-b)' has no GPUs in the placement lock stacks/placement.fleet.yaml; run "
            r"`make lock STACK=fleet`.* \(and 2 other member\(s\) alike\)",
            line,
        )
        for line in found
    ), found
    write(3)
    lock = lock_tool.locked("fleet", tmp_path)
    assert sorted(lock.hosts) == ["node-0", "node-1", "node-2"]
    assert all(sorted(map(sorted, h.partitions.values())) == [[0, 1, 2, 3], [4, 5, 6, 7]] for h in lock.hosts.values())
    placed = load("fleet", config(3), lock=lock)
    assert [c.gpus for c in placed.hosts[1].containers] == [
        lock.hosts["node-1"].partitions[name] for name in ("train-a", "serve-b")
    ]
    # A grown group: the new member is refused until locked, the others keep their GPUs.
    (found,) = [line for line in problems(config(4), stack="fleet", lock=lock) if "node-3/train-a" in line]
    assert found.startswith("rocm-stack:hostGroups[0].template.containers[0].gpuCount: member 'node-3'")
    write(4)
    grown = lock_tool.locked("fleet", tmp_path)
    assert {name: grown.hosts[name] for name in lock.hosts} == lock.hosts and "node-3" in grown.hosts


def test_the_docs_host_group_example_with_a_workload_on_one_member_takes_the_override_the_message_names():
    """configuration.md's example sets `image: vllm` on serve-b in the template; a vLLM server on one member's
    serve-b decides that partition's image. Removing the key would change every member: the message names the
    per-member way, and that way, written as said, synthesizes (issue 24 item 2)."""
    doc = (ROOT / "docs" / "configuration.md").read_text()
    example = doc.split("## Host groups", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    config = yaml.safe_load(example)["config"]
    group = config[P + "hostGroups"][0]
    group["count"] = 8  # alike members; the example's 128 are synthesized above
    config[P + "inference"] = [
        {"name": "qwen", "model": "Qwen/Qwen2.5-0.5B-Instruct", "docker": {"partitions": ["gpu-node-003/serve-b"]}}
    ]
    with pytest.raises(ConfigError) as refused:
        load("dev", config)
    (line,) = str(refused.value).splitlines()
    assert line.startswith("rocm-stack:hostGroups[0].template.containers[1].image: member 'gpu-node-003': ")
    (key,) = re.findall(r"write `overrides\.([^`]+)`", line)
    assert key == "gpu-node-003.containers"
    member, field = key.split(".")
    group["overrides"][member] = {
        field: [{k: v for k, v in c.items() if k != "image"} for c in group["template"]["containers"]]
    }
    plan = synthesize("dev", config)
    container = "docker:index/container:Container"
    assert plan.get(container, "gpu-node-003-serve-b")["inputs"]["command"][:2] == ["vllm", "serve"]
    # The other members keep the template: serve-b a shell in the vLLM image.
    shell = plan.get(container, "gpu-node-004-serve-b")["inputs"]
    assert shell["command"] == list(SHELL_COMMAND)
    assert shell["image"] == plan.get(container, "gpu-node-003-serve-b")["inputs"]["image"]
