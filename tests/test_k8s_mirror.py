"""Air-gapped stacks (issue 33 item 9): `rocm-stack:mirror` moves every image, chart and CRD file of both layers into
the mirror, and `rocm-stack images` lists the images to copy there.

The chart tables of components/supply.py are checked against each chart's values.yaml (and its subcharts') at the
pinned version, read from the upstream sources `make upstream` fetches (tests/upstream_go.py: skipped where absent; the citations still pin
the facts): a value naming an image that the table misses is a defect.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from components import supply
from components.k8s.gpu_operator import device_config_images
from schema.kubernetes import DeviceConfigSettings
from schema.mirror import MirrorConfig, qualified
from tools.cli import run
from tools.impact import predict
from tools.impact_rules import Action
from tools.images import skopeo_source
from tools.synth import Plan, synthesize
from tools.synth_diff import SynthPlan
from conftest import refusal, stack_file
from k8s_mirror import outside_mirror, references
from k8s_namespaces import namespace_problems
from upstream_go import Upstream

# prod's driver repository (registry.example.internal/amd/amdgpu-driver) is in this registry.
MIRROR = {
    "registry": "registry.example.internal",
    "charts": "oci://registry.example.internal/charts",
    "files": "https://files.example.internal/mirror",
}
MIRROR_CONFIG = MirrorConfig.model_validate(MIRROR)

GPU_OPERATOR = Upstream("ROCm/gpu-operator", "858cf255c7dd27cebf1cc5db400eee3aa06ecbbc")  # tag v1.5.1
NFD = Upstream("kubernetes-sigs/node-feature-discovery", "f39ef6267b20ddeb79e717940b71bb98979c49a0")  # tag v0.18.3
CERT_MANAGER = Upstream("cert-manager/cert-manager", "24e33194fb39488eff2bbf10c6dc640f407cad44")  # tag v1.21.1
KEDA_CHARTS = Upstream("kedacore/charts", "cbb9bb8ce0809dc9048f72302f7c09765d66ed56")  # tag v2.20.2
KUEUE = Upstream("kubernetes-sigs/kueue", "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb")  # tag v0.19.2
JOBSET = Upstream("kubernetes-sigs/jobset", "f22e565ac3cc3265c7c45ef67ecffdc689af5d77")  # tag v0.12.0
LWS = Upstream("kubernetes-sigs/lws", "2161f38ff333f9e24d3c44adef7cd5d9787cac00")  # tag v0.10.0
KPS = Upstream("prometheus-community/helm-charts", "ea930baeebeba39f56d6b44e351f23b2a072a600")  # kps 88.5.3
# kube-prometheus-stack 88.5.3 Chart.yaml L51-66: its subcharts kube-state-metrics 8.4.0, prometheus-node-exporter 4.56.1,
# grafana 12.11.1 (grafana-community).
KSM = Upstream(
    "prometheus-community/helm-charts", "1982f1c5828920f5d4ea5d04956169e81f8c5129"
)  # kube-state-metrics-8.4.0
NODE_EXPORTER = Upstream(
    "prometheus-community/helm-charts", "8b8e639cac80a3001412f187060068978f649a55"
)  # node-exporter 4.56.1
GRAFANA = Upstream("grafana-community/helm-charts", "864f7794683680e5100a38670e103c4fa6e37e29")  # tag grafana-12.11.1


def mirrored(stack: str, **monitoring: Any) -> Plan:
    config = stack_file(stack)
    config["rocm-stack:mirror"] = MIRROR
    config.setdefault("rocm-stack:monitoring", {}).update(monitoring)
    return synthesize(stack, config)


# --- the allow-list: nothing outside the mirror ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "stack, monitoring",
    [
        ("prod", {"kubePrometheusStack": {"install": True}}),  # every chart prod can install
        ("dev", {}),  # kube-prometheus-stack with Grafana, the Docker workstation
    ],
)
def test_with_a_mirror_no_image_chart_or_file_is_referenced_outside_it(stack, monitoring):
    plan = mirrored(stack, **monitoring)
    found = list(references(plan))
    assert outside_mirror(plan, MIRROR_CONFIG) == []
    # Not vacuous: the check saw the Docker pulls, the pods' images, the DeviceConfig's, the charts and their values,
    # and the CRD files.
    where = " ".join(w for w, _ in found)
    for seen in ("docker pull", "plan.json", ".image", "helm/", "chart", "file"):
        assert seen in where, seen
    assert namespace_problems(plan) == []


def test_device_plugin_mode_with_a_mirror_pulls_nothing_outside_it():
    config = stack_file("dev")
    config["rocm-stack:mirror"] = MIRROR
    config["rocm-stack:kubernetes"]["mode"] = "device-plugin"
    assert outside_mirror(synthesize("dev", config), MIRROR_CONFIG) == []


def test_without_a_mirror_the_same_check_finds_the_public_sources(prod_plan: Plan):
    """(The charts' own images are not in a plan without a mirror: the chart defaults them. The table test below
    finds each of them in the chart's values.)"""
    outside = outside_mirror(prod_plan, MIRROR_CONFIG)
    for public in (
        "docker.io/rocm/",
        ": rocm/pytorch:",
        "registry.k8s.io",
        "https://raw.githubusercontent.com/",
        "oci://registry.k8s.io/",
        "https://charts.jetstack.io",
        "docker pull: rocm/",
    ):
        assert any(public in line for line in outside), public


# --- the layouts ------------------------------------------------------------------------------------------------------


def test_references_take_the_layouts_the_copy_tools_make():
    # skopeo sync --scoped: "The FQDN of the registry hosting the image will be added as new root namespace of the
    # image" (containers/skopeo docs/skopeo-sync.1.md); Docker Hub names are docker.io/<name>, one-component ones
    # docker.io/library/<name> (distribution/reference normalize.go splitDockerDomain).
    assert MIRROR_CONFIG.image("rocm/pytorch:T") == "registry.example.internal/docker.io/rocm/pytorch:T"
    assert MIRROR_CONFIG.image("nginx:1.28@sha256:ab") == (
        "registry.example.internal/docker.io/library/nginx:1.28@sha256:ab"
    )
    assert MIRROR_CONFIG.image("localhost:5000/x:1") == "registry.example.internal/localhost:5000/x:1"
    assert qualified("gcr.io/cadvisor/cadvisor:v1") == "gcr.io/cadvisor/cadvisor:v1"
    # `helm push <chart>-<version>.tgz oci://HOST/PATH` stores it as HOST/PATH/<chart>:<version>
    # (https://helm.sh/docs/topics/registries/): the release names that reference, without a repository.
    assert (
        MIRROR_CONFIG.chart("oci://registry.k8s.io/jobset/charts/jobset")
        == "oci://registry.example.internal/charts/jobset"
    )
    assert MIRROR_CONFIG.chart("cert-manager") == "oci://registry.example.internal/charts/cert-manager"
    # A file keeps its host and path under the prefix (what `wget -x URL` writes).
    assert MIRROR_CONFIG.url("https://raw.githubusercontent.com/a/b/v1/c.yaml") == (
        "https://files.example.internal/mirror/raw.githubusercontent.com/a/b/v1/c.yaml"
    )


def test_a_release_comes_from_the_mirrors_oci_repository_and_the_crds_from_its_files():
    plan = mirrored("prod")
    jobset = plan.get("kubernetes:helm.sh/v3:Release", "jobset")["inputs"]
    assert jobset["chart"] == "oci://registry.example.internal/charts/jobset" and "repositoryOpts" not in jobset
    assert jobset["values"]["image"] == {
        "repository": "registry.example.internal/registry.k8s.io/jobset/jobset",
        "tag": "v0.12.0",
        "pullPolicy": "IfNotPresent",
    }
    (crd,) = plan.of_type("kubernetes:yaml/v2:ConfigFile")
    assert crd["inputs"]["file"] == (
        "https://files.example.internal/mirror/raw.githubusercontent.com/kubernetes-sigs/jobset/v0.12.0/charts/jobset/"
        "crds/jobset.x-k8s.io_jobsets.yaml"
    )
    operator = plan.get("kubernetes:helm.sh/v3:Release", "amd-gpu-operator")["inputs"]
    assert operator["chart"] == "oci://registry.example.internal/charts/gpu-operator-charts"
    assert operator["values"]["kmm"]["controller"]["manager"]["env"]["relatedImageWorker"] == (
        "registry.example.internal/docker.io/rocm/kernel-module-management-worker:latest"
    )


def test_the_device_config_names_the_operands_init_image_only_with_a_mirror(prod_plan: Plan):
    # Every operand's init container is busybox:1.36 unless the DeviceConfig says otherwise (gpu-operator v1.5.1
    # internal/plugin/plugin.go L57, nodelabeller/nodelabeller.go L59, metricsexporter/metricsexporter.go L58).
    for path, line in (
        ("internal/plugin/plugin.go", 57),
        ("internal/nodelabeller/nodelabeller.go", 59),
        ("internal/metricsexporter/metricsexporter.go", 58),
    ):
        assert "defaultInitContainerImage" in GPU_OPERATOR.read(path).decode().splitlines()[line - 1]
        assert '"busybox:1.36"' in GPU_OPERATOR.read(path).decode().splitlines()[line - 1]
    device_config = "kubernetes:amd.com/v1alpha1:DeviceConfig"
    common = prod_plan.get(device_config, "amd-gpu-operator-device-config")["inputs"]["spec"]["commonConfig"]
    assert "initContainerImage" not in common  # no change to a deployed DeviceConfig without a mirror
    spec = mirrored("prod").get(device_config, "amd-gpu-operator-device-config")["inputs"]["spec"]
    assert spec["commonConfig"]["initContainerImage"] == "registry.example.internal/docker.io/library/busybox:1.36"
    assert spec["driver"]["image"] == "registry.example.internal/amd/amdgpu-driver"  # the cluster's own: kept
    assert spec["driver"]["imageBuild"] == {"baseImageRegistry": "registry.example.internal/docker.io"}


# --- every image a chart's values name is in the table ---------------------------------------------------------------


def _image_values(values: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """(value path, what it names) of every value of a chart's values.yaml that names an image: a map with a
    `registry` (its registry), else one with a `repository` (its repository), and any other value whose key says
    image (`image`, `relatedImageWorker`, `imageRegistry` ...). Empty ones default to another value."""
    if isinstance(values, dict):
        if isinstance(values.get("registry"), str) and values["registry"]:
            yield ".".join((*path, "registry")), values["registry"]
        elif isinstance(values.get("repository"), str) and values["repository"]:
            yield ".".join((*path, "repository")), values["repository"]
        for key, item in values.items():
            if key in ("registry", "repository"):
                continue
            if isinstance(item, str) and item and "image" in key.lower() and "pull" not in key.lower():
                yield ".".join((*path, key)), item
            yield from _image_values(item, (*path, key))
    elif isinstance(values, list):
        for item in values:
            yield from _image_values(item, path)


def _chart_values(upstream: Upstream, path: str, prefix: str = "") -> dict[str, str]:
    values = yaml.safe_load(upstream.read(path))
    return {f"{prefix}{value}": named for value, named in _image_values(values)}


CHARTS = {
    "gpu-operator-charts": (
        lambda: {
            **_chart_values(GPU_OPERATOR, "helm-charts-k8s/values.yaml"),
            **_chart_values(GPU_OPERATOR, "helm-charts-k8s/charts/kmm/values.yaml", "kmm."),
            **_chart_values(NFD, "deployment/helm/node-feature-discovery/values.yaml", "node-feature-discovery."),
        },
        lambda: supply.gpu_operator_images(kmm=True, nfd=True, remediation=True),
        # The default DeviceConfig the chart can install, which the stack does not (crds.defaultCR.install false):
        # the stack's own DeviceConfig names these images (device_config_images, below).
        "deviceConfig.spec.",
    ),
    "cert-manager": (
        lambda: _chart_values(CERT_MANAGER, "deploy/charts/cert-manager/values.yaml"),
        supply.cert_manager_images,
        # The path under `imageRegistry` (jetstack): the mirror keeps it (templates/_helpers.tpl L198-221 joins them).
        "imageNamespace",
    ),
    "keda": (lambda: _chart_values(KEDA_CHARTS, "keda/values.yaml"), supply.keda_images, None),
    "kueue": (lambda: _chart_values(KUEUE, "charts/kueue/values.yaml"), lambda: supply.kueue_images("0.19.2"), None),
    "jobset": (
        lambda: _chart_values(JOBSET, "charts/jobset/values.yaml"),
        lambda: supply.repository_images("image.repository", "registry.k8s.io/jobset/jobset", "v0.12.0"),
        None,
    ),
    "lws": (
        lambda: _chart_values(LWS, "charts/lws/values.yaml"),
        lambda: supply.repository_images("image.manager.repository", "registry.k8s.io/lws/lws", "v0.10.0"),
        None,
    ),
    "kube-prometheus-stack": (
        lambda: {
            **_chart_values(KPS, "charts/kube-prometheus-stack/values.yaml"),
            **_chart_values(KSM, "charts/kube-state-metrics/values.yaml", "kube-state-metrics."),
            **_chart_values(NODE_EXPORTER, "charts/prometheus-node-exporter/values.yaml", "prometheus-node-exporter."),
            **_chart_values(GRAFANA, "charts/grafana/values.yaml", "grafana."),
        },
        lambda: supply.kube_prometheus_stack_images(grafana=True),
        None,
    ),
}


@pytest.mark.parametrize("chart", sorted(CHARTS))
def test_every_image_value_of_the_chart_at_its_pinned_version_is_in_the_table(chart):
    read, table, not_installed = CHARTS[chart]
    values = {path: named for path, named in read().items() if not (not_installed and path.startswith(not_installed))}
    entries = {entry.value: entry for entry in table()}
    assert sorted(set(values) - set(entries)) == [], "image values the mirror would not rewrite"
    assert sorted(set(entries) - set(values)) == [], "table entries the chart does not have"
    for path, named in values.items():
        entry = entries[path]
        # The table names what the chart does, but where the stack pins the release image over the chart's staging
        # default (JobSet, Kueue: the release packaging's rewrite, schema/kubernetes.py, schema/queues.py).
        staging = named.startswith("us-central1-docker.pkg.dev/k8s-staging-images/") and entry.pulls
        assert entry.source == named or staging, (path, named, entry.source)
        for pulled in entry.pulls:
            assert pulled.startswith(f"{entry.source}/" if entry.kind == "registry" else entry.source), (path, pulled)


def test_the_device_config_names_every_operand_image_the_operator_would_default():
    """The operand images of the DeviceConfig CRD (spec.*.image, *Image) that the stack's settings can turn on."""
    settings = DeviceConfigSettings.model_validate(
        {
            "driver": {"enable": True, "image": "r.example/amd/driver"},
            "testRunner": {"enable": True},
            "configManager": {"enable": True},
        }
    )
    paths = {entry.value for entry in device_config_images(settings)}
    assert paths == {
        "devicePlugin.devicePluginImage",
        "devicePlugin.nodeLabellerImage",
        "metricsExporter.image",
        "testRunner.image",
        "commonConfig.utilsContainer.image",
        "commonConfig.initContainerImage",
        "configManager.image",
        "driver.imageBuild.baseImageRegistry",
    }


# --- rocm-stack images -------------------------------------------------------------------------------------------------


def test_images_lists_every_image_of_both_layers_and_the_charts(capsys, prod_plan: Plan):
    assert run(["images", "--stack", "prod"]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == prod_plan.outputs["images"] == sorted(set(listed))
    # Each image a RemoteImage pulls or a pod runs is listed, fully qualified, with its digest where pinned ...
    for remote in prod_plan.of_type("docker:index/remoteImage:RemoteImage"):
        assert qualified(remote["inputs"]["name"]) in listed
    for where, image in references(prod_plan):
        if where.startswith("manifests/") and "containers." in where and where.endswith(".image"):
            assert qualified(image) in listed, image
    # ... and those the charts pull.
    for chart_image in ("quay.io/jetstack/cert-manager-webhook:v1.21.1", "registry.k8s.io/kueue/kueue:v0.19.2"):
        assert chart_image in listed
    assert (
        "docker.io/library/nginx:1.28-alpine@sha256:a8b39bd9cf0f83869a2162827a0caf6137ddf759d50a171451b335cecc87d236"
        in listed
    )


def test_images_gives_the_skopeo_sync_source_and_the_mirror_references(tmp_path, capsys):
    source = skopeo_source(["docker.io/library/nginx:1.28@sha256:ab", "quay.io/x/y:v1", "quay.io/x/y:v2"])
    # skopeo sync --src yaml: registry -> images -> repository -> [tags or digests] (docs/skopeo-sync.1.md EXAMPLES)
    assert source == {
        "docker.io": {"images": {"library/nginx": ["sha256:ab"]}},
        "quay.io": {"images": {"x/y": ["v1", "v2"]}},
    }
    config = stack_file("prod")
    config["rocm-stack:mirror"] = MIRROR
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.prod.yaml").write_text(yaml.safe_dump({"config": config}))
    from tools.synth import ROOT

    for path in ROOT.iterdir():  # the project, with this stack file
        if path.name != "stacks" and not path.name.startswith("."):
            (tmp_path / path.name).symlink_to(path)
    (tmp_path / "stacks" / "placement.prod.yaml").symlink_to(ROOT / "stacks" / "placement.prod.yaml")
    assert run(["images", "--stack", "prod", "--project-dir", str(tmp_path)]) == 0
    pairs = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert pairs and all(len(pair) == 2 and pair[1] == MIRROR_CONFIG.image(pair[0]) for pair in pairs)


# --- day 2: switching a deployed stack to the mirror ------------------------------------------------------------------


def test_scenario_switching_to_the_mirror_upgrades_the_releases_in_place(prod_plan: Plan):
    after = mirrored("prod")
    impacts = predict(SynthPlan.model_validate(prod_plan.to_json()), SynthPlan.model_validate(after.to_json())).impacts
    by_type: dict[str, list[Any]] = {}
    for impact in impacts:
        by_type.setdefault(impact.type, []).append(impact)
    # The releases: a new chart reference and image values, a `helm upgrade` in place (the release keeps its name).
    releases = by_type["kubernetes:helm.sh/v3:Release"]
    assert {r.name for r in releases} == {"cert-manager", "amd-gpu-operator", "jobset", "kueue", "keda"}
    assert all(
        r.action is Action.UPDATE and not r.replaced_by and ("chart", "k8s.update") in r.updated for r in releases
    )
    # The CRD file: the same CRD from another address, in place, never deleted.
    (crd,) = by_type["kubernetes:yaml/v2:ConfigFile"]
    assert crd.action is Action.UPDATE and crd.updated == [("file", "k8s.yaml-objects")]
    # The pods' images: a rolling update of each workload, no replacement of the object.
    for kind in ("kubernetes:apps/v1:Deployment", "kubernetes:amd.com/v1alpha1:DeviceConfig"):
        assert all(i.action is Action.UPDATE and not i.replaced_by for i in by_type[kind]), kind
    # A JobSet's pod template is immutable: each training is replaced (it resumes from its checkpoints).
    assert all(i.replaced_by for i in by_type["kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"])
    # The Docker hosts: each RemoteImage is pulled anew under its mirror name; the preview cannot know the new image
    # id, so it shows each container using one replaced (rule pulumi.unknown-output) - docs/operations.md says when.
    assert all(
        i.action is Action.REPLACE or i.action is Action.DELETE_REPLACE
        for i in by_type["docker:index/remoteImage:RemoteImage"]
    )
    assert all("pulumi.unknown-output" in i.rules for i in by_type["docker:index/container:Container"])
    json.dumps([i.name for i in impacts])  # the report is plain data


def test_a_driver_repository_outside_the_mirror_is_refused():
    config = stack_file("prod")
    config["rocm-stack:mirror"] = {**MIRROR, "registry": "mirror.example.internal"}
    message = refusal("prod", config)
    assert "rocm-stack:kubernetes.gpuOperator.deviceConfig.driver.image" in message
    assert "mirror.example.internal/amd/amdgpu-driver" in message and "replaces the DeviceConfig" in message


def test_a_registry_login_for_another_registry_than_the_mirrors_is_refused():
    config = stack_file("prod")
    config["rocm-stack:mirror"] = MIRROR
    config["rocm-stack:registry"] = {"server": "ghcr.io", "username": "ci"}
    message = refusal("prod", config, secrets={"registryPassword": "x"})
    assert "rocm-stack:registry.server: 'ghcr.io' is not the mirror's registry 'registry.example.internal'" in message
