"""Kubernetes GPU layer: what the program declares (via tools.synth), validated like an API server would.

Every declared object passes `kubernetes-validate` (strict) or, for the DeviceConfig, the CRD of
gpu-operator-charts v1.5.1 made strict (tests/k8s_validation.py); config errors name their key.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime import settings

from schema.kubernetes import (
    GPU_OPERATOR_CHART,
    GPU_OPERATOR_CHART_VERSION,
    NFD_WORKER_DEFAULT_TOLERATIONS,
    CertManagerConfig,
    DeviceConfigSettings,
    GpuOperatorConfig,
    KubernetesConfig,
)
from components.k8s import build_kubernetes
from components.k8s.gpu_operator import chart_values, device_config_spec
from tools.synth import Plan, manifest_of, synthesize, write
from conftest import refused, stack_file, stack_without_kubernetes
from k8s_validation import (
    CrdSchemas,
    ManifestInvalid,
    stack_crds,
    strict_structural_schema,
    validate_all,
    validate_object,
)

DATA = Path(__file__).parent / "data" / "kubernetes"
P = "rocm-stack:"

RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
DEVICE_CONFIG = "kubernetes:amd.com/v1alpha1:DeviceConfig"
PROVIDER = "pulumi:providers:kubernetes"
PROD_PROVIDER = {"context": "gpu-prod"}

CRDS = CrdSchemas.from_files(DATA / "deviceconfig-crd.yaml")


def synth(stack: str, kubernetes: dict[str, Any] | None) -> Plan:
    """The committed stack's config (hosts etc.) with this `rocm-stack:kubernetes` section, and without
    monitoring so that only the GPU layer declares Kubernetes objects."""
    config = stack_without_kubernetes(stack)
    config[P + "monitoring"] = {"enabled": False}
    if kubernetes is not None:
        config[P + "kubernetes"] = kubernetes
    return synthesize(stack, config)


def refusal(stack: str, kubernetes: dict[str, Any]) -> str:
    return refused(lambda: synth(stack, kubernetes))


def k8s_resources(plan: Plan) -> list[dict[str, Any]]:
    return [r for r in plan.resources if r["type"].startswith(("kubernetes:", "rocm-stack:k8s:", PROVIDER))]


def device_config(plan: Plan) -> dict[str, Any]:
    """A copy: tests may break it without touching the shared plan."""
    [resource] = plan.of_type(DEVICE_CONFIG)
    return copy.deepcopy(manifest_of(resource))


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    return {
        "dev-operator": synth("dev", {}),
        "prod-operator": synth("prod", {"provider": PROD_PROVIDER}),
        "dev-device-plugin": synth("dev", {"mode": "device-plugin"}),
        "prod-device-plugin": synth("prod", {"mode": "device-plugin", "provider": PROD_PROVIDER}),
    }


# --- every object is valid -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.30.0", "1.37.0"])
@pytest.mark.parametrize("case", ["dev-operator", "prod-operator", "dev-device-plugin", "prod-device-plugin"])
def test_every_declared_object_is_valid(plans, case, version):
    objects = [manifest_of(r) for r in plans[case].kubernetes_objects()]
    assert validate_all(objects, CRDS, version) == len(objects) >= 2


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_committed_stacks_declare_valid_objects(stack):
    """The stack files as committed: Kubernetes objects exactly when they have a kubernetes section."""
    plan = synthesize(stack, stack_file(stack))
    objects = [manifest_of(r) for r in plan.kubernetes_objects()]
    validate_all(objects, stack_crds())
    assert bool(objects) == (P + "kubernetes" in stack_file(stack))


def test_full_device_config_from_typed_config_passes_the_crd():
    plan = synth(
        "prod",
        {
            "provider": PROD_PROVIDER,
            "gpuOperator": {
                "deviceConfig": {
                    "name": "mi300x",
                    "selector": {"amd.com/gpu.family": "AI"},
                    "driver": {
                        "enable": True,
                        "blacklist": True,
                        "version": "30.20.1",
                        "image": "registry.example.com/amd/amdgpu",
                        "upgradePolicy": {
                            "maxParallelUpgrades": 2,
                            "maxUnavailableNodes": "25%",
                            "nodeDrainPolicy": {"timeoutSeconds": 0},
                        },
                    },
                    "devicePlugin": {"nodeLabellerArguments": ["compute-memory-partition"]},
                    "metricsExporter": {
                        "serviceType": "NodePort",
                        "nodePort": 32500,
                        "port": 5001,
                        "serviceMonitor": {"enable": True, "interval": "15s", "labels": {"release": "prom"}},
                    },
                    "testRunner": {"enable": True},
                }
            },
        },
    )
    obj = device_config(plan)
    validate_object(obj, CRDS)
    spec = obj["spec"]
    assert obj["metadata"] == {"name": "mi300x", "namespace": "kube-amd-gpu"}
    assert spec["selector"] == {"amd.com/gpu.family": "AI"}
    assert {k: spec["driver"][k] for k in ("enable", "blacklist", "version", "image")} == {
        "enable": True,
        "blacklist": True,
        "version": "30.20.1",
        "image": "registry.example.com/amd/amdgpu",
    }
    policy = spec["driver"]["upgradePolicy"]
    assert (policy["maxParallelUpgrades"], policy["maxUnavailableNodes"]) == (2, "25%")
    assert policy["nodeDrainPolicy"] == {
        "force": False,
        "timeoutSeconds": 0,
        "gracePeriodSeconds": -1,
        "ignoreDaemonSets": True,
    }
    assert spec["devicePlugin"]["nodeLabellerArguments"] == ["compute-memory-partition"]
    exporter = spec["metricsExporter"]
    assert (exporter["serviceType"], exporter["nodePort"], exporter["port"]) == ("NodePort", 32500, 5001)
    assert exporter["prometheus"]["serviceMonitor"] == {
        "enable": True,
        "interval": "15s",
        "labels": {"release": "prom"},
    }
    assert spec["testRunner"] == {"enable": True, "image": "docker.io/rocm/test-runner:v1.5.1"}


def _renamed(obj: dict[str, Any], path: list[str], new_key: str) -> dict[str, Any]:
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[new_key] = node.pop(path[-1])
    return obj


@pytest.mark.parametrize(
    "path, typo",
    [
        (["spec", "driver", "upgradePolicy", "maxParallelUpgrades"], "maxParalelUpgrades"),
        (["spec", "metricsExporter"], "metricExporter"),
        (["spec", "devicePlugin", "enableNodeLabeller"], "enableNodeLabeler"),
        (["metadata", "name"], "nmae"),
    ],
)
def test_misspelled_device_config_field_is_caught(plans, path, typo):
    obj = device_config(plans["prod-operator"])
    validate_object(obj, CRDS)  # the object as declared passes: the typo alone makes it fail
    with pytest.raises(ManifestInvalid, match=typo):
        validate_object(_renamed(obj, path, typo), CRDS)


@pytest.mark.parametrize(
    "path, value, error",
    [
        (["spec", "metricsExporter", "serviceType"], "LoadBalancer", "is not one of"),
        (["spec", "driver", "upgradePolicy", "nodeDrainPolicy", "timeoutSeconds"], -5, "less than the minimum"),
        (["spec", "driver", "upgradePolicy", "maxUnavailableNodes"], 1.5, "is not valid under any"),
        (["spec", "devicePlugin", "devicePluginImage"], "rocm/K8s Plugin", "does not match"),
    ],
)
def test_wrong_device_config_values_are_caught(plans, path, value, error):
    obj = device_config(plans["prod-operator"])
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ManifestInvalid, match=error):
        validate_object(obj, CRDS)


def test_custom_resource_without_its_crd_is_not_skipped(plans):
    with pytest.raises(ManifestInvalid, match="pass its CRD"):
        validate_object(device_config(plans["dev-operator"]), CrdSchemas())


def test_strict_structural_schema():
    schema = strict_structural_schema(
        {
            "type": "object",
            "properties": {
                "closed": {"type": "object", "properties": {"a": {"type": "string"}}},
                "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"a": {}}},
                "map": {"type": "object", "additionalProperties": {"type": "string"}},
                "count": {"x-kubernetes-int-or-string": True},
                "maybe": {"type": "string", "nullable": True},
                "list": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "integer"}}}},
            },
        }
    )
    assert schema["additionalProperties"] is False
    assert schema["properties"]["closed"]["additionalProperties"] is False
    assert "additionalProperties" not in schema["properties"]["open"]
    assert schema["properties"]["map"]["additionalProperties"] == {"type": "string"}
    assert schema["properties"]["count"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert schema["properties"]["maybe"]["type"] == ["string", "null"]
    assert schema["properties"]["list"]["items"]["additionalProperties"] is False


# --- Helm releases ---------------------------------------------------------------------------------------


def test_cert_manager_release(plans):
    release = plans["dev-operator"].get(RELEASE, "cert-manager")["inputs"]
    assert {k: release[k] for k in ("name", "chart", "version", "namespace", "repositoryOpts", "values")} == {
        "name": "cert-manager",
        "chart": "cert-manager",
        "version": "v1.21.1",
        "namespace": "cert-manager",
        "repositoryOpts": {"repo": "https://charts.jetstack.io"},
        "values": {"crds": {"enabled": True}},
    }
    assert (release["timeout"], release["atomic"], release["cleanupOnFail"]) == (600, True, True)


def test_cert_manager_is_a_supported_release():
    """https://cert-manager.io/docs/releases/ (website content/docs/releases/README.md, Aug 2026): "All
    cert-manager releases are supported at least until the release of a second subsequent version"; supported
    table `| [1.21][] | Jul 08, 2026 | Release of 1.23 |` and `| [1.20][] | Mar 10, 2026 | Release of 1.22 |`;
    1.19 "is no longer supported since the release of 1.21" (cert-manager/testing#1218). 1.22 was planned for
    ~Nov 2026, which ends 1.20: 1.21 is the line supported either way (update this when 1.23 ships)."""
    major, minor, _ = CertManagerConfig().chart_version.removeprefix("v").split(".")
    assert (int(major), int(minor)) == (1, 21)
    # The v1.15.1 of the GPU Operator's install guide, the previous default, is long out of support.
    assert CertManagerConfig().chart_version != "v1.15.1"


def test_existing_cert_manager_namespace_is_no_error(plans):
    """Helm's createNamespace creates the namespace or accepts an existing one (helm pkg/action/install.go:
    `if _, err := i.cfg.KubeClient.Create(resourceList); err != nil && !apierrors.IsAlreadyExists(err)`), where a
    Namespace resource fails with AlreadyExists since pulumi-kubernetes 4.29.0 ("When a resource already exists
    in the cluster, the API server now returns an AlreadyExists error", CHANGELOG, #2926)."""
    for case in ("dev-operator", "prod-operator"):
        plan = plans[case]
        assert plan.get(RELEASE, "cert-manager")["inputs"]["createNamespace"] is True
        assert "cert-manager" not in [r["inputs"]["metadata"]["name"] for r in plan.of_type(NAMESPACE)]


@pytest.mark.parametrize(
    "version, values",
    [
        ("v1.14.5", {"installCRDs": True}),
        ("v1.15.0", {"crds": {"enabled": True}}),
        ("v1.17.2", {"crds": {"enabled": True}}),
    ],
)
def test_cert_manager_crd_value_follows_the_chart_version(version, values):
    assert CertManagerConfig(chart_version=version).crd_values() == values


def test_gpu_operator_release(plans):
    plan = plans["dev-operator"]
    release = plan.get(RELEASE, "amd-gpu-operator")
    inputs = release["inputs"]
    assert {k: inputs[k] for k in ("name", "chart", "version", "namespace", "repositoryOpts")} == {
        "name": "amd-gpu-operator",
        "chart": "gpu-operator-charts",
        "version": "v1.5.1",
        "namespace": "kube-amd-gpu",
        "repositoryOpts": {"repo": "https://rocm.github.io/gpu-operator"},
    }
    assert inputs["values"] == {
        "node-feature-discovery": {"enabled": True, "worker": {"tolerations": list(NFD_WORKER_DEFAULT_TOLERATIONS)}},
        "installdefaultNFDRule": True,
        "kmm": {"enabled": True, "watch": True},
        "remediation": {"enabled": False, "installCRDs": False},
        "crds": {"defaultCR": {"install": False, "upgrade": False}},
    }
    assert (inputs["timeout"], inputs["atomic"], inputs["cleanupOnFail"]) == (900, False, True)
    # Ordering: cert-manager, then the operator, then its DeviceConfig.
    assert plan.get(RELEASE, "cert-manager")["urn"] in release["depends_on"]
    assert release["urn"] in plan.of_type(DEVICE_CONFIG)[0]["depends_on"]


def test_nfd_and_kmm_follow_config():
    """`kmm.watch` follows `kmm.enabled`: AMD's install doc (docs/installation/kubernetes-helm.md L133-136 @ v1.5.1,
    https://instinct.docs.amd.com/projects/gpu-operator/en/latest/installation/kubernetes-helm.html) pairs "Skip
    KMM for alternative driver management: `--set kmm.enabled=false --set kmm.watch=false`" (the chart's
    templates/deployment.yaml passes it as KMM_WATCH_ENABLED, default true). `installdefaultNFDRule` follows NFD:
    templates/gpu-nfd-default-rule.yaml renders a `nfd.k8s-sigs.io/v1alpha1` NodeFeatureRule, whose CRD comes
    with the NFD subchart; without NFD the install fails with "no matches for kind NodeFeatureRule"."""
    plan = synth("dev", {"gpuOperator": {"nodeFeatureDiscovery": False, "kmm": False}})
    values = plan.get(RELEASE, "amd-gpu-operator")["inputs"]["values"]
    assert values["node-feature-discovery"]["enabled"] is False and values["installdefaultNFDRule"] is False
    assert values["kmm"] == {"enabled": False, "watch": False}


def test_existing_kmm_and_nfd_of_the_cluster():
    """The doc's "Use existing KMM installation: `--set kmm.enabled=false --set kmm.watch=true`"."""
    plan = synth(
        "dev",
        {"gpuOperator": {"nodeFeatureDiscovery": False, "installDefaultNfdRule": True, "kmm": False, "kmmWatch": True}},
    )
    values = plan.get(RELEASE, "amd-gpu-operator")["inputs"]["values"]
    assert values["kmm"] == {"enabled": False, "watch": True} and values["installdefaultNFDRule"] is True


def test_remediation_is_off_with_its_argo_crds_unless_enabled():
    """The chart defaults `remediation.enabled: true` (values.yaml L30-32), installing an Argo workflow
    controller, `argo-*` ClusterRoles and a PriorityClass; its Argo CRDs are a separate dependency
    (Chart.yaml @ v1.5.1 `condition: remediation.installCRDs`, default true), and the post-delete hook deletes
    them cluster-wide (templates/post-delete-hook.yaml; ROCm/gpu-operator#324). Both switches off by default."""
    defaults = yaml.safe_load((DATA / "gpu-operator-values.yaml").read_text())["remediation"]
    assert (defaults["enabled"], defaults["installCRDs"]) == (True, True)  # why both must be set
    assert chart_values(GpuOperatorConfig(), [])["remediation"] == {"enabled": False, "installCRDs": False}
    plan = synth("dev", {"gpuOperator": {"remediation": {"enabled": True}}})
    assert plan.get(RELEASE, "amd-gpu-operator")["inputs"]["values"]["remediation"] == {
        "enabled": True,
        "installCRDs": True,
    }


def test_operator_release_is_not_atomic():
    """With `atomic` Helm uninstalls a failed first install (helm pkg/action/install.go failRelease: "Install
    failed and atomic is set, uninstalling release"), which runs the chart's post-delete hook: it deletes the
    NFD, KMM and Argo CRDs cluster-wide (templates/post-delete-hook.yaml L83-133 @ v1.5.1, ROCm/gpu-operator#324)
    and its pre-delete hook every DeviceConfig in the cluster. cert-manager has no such hooks: it stays atomic."""
    plan = synth("dev", {})
    assert plan.get(RELEASE, "amd-gpu-operator")["inputs"]["atomic"] is False
    assert plan.get(RELEASE, "cert-manager")["inputs"]["atomic"] is True


def _leaf_paths(tree: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    return [
        p for k, v in tree.items() for p in (_leaf_paths(v, prefix + (k,)) if isinstance(v, dict) else [prefix + (k,)])
    ]


def test_chart_values_are_keys_of_the_pinned_chart():
    chart_defaults = yaml.safe_load((DATA / "gpu-operator-values.yaml").read_text())
    for path in _leaf_paths(chart_values(KubernetesConfig().gpu_operator, [])):
        node = chart_defaults
        for key in path:
            assert isinstance(node, dict) and key in node, f"{'.'.join(path)} is not a value of the chart"
            node = node[key]
    # The vendored CRD is the one that chart version installs.
    crd = yaml.safe_load((DATA / "deviceconfig-crd.yaml").read_text())
    assert crd["metadata"]["labels"]["helm.sh/chart"] == f"{GPU_OPERATOR_CHART}-{GPU_OPERATOR_CHART_VERSION}"


def test_existing_cert_manager_is_not_installed():
    plan = synth("dev", {"certManager": {"install": False}})
    assert [r["name"] for r in plan.of_type(RELEASE)] == ["amd-gpu-operator"]
    assert [r["inputs"]["metadata"]["name"] for r in plan.of_type(NAMESPACE)] == ["kube-amd-gpu"]
    assert plan.get(RELEASE, "amd-gpu-operator")["depends_on"] == [plan.get(NAMESPACE, "k8s-kube-amd-gpu")["urn"]]


# --- protection, parents, providers, names --------------------------------------------------------------


def test_prod_protects_releases_namespaces_and_the_device_config(plans):
    protected = {(r["type"], r["name"]) for r in k8s_resources(plans["prod-operator"]) if r["protect"]}
    assert protected == {
        (RELEASE, "cert-manager"),
        (RELEASE, "amd-gpu-operator"),
        (NAMESPACE, "k8s-kube-amd-gpu"),
        (DEVICE_CONFIG, "amd-gpu-operator-device-config"),
    }
    assert not any(r["protect"] for r in k8s_resources(plans["dev-operator"]))


def test_renaming_the_device_config_replaces_it_deleting_the_old_one_first():
    """The operator refuses a DeviceConfig selecting nodes another one has: "node %s already assigned to
    DeviceConfig %s, cannot re-assign to %s" (internal/controllers/device_config_reconciler.go L259-271,
    L1629-1640 @ v1.5.1). The provider deletes first only when the name stays the same (pulumi-kubernetes
    provider/pkg/provider/provider.go L1645-1660 @ v4.32.0), so a rename must be an explicit
    deleteBeforeReplace of the same Pulumi resource (its URN does not follow metadata.name)."""
    a, b = synth("dev", {}), synth("dev", _device_config(name="mi300x"))
    [old], [new] = a.of_type(DEVICE_CONFIG), b.of_type(DEVICE_CONFIG)
    assert old["urn"] == new["urn"]
    assert (manifest_of(old)["metadata"]["name"], manifest_of(new)["metadata"]["name"]) == ("gpu-operator", "mi300x")
    assert old["delete_before_replace"] is new["delete_before_replace"] is True


def test_gpu_node_taints_are_tolerated_by_every_gpu_stack_daemon_set(plans, prod_plan):
    """The operator sets no toleration unless the DeviceConfig gives one: `ds.Spec.Template.Spec.Tolerations =
    ...DevicePluginTolerations` else `= nil` (internal/plugin/plugin.go L272-276 @ v1.5.1; same in
    nodelabeller.go L240-243, metricsexporter.go L483-486); users asked for it in ROCm/gpu-operator#25 (device
    plugin, taint `amd.com/gpu=present:NoSchedule`) and #149 (NFD workers). A NoSchedule-tainted node would get
    no device plugin, hence no `amd.com/gpu`. (prod's taint is PreferNoSchedule for driver upgrades' reboots:
    tests/test_k8s_day2_upgrade.py.)"""
    taint = {"key": "amd.com/gpu", "operator": "Equal", "value": "present", "effect": "PreferNoSchedule"}
    # The committed prod stack declares its GPU nodes tainted.
    assert stack_file("prod")[P + "kubernetes"]["gpuNodeTaints"] == [
        {"key": "amd.com/gpu", "value": "present", "effect": "PreferNoSchedule"}
    ]
    plan = prod_plan
    spec = device_config(plan)["spec"]
    for path in (
        ("devicePlugin", "devicePluginTolerations"),
        ("devicePlugin", "nodeLabellerTolerations"),
        ("metricsExporter", "tolerations"),
        ("driver", "tolerations"),
        ("testRunner", "tolerations"),
    ):
        assert spec[path[0]][path[1]] == [taint], path
    validate_object(device_config(plan), CRDS)  # the CRD has each of these fields (strict)
    nfd = plan.get(RELEASE, "amd-gpu-operator")["inputs"]["values"]["node-feature-discovery"]
    # Helm replaces lists ("Scalar values and arrays are replaced, maps are merged", helm pkg/chartutil
    # coalesce.go): the chart's own NFD worker tolerations (values.yaml L10-17) are kept, ours appended.
    chart_nfd = yaml.safe_load((DATA / "gpu-operator-values.yaml").read_text())["node-feature-discovery"]
    assert nfd["worker"]["tolerations"] == [*chart_nfd["worker"]["tolerations"], taint]
    # Without taints nothing changes: the chart defaults and no DeviceConfig tolerations.
    spec = device_config(plans["prod-operator"])["spec"]
    assert "devicePluginTolerations" not in spec["devicePlugin"] and "tolerations" not in spec["driver"]


def test_standalone_device_plugin_and_labeller_tolerate_the_gpu_node_taints():
    """Upstream's DaemonSets tolerate only CriticalAddonsOnly (k8s-ds-amdgpu-dp.yaml L19-21,
    k8s-ds-amdgpu-labeller.yaml L51-53): kept, the GPU node taints appended."""
    plan = synth(
        "dev",
        {
            "mode": "device-plugin",
            "gpuNodeTaints": [
                {"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"key": "gpu", "effect": "NoExecute"},
            ],
        },
    )
    daemon_sets = [manifest_of(r) for r in plan.of_type(DAEMON_SET)]
    assert len(daemon_sets) == 2
    for daemon_set in daemon_sets:
        assert daemon_set["spec"]["template"]["spec"]["tolerations"] == [
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            {"key": "amd.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
            {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},
        ]


def test_children_are_parented_and_use_the_stack_provider(plans):
    for case in ("dev-operator", "dev-device-plugin"):
        plan = plans[case]
        [provider] = plan.of_type(PROVIDER)
        components = {r["urn"] for r in plan.resources if r["type"].startswith("rocm-stack:k8s:")}
        assert provider["parent"] in components
        for resource in plan.kubernetes_objects() + plan.of_type(RELEASE):
            assert resource["parent"] in components, resource["name"]
            assert resource["provider"] == provider["urn"], resource["name"]


def test_provider_from_config(plans):
    assert plans["dev-operator"].of_type(PROVIDER)[0]["inputs"].get("context") is None
    plan = synth("dev", {"provider": {"kubeconfig": "~/.kube/gpu-lab", "context": "lab"}})
    # enableConfigMapMutable: ConfigMaps update in place (tests/test_k8s_day2_upgrade.py).
    assert plan.of_type(PROVIDER)[0]["inputs"] == {
        "kubeconfig": "~/.kube/gpu-lab",
        "context": "lab",
        "enableConfigMapMutable": "true",
    }


def test_extra_namespaces_are_owned_and_names_do_not_depend_on_order():
    a = synth("prod", {"provider": PROD_PROVIDER, "namespaces": ["ml-train", "ml-serve"]})
    b = synth("prod", {"provider": PROD_PROVIDER, "namespaces": ["ml-serve", "ml-train"]})
    names = {(r["name"], r["inputs"]["metadata"]["name"], r["protect"]) for r in a.of_type(NAMESPACE)}
    assert {("k8s-ml-train", "ml-train", True), ("k8s-ml-serve", "ml-serve", True)} <= names
    assert sorted(r["urn"] for r in k8s_resources(a)) == sorted(r["urn"] for r in k8s_resources(b))


def test_built_in_namespaces_are_deployed_into_but_never_owned():
    """Creating (and in prod protecting) kube-system would fail on an existing cluster, and a delete of the
    stack would take the cluster's own namespace with it."""
    plan = synth(
        "prod",
        {
            "provider": PROD_PROVIDER,
            "certManager": {"namespace": "kube-system"},
            "gpuOperator": {"namespace": "default"},
        },
    )
    assert [r["inputs"]["metadata"]["name"] for r in plan.of_type(NAMESPACE)] == []
    assert plan.get(RELEASE, "cert-manager")["inputs"]["namespace"] == "kube-system"
    assert plan.get(RELEASE, "amd-gpu-operator")["inputs"]["namespace"] == "default"
    assert manifest_of(plan.of_type(DEVICE_CONFIG)[0])["metadata"]["namespace"] == "default"


def test_no_kubernetes_section_declares_no_kubernetes_layer():
    assert k8s_resources(synth("dev", None)) == []


# --- safe driver upgrades -------------------------------------------------------------------------------


def test_prod_upgrades_one_node_at_a_time_with_drain(plans):
    policy = device_config(plans["prod-operator"])["spec"]["driver"]["upgradePolicy"]
    assert policy["enable"] is True and policy["rebootRequired"] is True
    assert (policy["maxParallelUpgrades"], policy["maxUnavailableNodes"]) == (1, 1)
    assert policy["nodeDrainPolicy"] == {
        "force": False,
        "timeoutSeconds": 300,
        "gracePeriodSeconds": -1,
        "ignoreDaemonSets": True,
    }


def test_dev_upgrades_faster(plans):
    policy = device_config(plans["dev-operator"])["spec"]["driver"]["upgradePolicy"]
    assert (policy["maxParallelUpgrades"], policy["maxUnavailableNodes"]) == (0, "100%")
    assert policy["rebootRequired"] is False and policy["nodeDrainPolicy"]["force"] is True


def test_an_explicit_policy_replaces_the_dev_preset():
    plan = synth("dev", _managed_driver(upgradePolicy={"maxParallelUpgrades": 2}))
    policy = device_config(plan)["spec"]["driver"]["upgradePolicy"]
    assert (policy["maxParallelUpgrades"], policy["maxUnavailableNodes"], policy["rebootRequired"]) == (2, 1, True)


def test_chart_default_device_config_is_off_and_images_are_pinned(plans):
    spec = device_config(plans["prod-operator"])["spec"]
    images = [
        spec["devicePlugin"]["devicePluginImage"],
        spec["devicePlugin"]["nodeLabellerImage"],
        spec["metricsExporter"]["image"],
        spec["testRunner"]["image"],
        spec["commonConfig"]["utilsContainer"]["image"],
    ]
    assert all(":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest") for image in images)


def test_operand_images_follow_the_operator_release():
    """The chart's DeviceConfig defaults are `latest` (values.yaml L118 utils, L165 exporter, L226 test runner).
    Pinned to the operator's line: test runner v1.5.1 ("If unspecified, the default image is
    `docker.io/rocm/test-runner:v1.5.1`", docs/autoremediation/auto-remediation.md L254 @ v1.5.1), utils
    v1.5.1 (Makefile @ v1.5.1 builds amd-gpu-operator-utils with the operator's PROJECT_VERSION), exporter of
    the v1.5 line (the Docker hosts' one, so one set of alert rules fits both)."""
    chart = yaml.safe_load((DATA / "gpu-operator-values.yaml").read_text())["deviceConfig"]["spec"]
    assert chart["commonConfig"]["utilsContainer"]["image"].endswith(":latest")
    line = GPU_OPERATOR_CHART_VERSION.rsplit(".", 1)[0]  # v1.5
    spec = device_config_spec(DeviceConfigSettings(), "prod")
    assert spec["testRunner"]["image"] == f"docker.io/rocm/test-runner:{GPU_OPERATOR_CHART_VERSION}"
    assert spec["commonConfig"]["utilsContainer"]["image"].endswith(
        f"amd-gpu-operator-utils:{GPU_OPERATOR_CHART_VERSION}"
    )
    assert spec["metricsExporter"]["image"].rsplit(":", 1)[1].startswith(f"{line}.")


# --- standalone device plugin ---------------------------------------------------------------------------


def _reference_objects() -> list[dict[str, Any]]:
    docs = [
        d
        for f in ("k8s-ds-amdgpu-dp.yaml", "k8s-ds-amdgpu-labeller.yaml")
        for d in yaml.safe_load_all((DATA / f).read_text())
        if d
    ]
    for doc in docs:
        if doc["kind"] == "ClusterRoleBinding":
            del doc["metadata"]["namespace"]  # cluster-scoped: upstream's namespace is ignored by the API
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if container.get("resources") == {}:
                del container["resources"]
    return docs


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def test_device_plugin_follows_the_reference_manifests(plans):
    declared = {_key(m): m for m in map(manifest_of, plans["dev-device-plugin"].kubernetes_objects())}
    reference = {_key(d): d for d in _reference_objects()}
    assert set(declared) == set(reference)
    pinned = {
        "amdgpu-dp-cntr": "docker.io/rocm/k8s-device-plugin:1.31.0.9",
        "amdgpu-lr-cntr": "docker.io/rocm/k8s-device-plugin:labeller-1.31.0.9",
    }
    for key, expected in reference.items():
        for container in expected.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            container["image"] = pinned[container["name"]]  # upstream: untagged / labeller-latest
        assert declared[key] == expected, key


def test_device_plugin_in_an_owned_namespace():
    plan = synth(
        "prod",
        {
            "mode": "device-plugin",
            "provider": PROD_PROVIDER,
            "devicePlugin": {
                "namespace": "amd-gpu",
                "nodeSelector": {"amd.com/gpu": "true"},
                "nodeLabeller": {"labels": ["vram"]},
            },
        },
    )
    [namespace] = plan.of_type(NAMESPACE)
    assert namespace["inputs"]["metadata"]["name"] == "amd-gpu" and namespace["protect"]
    objects = {_key(m): m for m in map(manifest_of, plan.kubernetes_objects())}
    plugin = objects["DaemonSet", "amdgpu-device-plugin-daemonset"]
    labeller = objects["DaemonSet", "amdgpu-labeller-daemonset"]
    assert plugin["metadata"]["namespace"] == labeller["metadata"]["namespace"] == "amd-gpu"
    assert plugin["spec"]["template"]["spec"]["nodeSelector"] == {"amd.com/gpu": "true"}
    assert labeller["spec"]["template"]["spec"]["containers"][0]["args"] == ["-vram"]
    assert objects["ClusterRoleBinding", "labeller"]["subjects"][0]["namespace"] == "amd-gpu"
    assert not plan.of_type(RELEASE) and not plan.of_type(DEVICE_CONFIG)


def test_device_plugin_without_labeller_has_no_rbac():
    plan = synth("dev", {"mode": "device-plugin", "devicePlugin": {"nodeLabeller": {"enable": False}}})
    assert [_key(manifest_of(r)) for r in plan.kubernetes_objects()] == [
        ("DaemonSet", "amdgpu-device-plugin-daemonset")
    ]


# --- the layer other components build on ----------------------------------------------------------------


class _Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args):
        return {}


@pytest.mark.parametrize("mode", ["operator", "device-plugin"])
def test_build_kubernetes_returns_what_workloads_need(mode):
    settings.ROOT.set(None)
    pulumi.runtime.set_mocks(_Mocks(), project="rocm-stack", stack="dev", preview=False)
    layer = build_kubernetes(KubernetesConfig(mode=mode, namespaces=["ml"]), "dev")
    assert layer.gpu_resource_name == "amd.com/gpu"
    assert layer.provider is layer.cluster.provider
    if mode == "operator":
        assert set(layer.namespaces) == {"kube-amd-gpu", "ml"}
        assert layer.gpu_ready == [layer.gpu_operator.device_config]
    else:
        assert set(layer.namespaces) == {"ml"}
        assert layer.gpu_ready == [layer.device_plugin] and layer.gpu_operator is None


# --- synth output files ---------------------------------------------------------------------------------


def test_synth_writes_manifests_and_helm_releases(plans, tmp_path):
    write(plans["prod-operator"], tmp_path)
    manifests = {p.name for p in (tmp_path / "manifests").iterdir()}
    assert {"DeviceConfig_kube-amd-gpu_gpu-operator.yaml", "Namespace_kube-amd-gpu.yaml"} <= manifests
    validate_object(
        yaml.safe_load((tmp_path / "manifests" / "DeviceConfig_kube-amd-gpu_gpu-operator.yaml").read_text()), CRDS
    )
    release = yaml.safe_load((tmp_path / "helm" / "amd-gpu-operator.yaml").read_text())
    assert (release["chart"], release["repo"], release["version"], release["namespace"]) == (
        "gpu-operator-charts",
        "https://rocm.github.io/gpu-operator",
        "v1.5.1",
        "kube-amd-gpu",
    )
    assert release["values"]["crds"]["defaultCR"]["install"] is False
    assert yaml.safe_load((tmp_path / "helm" / "cert-manager.yaml").read_text())["values"] == {
        "crds": {"enabled": True}
    }


# --- config errors name their key ----------------------------------------------------------------------


def _device_config(**fields: Any) -> dict[str, Any]:
    return {"gpuOperator": {"deviceConfig": fields}}


def _upgrade_policy(**fields: Any) -> dict[str, Any]:
    return _device_config(driver={"upgradePolicy": fields})


def _managed_driver(**fields: Any) -> dict[str, Any]:
    """The operator installs the out-of-tree driver (what prod's upgrade rules are about)."""
    return _device_config(driver={"enable": True, "blacklist": True, "version": "30.20.1", **fields})


K = "kubernetes.gpuOperator.deviceConfig"
# (stack, kubernetes section, key path that must be named, a fragment of the explanation)
BAD_CONFIGS = {
    "unknown mode": ("dev", {"mode": "daemonset"}, "kubernetes.mode", "'operator' or 'device-plugin'"),
    "negative drain timeout": (
        "dev",
        _upgrade_policy(nodeDrainPolicy={"timeoutSeconds": -1}),
        f"{K}.driver.upgradePolicy.nodeDrainPolicy.timeoutSeconds",
        "must be at least 0",
    ),
    "negative pod deletion timeout": (
        "dev",
        _upgrade_policy(podDeletionPolicy={"timeoutSeconds": -30}),
        f"{K}.driver.upgradePolicy.podDeletionPolicy.timeoutSeconds",
        "must be at least 0",
    ),
    "maxUnavailableNodes 0 with upgrades on": (
        "dev",
        _upgrade_policy(maxUnavailableNodes=0),
        f"{K}.driver.upgradePolicy.maxUnavailableNodes",
        "at least one node",
    ),
    "maxUnavailableNodes 0% with upgrades on": (
        "prod",
        {"provider": PROD_PROVIDER, **_upgrade_policy(maxUnavailableNodes="0%")},
        f"{K}.driver.upgradePolicy.maxUnavailableNodes",
        "at least one node",
    ),
    "maxUnavailableNodes over 100%": (
        "dev",
        _upgrade_policy(maxUnavailableNodes="150%"),
        f"{K}.driver.upgradePolicy.maxUnavailableNodes",
        "percentage",
    ),
    "missing context in prod": ("prod", {}, "kubernetes.provider.context", "name its kubeconfig context"),
    "unbounded parallel upgrades in prod": (
        "prod",
        {"provider": PROD_PROVIDER, **_upgrade_policy(maxParallelUpgrades=0)},
        f"{K}.driver.upgradePolicy.maxParallelUpgrades",
        "one node at a time",
    ),
    "forced drain in prod": (
        "prod",
        {"provider": PROD_PROVIDER, **_managed_driver(upgradePolicy={"nodeDrainPolicy": {"force": True}})},
        f"{K}.driver.upgradePolicy.nodeDrainPolicy.force",
        "must be false in prod",
    ),
    "managed driver without upgrade policy in prod": (
        "prod",
        {"provider": PROD_PROVIDER, **_managed_driver(upgradePolicy={"enable": False})},
        f"{K}.driver.upgradePolicy.enable",
        "must be true in prod",
    ),
    "misspelled deviceConfig key": ("dev", _device_config(metricExporter={}), f"{K}.metricExporter", "unknown key"),
    "out-of-tree driver without blacklist": (
        "dev",
        _device_config(driver={"enable": True}),
        f"{K}.driver.blacklist",
        "must be true",
    ),
    "blacklist with the inbox driver": (
        "dev",
        _device_config(driver={"blacklist": True}),
        f"{K}.driver.blacklist",
        "must be false",
    ),
    "blacklist without node labeller": (
        "dev",
        _device_config(driver={"enable": True, "blacklist": True}, devicePlugin={"nodeLabeller": False}),
        f"{K}.devicePlugin.nodeLabeller",
        "node labeller writes the blacklist",
    ),
    "unversioned driver in prod": (
        "prod",
        {"provider": PROD_PROVIDER, **_device_config(driver={"enable": True, "blacklist": True})},
        f"{K}.driver.version",
        "pin the out-of-tree driver version",
    ),
    "tagged driver image": (
        "dev",
        _device_config(driver={"image": "registry.example.com/amd/amdgpu:30.20.1"}),
        f"{K}.driver.image",
        "without tag or digest",
    ),
    "driver image the CRD refuses": (
        "dev",
        _device_config(driver={"image": "Registry.example.com/amd"}),
        f"{K}.driver.image",
        "without tag or digest",
    ),
    "nodePort with ClusterIP": (
        "dev",
        _device_config(metricsExporter={"nodePort": 32500}),
        f"{K}.metricsExporter.nodePort",
        "serviceType NodePort",
    ),
    "nodePort out of range": (
        "dev",
        _device_config(metricsExporter={"serviceType": "NodePort", "nodePort": 8080}),
        f"{K}.metricsExporter.nodePort",
        "must be at least 30000 (got 8080)",
    ),
    "unknown service type": (
        "dev",
        _device_config(metricsExporter={"serviceType": "LoadBalancer"}),
        f"{K}.metricsExporter.serviceType",
        "'ClusterIP' or 'NodePort'",
    ),
    "bad scrape interval": (
        "dev",
        _device_config(metricsExporter={"serviceMonitor": {"interval": "30 seconds"}}),
        f"{K}.metricsExporter.serviceMonitor.interval",
        "expected a number and one unit (ms, s, m or h)",
    ),
    "latest image in prod": (
        "prod",
        {"provider": PROD_PROVIDER, **_device_config(devicePlugin={"image": "rocm/k8s-device-plugin:latest"})},
        f"{K}.devicePlugin.image",
        "not pinned",
    ),
    "untagged device plugin image in prod": (
        "prod",
        {"mode": "device-plugin", "provider": PROD_PROVIDER, "devicePlugin": {"image": "rocm/k8s-device-plugin"}},
        "kubernetes.devicePlugin.image",
        "not pinned",
    ),
    "unknown node label": (
        "dev",
        {"mode": "device-plugin", "devicePlugin": {"nodeLabeller": {"labels": ["ram"]}}},
        "kubernetes.devicePlugin.nodeLabeller.labels[0]",
        "'vram'",
    ),
    "kube-system as owned namespace": (
        "dev",
        {"namespaces": ["kube-system"]},
        "kubernetes.namespaces[0]",
        "created by Kubernetes itself",
    ),
    "duplicate namespace": ("dev", {"namespaces": ["ml", "ml"]}, "kubernetes.namespaces[1]", "listed twice"),
    "taint key with a space": (
        "dev",
        {"gpuNodeTaints": [{"key": "amd gpu", "effect": "NoSchedule"}]},
        "kubernetes.gpuNodeTaints[0].key",
        "'amd gpu' is no Kubernetes label key: it has the name 'amd gpu'",
    ),
    "taint without effect": (
        "dev",
        {"gpuNodeTaints": [{"key": "amd.com/gpu"}]},
        "kubernetes.gpuNodeTaints[0].effect",
        "is required",
    ),
    "bad namespace name": (
        "dev",
        {"gpuOperator": {"namespace": "Kube_AMD"}},
        "kubernetes.gpuOperator.namespace",
        "expected lowercase letters, digits and '-', at most 63 characters",
    ),
    "unpinned chart version": (
        "dev",
        {"certManager": {"chartVersion": "latest"}},
        "kubernetes.certManager.chartVersion",
        "chart version 'latest' is a range or not a version; pin an exact version (e.g. 1.5.1) (rule pinned-charts)",
    ),
    "chart version without the chart's `v`": (
        "dev",
        {"certManager": {"chartVersion": "1.21.1"}},
        "kubernetes.certManager.chartVersion",
        "expected a chart version such as v1.5.1, as its chart repository spells it (got '1.21.1')",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_kubernetes_config_is_refused_naming_the_key(case):
    stack, kubernetes, path, explanation = BAD_CONFIGS[case]
    lines = refusal(stack, kubernetes).splitlines()
    assert any(line.strip().startswith(f"{P}{path}: ") and explanation in line for line in lines), lines


def test_monitoring_needs_the_operators_exporter():
    """Monitoring would otherwise enable the DeviceConfig's ServiceMonitor of a disabled exporter."""
    config = stack_file("dev")
    for workload_key in ("training", "inference", "gpuFleet"):
        config.pop(P + workload_key, None)
    config[P + "kubernetes"] = _device_config(metricsExporter={"enable": False})
    message = refused(lambda: synthesize("dev", config))
    assert f"{P}{K}.metricsExporter.enable: must be true while rocm-stack:monitoring is enabled" in message
    # Without monitoring the exporter may be off.
    spec = device_config(synth("dev", _device_config(metricsExporter={"enable": False})))["spec"]
    assert spec["metricsExporter"]["enable"] is False
    assert spec["metricsExporter"]["prometheus"]["serviceMonitor"]["enable"] is False


def test_zero_unavailable_nodes_is_fine_with_upgrades_off():
    plan = synth("dev", _managed_driver(upgradePolicy={"enable": False, "maxUnavailableNodes": 0}))
    assert device_config(plan)["spec"]["driver"]["upgradePolicy"]["enable"] is False


def test_latest_images_are_allowed_in_dev():
    plan = synth("dev", _device_config(devicePlugin={"image": "rocm/k8s-device-plugin:latest"}))
    assert device_config(plan)["spec"]["devicePlugin"]["devicePluginImage"] == "rocm/k8s-device-plugin:latest"
