"""GPU models and families: MI350X/MI355X hosts, per-family images, and the model table the schemas key on."""

from __future__ import annotations

from typing import Any

import pytest

from domain.gpus import MODELS
from schema import load
from schema.checks import DEFAULT_FLOORS
from tools.synth import synthesize
from conftest import REMOTE_IMAGE, refusal, stack_file

P = "rocm-stack:"
# AMD's vLLM images per GPU family (rocm.docs.amd.com/en/7.12.0-preview/rocm-for-ai/vllm.html, "Pull the ROCm vLLM
# Docker image", one per device tab: MI355X/MI350X pull the gfx950 image, MI325X/MI300X the gfx94X one).
VLLM_GFX942 = "rocm/vllm:rocm7.12.0_gfx94X-dcgpu_ubuntu24.04_py3.12_pytorch_2.9.1_vllm_0.16.0"
VLLM_GFX950 = "rocm/vllm:rocm7.12.0_gfx950-dcgpu_ubuntu24.04_py3.12_pytorch_2.9.1_vllm_0.16.0"
PER_FAMILY = {"vllm": {"gfx942": VLLM_GFX942, "gfx950": VLLM_GFX950}}


def host(name: str, model: str, image: str = "vllm") -> dict[str, Any]:
    return {
        "name": name,
        "gpus": 8,
        "gpuModel": model,
        "docker": {"host": f"ssh://deploy@{name}"},
        "containers": [{"name": "serve", "image": image, "gpus": [0]}],
    }


def test_the_model_table_knows_the_gfx950_models() -> None:
    # ROCm system requirements: MI355X and MI350X are gfx950 (CDNA 4), MI325X/MI300X/MI308X gfx942, MI2xx gfx90a.
    assert {name: model.gfx for name, model in MODELS.items()} == {
        "MI300X": "gfx942",
        "MI325X": "gfx942",
        "MI308X": "gfx942",
        "MI350X": "gfx950",
        "MI355X": "gfx950",
        "MI250X": "gfx90a",
        "MI250": "gfx90a",
        "MI210": "gfx90a",
    }
    # The GPU check floors live in the same table; only MI300X/MI325X have AMD-published ones (schema/checks.py).
    assert set(DEFAULT_FLOORS) == {"MI300X", "MI325X"}


def test_mi355x_and_mi350x_hosts_are_accepted() -> None:
    cfg = load("dev", {P + "hosts": [host("a", "MI355X", "pytorch"), host("b", "MI350X", "pytorch")]})
    assert [h.gpu_model for h in cfg.hosts] == ["MI355X", "MI350X"]
    assert (
        cfg.monitoring.effective_thresholds("MI355X").power_cap_watts,
        cfg.monitoring.effective_thresholds("MI350X").power_cap_watts,
    ) == (1400, 1000)


def test_each_host_pulls_its_familys_image() -> None:
    plan = synthesize("dev", {P + "hosts": [host("new", "MI355X"), host("old", "MI300X")], P + "images": PER_FAMILY})
    pulled = {r["name"]: r["inputs"]["name"] for r in plan.of_type(REMOTE_IMAGE) if r["name"].endswith("-vllm")}
    assert pulled == {"new-vllm": VLLM_GFX950, "old-vllm": VLLM_GFX942}


def test_a_host_whose_family_has_no_image_is_refused_naming_the_key() -> None:
    message = refusal("dev", {P + "hosts": [host("new", "MI355X"), host("old", "MI250")], P + "images": PER_FAMILY})
    assert "rocm-stack:hosts[1].containers[0].image" in message
    assert "MI250 GPUs (gfx90a)" in message and "images.vllm.gfx90a" in message
    # The same host with a plain (every-family) reference is fine.
    load("dev", {P + "hosts": [host("old", "MI250", "pytorch")]})


def test_every_per_family_reference_must_be_pinned() -> None:
    images = {"vllm": {"gfx942": VLLM_GFX942, "gfx950": "rocm/vllm:latest"}}
    message = refusal("prod", {P + "hosts": [host("new", "MI355X")], P + "images": images})
    assert "rocm-stack:images.vllm.gfx950" in message and "not pinned" in message


@pytest.mark.parametrize("family", ["gfx1100", "MI300X"])
def test_a_per_family_image_takes_only_known_families(family: str) -> None:
    message = refusal("dev", {P + "images": {"vllm": {"gfx942": VLLM_GFX942, family: VLLM_GFX950}}})
    # One line, at the unknown key: not also the `str` branch of `ImageRef`'s union ("images.vllm.str: expected
    # text", issue 24 item 12).
    assert message == f"rocm-stack:images.vllm.{family}: expected 'gfx950', 'gfx942' or 'gfx90a' (got {family!r})"


def test_an_unknown_device_id_is_said_so_not_that_the_selector_is_missing() -> None:
    config = stack_file("dev")
    config[P + "images"] = PER_FAMILY
    config[P + "inference"][0]["kubernetes"]["nodeSelector"] = {"amd.com/gpu.device-id": "74b9"}
    lines = refusal("dev", config).splitlines()
    assert lines == [
        "rocm-stack:inference[0].kubernetes.nodeSelector.amd.com/gpu.device-id: '74b9' is the PCI device ID of no GPU "
        "model rocm-stack knows; expected one of "
        + ", ".join(f"{m.pci_device_id} ({name})" for name, m in MODELS.items())
    ]


def test_a_kubernetes_workload_takes_the_image_of_its_node_selectors_family() -> None:
    """Its family is known from its nodeSelector on the labeller's amd.com/gpu.device-id ("Example labels for an
    AMD MI300X GPU: amd.com/gpu.device-id=74a1", ROCm/k8s-device-plugin install guide; 75a3 is MI355X's PCI device
    ID, ROCm/system-acceptance-docs docs/common/health-checks.md); without one a per-family image is refused."""
    config = stack_file("prod")
    inference = config[P + "inference"]
    k8s = next(i for i, workload in enumerate(inference) if workload.get("kubernetes") is not None)
    image = inference[k8s].get("image", "vllm")
    config[P + "images"] = {image: {"gfx942": VLLM_GFX942, "gfx950": VLLM_GFX950}}
    message = refusal("prod", config)
    assert f"rocm-stack:inference[{k8s}].kubernetes.nodeSelector" in message and "amd.com/gpu.device-id" in message

    inference[k8s]["kubernetes"]["nodeSelector"] = {"amd.com/gpu.device-id": "75a3"}
    plan = synthesize("prod", config)
    deployments = [
        r
        for r in plan.of_type("kubernetes:apps/v1:Deployment")
        if r["inputs"]["spec"]["template"]["spec"].get("nodeSelector")
    ]
    (deployment,) = deployments
    server, _proxy = deployment["inputs"]["spec"]["template"]["spec"]["containers"]  # and prod's proxy sidecar
    assert server["image"] == VLLM_GFX950

    config[P + "images"] = {image: {"gfx942": VLLM_GFX942}}
    assert f"rocm-stack:inference[{k8s}].image" in refusal("prod", config)
