"""How Docker GPU containers reach their GPUs (issue 11 defects 1-3 and the vLLM API), each against its upstream fact.

Group names, visibility variables, render-node isolation, CDI, the vLLM image pin and API key, as the program
declares them (tools.synth plans) and as the config loader and the policy pack judge them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CONTAINER, env_of, gpu_containers, partition_of, refusal, render_nodes_of, stack_file
from domain.render_nodes import RenderNodesError, load_render_nodes, parse_render_nodes
import rules
from policy.rocm_policy import offline
from tools.synth import SECRET, synthesize

P = "rocm-stack:"
DATA = Path(__file__).parent / "data" / "render_nodes"
MAP_8 = "hosts/mi300x-8gpu.render-nodes.json"
VISIBILITY = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
TOKEN = {P + "huggingfaceToken": "hf_test", P + "vllmApiKey": "sk-test-key-0123456789abcdef01234"}


def vllm_containers(plan):
    return [c for c in gpu_containers(plan) if "vllm" in " ".join(c["inputs"].get("command", []))]


def host(name="box", **extra):
    return {"name": name, "gpus": 8, **extra}


# --- 1. supplementary groups -------------------------------------------------------------------------------------


@pytest.mark.parametrize("plan_name", ["dev_plan", "prod_plan"])
def test_no_container_of_a_committed_stack_passes_a_group_name(plan_name, request):
    """Docker resolves `--group-add NAME` in the image's /etc/group, not the host's (moby daemon/oci_linux.go
    getUser -> user.GetAdditionalGroupsPath on the container's group file; moby/sys/user GetAdditionalGroups:
    "If a group name cannot be found, an error will be returned"). Recent rocm/pytorch images dropped `render`
    (ROCm/rocm-libraries PR #6563: "Unable to find group render: no matching entries in group file"), so a name
    stops the container. The old `["video", "render"]` fails here."""
    for container in request.getfixturevalue(plan_name).of_type(CONTAINER):
        assert all(str(g).isdigit() for g in container["inputs"].get("groupAdds", [])), container["name"]


def test_device_groups_take_numeric_host_gids_only():
    """A numeric GID passes through as-is even when the image has no such group (moby/sys/user GetAdditionalGroups:
    "If a group id cannot be found ... the id will be returned as-is"; the pattern of vLLM PR #27881 (closed):
    `--group-add $(getent group render | cut -d: -f3)`). Names are refused naming the key."""
    plan = synthesize("dev", {P + "hosts": [host(deviceGroups=[44, "992"])]})
    assert [c["inputs"]["groupAdds"] for c in gpu_containers(plan)] == [["44", "992"]]
    message = refusal("dev", {P + "hosts": [host(deviceGroups=[44, "render"])]})
    assert f"{P}hosts[0].deviceGroups[1]: " in message and "image's /etc/group" in message
    assert "stat -c %g" in message


def test_policy_flags_a_group_name():
    """The pack refuses what the schema refuses (ROCm/rocm-libraries PR #6563)."""
    props = {
        "name": "x",
        "image": "sha256:" + "a" * 64,
        "ipcMode": "host",
        "groupAdds": ["992", "render"],
        "devices": [{"hostPath": "/dev/kfd"}, {"hostPath": "/dev/dri/renderD128"}],
    }
    (problem,) = rules.docker_gpu_container_problems(CONTAINER, props)
    assert "'render' is a group name" in problem


# --- 2. vLLM's GPU visibility and data parallelism ---------------------------------------------------------------


@pytest.mark.parametrize("plan_name", ["dev_plan", "prod_plan"])
def test_no_vllm_container_carries_hip_or_rocr_visible_devices(plan_name, request):
    """AMD's vLLM V1 optimization guide (https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-
    optimization/vllm-optimization.html, Tensor parallelism note): "vLLM on ROCm reads CUDA_VISIBLE_DEVICES. Keep
    HIP_VISIBLE_DEVICES unset to avoid conflicts." vllm/platforms/rocm.py ("Prevent use of clashing
    `{CUDA/HIP}_VISIBLE_DEVICES`") asserts both agree; data-parallel engine cores get a narrowed
    CUDA_VISIBLE_DEVICES only (vllm/v1/engine/utils.py set_device_control_env_var), so an inherited
    HIP_VISIBLE_DEVICES=0,1,2,3 crashes them. ROCR_VISIBLE_DEVICES renumbers below HIP (pytorch PR #142292)."""
    containers = vllm_containers(request.getfixturevalue(plan_name))
    assert containers
    for c in containers:
        assert not {"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"} & set(env_of(c)), c["name"]


def test_vllm_on_a_shared_dri_selects_its_gpu_with_cuda_visible_devices(dev_plan):
    """dev's workstation (gpuAccess all) gives every container all of /dev/dri: the vLLM partition on GPU 1 selects
    it with the variable vLLM reads (same guide: `CUDA_VISIBLE_DEVICES=2,3 vllm serve ...`), training with HIP's."""
    env = {c["name"]: env_of(c) for c in gpu_containers(dev_plan)}
    assert env["workstation-serve"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["workstation-train"]["HIP_VISIBLE_DEVICES"] == "0"
    assert "CUDA_VISIBLE_DEVICES" not in env["workstation-train"]


def test_data_parallel_vllm_gets_amds_rocm_settings(prod_plan, dev_plan):
    """AMD's vLLM V1 guide, Data parallelism tip: "For ROCm, currently use VLLM_ALL2ALL_BACKEND="allgather_reducescatter"
    and --disable-nccl-for-dp-synchronization with data parallelism." prod's serve-b: TP 2 x DP 2."""
    (serve,) = [c for c in vllm_containers(prod_plan) if c["name"] == "gpu-node-3-serve-b"]
    command = serve["inputs"]["command"]
    assert command[command.index("--data-parallel-size") + 1] == "2"
    assert "--disable-nccl-for-dp-synchronization" in command
    assert env_of(serve)["VLLM_ALL2ALL_BACKEND"] == "allgather_reducescatter"
    (single,) = vllm_containers(dev_plan)  # one GPU: no data parallelism, none of it
    assert "--disable-nccl-for-dp-synchronization" not in single["inputs"]["command"]
    assert "VLLM_ALL2ALL_BACKEND" not in env_of(single)


# --- 3. device-level isolation -----------------------------------------------------------------------------------


def test_render_node_formats_from_real_hosts():
    """Each sample's source is in tests/data/render_nodes/SOURCES.md. MI300-class GPUs step their render minors by 8
    (AMD, ROCm/legacy-rocm-build issue #4261: nodes 2-5 -> 128, 136, 144, 152), and a CPX partition is a GPU of
    its own (ROCm/amdsmi CHANGELOG 6.4.1: renderD128, renderD129): never 128 + index."""
    assert parse_render_nodes((DATA / "kfd-grep_mi300a-tpx.txt").read_text()) == {
        0: (128,),
        1: (136,),
        2: (144,),
        3: (152,),
    }
    # CPU nodes print drm_render_minor 0 and are no GPU.
    assert parse_render_nodes((DATA / "kfd-properties_mi300a-4apu.txt").read_text()) == {0: (128,), 1: (136,)}
    assert parse_render_nodes((DATA / "amd-smi-list-e_mi300x-cpx.txt").read_text()) == {0: (128,), 1: (129,)}
    assert parse_render_nodes((DATA / "amd-smi-list-e.json").read_text()) == {0: (128,)}


@pytest.mark.parametrize(
    "sample, why",
    [
        ("amd-smi-list.json", "without -e prints no render node"),  # amdsmi_commands.py `list`: render only with -e
        ("amd-smi-list-e_na.txt", "has no render node ('N/A')"),  # the ROCm 6.4.0 CPX bug, fixed in 6.4.1
    ],
)
def test_render_node_files_without_nodes_are_refused(sample, why):
    with pytest.raises(RenderNodesError, match=why.replace("(", r"\(").replace(")", r"\)")):
        load_render_nodes(str(DATA / sample))


def test_prod_partitions_see_only_their_own_render_nodes(prod_plan):
    """ROCm docs, "Restricting GPU access" (rocm-install-on-linux docs/how-to/docker.rst): "By passing --device
    /dev/dri, you are granting access to all GPUs"; pass /dev/kfd and each partition's renderD node instead. KFD
    checks the device cgroup per render node (linux drivers/gpu/drm/amd/amdkfd/kfd_priv.h
    kfd_devcgroup_check_permission), so each partition's nodes must be its own and disjoint."""
    expected = {gpu: [f"/dev/dri/renderD{m}" for m in minors] for gpu, minors in load_render_nodes(MAP_8).items()}
    by_host: dict[str, list[str]] = {}
    for c in gpu_containers(prod_plan):
        paths = [d["containerPath"] for d in c["inputs"]["devices"]]
        assert "/dev/dri" not in paths and paths[0] == "/dev/kfd"
        by_host.setdefault(partition_of(c).split("/")[0], []).extend(render_nodes_of(c))
    for nodes in by_host.values():
        assert sorted(nodes) == sorted(n for gpu in range(8) for n in expected[gpu])  # disjoint, together all 8


@pytest.mark.parametrize("plan_name", ["dev_plan", "prod_plan"])
def test_isolated_partitions_carry_no_host_index_visibility_variable(plan_name, request):
    """With only its render nodes the container sees its GPUs as 0..N-1 (kfd_flat_memory.c kfd_init_apertures skips
    "devices to which the current process have no access to"), so HIP_VISIBLE_DEVICES=4,5,6,7 would select GPUs
    that do not exist there. Containers sharing /dev/dri (dev) keep the host indices."""
    for c in gpu_containers(request.getfixturevalue(plan_name)):
        selected = {k: v for k, v in env_of(c).items() if k in VISIBILITY}
        if render_nodes_of(c):
            assert selected == {}, c["name"]
        else:
            assert len(selected) == 1, c["name"]


def test_prod_refuses_a_whole_dri_beside_another_partition_in_config_and_policy(prod_plan):
    """ROCm "GPU isolation techniques" (https://rocm.docs.amd.com/en/latest/conceptual/gpu-isolation.html):
    environment variables "shouldn't be used for isolating untrusted applications, as an application can reset
    them". Config and policy pack judge with one function (rules.isolation_problems)."""
    config = stack_file("prod")
    config[P + "hosts"][0]["gpuAccess"] = "all"
    message = refusal("prod", config)
    assert f"{P}hosts[0].gpuAccess: partition 'serve-b' maps the whole /dev/dri" in message
    # The pack on the declared containers: gpu-node-1's partitions given all of /dev/dri again.
    resources = json.loads(json.dumps(prod_plan.resources))
    for r in resources:
        if r["type"] == CONTAINER and (partition_of(r) or "").startswith("gpu-node-1/"):
            r["inputs"]["devices"] = [{"hostPath": p, "containerPath": p} for p in ("/dev/kfd", "/dev/dri")]
    with offline.stack_environment("prod"):
        violations = [v for v in offline.check(resources) if v.policy == "gpu-partitions-isolated"]
    assert sorted(v.message for v in violations) == [
        f"host 'gpu-node-1': partition '{name}' maps the whole /dev/dri (every GPU of the host) beside 1 other "
        "partition(s): prod isolates partitions by device; use gpuAccess renderNodes (or cdi) (rule gpu-partitions-isolated)"
        for name in ("serve-b", "train-a")
    ]
    with offline.stack_environment("prod"):
        assert [v for v in offline.check(prod_plan.resources) if v.policy == "gpu-partitions-isolated"] == []


def test_overlapping_render_nodes_are_refused(tmp_path):
    """Render-node sets on a host are disjoint: a map listing one node under two GPUs is no real host's."""
    bad = tmp_path / "map.txt"
    bad.write_text(
        "".join(
            f"/sys/class/kfd/kfd/topology/nodes/{n}/properties:drm_render_minor {m}\n" for n, m in ((1, 128), (2, 128))
        )
    )
    message = refusal(
        "dev",
        {
            P + "hosts": [
                host(
                    gpus=2,
                    gpuAccess="renderNodes",
                    renderNodes=str(bad),
                    containers=[{"name": "a", "gpus": [0]}, {"name": "b", "gpus": [1]}],
                )
            ]
        },
    )
    assert f"{P}hosts[0].renderNodes: renderD128 is listed for GPU 0 and GPU 1" in message
    props = {"devices": [{"hostPath": "/dev/dri/renderD128", "containerPath": "/dev/dri/renderD128"}]}
    a = {**props, "labels": [{"label": rules.PARTITION_LABEL, "value": "h/a"}]}
    b = {**props, "labels": [{"label": rules.PARTITION_LABEL, "value": "h/b"}]}
    assert rules.host_isolation_problems([a, b], prod=False) == [
        "host 'h': partitions 'a' and 'b' share ['/dev/dri/renderD128']: the render-node sets of a host's "
        "partitions must be disjoint"
    ]


def test_render_nodes_needs_a_saved_map_and_covers_every_gpu(tmp_path):
    message = refusal("dev", {P + "hosts": [host(gpuAccess="renderNodes")]})
    assert f"{P}hosts[0].renderNodes: gpuAccess renderNodes needs host 'box''s GPU -> render-node map" in message
    short = tmp_path / "two.txt"
    short.write_text((DATA / "kfd-properties_mi300a-4apu.txt").read_text())
    message = refusal("dev", {P + "hosts": [host(gpuAccess="renderNodes", renderNodes=str(short))]})
    assert f"{P}hosts[0].renderNodes: the file has no render node for GPU(s) [2, 3, 4, 5, 6, 7]" in message


def test_visibility_variables_in_a_partitions_env_are_refused():
    message = refusal("dev", {P + "hosts": [host(containers=[{"name": "a", "env": {"HIP_VISIBLE_DEVICES": "0"}}])]})
    assert f"{P}hosts[0].containers[0].env.HIP_VISIBLE_DEVICES: GPU visibility is set by rocm-stack" in message


def test_device_paths_point_the_host_side_at_stand_in_nodes():
    """The e2e tests map mknod stand-ins; the container still sees /dev/kfd and /dev/dri/renderD<minor>."""
    plan = synthesize(
        "dev",
        {
            P + "hosts": [
                host(
                    gpuAccess="renderNodes",
                    renderNodes=MAP_8,
                    devicePaths={"kfd": "/tmp/gpu/kfd", "dri": "/tmp/gpu/dri"},
                    containers=[{"name": "a", "gpus": [1]}],
                )
            ]
        },
    )
    (c,) = gpu_containers(plan)
    assert [(d["hostPath"], d["containerPath"]) for d in c["inputs"]["devices"]] == [
        ("/tmp/gpu/kfd", "/dev/kfd"),
        ("/tmp/gpu/dri/renderD136", "/dev/dri/renderD136"),
    ]


def test_cdi_requests_the_toolkits_gpus_instead_of_device_nodes():
    """AMD Container Toolkit: `amd-ctk cdi generate` writes devices `amd.com/gpu=<i>` whose deviceNodes are the
    GPU's card and renderD nodes plus /dev/kfd (ROCm/container-toolkit internal/cdi/cdi.go); Docker takes them as
    device requests with driver "cdi" (pulumi_docker ContainerDeviceRequestArgs: "CDI device identifiers")."""
    plan = synthesize(
        "dev",
        {P + "hosts": [host(gpuAccess="cdi", containers=[{"name": "a", "gpus": [0, 1]}, {"name": "b", "gpus": [2]}])]},
    )
    requests = {c["inputs"]["name"]: c["inputs"] for c in gpu_containers(plan)}
    assert requests["a"]["deviceRequests"] == [{"driver": "cdi", "deviceIds": ["amd.com/gpu=0", "amd.com/gpu=1"]}]
    assert "devices" not in requests["a"] and not {k for k in env_of({"inputs": requests["a"]}) if k in VISIBILITY}
    assert rules.docker_gpu_container_problems(CONTAINER, requests["b"]) == []


def test_cdi_device_requests_are_declared_in_the_form_the_provider_reads_back(cdi_plan):
    """terraform-provider-docker v4.5.0 reads device_requests back with flattenDeviceRequests
    (internal/provider/resource_docker_container_structures.go L500-524): driver, count, device_ids when any,
    capabilities and options only when set; the schema's defaults are driver "cdi" and count 0 and every field
    is ForceNew (resource_docker_container.go L774-822), so any other form would replace the container on every
    `pulumi up`. Docker stores the request as sent (tests/e2e/test_e2e_cdi.py reads it back): one request, the
    "cdi" driver, no count, capabilities or options, and device ids a set holds as declared (no duplicates)."""
    containers = [c for c in cdi_plan.of_type(CONTAINER) if partition_of(c)]  # the partitions and their GPU checks
    assert len(containers) == 4
    for c in containers:
        (request,) = c["inputs"]["deviceRequests"]
        assert set(request) == {"driver", "deviceIds"} and request["driver"] == "cdi", c["name"]
        assert len(set(request["deviceIds"])) == len(request["deviceIds"]) == 1, c["name"]


def test_cdi_with_a_topology_file_is_refused_until_the_numberings_can_be_checked():
    """The AMD Container Toolkit numbers amd.com/gpu=<i> by PCI address: GetAMDGPUsWithFS takes the sorted glob of
    /sys/module/amdgpu/drivers/pci:amdgpu/<domain>:*, a GPU's partitions by render minor (ROCm/container-toolkit
    internal/amdgpu/amdgpu.go L96-192; internal/cdi/cdi.go L124-141 names device i). The topology file's GPU ids are
    amd-smi's (or rocm-smi's) order, which is not HIP's KFD node order on every host (ROCm/rocm-systems PR #4406:
    amd-smi's `hip_id = kfd_node_id - smallest_kfd_gpu_node_id`): nothing proves GPU i of the file is CDI device i."""
    config = stack_file("prod")
    config[P + "hosts"][1]["gpuAccess"] = "cdi"
    message = refusal("prod", config)
    assert message.startswith(
        f"{P}hosts[1].topology: gpuAccess cdi selects GPUs by the AMD Container Toolkit's index (`amd-ctk cdi list`"
    )
    assert "give each partition `gpus` from `amd-ctk cdi list`, or use gpuAccess renderNodes" in message
    assert f"{P}hosts[0]" not in message


# --- Also: the vLLM image pin and API ----------------------------------------------------------------------------


def test_prod_pins_vllm_to_the_digest_amd_publishes(prod_plan):
    """AMD's vLLM version history (https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference/benchmark-docker/
    previous-versions/vllm-history.html) lists rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210 with Docker Hub image
    sha256-e7f02dd2ce3824959658bc0391296f6158638e3ebce164f6c019c4eca8150ec7; prod takes tag@digest."""
    pinned = (
        "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210"
        "@sha256:e7f02dd2ce3824959658bc0391296f6158638e3ebce164f6c019c4eca8150ec7"
    )
    names = {r["inputs"]["name"] for r in prod_plan.of_type("docker:index/remoteImage:RemoteImage")}
    assert pinned in names and rules.image_pin_problem(pinned) is None


def test_prod_docker_vllm_requires_an_api_key_secret():
    config = stack_file("prod")
    del config[P + "vllmApiKey"]
    message = refusal("prod", config)
    assert f"{P}vllmApiKey: inference[0] ('llama') publishes vLLM's API on Docker hosts" in message


def test_the_api_key_reaches_vllm_from_a_secret_file_never_in_the_plan():
    """vLLM takes the key from --api-key or VLLM_API_KEY (vllm/entrypoints/openai/api_server.py build_app:
    `args.api_key or [envs.VLLM_API_KEY]`); /health stays unauthenticated (AuthenticationMiddleware skips paths
    outside /v1), so the health check needs no key. The port binds to the configured address."""
    config = stack_file("dev")
    config[P + "inference"][0]["docker"]["ip"] = "127.0.0.1"
    plan = synthesize("dev", config, secrets=TOKEN)
    (serve,) = vllm_containers(plan)
    i = serve["inputs"]
    assert (
        i["command"][:2] == ["sh", "-c"] and "VLLM_API_KEY=" in i["command"][2] and "/run/secrets/" in i["command"][2]
    )
    assert i["uploads"] == SECRET and "VLLM_API_KEY" not in env_of(serve)
    assert "sk-test-key-0123456789abcdef01234" not in json.dumps(plan.to_json())
    assert "/health" in " ".join(i["healthcheck"]["tests"])
    # With the key vLLM publishes nothing: its proxy (components/workloads/proxy.py) publishes the API port on the
    # configured address from a network of its own, whose namespace vLLM joins; the key file is a secret upload of the
    # proxy too.
    assert "ports" not in i
    [proxy_container] = [c for c in plan.of_type(CONTAINER) if c["name"] == f"{serve['name']}-proxy"]
    p = proxy_container["inputs"]
    # nginx on 8080 beside vLLM (8000) in one network namespace.
    assert [(m["ip"], m["internal"]) for m in p["ports"]] == [("127.0.0.1", 8080)]
    assert p["uploads"] == SECRET and p["image"] and p["entrypoints"][0] == "nginx"
    [network] = plan.of_type("docker:index/network:Network")
    assert p["networksAdvanced"] == [{"name": network["inputs"]["name"]}]
    assert i["networkMode"] == f"container:{proxy_container['name']}-id" and "networksAdvanced" not in i
