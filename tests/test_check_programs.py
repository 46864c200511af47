"""The check programs shipped to each Docker host once (components/docker/checks.py check_programs_volume), by
reference (components/docker/programs.py), and what `pulumi up` does when they change (the change-impact preview).

Upstream facts, read from the mirrors (tests/upstream_go.py; skipped where a mirror is absent): the Docker
provider reads an upload's `source` file at create and keeps only its path and hash, both ForceNew; the Pulumi
engine starts the provider in the project directory; the daemon mounts a created container's volumes before it
extracts an upload into it (proved on the real daemon too: tests/e2e/test_e2e_render_nodes.py).
"""

from __future__ import annotations

import copy
import hashlib
import re
import shutil
from collections import defaultdict
from typing import Any

import pytest

from components.docker import checks, programs
from components.docker.checks import CHECK_PROGRAMS, PROGRAM_MOUNT
from conftest import CONTAINER, check_containers, stack_file
from schema.project import PROGRAMS
from test_impact import by_name, report_of
from tools.impact_rules import Action
from tools.synth import SECRET, Plan, synthesize
from upstream_go import Upstream, resource_schema

VOLUME = "docker:index/volume:Volume"
TFD = Upstream("kreuzwerker/terraform-provider-docker", "5074970c71ce6cc393c74942d5d628943834beb9")  # tag v4.5.0
PULUMI = Upstream("pulumi/pulumi", "0ac56e876614aedf12771d73ef7e80959b8a6fd4")  # tag v3.259.0
PULUMI_DOCKER = Upstream("pulumi/pulumi-docker", "237b7899bb513613a7645e74d6981c12d054dcc7")  # v5.2.0's bridge
MOBY_20 = Upstream("moby/moby", "5d6db842238e3c4f5f9fb9ad70ea46b35227d084")  # tag v20.10.24 (Debian's docker.io here)
MOBY_28 = Upstream("moby/moby", "af898abe44662d9554fb15ee4d4a7307f1b8e315")  # tag v28.0.0


def on_hosts(plan: Plan) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Host -> resource type -> the records on its Docker provider."""
    providers = {r["urn"]: r["name"] for r in plan.of_type("pulumi:providers:docker")}
    found: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for record in plan.resources:
        if record.get("provider") in providers:
            found[providers[record["provider"]]][record["type"]].append(record)
    return found


def test_each_host_gets_the_check_programs_once_and_every_check_reads_them_from_there(prod_plan):
    for host, resources in on_hosts(prod_plan).items():
        # (the monitoring host has its servers' data volumes besides)
        (volume,) = [v for v in resources[VOLUME] if v["name"] == f"{host}-check-programs"]
        name = volume["inputs"]["name"]
        checks_here = [c for c in resources[CONTAINER] if c in check_containers(prod_plan)]
        (preflight,) = [c for c in checks_here if c["name"].endswith("-preflight")]
        gpuchecks = [c for c in checks_here if c["name"].endswith("-gpucheck")]
        assert len(gpuchecks) == 2, host
        # The preflight mounts the volume writable and copies the files into it: by path and SHA-256, never by text.
        assert {"volumeName": name, "containerPath": PROGRAM_MOUNT, "readOnly": False} in preflight["inputs"]["volumes"]
        assert sorted(preflight["inputs"]["uploads"], key=lambda u: u["file"]) == [
            {
                "file": f"{PROGRAM_MOUNT}/{program}",
                "source": f"programs/{program}",
                "sourceHash": hashlib.sha256((PROGRAMS / program).read_bytes()).hexdigest(),
            }
            for program in sorted(CHECK_PROGRAMS)
        ]
        assert volume["urn"] in preflight["depends_on"]
        # Each GPU check only reads them, after the preflight (its verdict).
        for check in gpuchecks:
            assert check["inputs"]["volumes"] == [
                {"volumeName": name, "containerPath": PROGRAM_MOUNT, "readOnly": True}
            ]
            assert "uploads" not in check["inputs"] and preflight["urn"] in check["depends_on"]


def test_no_container_keeps_a_programs_text_in_the_state(prod_plan, dev_plan):
    texts = {path.read_text() for path in PROGRAMS.glob("*.py")}
    for plan in (prod_plan, dev_plan):
        for container in plan.of_type(CONTAINER):
            uploads = container["inputs"].get("uploads", [])
            if uploads != SECRET:
                assert not [u["file"] for u in uploads if u.get("content") in texts], container["name"]


def test_the_provider_reads_an_uploads_source_at_create_and_keeps_only_its_path_and_hash():
    """TFD v4.5.0: `upload.source` and `upload.source_hash` are ForceNew (a new hash replaces the container: the
    programs are copied in again); the source file is read by the create, `os.ReadFile(source)`, into the tar it
    copies in; its description says what it is for."""
    container = TFD.read("internal/provider/resource_docker_container.go")
    schema = {a.path: a for a in resource_schema(container, TFD.read("internal/provider/helpers.go"))}
    assert schema["upload.source"].force_new and schema["upload.source_hash"].force_new
    assert (schema["upload.source"].line, schema["upload.source_hash"].line) == (1029, 1035)
    assert b"This allows for large file uploads that do not get stored in state." in container
    funcs = TFD.read("internal/provider/resource_docker_container_funcs.go").decode().splitlines()
    assert funcs[537 - 1].strip() == "sourceContent, err := os.ReadFile(source)"


def test_the_engine_runs_the_provider_in_the_project_directory():
    """A relative `source` is read from the provider process's working directory: the engine's plugin context is
    made with pwd = the project's directory (getPwdMain: Pulumi.yaml's directory, `main` unset here), and every
    provider plugin is started there."""
    assert "main" not in (PROGRAMS.parent / "Pulumi.yaml").read_text()
    deployment = PULUMI.read("pkg/engine/deployment.go").decode().splitlines()
    assert deployment[57 - 1].strip() == "pwd, main, err := projinfo.GetPwdMain()"
    assert "pwd := root" in PULUMI.read("pkg/engine/project.go").decode()
    provider = PULUMI.read("sdk/go/common/resource/plugin/provider_plugin.go").decode().splitlines()
    assert provider[287 - 1].strip().startswith("plug, handshakeRes, err = newPlugin(ctx, ctx.Pwd, path, prefix,")
    plugin = PULUMI.read("sdk/go/common/resource/plugin/plugin.go").decode().splitlines()
    assert plugin[599 - 1].strip() == "cmd.Dir = pwd"


def test_the_daemon_extracts_an_upload_into_a_created_containers_volume():
    """moby v20.10.24 containerExtractToDir mounts the container, then its volumes, before extracting; v28.0.0 does
    it in openContainerFS (setupMounts, bound into a private mount namespace)."""
    old = MOBY_20.read("daemon/archive.go").decode().splitlines()
    assert old[276 - 1].strip() == "if err = daemon.Mount(container); err != nil {"
    assert old[281 - 1].strip() == "err = daemon.mountVolumes(container)"
    new = MOBY_28.read("daemon/archive_unix.go").decode().splitlines()
    assert new[104 - 1].strip() == "cfs, err := daemon.openContainerFS(container)"
    assert "daemon.setupMounts(ctx, ctr)" in MOBY_28.read("daemon/containerfs_linux.go").decode()


def test_pulumi_docker_replaces_a_volume_create_first():
    """No DeleteBeforeReplace for docker_volume (provider/resources.go L136): the new version's volume exists
    before the old one is deleted, and its new name never meets the old one."""
    resources = PULUMI_DOCKER.read("provider/resources.go").decode().splitlines()
    assert resources[136 - 1].split() == ['"docker_volume":', "{Tok:", "dockerResource(dockerMod,", '"Volume")},']


# --- day 2 ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def program_edit(tmp_path_factory):
    """prod before and after an edit of programs/gpucheck.py, in a copy of programs/ standing in for the project's
    (the same relative `source` paths as in the repository)."""
    project = tmp_path_factory.mktemp("project")
    shutil.copytree(PROGRAMS, project / "programs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checks, "PROGRAM_SOURCE", project / "programs")
        patch.setattr(programs, "ROOT", project)
        base = synthesize("prod")
        gpucheck = project / "programs" / "gpucheck.py"
        gpucheck.write_text(gpucheck.read_text() + "\n# the next version\n")
        head = synthesize("prod")
    return base, head, report_of(base, head)


def test_a_program_edit_reruns_every_hosts_checks_and_nothing_else(program_edit):
    base, head, report = program_edit
    impacts = by_name(report)
    hosts = sorted(on_hosts(base))
    expected = {(VOLUME, f"{h}-check-programs") for h in hosts} | {
        (CONTAINER, c["name"]) for c in check_containers(base)
    }
    assert set(impacts) == expected
    assert report.containers_stopped == []  # every running partition keeps running
    for host in hosts:
        # A new volume (its name is ForceNew, resource_docker_volume.go L41-46), created before the old is deleted.
        volume = impacts[(VOLUME, f"{host}-check-programs")]
        assert volume.action is Action.REPLACE and volume.replaced_by == [("name", "tfbridge.force-new")]
        assert re.fullmatch(
            rf"creates volume `\S+` on `{host}`, then deletes `\S+` once no container uses it", volume.meaning
        )
    for check in check_containers(base):
        impact = impacts[(CONTAINER, check["name"])]
        assert impact.action is Action.DELETE_REPLACE and impact.runs_check, check["name"]
        paths = {path.split("[")[0] for path, _ in impact.replaced_by}
        # The mounted volume (ForceNew, resource_docker_container.go L434-466) re-runs each check; the preflight's
        # files are copied in again (sourceHash, ForceNew L1035).
        assert "volumes" in paths, (check["name"], impact.replaced_by)
        if check["name"].endswith("-preflight"):
            assert "uploads" in paths
            hashes = {u["sourceHash"] for u in head.get(CONTAINER, check["name"])["inputs"]["uploads"]}
            assert hashlib.sha256((PROGRAMS / "gpucheck.py").read_bytes()).hexdigest() not in hashes


def test_an_unrelated_change_reruns_no_check(prod_plan):
    config = stack_file("prod")
    training = copy.deepcopy(config["rocm-stack:training"])
    training[0]["steps"] *= 2
    config["rocm-stack:training"] = training
    report = report_of(prod_plan, synthesize("prod", config))
    assert report.impacts and not [i.name for i in report.impacts if i.runs_check]
    assert not [i.name for i in report.impacts if i.type == VOLUME]
