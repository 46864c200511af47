"""The Docker GPU-host layer as declared by the real program (Pulumi mock engine)."""

from __future__ import annotations

import json

import pytest

from tools.synth import SECRET, synthesize
from conftest import (
    CONTAINER,
    DOCKER_PROVIDER,
    REMOTE_IMAGE,
    env_of,
    gpu_containers,
    on_gpu_hosts,
    render_nodes_of,
    stack_file,
)

P = "rocm-stack:"


def test_prod_has_one_docker_provider_per_host(prod_plan):
    # Providers receive non-string settings JSON-encoded, as the engine hands them over.
    providers = {
        r["name"]: {**r["inputs"], "sshOpts": json.loads(r["inputs"]["sshOpts"])}
        for r in prod_plan.of_type(DOCKER_PROVIDER)
    }
    assert providers == {
        f"gpu-node-{i}": {
            "host": f"ssh://deploy@gpu-node-{i}.example.internal",
            "sshOpts": ["-o", "StrictHostKeyChecking=yes"],
        }
        for i in range(1, 5)
    }
    for container in gpu_containers(prod_plan):
        host = container["name"].rsplit("-", 2)[0]
        assert container["provider"].endswith(f"pulumi:providers:docker::{host}")


def test_prod_images_are_pinned_and_pulled_per_host(prod_plan):
    images = prod_plan.of_type(REMOTE_IMAGE)
    pulled = {(r["provider"].rsplit("::", 1)[1], r["inputs"]["name"].split(":")[0]) for r in images}
    # Both ROCm images on each of the four daemons (the partitions' shells and workloads share them).
    assert {(f"gpu-node-{i}", repo) for i in range(1, 5) for repo in ("rocm/pytorch", "rocm/vllm")} <= pulled
    for image in images:
        name = image["inputs"]["name"]
        assert ":" in name and not name.endswith(":latest")
        assert image["inputs"]["keepLocally"] is True


@pytest.mark.parametrize("plan_name", ["dev_plan", "prod_plan"])
def test_every_container_gets_rocm_device_access(plan_name, request):
    plan = request.getfixturevalue(plan_name)
    containers = gpu_containers(plan)
    assert len(containers) == {"dev_plan": 2, "prod_plan": 8}[plan_name]
    for c in containers:
        i = c["inputs"]
        devices = [(d["hostPath"], d["containerPath"]) for d in i["devices"]]
        assert devices[0] == ("/dev/kfd", "/dev/kfd")
        if plan_name == "dev_plan":  # one workstation: all of /dev/dri, a visibility variable splits it
            assert devices[1:] == [("/dev/dri", "/dev/dri")]
        else:  # prod: only the partition's 4 render nodes (gpuAccess renderNodes)
            assert len(devices) == 5 and all(c.startswith("/dev/dri/renderD") and h == c for h, c in devices[1:])
        assert "groupAdds" not in i  # root containers: no supplementary groups, never group names
        assert i["ipcMode"] == "private"  # two partitions on each host: each its own /dev/shm (test_shm_and_logs.py)
        assert i["shmSize"] >= 1024
    # A partition's own shell restarts unless a person stopped it: then `pulumi up` leaves it stopped
    # (tests/test_impact_limits.py).
    assert all(c["inputs"]["mustRun"] is False for c in on_gpu_hosts(plan, CONTAINER))


def test_prod_partitions_get_the_render_nodes_of_their_gpus(prod_plan):
    """GPUs 0-3 and 4-7 of an 8x MI300X host: its primary render minors step by 8 (each GPU reserves 8 for its
    partitions; a real MI300X host in ROCm/k8s-gpu-dra-driver issue #20 has renderD128, renderD136, renderD144),
    so `128 + index` would hand GPU 1's partition GPU 0's node."""
    seen = {c["name"]: _gpus(c) for c in gpu_containers(prod_plan)}
    assert seen == {
        f"gpu-node-{i}-{name}": devices
        for i in range(1, 5)
        for name, devices in (
            ("serve-b", "renderD128,renderD136,renderD144,renderD152"),
            ("train-a", "renderD160,renderD168,renderD176,renderD184"),
        )
    }


def test_prod_is_hardened(prod_plan):
    for c in gpu_containers(prod_plan):
        i = c["inputs"]
        assert i["capabilities"] == {"adds": ["SYS_NICE"]}
        assert "seccomp=unconfined" not in i["securityOpts"]
        assert "no-new-privileges:true" in i["securityOpts"]
        assert not i.get("privileged")


def test_dev_has_debug_flags(dev_plan):
    containers = {c["name"]: c for c in gpu_containers(dev_plan)}
    # vLLM reads CUDA_VISIBLE_DEVICES (AMD's vLLM V1 optimization guide), the training HIP's variable.
    assert {
        name: env_of(c).get("HIP_VISIBLE_DEVICES", env_of(c).get("CUDA_VISIBLE_DEVICES"))
        for name, c in containers.items()
    } == {"workstation-train": "0", "workstation-serve": "1"}
    for c in containers.values():
        assert c["inputs"]["capabilities"] == {"adds": ["SYS_PTRACE"]}
        assert c["inputs"]["securityOpts"] == ["seccomp=unconfined"]


def test_a_host_without_workloads_runs_a_shell_on_every_gpu():
    plan = synthesize("dev", {P + "hosts": [{"name": "workstation", "gpus": 2}]})
    (c,) = on_gpu_hosts(plan, CONTAINER)
    # Every GPU of the host: nothing to select, so no visibility variable.
    assert (c["name"], _gpus(c)) == ("workstation-rocm-dev", "all")


def test_split_8x1_gives_one_gpu_each():
    containers = [{"name": f"g{i}", "gpus": [i]} for i in range(8)]
    plan = synthesize("dev", {P + "hosts": [{"name": "box", "gpus": 8, "containers": containers}]})
    assert {c["name"]: env_of(c)["HIP_VISIBLE_DEVICES"] for c in on_gpu_hosts(plan, CONTAINER)} == {
        f"box-g{i}": str(i) for i in range(8)
    }


def test_container_image_is_the_hosts_pinned_image(prod_plan):
    image_ids = {r["urn"]: prod_plan.mock_outputs[r["urn"]]["imageId"] for r in on_gpu_hosts(prod_plan, REMOTE_IMAGE)}
    for c in on_gpu_hosts(prod_plan, CONTAINER):
        (image_urn,) = [urn for urn in c["depends_on"] if "remoteImage" in urn]
        assert c["inputs"]["image"] == image_ids[image_urn]
        expected = "vllm" if c["name"].endswith("serve-b") else "pytorch"
        assert image_urn.endswith(f"::{c['name'].rsplit('-', 2)[0]}-{expected}")


def _identity(plan):
    return {r["urn"]: r["inputs"] for r in plan.resources}


def test_reordering_hosts_renames_nothing(prod_plan):
    config = stack_file("prod")
    config[P + "hosts"].reverse()
    for host in config[P + "hosts"]:
        host["containers"].reverse()
    assert _identity(synthesize("prod", config)) == _identity(prod_plan)


def test_adding_a_host_keeps_existing_resources(prod_plan):
    config = stack_file("prod")
    config[P + "hosts"].insert(
        0,
        {
            "name": "gpu-node-0",
            "gpus": 8,
            "docker": {"host": "ssh://deploy@gpu-node-0"},
            "gpuAccess": "all",
            "containers": [{"name": "train-a", "image": "pytorch"}],
        },
    )
    after = _identity(synthesize("prod", config))
    before = _identity(prod_plan)
    # The monitoring host's files container gains the new host's scrape targets (its uploaded targets files).
    prometheus = next(urn for urn in before if urn.endswith("::gpu-node-1-prometheus-files") and "container" in urn)
    assert {k for k in before[prometheus] if after[prometheus][k] != before[prometheus][k]} == {"uploads"}
    assert {urn: after[urn] for urn in before if urn != prometheus} == {
        urn: inputs for urn, inputs in before.items() if urn != prometheus
    }
    added = sorted(urn.rsplit("::", 1)[1] for urn in set(after) - set(before))
    # GpuHost: component, provider, image, the check programs' volume, preflight, GPU check, container; its metrics
    # exporter: component, image, container; its node-exporter and cAdvisor: component, an image and a container each.
    assert added == ["gpu-node-0"] * 4 + ["gpu-node-0-amd-device-metrics-exporter"] * 2 + [
        "gpu-node-0-cadvisor",
        "gpu-node-0-cadvisor",
        "gpu-node-0-check-programs",
        "gpu-node-0-node-exporter",
        "gpu-node-0-node-exporter",
        "gpu-node-0-preflight",
        "gpu-node-0-pytorch",
        "gpu-node-0-train-a",
        "gpu-node-0-train-a-gpucheck",
    ]


def test_registry_password_reaches_the_provider_as_a_secret():
    plan = synthesize(
        "dev",
        {P + "registry": {"server": "registry.example.com", "username": "ci"}},
        secrets={P + "registryPassword": "s3cret"},
    )
    (provider,) = plan.of_type(DOCKER_PROVIDER)
    # The provider gets its registry settings as one JSON value, secret as a whole because it holds one.
    assert provider["inputs"]["registryAuth"] == SECRET
    assert "s3cret" not in str(plan.to_json())


def _gpus(container):
    """HIP_VISIBLE_DEVICES where a partition shares /dev/dri (gpuAccess all), else its render nodes."""
    env = env_of(container)
    if "HIP_VISIBLE_DEVICES" in env:
        return env["HIP_VISIBLE_DEVICES"]
    return ",".join(path.rsplit("/", 1)[1] for path in render_nodes_of(container)) or "all"


def _partitions(plan):
    return {c["name"]: (_gpus(c), c["inputs"].get("cpuSet")) for c in gpu_containers(plan)}


def test_prod_partitions_are_numa_local_with_their_cpus(prod_plan):
    """prod asks for two gpuCount: 4 partitions per host; the saved MI300X topology puts each on one NUMA node
    (in container-name order: serve-b first)."""
    for i in range(1, 5):
        assert _partitions(prod_plan)[f"gpu-node-{i}-serve-b"] == (
            "renderD128,renderD136,renderD144,renderD152",
            "0-95,192-287",
        )
        assert _partitions(prod_plan)[f"gpu-node-{i}-train-a"] == (
            "renderD160,renderD168,renderD176,renderD184",
            "96-191,288-383",
        )


def test_mi250_gcd_pairs_stay_together():
    containers = [{"name": f"p{i}", "gpuCount": 2} for i in range(4)]
    plan = synthesize(
        "dev",
        {
            P + "hosts": [
                {
                    "name": "mi250",
                    "gpus": 8,
                    "gpuModel": "MI250",
                    "topology": "tests/data/topology/handwritten_rocm_smi_4x_mi250_8gcd.txt",
                    "containers": containers,
                }
            ]
        },
    )
    assert _partitions(plan) == {
        "mi250-p0": ("0,1", None),
        "mi250-p1": ("2,3", None),
        "mi250-p2": ("4,5", None),
        "mi250-p3": ("6,7", None),
    }


def test_gpu_count_without_topology_takes_consecutive_gpus():
    plan = synthesize(
        "dev",
        {
            P + "hosts": [
                {"name": "box", "gpus": 8, "containers": [{"name": "a", "gpuCount": 2}, {"name": "b", "gpuCount": 6}]}
            ]
        },
    )
    assert _partitions(plan) == {"box-a": ("0,1", None), "box-b": ("2,3,4,5,6,7", None)}


def test_explicit_gpus_get_the_numa_cpus_of_their_node_and_cpuset_wins():
    plan = synthesize(
        "dev",
        {
            P + "hosts": [
                {
                    "name": "box",
                    "gpus": 8,
                    "topology": "hosts/mi300x-8gpu.showtopo.txt",
                    "numaCpus": {0: "0-47", 1: "48-95"},
                    "containers": [
                        {"name": "a", "gpus": [4, 5]},
                        {"name": "b", "gpus": [3, 6]},
                        {"name": "c", "gpus": [0], "cpuset": "2-3"},
                    ],
                }
            ]
        },
    )
    # b spans both NUMA nodes: no cpuset hint rather than a wrong one.
    assert _partitions(plan) == {"box-a": ("4,5", "48-95"), "box-b": ("3,6", None), "box-c": ("0", "2-3")}
