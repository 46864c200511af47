"""The policy pack (policy/): each rule on passing and failing resources, the CrossGuard callbacks as the engine
calls them, the committed stacks' synth plans, and the pack process over gRPC as the Pulumi CLI drives it."""

from __future__ import annotations

import copy
import json
import os
import select
import site
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
POLICY_DIR = ROOT / "policy"
DATA = Path(__file__).parent / "data" / "policy"
sys.path.insert(0, str(POLICY_DIR))  # the CLI runs the pack with policy/ first on sys.path

from pulumi_policy import EnforcementLevel, PolicyResource, ResourceValidationArgs, StackValidationArgs  # noqa: E402
from pulumi_policy.policy import _NotApplicableError  # noqa: E402
import rules  # noqa: E402
from rocm_policy import offline, pack  # noqa: E402

POLICIES = {p.name: p for p in pack.POLICIES}
CONTAINER, REMOTE_IMAGE, DEVICE_CONFIG = rules.CONTAINER, rules.REMOTE_IMAGE, rules.DEVICE_CONFIG
POD, JOB, CRONJOB, DAEMONSET = (
    "kubernetes:core/v1:Pod",
    "kubernetes:batch/v1:Job",
    "kubernetes:batch/v1:CronJob",
    "kubernetes:apps/v1:DaemonSet",
)
HELM = "kubernetes:helm.sh/v3:Release"


def upstream(name: str) -> dict:
    return yaml.safe_load((DATA / name).read_text())


def gpu_container(**overrides) -> dict:
    """A Docker GPU container as the GpuHost component declares it for prod."""
    props = {
        "name": "train-a",
        "image": "sha256:" + "ab" * 32,
        "ipcMode": "host",
        "shmSize": 65536,
        "devices": [
            {"hostPath": p, "containerPath": p, "permissions": "rwm"}
            for p in ("/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD136")
        ],
        "labels": [{"label": rules.PARTITION_LABEL, "value": "gpu-node-1/train-a"}],
        "envs": [],
        "capabilities": {"adds": ["SYS_NICE"]},
        "securityOpts": ["no-new-privileges:true"],
    }
    props.update(overrides)
    return props


def training_job(**container_overrides) -> dict:
    container = {
        "name": "trainer",
        "image": "rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.7.1",
        "resources": {"limits": {"amd.com/gpu": 8}, "requests": {"amd.com/gpu": 8}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    container.update(container_overrides)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [container],
                    "restartPolicy": "Never",
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}],
                }
            }
        },
    }


def device_config(**upgrade_policy) -> dict:
    policy = {
        "enable": True,
        "maxParallelUpgrades": 1,
        "maxUnavailableNodes": 1,
        "rebootRequired": True,
        "nodeDrainPolicy": {"force": False, "timeoutSeconds": 300, "ignoreDaemonSets": True},
    }
    policy.update(upgrade_policy)
    return {
        "apiVersion": "amd.com/v1alpha1",
        "kind": "DeviceConfig",
        "metadata": {"name": "gpu"},
        "spec": {"driver": {"enable": True, "version": "30.20.1", "upgradePolicy": policy}},
    }


@pytest.fixture
def prod_env(monkeypatch):
    monkeypatch.setenv("PULUMI_STACK", "acme/rocm-stack/prod")
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({"rocm-stack:environment": "prod"}))


@pytest.fixture
def dev_env(monkeypatch):
    monkeypatch.setenv("PULUMI_STACK", "dev")
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({"rocm-stack:environment": "dev"}))


def urn(type_token: str, name: str) -> str:
    """The URN the engine gives a resource of the stack the test runs as (PULUMI_STACK)."""
    stack = os.environ.get("PULUMI_STACK", "prod").rsplit("/", 1)[-1]
    return f"urn:pulumi:{stack}::rocm-stack::{type_token}::{name}"


def validate(policy: str, resource_type: str, props: dict, name: str = "r", config: dict | None = None) -> list[str]:
    """Call a policy's real validate callback the way the engine does; returns the reported messages."""
    messages: list[str] = []
    args = ResourceValidationArgs(
        resource_type, props, urn(resource_type, name), name, offline._options({}), None, config
    )
    POLICIES[policy].validate(args, lambda message, urn=None: messages.append(message))
    return messages


# --- pinned-images ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reference",
    [
        "rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.7.1",
        "rocm/vllm@sha256:" + "0" * 64,
        "rocm/pytorch:latest@sha256:" + "1" * 64,  # the digest decides, whatever the tag says
        "registry.example:5000/rocm/pytorch:7.0",
        "sha256:" + "2" * 64,  # an image ID, what a Container gets from RemoteImage.image_id
    ],
)
def test_pinned_image_references_pass(reference):
    assert rules.image_pin_problem(reference) is None


@pytest.mark.parametrize(
    "reference, why",
    [
        ("rocm/pytorch", "no tag"),
        ("rocm/pytorch:latest", "moving tag 'latest'"),
        ("registry.example:5000/rocm/pytorch", "no tag"),  # a registry port is not a tag
        ("rocm/k8s-device-plugin:labeller-latest", "moving tag 'labeller-latest'"),
        ("", "no image reference"),
    ],
)
def test_unpinned_image_references_fail(reference, why):
    assert why in rules.image_pin_problem(reference)


def test_pinned_images_policy_on_docker_and_kubernetes(prod_env):
    assert validate("pinned-images", REMOTE_IMAGE, {"name": "rocm/vllm:rocm7.0.0_vllm_0.10.1_20250827"}) == []
    assert "no tag" in validate("pinned-images", REMOTE_IMAGE, {"name": "rocm/vllm"})[0]
    assert validate("pinned-images", CONTAINER, gpu_container()) == []
    assert "latest" in validate("pinned-images", CONTAINER, gpu_container(image="rocm/pytorch:latest"))[0]
    assert validate("pinned-images", JOB, training_job()) == []
    (message,) = validate("pinned-images", POD, upstream("upstream-pytorch-pod.yaml"))
    assert message.startswith("container 'pytorch-gpu-container': image 'rocm/pytorch:latest'")
    assert validate("pinned-images", DAEMONSET, upstream("upstream-device-plugin-daemonset.yaml"))


# --- docker-gpu-container-devices -------------------------------------------------------------------------


def test_gpu_container_with_kfd_dri_and_its_own_or_the_host_ipc_passes(prod_env):
    assert validate("docker-gpu-container-devices", CONTAINER, gpu_container()) == []
    assert validate("docker-gpu-container-devices", CONTAINER, gpu_container(ipcMode="private")) == []
    partitioned = gpu_container(devices=[{"hostPath": "/dev/kfd"}, {"hostPath": "/dev/dri/renderD128"}])
    assert rules.docker_gpu_container_problems(CONTAINER, partitioned) == []


def test_gpu_container_missing_devices_or_a_shm_of_its_own_fails(prod_env):
    """`none` has no /dev/shm (moby v20.10.24 daemon/oci_linux.go L553-555), `container:<x>` is another's."""
    for mode in ("none", "container:train-b", None):
        problems = validate(
            "docker-gpu-container-devices", CONTAINER, gpu_container(devices=[{"hostPath": "/dev/kfd"}], ipcMode=mode)
        )
        assert len(problems) == 2
        assert "render node" in problems[0] and f"ipcMode {mode!r}" in problems[1]
    (no_kfd,) = rules.docker_gpu_container_problems(CONTAINER, gpu_container(devices=[{"hostPath": "/dev/dri"}]))
    assert "/dev/kfd" in no_kfd


def test_gpu_reader_needs_devices_but_not_host_ipc():
    """The metrics exporter maps the devices to read them but runs no RCCL: no HIP_VISIBLE_DEVICES."""
    exporter = {
        "name": "amd-device-metrics-exporter",
        "image": "rocm/device-metrics-exporter:v1.5.2",
        "devices": [{"hostPath": "/dev/kfd"}, {"hostPath": "/dev/dri"}],
    }
    assert rules.docker_gpu_container_problems(CONTAINER, exporter) == []
    (no_dri,) = rules.docker_gpu_container_problems(CONTAINER, {**exporter, "devices": [{"hostPath": "/dev/kfd"}]})
    assert "render node" in no_dri


def test_container_without_gpus_is_not_a_gpu_container():
    assert rules.docker_gpu_container_problems(CONTAINER, {"name": "nginx", "image": "nginx:1.27"}) == []


# --- no-debug-privileges-in-prod --------------------------------------------------------------------------


def test_hardened_containers_pass_in_prod(prod_env):
    assert validate("no-debug-privileges-in-prod", CONTAINER, gpu_container()) == []
    # The device plugin is privileged by upstream design, but asks for no GPU: not a workload.
    assert validate("no-debug-privileges-in-prod", DAEMONSET, upstream("upstream-device-plugin-daemonset.yaml")) == []
    assert validate("no-debug-privileges-in-prod", JOB, training_job()) == []


def test_debugging_flags_fail_in_prod(prod_env):
    debug = gpu_container(
        capabilities={"adds": ["CAP_SYS_PTRACE"]}, privileged=True, securityOpts=["seccomp=unconfined"]
    )
    problems = validate("no-debug-privileges-in-prod", CONTAINER, debug)
    assert [p.split(" ")[0] for p in problems] == ["adds", "runs", "security"]
    assert rules.debug_privilege_problems(CONTAINER, gpu_container(securityOpts=["seccomp:unconfined"]))
    (unconfined,) = validate("no-debug-privileges-in-prod", POD, upstream("upstream-pytorch-non-privileged-pod.yaml"))
    assert "seccompProfile Unconfined" in unconfined
    ptrace = training_job(securityContext={"capabilities": {"add": ["SYS_PTRACE"]}, "privileged": True})
    assert len(validate("no-debug-privileges-in-prod", JOB, ptrace)) == 2


def test_debugging_flags_are_not_checked_on_dev(dev_env):
    with pytest.raises(_NotApplicableError):
        validate("no-debug-privileges-in-prod", CONTAINER, gpu_container(capabilities={"adds": ["SYS_PTRACE"]}))


# --- prod-host-access -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host_path, read_only, expected",
    [
        ("/var/run/docker.sock", True, "Docker socket"),  # connect() needs no writable mount (rules.DOCKER_SOCKETS)
        ("/run/docker.sock", False, "Docker socket"),
        ("/var/run", False, "Docker socket"),  # a directory above it holds it
        ("/", True, "Docker socket"),
        ("//etc/./", False, "is the host's system path /etc"),
        ("/srv/../etc/shadow", True, "is under the host's system path /etc"),
        ("/var/lib/docker/volumes", False, "system path /var/lib/docker"),
        ("/var/lib", False, "holds the host's system path /var/lib/docker"),
        ("/root/.ssh", True, "/root"),
        ("/dev", False, "/dev"),
        ("/proc", False, "/proc"),  # writable: /proc/sysrq-trigger, /proc/sys
        ("/sys/kernel", False, "/sys"),
    ],
)
def test_host_mounts_of_the_docker_socket_and_system_paths_are_refused(host_path, read_only, expected):
    assert expected in rules.host_mount_problem(host_path, read_only)


@pytest.mark.parametrize(
    "host_path, read_only",
    [
        ("/proc", True),  # what the host preflight mounts (components/docker/checks.py)
        ("/sys", True),
        ("/var/lib/rocm-stack/checkpoints/llm/train-a", False),
        ("/srv/datasets", True),
        ("/etcetera", False),  # a name that merely starts like one
        ("/home/alice/models", False),
    ],
)
def test_data_directories_and_read_only_kernel_state_may_be_mounted(host_path, read_only):
    assert rules.host_mount_problem(host_path, read_only) is None


@pytest.mark.parametrize(
    "host_path, container_path, expected",
    [
        ("/dev/kfd", None, None),
        ("/dev/dri", "/dev/dri", None),
        ("/dev/dri/renderD128", "/dev/dri/renderD128", None),
        ("/dev/sda", "/dev/kfd", "not a GPU device node"),
        ("/dev", "/dev/dri", "not a GPU device node"),  # a directory: every node under it (DevicesFromPath)
        ("/dev/dri/card0", None, "not a GPU device node"),  # the display node: modesetting, no ROCm compute
        ("/tmp/standin/kfd", "/dev/kfd", "not a GPU device node"),  # an end-to-end stand-in
        ("/dev/dri/renderD128", "/dev/dri/renderD129", "at its own path"),
        ("/dev/mem", None, "not a GPU device node"),
    ],
)
def test_prod_maps_only_gpu_device_nodes(host_path, container_path, expected):
    problem = rules.device_problem(host_path, container_path)
    assert problem is None if expected is None else expected in problem


def test_host_access_policy_in_prod_only(prod_env, monkeypatch):
    attacked = gpu_container(
        volumes=[{"hostPath": "/var/run/docker.sock", "containerPath": "/s", "readOnly": True}],
        devices=[{"hostPath": "/dev/sda", "containerPath": "/dev/kfd"}],
        ports=[{"internal": 22, "external": 2222}],
    )
    problems = validate("prod-host-access", CONTAINER, attacked)
    assert [p.split(" ")[0] for p in problems] == ["host", "device", "publishes"]
    assert validate("prod-host-access", CONTAINER, gpu_container()) == []
    monkeypatch.setenv("PULUMI_STACK", "dev")
    monkeypatch.setenv("PULUMI_CONFIG", "{}")
    with pytest.raises(_NotApplicableError):  # dev keeps the end-to-end stand-ins (devicePaths)
        validate("prod-host-access", CONTAINER, attacked)


@pytest.mark.parametrize(
    "first, second",
    [
        ("ssh://deploy@gpu-node-1", "ssh://other@GPU-NODE-1:2222"),
        ("ssh://gpu-node-1", "tcp://gpu-node-1:2376"),  # one machine, one set of GPUs, whatever the transport
        ("unix:///var/run/docker.sock", "unix:///run/docker.sock"),
        ("unix:///var/run/docker.sock", "ssh://deploy@localhost"),
        ("tcp://[::1]:2376", "unix:///var/run/docker.sock"),
    ],
)
def test_two_host_entries_on_one_machine_are_refused(first, second):
    ((host, problem),) = rules.duplicate_endpoint_problems({"a": first, "b": second})
    assert host == "b" and "is the machine of host 'a'" in problem
    assert rules.duplicate_endpoint_problems({"a": first, "b": "ssh://deploy@gpu-node-9"}) == []


# --- gpu-pods-limits-and-shm ------------------------------------------------------------------------------


def test_gpu_job_with_limits_and_memory_shm_passes(prod_env):
    assert validate("gpu-pods-limits-and-shm", JOB, training_job()) == []
    cron = {"spec": {"jobTemplate": {"spec": training_job()["spec"]}}}
    assert rules.gpu_pod_problems(CRONJOB, cron) == []


def test_gpu_pods_without_limit_or_shm_fail(prod_env):
    (no_shm,) = validate("gpu-pods-limits-and-shm", POD, upstream("upstream-pytorch-pod.yaml"))
    assert "no memory-backed /dev/shm" in no_shm
    (no_limit,) = validate("gpu-pods-limits-and-shm", JOB, training_job(resources={"requests": {"amd.com/gpu": 1}}))
    assert "without a limit" in no_limit
    (unequal,) = rules.gpu_pod_problems(
        JOB, training_job(resources={"limits": {"amd.com/gpu": 8}, "requests": {"amd.com/gpu": 4}})
    )
    assert "must be equal" in unequal
    disk_shm = training_job()
    disk_shm["spec"]["template"]["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {}}]
    assert "no memory-backed /dev/shm" in rules.gpu_pod_problems(JOB, disk_shm)[0]


def test_pods_without_gpus_need_no_shm():
    assert rules.gpu_pod_problems(DAEMONSET, upstream("upstream-device-plugin-daemonset.yaml")) == []


# --- gpu-operator-drains-before-driver-upgrade ------------------------------------------------------------


def test_deviceconfig_draining_one_node_at_a_time_passes(prod_env):
    assert validate("gpu-operator-drains-before-driver-upgrade", DEVICE_CONFIG, device_config()) == []
    inbox_driver = {"spec": {"driver": {"enable": False}}}  # the operator upgrades nothing
    assert rules.driver_upgrade_problems(DEVICE_CONFIG, inbox_driver) == []


@pytest.mark.parametrize(
    "upgrade_policy, expected",
    [
        ({"enable": False}, "enable is not true"),
        ({"nodeDrainPolicy": None}, "nodeDrainPolicy is not set"),
        ({"nodeDrainPolicy": {"force": True}}, "force is true"),
        ({"maxParallelUpgrades": 0}, "maxParallelUpgrades is 0"),
    ],
)
def test_deviceconfig_without_safe_drain_fails_in_prod(prod_env, upgrade_policy, expected):
    (problem,) = validate("gpu-operator-drains-before-driver-upgrade", DEVICE_CONFIG, device_config(**upgrade_policy))
    assert expected in problem


def test_deviceconfig_driver_enabled_by_crd_default_needs_an_upgrade_policy():
    (problem,) = rules.driver_upgrade_problems(DEVICE_CONFIG, {"spec": {"driver": {"version": "30.20.1"}}})
    assert "enable is not true" in problem


def test_deviceconfig_drain_is_not_checked_on_dev(dev_env):
    with pytest.raises(_NotApplicableError):
        validate("gpu-operator-drains-before-driver-upgrade", DEVICE_CONFIG, device_config(enable=False))


# --- no-plaintext-secrets-in-config -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "rocm-stack:registryPassword",
        "rocm-stack:huggingfaceToken",
        "grafanaApiKey",
        "secret",
        "db_passwd",
        "aws:secretKey",
        "oauthClientSecret",
    ],
)
def test_credential_keys(key):
    assert rules.is_credential_key(key)


@pytest.mark.parametrize(
    "key", ["rocm-stack:tokenizer", "secretName", "imagePullSecrets", "rocm-stack:hosts", "maxTokens", "keyPath"]
)
def test_keys_that_are_not_credentials(key):
    assert not rules.is_credential_key(key)


def test_plaintext_credentials_found_at_any_depth():
    config = {
        "rocm-stack:environment": "prod",
        "rocm-stack:registryPassword": {"secure": "AAABAD..."},
        "rocm-stack:huggingfaceToken": "hf_plain",
        "rocm-stack:registry": {"server": "registry.example", "password": "plain"},
        "rocm-stack:monitoring": {"grafana": [{"apiKey": {"secure": "AAAB..."}}, {"apiKey": "plain"}]},
        "rocm-stack:workloads": {"tokenizer": "gpt2", "emptyToken": ""},
    }
    assert [path for path, _ in rules.plaintext_secrets(config)] == [
        "rocm-stack:huggingfaceToken",
        "rocm-stack:registry.password",
        "rocm-stack:monitoring.grafana[1].apiKey",
    ]


def test_config_secrets_policy_reads_the_stack_file(tmp_path, monkeypatch):
    (tmp_path / "Pulumi.yaml").write_text("name: rocm-stack\nruntime: python\nstackConfigDir: stacks\n")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.prod.yaml").write_text(
        yaml.safe_dump(
            {
                "config": {
                    "rocm-stack:environment": "prod",
                    "rocm-stack:registryPassword": "hunter2",
                    "rocm-stack:registry": {"server": "registry.example", "password": "plain"},
                    "rocm-stack:huggingfaceToken": {"secure": "v1:abc"},
                }
            }
        )
    )
    monkeypatch.setattr(pack, "PROJECT_DIR", tmp_path)
    monkeypatch.setenv("PULUMI_STACK", "prod")
    messages: list[str] = []
    POLICIES["no-plaintext-secrets-in-config"].validate(StackValidationArgs([]), lambda m, urn=None: messages.append(m))
    assert sorted(messages) == [
        "config 'rocm-stack:registry.password' holds a credential in plain text in Pulumi.prod.yaml ('password' is "
        "named like a credential): run `pulumi config set --path --secret 'rocm-stack:registry.password' ...`, or "
        "give a file's path (rule no-plaintext-secrets-in-config)",
        "config 'rocm-stack:registryPassword' holds a credential in plain text in Pulumi.prod.yaml ('registryPassword' "
        "is named like a credential): run `pulumi config set --secret 'rocm-stack:registryPassword' ...`, or give a "
        "file's path (rule no-plaintext-secrets-in-config)",
    ]
    monkeypatch.setenv("PULUMI_STACK", "staging")  # no such stack file: config lives elsewhere
    with pytest.raises(_NotApplicableError):
        POLICIES["no-plaintext-secrets-in-config"].validate(StackValidationArgs([]), lambda m, urn=None: None)


def test_committed_stack_files_hold_no_plaintext_credentials():
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        assert rules.plaintext_secrets(yaml.safe_load(path.read_text()).get("config") or {}) == [], path.name


# --- prod-operator-and-namespaces-protected ---------------------------------------------------------------


def stack_resources(protect: bool) -> list[PolicyResource]:
    def resource(type_token: str, name: str, props: dict) -> PolicyResource:
        return PolicyResource(
            type_token,
            props,
            urn(type_token, name),
            name,
            offline._options({"protect": protect}),
            None,
            None,
            [],
            {},
        )

    return [
        resource("kubernetes:core/v1:Namespace", "kube-amd-gpu", {"metadata": {"name": "kube-amd-gpu"}}),
        resource(HELM, "gpu-operator", {"chart": "gpu-operator-charts", "version": "v1.5.1"}),
        resource(HELM, "cert-manager", {"chart": "cert-manager", "version": "v1.18.2"}),
        resource(HELM, "grafana", {"chart": "grafana", "version": "9.4.4"}),
    ]


def validate_stack(resources: list[PolicyResource], config: dict | None = None) -> list[tuple[str, str]]:
    reported: list[tuple[str, str]] = []
    POLICIES["prod-operator-and-namespaces-protected"].validate(
        StackValidationArgs(resources, config), lambda message, urn=None: reported.append((message, urn))
    )
    return reported


def test_protected_operator_and_namespaces_pass(prod_env):
    assert validate_stack(stack_resources(protect=True)) == []


def test_unprotected_operator_and_namespaces_fail_in_prod(prod_env):
    reported = validate_stack(stack_resources(protect=False))
    assert [urn.rsplit("::", 1)[1] for _, urn in reported] == ["kube-amd-gpu", "gpu-operator", "cert-manager"]
    assert "namespace 'kube-amd-gpu' is not protected" in reported[0][0]
    # The chart list is policy config (--policy-pack-config): here only grafana must be protected.
    only_grafana = validate_stack(stack_resources(protect=False), {"charts": ["grafana"]})
    assert [urn.rsplit("::", 1)[1] for _, urn in only_grafana] == ["kube-amd-gpu", "grafana"]


def test_protection_is_not_required_on_dev(dev_env):
    with pytest.raises(_NotApplicableError):
        validate_stack(stack_resources(protect=False))


# --- the stack context and enforcement --------------------------------------------------------------------


@pytest.mark.parametrize(
    "environ, urns, policy_config, stack, environment, level",
    [
        ({"PULUMI_STACK": "dev"}, [], {}, "dev", "dev", EnforcementLevel.ADVISORY),
        ({"PULUMI_STACK": "acme/rocm-stack/prod"}, [], {}, "prod", "prod", EnforcementLevel.MANDATORY),
        ({"PULUMI_STACK": "prod-eu"}, [], {}, "prod-eu", "prod", EnforcementLevel.MANDATORY),
        # The stack config makes a stack stricter...
        (
            {"PULUMI_STACK": "lab", "PULUMI_CONFIG": '{"rocm-stack:environment": "prod"}'},
            [],
            {},
            "lab",
            "prod",
            EnforcementLevel.MANDATORY,
        ),
        # ...never a prod stack laxer (issue 27 item 1: this was dev, advisory).
        (
            {"PULUMI_STACK": "prod-sandbox", "PULUMI_CONFIG": '{"rocm-stack:environment": "dev"}'},
            [],
            {},
            "prod-sandbox",
            "prod",
            EnforcementLevel.MANDATORY,
        ),
        # The resources' URNs name the stack too; any prod name makes it prod.
        (
            {},
            ["urn:pulumi:prod::rocm-stack::docker:index/container:Container::a"],
            {},
            "prod",
            "prod",
            EnforcementLevel.MANDATORY,
        ),
        (
            {"PULUMI_STACK": "dev"},
            ["urn:pulumi:prod::rocm-stack::docker:index/container:Container::a"],
            {},
            "dev",
            "prod",
            EnforcementLevel.MANDATORY,
        ),
        # The pack's own config (whoever enables the pack) makes any stack prod.
        ({"PULUMI_STACK": "lab"}, [], {"prod": True}, "lab", "prod", EnforcementLevel.MANDATORY),
        ({}, [], {}, None, None, EnforcementLevel.MANDATORY),  # no stack (e.g. `pulumi policy publish`): fail closed
    ],
)
def test_environment_and_enforcement_follow_the_stack_name(environ, urns, policy_config, stack, environment, level):
    context = pack.stack_context(policy_config, urns, environ=environ)
    assert (context.stack, context.environment, pack.enforcement_level(context)) == (stack, environment, level)


def test_prod_pack_config_names_every_policy():
    """policy/prod.json, what CI passes with the pack to the prod deploy: every policy judges the stack as prod and
    is mandatory, whatever the stack's name or config."""
    config = offline.read_policy_config(POLICY_DIR / "prod.json")
    assert config.pop("all") == {"enforcementLevel": "mandatory"}
    assert config == {name: {pack.PROD_KEY: True} for name in POLICIES}
    # The CLI validates each policy's properties against its schema (pkg/resource/analyzer/config.go
    # validatePolicyPackConfig): every policy declares the switch.
    assert all(pack.PROD_KEY in p.config_schema.properties for p in pack.POLICIES)


# --- the committed stacks, offline ------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_committed_stacks_pass_the_pack(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan").to_json()
    with offline.stack_environment(stack):
        assert offline.check(plan["resources"]) == []


def test_debug_flags_in_the_prod_synth_are_mandatory_violations(prod_plan, tmp_path):
    plan = copy.deepcopy(prod_plan.to_json())
    container = next(r for r in plan["resources"] if r["type"] == CONTAINER)
    container["inputs"]["capabilities"] = {"adds": ["SYS_PTRACE"]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    result = subprocess.run(
        [sys.executable, "-m", "rocm_policy.offline", str(path)],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(POLICY_DIR)},
    )
    assert result.returncode == 1, result.stderr
    assert "(prod: mandatory)" in result.stdout
    assert (
        f"- **mandatory** `no-debug-privileges-in-prod` `{container['urn']}`: adds capability SYS_PTRACE"
        in result.stdout
    )


# --- the pack process, as the Pulumi CLI drives it --------------------------------------------------------


@contextmanager
def pack_process(stack: str, config: dict):
    """The pack as pulumi-analyzer-policy-python runs it (`python -u -m pulumi.policy ENGINE_ADDRESS .` in policy/,
    PULUMI_STACK/PULUMI_CONFIG in its environment); yields an Analyzer client."""
    import grpc
    from pulumi.runtime.proto import analyzer_pb2_grpc

    env = {
        **os.environ,
        # The pack's own virtualenv knows nothing of the project (no editable install mapping `rules`): site-packages
        # on PYTHONPATH without site's .pth files (-S), so only policy/__main__.py's path puts rules/ in reach.
        "PYTHONPATH": os.pathsep.join(site.getsitepackages()),
        "PULUMI_STACK": stack,
        "PULUMI_PROJECT": "rocm-stack",
        "PULUMI_DRY_RUN": "true",
        "PULUMI_CONFIG": json.dumps(config),
    }
    process = subprocess.Popen(
        [sys.executable, "-S", "-u", "-m", "pulumi.policy", "127.0.0.1:1", "."],
        cwd=POLICY_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], 30)
        assert ready, "the policy pack did not report its port"
        port = int(process.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        process.kill()
        process.wait(timeout=10)


def analyze(analyzer, stack: str, type_token: str, props: dict, name: str = "r") -> list[tuple[str, int, str]]:
    from google.protobuf import struct_pb2
    from pulumi.runtime.proto import analyzer_pb2

    properties = struct_pb2.Struct()
    properties.update(props)
    request = analyzer_pb2.AnalyzeRequest(
        type=type_token, properties=properties, name=name, urn=f"urn:pulumi:{stack}::rocm-stack::{type_token}::{name}"
    )
    response = analyzer.Analyze(request, timeout=10)
    return [(d.policyName, d.enforcementLevel, d.message) for d in response.diagnostics]


# proto EnforcementLevel: 0 advisory, 1 mandatory. `prod` with `environment: dev` was advisory (issue 27 item 1).
@pytest.mark.parametrize(
    "stack, environment, level", [("prod", "prod", 1), ("dev", "dev", 0), ("prod", "dev", 1), ("lab", "prod", 1)]
)
def test_pack_process_serves_the_policies_over_grpc(stack, environment, level):
    from google.protobuf import empty_pb2

    with pack_process(stack, {"rocm-stack:environment": environment}) as analyzer:
        info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=10)
        assert info.name == "rocm-stack" and {p.name for p in info.policies} == set(POLICIES)
        assert {p.enforcementLevel for p in info.policies} == {level}
        ((policy, enforcement, message),) = analyze(analyzer, stack, REMOTE_IMAGE, {"name": "rocm/pytorch:latest"})
        assert (policy, enforcement) == ("pinned-images", level) and "moving tag 'latest'" in message


def test_pack_config_makes_a_dev_named_stack_prod_over_grpc():
    """What `pulumi up --policy-pack policy --policy-pack-config policy/prod.json` sends the pack (the engine's
    Configure call, pulumi/pulumi sdk/go/common/resource/plugin/analyzer_plugin.go Configure): a stack whose name and
    config say dev gets the prod rules, mandatory."""
    from google.protobuf import struct_pb2
    from pulumi.runtime.proto import analyzer_pb2

    debug = gpu_container(capabilities={"adds": ["SYS_PTRACE"]})
    with pack_process("lab", {"rocm-stack:environment": "dev"}) as analyzer:
        assert analyze(analyzer, "lab", CONTAINER, debug) == []  # dev: the prod-only rule does not apply
        policy_config = {}
        for name, entry in offline.read_policy_config(POLICY_DIR / "prod.json").items():
            properties = struct_pb2.Struct()
            properties.update({k: v for k, v in entry.items() if k != "enforcementLevel"})
            policy_config[name] = analyzer_pb2.PolicyConfig(enforcementLevel=1, properties=properties)
        analyzer.Configure(analyzer_pb2.ConfigureAnalyzerRequest(policyConfig=policy_config), timeout=10)
        ((policy, enforcement, message),) = analyze(analyzer, "lab", CONTAINER, debug)
        assert (policy, enforcement) == ("no-debug-privileges-in-prod", 1) and "SYS_PTRACE" in message


# --- prod-vllm-behind-proxy ----------------------------------------------------------------------------------


def test_prod_vllm_is_reachable_only_through_its_proxy(prod_env, prod_plan):
    """vLLM 0.11.2's key guards /v1 only (api_server.py build_app `url_path.startswith("/v1")`): /invocations
    answers without it (vllm-project/vllm#58144). The prod synth passes; the shapes before the proxy do not."""
    resources = prod_plan.to_json()["resources"]
    deployment = next(r for r in resources if r["type"] == "kubernetes:apps/v1:Deployment" and r["name"] == "llama")
    serve = next(r for r in resources if r["type"] == CONTAINER and "serve" in r["inputs"].get("command", []))
    assert validate("prod-vllm-behind-proxy", deployment["type"], deployment["inputs"]) == []
    assert validate("prod-vllm-behind-proxy", CONTAINER, serve["inputs"]) == []
    exposed = copy.deepcopy(deployment["inputs"])
    command = exposed["spec"]["template"]["spec"]["containers"][0]["command"]
    command[command.index("--host") + 1] = "0.0.0.0"
    [problem] = validate("prod-vllm-behind-proxy", deployment["type"], exposed)
    assert problem.startswith("container 'vllm' serves vLLM on 0.0.0.0")
    command.remove("--host")  # vLLM's default: every address
    assert len(validate("prod-vllm-behind-proxy", deployment["type"], exposed)) == 1
    published = {**serve["inputs"], "ports": [{"internal": 8000, "external": 8000}]}
    [problem] = validate("prod-vllm-behind-proxy", CONTAINER, published)
    assert problem.startswith("publishes vLLM's own port")
    # Issue 34: on its own network's address, vLLM is reached around the proxy by a routing neighbour.
    on_network = copy.deepcopy(serve["inputs"])
    on_network["command"] = [part.replace("127.0.0.1", "0.0.0.0") for part in on_network["command"]]
    [problem] = validate("prod-vllm-behind-proxy", CONTAINER, on_network)
    assert problem.startswith("serves vLLM on 0.0.0.0, which a neighbour routing")
    # The proxy itself publishes: not a vLLM server.
    proxy = next(r for r in resources if r["type"] == CONTAINER and r["name"].endswith("-proxy"))
    assert proxy["inputs"]["ports"] and validate("prod-vllm-behind-proxy", CONTAINER, proxy["inputs"]) == []


def test_the_pack_reads_an_unknown_tag_as_the_cli_does(tmp_path):
    # go-yaml v3.0.1 resolve.go L127-130: a tag it cannot resolve leaves the plain text (decode.go L612), also on a
    # mapping or a sequence; PyYAML's safe_load raised ConstructorError, a traceback out of the pack.
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(
        "config:\n  rocm-stack:token: !secret abc\n  rocm-stack:inference: !Ref [{name: a}]\n"
        "  rocm-stack:kubernetes: !x {namespace: n}\n  rocm-stack:blob: !!binary aGk=\n"
    )
    assert pack.stack_file_config(path) == {
        "rocm-stack:token": "abc",
        "rocm-stack:inference": [{"name": "a"}],
        "rocm-stack:kubernetes": {"namespace": "n"},
        "rocm-stack:blob": b"hi",
    }
    assert pack.stack_file_config(tmp_path / "absent.yaml") == {}
