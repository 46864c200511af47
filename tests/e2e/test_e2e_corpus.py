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
