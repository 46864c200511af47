"""A partition without a workload is a shell that stays up by design, in every environment (issue 24 item 1).

The images' own command is an interactive shell that exits at once without a terminal (the upstream Dockerfiles are
cited at schema.docker.SHELL_COMMAND; tests/e2e/test_e2e_shell.py shows both on a real daemon). One definition decides
what a shell runs: the prod stack no longer writes it.
"""

from __future__ import annotations

import copy

from schema.docker import SHELL_COMMAND
from tools.impact_rules import Action
from tools.synth import synthesize
from components.docker.gpu_host import LIMITS_REPLACE
from conftest import CONTAINER, on_gpu_hosts, partition_of
from test_impact import by_name, report_of

P = "rocm-stack:"


def readme_stack(**container: object) -> dict:
    """README.md's minimal stack (its `docker.host` left at the local socket)."""
    return {
        P + "hosts": [
            {
                "name": "gpu-node-1",
                "gpus": 8,
                "containers": [
                    {"name": "train-a", "gpus": [0, 1, 2, 3], **container},
                    {"name": "train-b", "gpus": [4, 5, 6, 7]},
                ],
            }
        ]
    }


def shells(plan) -> dict[str, list[str] | None]:
    return {partition_of(c): c["inputs"].get("command") for c in on_gpu_hosts(plan, CONTAINER) if partition_of(c)}


def test_a_shell_runs_sleep_infinity_in_dev_and_in_prod(prod_plan):
    assert shells(synthesize("dev", readme_stack())) == {
        "gpu-node-1/train-a": list(SHELL_COMMAND),
        "gpu-node-1/train-b": list(SHELL_COMMAND),
    }
    # The committed prod stack's shells (the partitions no workload claims) write no command.
    assert shells(prod_plan) == {
        f"gpu-node-{n}/{c}": list(SHELL_COMMAND)
        for n, c in ((1, "serve-b"), (2, "serve-b"), (3, "train-a"), (4, "train-a"))
    }


def test_a_command_of_its_own_is_kept():
    command = ["python3", "-m", "http.server", "8080"]
    assert shells(synthesize("dev", readme_stack(command=command)))["gpu-node-1/train-a"] == command


def test_day2_a_shell_declared_without_a_command_is_replaced_once_and_its_check_does_not_run_again():
    """Before, the shell's container had no `command` input (the image's own); the next `pulumi up` replaces it
    (command is ForceNew in the Docker provider: rule tfbridge.force-new), delete first, and the GPU check, whose name
    hashes the partition's own config (unchanged), is not touched."""
    head = synthesize("dev", readme_stack()).to_json()
    base = copy.deepcopy(head)
    for resource in base["resources"]:
        if resource["type"] == CONTAINER and resource["inputs"].get("command") == list(SHELL_COMMAND):
            del resource["inputs"]["command"]
    report = report_of(base, head)
    impacts = by_name(report)
    assert set(impacts) == {(CONTAINER, "gpu-node-1-train-a"), (CONTAINER, "gpu-node-1-train-b")}
    for impact in impacts.values():
        assert impact.action is Action.DELETE_REPLACE and impact.replaced_by == [("command", "tfbridge.force-new")]
        assert impact.stops_container and not impact.runs_check


def test_every_shell_runs_under_an_init_that_forwards_the_stop_signal(prod_plan):
    """A shell is PID 1 of its container and `sleep` has no SIGTERM handler, so the kernel never delivers the stop
    signal to it (pid_namespaces(7)): Docker's init (docker-init, tini) runs the command as its child and forwards
    the signal (tests/e2e/test_e2e_shell.py measures the stop on a real daemon). A workload's container runs its own
    signal-aware process as PID 1 (vLLM exec'd by its key wrapper, torchrun) and gets none."""
    own_command = synthesize("dev", readme_stack(command=["python3", "-m", "http.server", "8080"]))
    for plan in (synthesize("dev", readme_stack()), own_command, prod_plan):
        for container in on_gpu_hosts(plan, CONTAINER):
            assert container["inputs"].get("init") is True, container["name"]
            # `init` is not ForceNew and the provider's update never applies it: replaceOnChanges does (as for the
            # limits, tests/test_impact_limits.py).
            assert container["replace_on_changes"] == sorted(["init", *LIMITS_REPLACE]), container["name"]
    workloads = [c for c in prod_plan.of_type(CONTAINER) if c["aliases"] and not c["inputs"].get("attach")]
    assert workloads and not any(c["inputs"].get("init") for c in workloads)


def test_day2_the_first_up_with_the_init_replaces_each_shell_once(prod_plan):
    """Before, the shells had no `init`: the first `pulumi up` after it replaces each of them (the resource option
    replaceOnChanges, rule pulumi.replace-on-changes), delete first; the old shell ignores SIGTERM and is killed at
    the end of its 30 s grace, once. Nothing else changes (its GPU check's name hashes the partition's config)."""
    head = prod_plan.to_json()
    base = copy.deepcopy(head)
    shell_names = set()
    for resource in base["resources"]:
        if resource["type"] == CONTAINER and resource["inputs"].pop("init", None):
            resource["replace_on_changes"] = []
            shell_names.add(resource["name"])
    assert len(shell_names) == 4
    impacts = by_name(report_of(base, head))
    assert set(impacts) == {(CONTAINER, name) for name in shell_names}
    for impact in impacts.values():
        assert impact.action is Action.DELETE_REPLACE and impact.replaced_by == [("init", "pulumi.replace-on-changes")]
        assert impact.stops_container and not impact.runs_check
        assert impact.meaning.startswith("replaces the shell of partition") and "SIGTERM, grace 30 s" in impact.meaning
