"""A container stopped by hand, on the real daemon: what terraform-provider-docker v4.5.0's Read then stores for its
published ports (resource_docker_container_funcs.go L797-805): with `must_run` true it sets `ports` from
NetworkSettings.Ports, which a stopped container no longer has, so the state holds none, a list of another length
than the declared one, which the ports' DiffSuppressFunc does not suppress (resource_docker_container.go L1193-1204),
and `ports` is ForceNew (L487-491): the next `pulumi up` replaces the container (its writable layer is lost) instead
of starting it. With `must_run` false Read leaves `ports` as the state holds it: no diff, the container stays stopped
("If `false`, Terraform leaves the container alone", the attribute's description, L124). So the partitions declare
`must_run` false (components/docker/gpu_host.py, components/workloads/inference.py)."""

from __future__ import annotations

from docker import APIClient  # type: ignore[import-untyped]  # docker 7.2.0 ships no type information

from e2e.harness import Docker

# Published ports need a bridge: the private daemon has none (--bridge=none), so this test makes one and removes it,
# as test_e2e_vllm_proxy.py does (a br-* interface while it lives).
NETWORK = "rocm-stack-e2e-stopped"


def test_a_stopped_container_has_no_published_ports_to_read_back(docker: Docker, standin_image: str):
    api = APIClient(base_url=docker.host, version="auto")
    create = {  # portSetToDockerPorts (funcs.go L103-106): ExposedPorts and PortBindings
        "Image": standin_image,
        "Cmd": ["python3", "-c", "import time; time.sleep(120)"],
        "ExposedPorts": {"8000/tcp": {}},
        "HostConfig": {
            "NetworkMode": NETWORK,
            "PortBindings": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18000"}]},
        },
    }
    docker.run("network", "create", "--driver", "bridge", NETWORK)
    try:
        created = api._result(api._post_json(api._url("/containers/create"), data=create), True)["Id"]
        api.start(created)
        binding = api.inspect_container(created)["NetworkSettings"]["Ports"]
        assert binding == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18000"}]}  # read back while running
        api.stop(created, timeout=1)
        inspected = api.inspect_container(created)
        assert not inspected["State"]["Running"]
        # flattenContainerPorts (structures.go L35-59) of nothing is an empty list.
        assert not inspected["NetworkSettings"]["Ports"]
        assert inspected["HostConfig"]["PortBindings"] == create["HostConfig"]["PortBindings"]  # declared, kept
    finally:
        docker.remove_all_containers()
        docker.run("network", "rm", NETWORK)
