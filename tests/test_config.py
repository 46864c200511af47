"""Stack configuration: committed stacks load; bad input is refused with one message per problem naming the key."""

from __future__ import annotations

import pytest

import rules
from schema import ConfigError, load
from schema.docker import image_pin_problem
from tools.synth import ROOT
from conftest import refusal, stack_file

P = "rocm-stack:"


def test_committed_stacks_load():
    dev = load("dev", stack_file("dev"))
    prod_file = stack_file("prod")
    prod = load("prod", prod_file, [k for k, v in prod_file.items() if isinstance(v, dict) and set(v) == {"secure"}])
    assert dev.environment == "dev" and len(dev.hosts) == 1
    assert dev.hosts[0].docker.host == "unix:///var/run/docker.sock"
    assert prod.environment == "prod" and [h.gpus for h in prod.hosts] == [8, 8, 8, 8]
    assert all(h.docker.host.startswith("ssh://") for h in prod.hosts)


def test_empty_config_is_a_working_dev_stack():
    cfg = load("dev", {})
    assert cfg.environment == "dev"
    assert [h.name for h in cfg.hosts] == ["local"]
    assert cfg.hosts[0].docker.host == "unix:///var/run/docker.sock"
    assert set(cfg.images) == {"pytorch", "vllm"}


@pytest.mark.parametrize("stack, expected", [("dev", "dev"), ("staging", "dev"), ("prod", "prod"), ("prod-eu", "prod")])
def test_environment_defaults_from_stack_name(stack, expected):
    assert load(stack, {}).environment == expected


def test_setting_one_image_keeps_the_other_defaults():
    cfg = load("dev", {P + "images": {"pytorch": "rocm/pytorch:custom-1"}})
    assert cfg.images["pytorch"] == "rocm/pytorch:custom-1"
    assert cfg.images["vllm"].startswith("rocm/vllm:rocm")


MI300X_TOPOLOGY = str(ROOT / "tests/data/topology/handwritten_rocm_smi_8x_mi300x.txt")


def host(name="h1", **extra):
    return {"name": name, "gpus": 8, **extra}


# (stack, config, key path that must be named, a fragment of the expected explanation)
BAD_CONFIGS = {
    "unknown top-level key": ("dev", {P + "hostz": []}, "hostz", "unknown key; expected one of"),
    "unknown nested key": ("dev", {P + "hosts": [host(gpuz=4)]}, "hosts[0].gpuz", "unknown key"),
    "too many gpus": ("dev", {P + "hosts": [host(gpus=65)]}, "hosts[0].gpus", "must be at most 64 (got 65)"),
    "zero gpus": ("dev", {P + "hosts": [host(gpus=0)]}, "hosts[0].gpus", "must be at least 1 (got 0)"),
    "gpus not a number": (
        "dev",
        {P + "hosts": [host(gpus="eight")]},
        "hosts[0].gpus",
        "expected a number, got the text 'eight'",
    ),
    "bad host name": (
        "dev",
        {P + "hosts": [host(name="GPU_Node")]},
        "hosts[0].name",
        "expected lowercase letters, digits and '-', at most 63 characters",
    ),
    "duplicate host": ("dev", {P + "hosts": [host(), host()]}, "hosts", "used twice"),
    "bad docker endpoint": (
        "dev",
        {P + "hosts": [host(docker={"host": "http://gpu1"})]},
        "hosts[0].docker.host",
        "ssh://user@host",
    ),
    "unknown gpu model": ("dev", {P + "hosts": [host(gpuModel="MI999")]}, "hosts[0].gpuModel", "MI300X"),
    "gpu index out of range": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "gpus": [6, 8]}])]},
        "hosts[0].containers[0].gpus[1]",
        "out of range",
    ),
    "negative gpu index": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "gpus": [-1]}])]},
        "hosts[0].containers[0].gpus[0]",
        "must be at least 0 (got -1)",
    ),
    "overlapping partitions": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "gpus": [0, 1, 2, 3]}, {"name": "b", "gpus": [3, 4]}])]},
        "hosts[0].containers[1].gpus[0]",
        "already given to container 'a'",
    ),
    "empty gpu list": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "gpus": []}])]},
        "hosts[0].containers[0].gpus",
        "empty GPU list",
    ),
    "shared gpus between containers": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a"}, {"name": "b"}])]},
        "hosts[0].containers",
        "each must list its `gpus`",
    ),
    "duplicate container": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "gpus": [0]}, {"name": "a", "gpus": [1]}])]},
        "hosts[0].containers",
        "used twice",
    ),
    "unknown image key": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "image": "jax"}])]},
        "hosts[0].containers[0].image",
        "unknown image 'jax'",
    ),
    "bad shm size": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "shmSize": "lots"}])]},
        "hosts[0].containers[0].shmSize",
        "'lots' is not a size as Docker reads it",
    ),
    "shm size under 1 MiB": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "shmSize": "512KiB"}])]},
        "hosts[0].containers[0].shmSize",
        "must be at least 1MiB (got 512KiB)",
    ),
    "bad restart policy": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "restart": "sometimes"}])]},
        "hosts[0].containers[0].restart",
        "on-failure",
    ),
    "relative volume path": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "volumes": [{"hostPath": "data", "containerPath": "/data"}]}])]},
        "hosts[0].containers[0].volumes[0].hostPath",
        "expected an absolute path",
    ),
    "port out of range": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "ports": [{"internal": 70000}]}])]},
        "hosts[0].containers[0].ports[0].internal",
        "must be at most 65535",
    ),
    "latest tag in prod": ("prod", {P + "images": {"pytorch": "rocm/pytorch:latest"}}, "images.pytorch", "not pinned"),
    "untagged image in prod": ("prod", {P + "images": {"vllm": "rocm/vllm"}}, "images.vllm", "not pinned"),
    "malformed image ref": (
        "dev",
        {P + "images": {"vllm": "rocm/vllm:bad tag"}},
        "images.vllm",
        "not a Docker image reference",
    ),
    "debug profile in prod": ("prod", {P + "security": {"profile": "debug"}}, "security.profile", "allowDebugInProd"),
    "unknown security profile": ("dev", {P + "security": {"profile": "yolo"}}, "security.profile", "'debug'"),
    "unknown environment": ("dev", {P + "environment": "qa"}, "environment", "'dev' or 'prod'"),
    "registry without password": (
        "dev",
        {P + "registry": {"server": "registry.example.com", "username": "ci"}},
        "registryPassword",
        "pulumi config set --secret registryPassword",
    ),
    "both gpus and gpuCount": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "gpus": [0], "gpuCount": 1}])]},
        "hosts[0].containers[0].gpuCount",
        "not both",
    ),
    "gpuCount on some containers only": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "gpuCount": 4}, {"name": "b", "gpus": [4]}])]},
        "hosts[0].containers",
        "or none",
    ),
    "gpuCount sizes too large": (
        "dev",
        {P + "hosts": [host(containers=[{"name": "a", "gpuCount": 4}, {"name": "b", "gpuCount": 5}])]},
        "hosts[0].containers",
        "need 9 GPUs but host 'h1' has 8",
    ),
    "missing topology file": (
        "dev",
        {P + "hosts": [host(topology="hosts/nope.showtopo.txt")]},
        "hosts[0].topology",
        "cannot read",
    ),
    "not a topology file": (
        "dev",
        {P + "hosts": [host(topology=str(ROOT / "README.md"))]},
        "hosts[0].topology",
        "no topology table found",
    ),
    "topology of another host size": (
        "dev",
        {P + "hosts": [host(gpus=4, topology=MI300X_TOPOLOGY)]},
        "hosts[0].topology",
        "describes 8 GPUs but the host declares gpus: 4",
    ),
    "bad cpuset": (
        "dev",
        {P + "hosts": [host(numaCpus={"0": "0-47;48-95"})]},
        "hosts[0].numaCpus.0",
        "expected a CPU list such as 0-47,96-143",
    ),
    "plain-text token": ("dev", {P + "huggingfaceToken": "hf_abc"}, "huggingfaceToken", "must be a Pulumi secret"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_is_refused_naming_the_key(case):
    stack, config, path, explanation = BAD_CONFIGS[case]
    with pytest.raises(ConfigError) as error:
        load(stack, config)
    messages = [str(p) for p in error.value.problems]
    assert any(m.startswith(f"{P}{path}: ") and explanation in m for m in messages), messages


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as error:
        load(
            "prod",
            {
                P + "images": {"pytorch": "rocm/pytorch:latest", "vllm": "rocm/vllm"},
                P + "hosts": [host(containers=[{"name": "a", "gpus": [9]}])],
            },
        )
    assert [p.path for p in error.value.problems] == [
        "images.pytorch",
        "images.vllm",
        "hosts[0].containers[0].gpus[0]",
        "hosts[0].renderNodes",
        "grafanaAdminPassword",  # a Docker-only prod stack runs the monitoring host
    ]


def test_latest_is_allowed_in_dev():
    assert load("dev", {P + "images": {"pytorch": "rocm/pytorch:latest"}}).images["pytorch"].endswith(":latest")


def test_debug_in_prod_needs_explicit_acknowledgement():
    cfg = load("prod", {P + "security": {"profile": "debug", "allowDebugInProd": True}})
    assert cfg.security_profile.value == "debug"


@pytest.mark.parametrize(
    "ref, pinned",
    [
        ("rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.8.0", True),
        ("registry.example.com:5000/rocm/pytorch:7.0", True),
        ("rocm/pytorch@sha256:" + "a" * 64, True),
        ("rocm/pytorch:latest@sha256:" + "b" * 64, True),
        ("rocm/pytorch:latest", False),
        ("rocm/pytorch", False),
        ("registry.example.com:5000/rocm/pytorch", False),
        ("rocm/pytorch:nightly-latest", False),
        ("rocm/pytorch:LATEST", False),
        ("rocm/k8s-device-plugin:labeller-latest", False),
        ("rocm/pytorch:latest-rocm7.0", True),
    ],
)
def test_image_pinning(ref, pinned):
    """The config and the policy pack judge with one rule (issue 16: `:nightly-latest` and `:LATEST` used to pass
    the config and fail `pulumi preview --policy-pack policy` in prod)."""
    assert (image_pin_problem(ref) is None) is pinned
    assert (rules.image_pin_problem(ref) is None) is pinned


def test_refused_program_declares_nothing_and_names_keys():
    """Through the real __main__.py: pulumi.RunError with every problem, before any resource."""
    config = stack_file("prod")
    config[P + "hosts"][1]["gpus"] = 80
    message = refusal("prod", config)
    assert message.splitlines() == [f"{P}hosts[1].gpus: must be at most 64 (got 80)"]
