"""Two Docker vLLM servers of one workload roll on a real daemon: one keeps answering (issue 35 item 7).

The dev stack with both of its partitions serving `qwen-small` (maxUnavailable 1, the default): `docker/HOST.sh`
deploys it, then an image bump replaces both servers in the steps the change-impact preview predicts from the plan's
dependsOn edges (tools.impact Roll; the engine's order is pinned in tests/test_docker_rolling.py). Each step is run as
the engine runs a container's replacement: the provider's delete (`docker stop -t <old destroyGraceSeconds>`, then
remove), its create from the new plan's inputs (tools.synth.docker_create_args), start, and its health wait. Every
server's /health is probed inside its container throughout (without a bridge, published ports are not forwarded:
tests/e2e/harness.py): the server being replaced stops answering, the other answers every probe.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path


from conftest import stack_file
from e2e.deployment import deploy
from e2e.harness import Docker, make_gpu_nodes, on_test_host, with_health_interval
from tools.impact import predict
from tools.synth import Plan, docker_create_args, synthesize
from tools.synth_diff import SynthPlan

P = "rocm-stack:"
CONTAINER = "docker:index/container:Container"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
NEW_VLLM = "rocm/vllm:rocm7.0.0_vllm_0.11.2_20260105"
HEALTHY_WITHIN_S = 60


def two_servers(tmp: Path, images: dict[str, str] | None = None) -> dict:
    """Two hosts of one GPU, one server each (on one daemon here: without a bridge their published ports are only
    recorded, so both may publish 8000), the dev stack's `qwen-small` on both; no training, checks or exporters."""
    config = stack_file("dev")
    config[P + "hosts"] = [
        {"name": f"gpu-{x}", "gpus": 1, "containers": [{"name": f"serve-{x}", "gpus": [0]}]} for x in ("a", "b")
    ]
    config[P + "training"] = []
    (inference,) = config[P + "inference"]
    inference["docker"].update(partitions=["gpu-a/serve-a", "gpu-b/serve-b"], modelCacheDir=str(tmp / "hf"))
    config[P + "checks"] = {"enable": False}
    config[P + "monitoring"] = {"enabled": False}
    if images:
        config[P + "images"] = {**config.get(P + "images", {}), **images}
    return config


def plan_of(docker: Docker, config: dict, dev_root: Path) -> Plan:
    return with_health_interval(on_test_host(synthesize("dev", config), docker.host, dev_root))


def healthy(docker: Docker, name: str) -> bool:
    state = docker.inspect(name)["State"]
    return state.get("Health", {}).get("Status") == "healthy"


def answers(docker: Docker, name: str, port: int) -> bool:
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health', timeout=2)"
    return docker.run("exec", name, "python3", "-c", probe, check=False, timeout=30).returncode == 0


def test_an_image_bump_replaces_one_server_at_a_time_and_the_other_keeps_answering(
    docker: Docker, standin_image: str, tmp_path: Path
):
    nodes = make_gpu_nodes(tmp_path / "dev", gpus=2)
    base = plan_of(docker, two_servers(tmp_path), nodes.root)
    head = plan_of(docker, two_servers(tmp_path, {"vllm": NEW_VLLM}), nodes.root)
    for host in ("gpu-a", "gpu-b"):
        deployed = deploy(docker, standin_image, base, host, nodes.root, tmp_path)
        assert deployed.script.returncode == 0, deployed.script.stderr
    servers = {"gpu-a/serve-a": "serve-a", "gpu-b/serve-b": "serve-b"}
    for name in servers.values():
        deadline = time.monotonic() + HEALTHY_WITHIN_S
        while not healthy(docker, name):
            assert time.monotonic() < deadline, f"{name} never got healthy"
            time.sleep(0.5)

    report = predict(SynthPlan.model_validate(base.to_json()), SynthPlan.model_validate(head.to_json()))
    (roll,) = [r for r in report.rolls if not r.if_rotated]
    assert roll.steps == [["gpu-a/serve-a"], ["gpu-b/serve-b"]]  # the order of `partitions`

    docker.run("tag", standin_image, NEW_VLLM)
    image_names = {head.mock_outputs[r["urn"]]["imageId"]: r["inputs"]["name"] for r in head.of_type(REMOTE_IMAGE)}
    old = {c["inputs"]["name"]: c["inputs"] for c in base.of_type(CONTAINER)}
    new = {c["inputs"]["name"]: c["inputs"] for c in head.of_type(CONTAINER)}
    port = new["serve-a"]["ports"][0]["internal"]  # no API key in dev: vLLM publishes its own port
    probes: dict[str, list[bool]] = {name: [] for name in servers.values()}

    for step in roll.steps:
        replaced = [servers[p] for p in step]
        others = [n for n in servers.values() if n not in replaced]
        stop = threading.Event()

        def probe(stop: threading.Event = stop) -> None:
            while not stop.is_set():
                for name in servers.values():
                    probes[name].append(answers(docker, name, port))
                time.sleep(0.1)

        seen_before = {name: len(results) for name, results in probes.items()}
        prober = threading.Thread(target=probe)
        prober.start()
        try:
            for name in replaced:
                started = time.monotonic()
                docker.run("stop", "-t", str(old[name]["destroyGraceSeconds"]), name)
                docker.run("rm", name)
                docker.run(*docker_create_args(new[name], image_names)[1:])
                docker.run("start", name)
                deadline = time.monotonic() + HEALTHY_WITHIN_S
                while not healthy(docker, name):
                    assert time.monotonic() < deadline, f"{name}'s replacement never got healthy"
                    time.sleep(0.2)
                print(f"\ne2e: {name} replaced and healthy again in {time.monotonic() - started:.2f}s")
        finally:
            stop.set()
            prober.join()
        during = {name: results[seen_before[name] :] for name, results in probes.items()}
        print(f"e2e: step {step}: probes answered { ({n: f'{sum(r)}/{len(r)}' for n, r in during.items()}) }")
        for name in others:
            assert len(during[name]) >= 2 and all(during[name]), (name, during[name])
        for name in replaced:
            assert not all(during[name]), (name, during[name])  # it was down for a while
        assert docker.inspect(replaced[0])["Config"]["Image"] == NEW_VLLM
    assert all(docker.inspect(name)["Config"]["Image"] == NEW_VLLM for name in servers.values())
