"""The daemon's part of two rows of the change corpus (tests/test_impact_corpus.py), on the real dockerd.

`restart-policy`: terraform-provider-docker v4.5.0's update sends the new restart policy with ContainerUpdate
(resource_docker_container_funcs.go L1053-1068), and Read stores HostConfig.RestartPolicy.Name (L857): the running
container takes it without a restart, and the next refresh reads back what was declared.
`host-removed`, `monitoring-off`: the monitoring host's files and token writers are one-shot containers with restart
"no" (components/monitoring/docker_host.py `_one_shot`): dockerd leaves such a container exited once its program
ends, so deleting or replacing it stops nothing that runs.
"""

from __future__ import annotations

from typing import Any

from docker import APIClient  # type: ignore[import-untyped]  # docker 7.2.0 ships no type information

from e2e.harness import Docker


def _create(api: APIClient, image: str, command: list[str], restart: str) -> str:
    body: dict[str, Any] = {
        "Image": image,
        "Cmd": command,
        "HostConfig": {"NetworkMode": "none", "RestartPolicy": {"Name": restart, "MaximumRetryCount": 0}},
    }
    created: str = api._result(api._post_json(api._url("/containers/create"), data=body), True)["Id"]
    api.start(created)
    return created


def test_a_new_restart_policy_reaches_the_running_container_without_a_restart(docker: Docker, standin_image: str):
    api = APIClient(base_url=docker.host, version="auto")
    try:
        created = _create(api, standin_image, ["python3", "-c", "import time; time.sleep(120)"], "unless-stopped")
        before = docker.inspect(created)["State"]
        # The UpdateConfig TFD builds (funcs.go L1032-1068): the restart policy with the limits the state holds.
        body = {"RestartPolicy": {"Name": "always", "MaximumRetryCount": 0}, "CpuShares": 0, "Memory": 0}
        api._raise_for_status(api._post_json(api._url("/containers/{0}/update", created), data=body))
        after = docker.inspect(created)
        assert after["HostConfig"]["RestartPolicy"]["Name"] == "always"  # what Read stores (L857): no diff
        assert after["State"]["Running"] and after["State"]["StartedAt"] == before["StartedAt"]
        assert after["State"]["Pid"] == before["Pid"]
    finally:
        docker.remove_all_containers()


def test_a_one_shot_container_with_restart_no_stays_exited(docker: Docker, standin_image: str):
    api = APIClient(base_url=docker.host, version="auto")
    try:
        created = _create(api, standin_image, ["python3", "-c", "print('written')"], "no")
        assert api.wait(created, timeout=60)["StatusCode"] == 0
        state = docker.inspect(created)["State"]
        assert not state["Running"] and state["Status"] == "exited"
        assert docker.inspect(created)["RestartCount"] == 0
    finally:
        docker.remove_all_containers()


def test_a_second_network_of_the_same_name_is_refused(docker: Docker):
    """terraform-provider-docker v4.5.0 creates a network by name (resource_docker_network_funcs.go L75) with the
    docker client v28.5.2, which asks the daemon to check for a duplicate below API 1.44 (client/network_create.go
    L26-29; from 1.44 the daemon always checks): pulumi-docker replaces a network create-first (no DeleteBeforeReplace
    for docker_network, provider/resources.go L133), so a replacement that keeps the name fails at the create."""
    api = APIClient(base_url=docker.host, version="auto")
    body = {"Name": "rocm-stack-corpus", "CheckDuplicate": True, "Driver": "bridge"}
    try:
        first = api._result(api._post_json(api._url("/networks/create"), data=body), True)["Id"]
        second = api._post_json(api._url("/networks/create"), data={**body, "Internal": True})
        assert second.status_code == 409, second.text
        assert "already exists" in second.text
        assert [n["Id"] for n in api.networks(names=["rocm-stack-corpus"])] == [first]
    finally:
        for network in api.networks(names=["rocm-stack-corpus"]):
            api.remove_network(network["Id"])


def test_a_volume_created_again_under_its_name_is_the_same_volume_and_its_delete_waits_for_its_users(
    docker: Docker, standin_image: str
):
    """TFD creates a volume by name (resource_docker_volume.go L175) and deletes it by that name, force, retrying
    "volume is in use" for 30 s (L362-386, L429-445). Docker answers a create of an existing name with the existing
    volume, labels unchanged; so a create-first replacement (pulumi-docker sets no DeleteBeforeReplace for
    docker_volume, resources.go L136) adopts the old volume, and the old one's delete removes that very volume, or
    fails while a container mounts it."""
    api = APIClient(base_url=docker.host, version="auto")
    try:
        api.create_volume("rocm-stack-corpus", labels={"generation": "1"})
        again = api.create_volume("rocm-stack-corpus", labels={"generation": "2"})
        assert again["Name"] == "rocm-stack-corpus" and again["Labels"] == {"generation": "1"}
        user = api.create_container(
            standin_image,
            ["python3", "-c", "import time; time.sleep(60)"],
            host_config=api.create_host_config(binds=["rocm-stack-corpus:/data"], network_mode="none"),
        )
        api.start(user)
        refused = api._delete(api._url("/volumes/{0}", "rocm-stack-corpus"), params={"force": True})
        assert refused.status_code == 409 and "in use" in refused.text, refused.text
        api.remove_container(user, force=True)
        api.remove_volume("rocm-stack-corpus", force=True)
        assert "rocm-stack-corpus" not in [v["Name"] for v in api.volumes()["Volumes"] or []]
    finally:
        docker.remove_all_containers()
        if "rocm-stack-corpus" in [v["Name"] for v in api.volumes()["Volumes"] or []]:
            api.remove_volume("rocm-stack-corpus", force=True)
