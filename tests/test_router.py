"""The vLLM production-stack router in front of an inference workload (components/workloads/router.py).

Upstream facts are read from the production-stack source at the pinned tag (vllm-stack-0.1.12, which `make upstream`
fetches: tests/upstream_go.py; those tests skip without it): the router's own argument parser
parses the flags the stack passes, the Role's verbs are the API calls of its discovery code, the cited lines say what
the module docstring says. The plan side: every object validates (kubernetes-validate, strict), the discovery
selector and port are the replicas', the Service, NetworkPolicies, the proxy and the policy pack's token rule. Day 2
through the change-impact preview: adding the router to a running workload, an image bump, turning it off (the key
rotation: tests/test_day2_vllm_proxy.py).
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from components.workloads import proxy, router
from schema.workloads import ROUTER_IMAGE
from tools.impact import ImpactReport, predict
from tools.impact_rules import Action
from tools.synth import Plan, manifest_of, synthesize
from tools.synth_diff import SynthPlan
from conftest import committed_plan, refusal, stack_file
from k8s_validation import stack_crds, validate_all
from upstream_go import show

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "policy"))
import rules  # noqa: E402

TAG = "vllm-stack-0.1.12"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
SERVICE_MONITOR = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"
SERVING_POLICY = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
P = "rocm-stack:"


@cache
def upstream(path: str) -> str:
    """A file of production-stack's router at the pinned tag; the test skips where it is not fetched."""
    return show("vllm-project/production-stack", TAG, f"src/vllm_router/{path}")


def lines(path: str, first: int, last: int) -> str:
    return "\n".join(upstream(path).splitlines()[first - 1 : last])


@pytest.fixture(scope="module")
def prod() -> Plan:
    return committed_plan("prod")


def prod_with(**router_keys: Any) -> dict[str, Any]:
    """The committed prod config with llama's `router` set to these keys (None: no router)."""
    config = stack_file("prod")
    k8s = config[P + "inference"][0]["kubernetes"]
    if router_keys.get("off"):
        del k8s["router"]
    else:
        k8s["router"] = {**k8s["router"], **router_keys}
    return config


def inputs(plan: Plan, type_: str, name: str) -> dict[str, Any]:
    [found] = [r for r in plan.of_type(type_) if r["name"] == name]
    return found["inputs"]


def router_container(plan: Plan) -> dict[str, Any]:
    [container] = [
        c
        for c in inputs(plan, DEPLOYMENT, "llama-router")["spec"]["template"]["spec"]["containers"]
        if c["name"] == "router"
    ]
    return container


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# --- upstream: the router's own parser, discovery and routing, at the pinned tag ----------------------------------


def upstream_parser() -> argparse.ArgumentParser:
    """parse_args()'s add_argument calls of parsers/parser.py, evaluated into a real ArgumentParser (their arguments
    are literals and the names str/int/float); the import-time extras (semantic cache) are left out."""
    tree = ast.parse(upstream("parsers/parser.py"))
    [parse_args] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_args"]
    parser = argparse.ArgumentParser(exit_on_error=False)
    names = {"str": str, "int": int, "float": float, "__version__": "?"}
    for call in ast.walk(parse_args):
        if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "add_argument":
            if any(k.arg == "action" and getattr(k.value, "value", None) == "version" for k in call.keywords):
                continue
            args = [ast.literal_eval(a) for a in call.args]
            kwargs = {
                k.arg: names[k.value.id] if isinstance(k.value, ast.Name) else ast.literal_eval(k.value)
                for k in call.keywords
            }
            parser.add_argument(*args, **kwargs)
    return parser


def test_the_routers_own_parser_takes_the_flags_the_stack_passes(prod):
    """Every flag and value the Deployment passes parses with the router's argument definitions (an unknown flag or
    a value outside `choices`, e.g. a routing logic, fails), and validate_args' conditions hold: k8s discovery has a
    port, session routing a session key (parser.py validate_args)."""
    args = router_container(prod)["args"]
    parsed = upstream_parser().parse_args(args)
    assert parsed.service_discovery == "k8s" and parsed.k8s_service_discovery_type == "pod-ip"
    assert parsed.routing_logic == "session" and parsed.session_key == "x-session-id"
    assert parsed.k8s_port == 8080 and parsed.port == router.ROUTER_PORT
    assert parsed.k8s_watcher_timeout_seconds == router.WATCH_TIMEOUT_SECONDS
    assert 'if args.routing_logic == "session" and args.session_key is None:' in upstream("parsers/parser.py")
    for logic in ("prefixaware", "roundrobin"):
        other = router_container(synthesize("prod", prod_with(routingLogic=logic)))["args"]
        assert upstream_parser().parse_args(other).routing_logic == logic
        assert "--session-key" not in other
    with pytest.raises(argparse.ArgumentError):
        upstream_parser().parse_args([*args, "--routing-logic", "nearest"])


def test_the_roles_verbs_are_the_api_calls_of_its_discovery():
    """K8sPodIPServiceDiscovery's calls on the CoreV1Api: the watch stream lists (list + watch), read_namespaced_pod
    gets, and patch_namespaced_pod runs only in add/remove_sleep_label, which only route_sleep_wakeup_request calls
    after vLLM answered /sleep or /wake_up (vLLM serves those in its development mode only): get, list, watch."""
    source = upstream("service_discovery.py")
    pod_ip = source[
        source.index("class K8sPodIPServiceDiscovery") : source.index("class K8sServiceNameServiceDiscovery")
    ]
    calls = set(re.findall(r"self\.k8s_api\.(\w+)", pod_ip))
    assert calls == {"list_namespaced_pod", "read_namespaced_pod", "patch_namespaced_pod"}
    assert "self.k8s_watcher.stream(\n                    self.k8s_api.list_namespaced_pod" in pod_ip
    verbs = {"list_namespaced_pod": {"list", "watch"}, "read_namespaced_pod": {"get"}}
    assert set(router.DISCOVERY_VERBS) == set().union(*verbs.values())
    for method in ("add_sleep_label", "remove_sleep_label"):
        body = pod_ip[pod_ip.index(f"def {method}") :]
        assert "patch_namespaced_pod" in body[: body.index("\n    def ", 1)]
    callers = upstream("services/request_service/request.py")
    assert re.findall(r"\w+_sleep_label\(", callers) == ["add_sleep_label(", "remove_sleep_label("]
    assert 'if endpoint == "/sleep":' in lines("services/request_service/request.py", 1104, 1108)


@pytest.mark.parametrize(
    ("path", "first", "last", "text"),
    [
        ("service_discovery.py", 674, 678, "self.k8s_api.list_namespaced_pod"),
        ("service_discovery.py", 536, 536, "read_namespaced_pod"),
        ("service_discovery.py", 692, 697, "is_pod_ready = is_container_ready and not is_pod_terminating"),
        ("service_discovery.py", 601, 606, 'headers = {"Authorization": f"Bearer {VLLM_API_KEY}"}'),
        ("stats/engine_stats.py", 127, 127, 'requests.get(url + "/metrics"'),
        ("services/request_service/request.py", 205, 221, "if lowered_key in _HOP_BY_HOP_HEADERS:"),
        (
            "routers/main_router.py",
            212,
            247,
            'content={"status": "Service discovery module is down."}, status_code=503',
        ),
        ("routers/metrics_router.py", 81, 81, '@metrics_router.get("/metrics")'),
        ("routers/routing_logic.py", 107, 115, "val = request.headers.get(session_key)"),
        ("routers/routing_logic.py", 198, 249, "url = self.hash_ring.get_node(session_id)"),
        ("services/metrics_service/__init__.py", 5, 9, '"vllm:num_requests_waiting"'),
        ("app.py", 138, 138, "service_discovery.close()"),
        ("service_discovery.py", 841, 847, "self.watcher_thread.join()"),
    ],
)
def test_the_cited_lines_say_what_the_stack_relies_on(path, first, last, text):
    assert text in lines(path, first, last)


def test_the_client_key_passes_the_router_unchanged():
    """The router drops only hop-by-hop headers and X-Request-Id (request.py L82-92, L205-221): `Authorization`
    reaches the replica's proxy, which checks the same key (the replicas keep theirs: router.py docstring)."""
    hop_by_hop = ast.literal_eval(
        re.search(r"_HOP_BY_HOP_HEADERS = (\{.*?\})", upstream("services/request_service/request.py"), re.S)[1]
    )
    assert "authorization" not in hop_by_hop


# --- the plan ---------------------------------------------------------------------------------------------------


def test_every_router_object_validates(prod):
    """kubernetes-validate strict for the built-in kinds, the ServiceMonitor subset for the router's monitor."""
    objects = [
        manifest_of(r)
        for r in prod.kubernetes_objects()
        if r["name"].startswith("llama-router") or r["name"] == "monitoring-rocm-vllm-router"
    ]
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ]
    assert validate_all(objects, stack_crds()) == len(objects)


def test_the_router_discovers_exactly_the_replicas_pods(prod):
    """Discovery by the Deployment's selector (never a list of backends: an autoscaler's replicas are found), in
    its namespace, on the pods' API port (the proxy's), which the replicas' NetworkPolicy opens to the router."""
    args = router_container(prod)["args"]
    vllm = inputs(prod, DEPLOYMENT, "llama")["spec"]
    labels = vllm["selector"]["matchLabels"]
    assert flag(args, "--k8s-label-selector") == ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    assert flag(args, "--k8s-namespace") == inputs(prod, DEPLOYMENT, "llama-router")["metadata"]["namespace"] == "ml"
    [http] = [p for c in vllm["template"]["spec"]["containers"] for p in c.get("ports", []) if p["name"] == "http"]
    assert flag(args, "--k8s-port") == str(http["containerPort"])
    router_labels = inputs(prod, DEPLOYMENT, "llama-router")["spec"]["template"]["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in router_labels.items())  # the router is no backend of itself
    [rule] = inputs(prod, NETWORK_POLICY, "llama-ingress")["spec"]["ingress"]
    assert rule["from"][0] == {"podSelector": {"matchLabels": router_labels}}


def test_the_router_may_only_read_pods(prod):
    role = inputs(prod, ROLE, "llama-router-role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    binding = inputs(prod, ROLE_BINDING, "llama-router-binding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "llama-router"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llama-router", "namespace": "ml"}]
    pod = inputs(prod, DEPLOYMENT, "llama-router")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "llama-router" and pod["automountServiceAccountToken"] is True


def test_the_pack_refuses_a_token_that_can_do_more_than_read(prod):
    """prod-service-account-tokens-read-only: the committed plan passes; a Role that may patch, a ClusterRoleBinding,
    or an account the stack does not declare is refused for the router's pods."""
    declared = [rules.Declared(r["type"], r["name"], r["inputs"], False, r["urn"]) for r in prod.resources]
    assert rules.token_holder_problems(declared) == []

    def tampered(change: Any) -> list[str]:
        resources = copy.deepcopy(declared)
        change(resources)
        return [message for message, _ in rules.token_holder_problems(resources)]

    def patch(resources: list[rules.Declared]) -> None:
        [role] = [r for r in resources if r.type == ROLE and r.name == "llama-router-role"]
        role.props["rules"][0]["verbs"].append("patch")

    def cluster_binding(resources: list[rules.Declared]) -> None:
        [binding] = [r for r in resources if r.type == ROLE_BINDING]
        resources.append(
            rules.Declared(
                rules.CLUSTER_ROLE_BINDING, "admin", {**binding.props, "roleRef": {"kind": "ClusterRole"}}, False
            )
        )

    def undeclared(resources: list[rules.Declared]) -> None:
        resources[:] = [r for r in resources if r.type != SERVICE_ACCOUNT]

    assert tampered(patch) == [
        "the pods of Deployment 'llama-router' mount a service-account token: RoleBinding 'llama-router-binding' "
        "grants more than reading (or set automountServiceAccountToken: false)"
    ]
    assert "ClusterRoleBinding 'admin' grants more than reading" in tampered(cluster_binding)[0]
    assert "its ServiceAccount 'llama-router' is not one the stack declares" in tampered(undeclared)[0]


def test_the_router_is_the_entry_point_behind_the_same_key(prod):
    """The router's pod listens through the same nginx configuration as the replicas' (proxy.py, /health and
    /metrics open), with the key map of the same Secret, which also gives the router VLLM_API_KEY for discovery."""
    pod = inputs(prod, DEPLOYMENT, "llama-router")["spec"]["template"]["spec"]
    names = [c["name"] for c in pod["containers"]]
    assert names == ["router", "proxy"]
    args = router_container(prod)["args"]
    assert flag(args, "--host") == "127.0.0.1"
    [config] = [r for r in prod.of_type(CONFIG_MAP) if r["name"] == "llama-router-proxy"]
    expected = proxy.nginx_config(proxy.POD_PORT, f"127.0.0.1:{router.ROUTER_PORT}", proxy.POD_OPEN_PATHS)
    assert config["inputs"]["data"] == {proxy.CONFIG_FILE: expected}
    vllm_pod = inputs(prod, DEPLOYMENT, "llama")["spec"]["template"]["spec"]
    [key_volume] = [v for v in vllm_pod["volumes"] if v["name"] == "proxy-config"]
    [router_key_volume] = [v for v in pod["volumes"] if v["name"] == "proxy-config"]
    secret = key_volume["projected"]["sources"][1]["secret"]["name"]
    assert router_key_volume["projected"]["sources"][1]["secret"]["name"] == secret
    [env] = router_container(prod)["env"]
    assert env == {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": secret, "key": "api-key"}}}
    for probe in ("readinessProbe", "livenessProbe"):
        assert router_container(prod)[probe]["httpGet"] == {"path": "/health", "port": proxy.POD_PORT}
    assert proxy.HEALTH_PATH in proxy.POD_OPEN_PATHS and proxy.METRICS_PATH in proxy.POD_OPEN_PATHS
    service = inputs(prod, SERVICE, "llama-router-service")
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http"}]
    assert prod.outputs["workloads"]["inference"]["llama"]["kubernetes"] == "llama-router"


def test_the_service_type_moves_to_the_router():
    """A LoadBalancer (with prod's opt-in) publishes the router; the replicas' Service stays in the cluster."""
    config = prod_with()
    config[P + "inference"][0]["kubernetes"] |= {"serviceType": "LoadBalancer", "allowLoadBalancer": True}
    plan = synthesize("prod", config)
    routed = inputs(plan, SERVICE, "llama-router-service")
    assert routed["spec"]["type"] == "LoadBalancer"
    assert routed["metadata"]["annotations"] == {rules.LOAD_BALANCER_OPT_IN: "true"}
    replicas = inputs(plan, SERVICE, "llama-service")
    assert replicas["spec"]["type"] == "ClusterIP" and "annotations" not in replicas["metadata"]
    [rule] = inputs(plan, NETWORK_POLICY, "llama-router-ingress")["spec"]["ingress"]
    assert "from" not in rule  # published beyond the cluster: from anywhere, as the replicas' was


def test_without_a_key_the_router_listens_itself():
    """dev without vllmApiKey: no proxy, the router holds the pod's `http` port and probes go to it."""
    config = stack_file("dev")
    config[P + "inference"][0]["kubernetes"]["router"] = {}
    plan = synthesize("dev", config)
    pod = inputs(plan, DEPLOYMENT, "qwen-small-router")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert flag(container["args"], "--host") == "0.0.0.0"
    assert container["ports"] == [{"name": "http", "containerPort": router.ROUTER_PORT}]
    assert container["readinessProbe"]["httpGet"]["port"] == router.ROUTER_PORT
    assert "env" not in container and inputs(plan, DEPLOYMENT, "qwen-small-router")["spec"]["replicas"] == 1
    assert not [r for r in plan.of_type(PDB) if r["name"].startswith("qwen-small-router")]


def test_the_routers_metrics_are_a_job_of_their_own(prod):
    """The router exports vllm:num_requests_waiting per backend under vLLM's own name (metrics_service/__init__.py
    L5-9): its ServiceMonitor sets job vllm-router, and every vLLM alert on that metric selects job="vllm"."""
    monitor = inputs(prod, SERVICE_MONITOR, "monitoring-rocm-vllm-router")["spec"]
    service = inputs(prod, SERVICE, "llama-router-service")
    assert all(service["metadata"]["labels"][k] == v for k, v in monitor["selector"]["matchLabels"].items())
    [endpoint] = monitor["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] == "http"
    assert endpoint["relabelings"][0]["replacement"] == "vllm-router"
    # The autoscaler's query (components/workloads/autoscaling.py) selects the replicas' Service, not the router's.
    [scaler] = prod.of_type("kubernetes:keda.sh/v1alpha1:ScaledObject")
    assert 'service="llama"' in scaler["inputs"]["spec"]["triggers"][0]["metadata"]["query"]
    alerts = (Path(__file__).resolve().parents[1] / "monitoring/rules/gpu-alerts.rules.yml").read_text()
    uses = re.findall(r"vllm:num_requests_waiting(\{[^}]*\})?", alerts)
    assert uses and all('job="vllm"' in selector for selector in uses)


def test_an_unpinned_router_image_is_refused_by_key():
    message = refusal("prod", prod_with(image="lmcache/lmstack-router:latest"))
    assert "inference[0].kubernetes.router.image" in message and "moving tag 'latest'" in message
    assert ROUTER_IMAGE.startswith("lmcache/lmstack-router:v0.1.12@sha256:")


def test_a_session_key_must_be_a_header_name():
    assert "inference[0].kubernetes.router.sessionKey" in refusal("prod", prod_with(sessionKey="X Session"))


# --- day 2 --------------------------------------------------------------------------------------------------------


def report_of(base: Plan, head: Plan) -> ImpactReport:
    return predict(SynthPlan.model_validate(base.to_json()), SynthPlan.model_validate(head.to_json()))


def changed(report: ImpactReport) -> dict[tuple[str, str], Action | None]:
    return {(i.type, i.name): i.action for i in report.impacts}


def test_adding_the_router_leaves_the_replicas_running(prod):
    """From prod without a router: the router's objects are created; the replicas' NetworkPolicy is updated in place
    (from every pod of the namespace to the router's pods); the vLLM Deployment, its Service and Secrets do not
    change, so no replica restarts and no model is reloaded."""
    before = synthesize("prod", prod_with(off=True))
    report = report_of(before, prod)
    impacts = changed(report)
    assert impacts.pop((NETWORK_POLICY, "llama-ingress")) is Action.UPDATE
    # The serving admission policy admits the router's Deployment by name (components/workloads/admission.py).
    assert impacts.pop((SERVING_POLICY, "rocm-stack-serving")) is Action.UPDATE
    assert set(impacts.values()) == {Action.CREATE}
    assert {name for _, name in impacts} == {
        "llama-router",
        "llama-router-account",
        "llama-router-role",
        "llama-router-binding",
        "llama-router-proxy",
        "llama-router-service",
        "llama-router-ingress",
        "llama-router-pdb",
    }
    assert not report.containers_stopped


def test_a_router_image_bump_rolls_the_router_only(prod):
    bumped = ROUTER_IMAGE.split(":v")[0] + ":v0.1.13@sha256:" + "0" * 64
    report = report_of(prod, synthesize("prod", prod_with(image=bumped)))
    [impact] = report.impacts
    assert (impact.type, impact.name, impact.action) == (DEPLOYMENT, "llama-router", Action.UPDATE)
    assert impact.meaning == "rolls the pods of Deployment `ml/llama-router`"


def test_turning_the_router_off_deletes_it_and_reopens_the_replicas_to_the_clients(prod):
    report = report_of(prod, synthesize("prod", prod_with(off=True)))
    impacts = changed(report)
    assert impacts.pop((NETWORK_POLICY, "llama-ingress")) is Action.UPDATE
    assert impacts.pop((SERVING_POLICY, "rocm-stack-serving")) is Action.UPDATE
    assert set(impacts.values()) == {Action.DELETE}
    assert {name for _, name in impacts} == {n for n in _router_names(prod)}


def _router_names(plan: Plan) -> set[str]:
    return {
        r["name"]
        for r in plan.resources
        if r["name"].startswith("llama-router") and r["type"].startswith("kubernetes:")
    }


def test_a_multi_node_workload_is_routed_to_its_leaders():
    """A LeaderWorkerSet's API is its leaders' (worker index 0, multinode.leader_selector): the router discovers
    those pods only, on the leader's API port, and the group's NetworkPolicy still lets its pods reach each other."""
    from test_multinode import BIG, NAME, config_with

    routed = {**BIG, "kubernetes": {**BIG["kubernetes"], "router": {}}}
    plan = synthesize("prod", config_with(routed))
    args = [
        c
        for c in inputs(plan, DEPLOYMENT, f"{NAME}-router")["spec"]["template"]["spec"]["containers"]
        if c["name"] == "router"
    ][0]["args"]
    selector = dict(item.split("=", 1) for item in flag(args, "--k8s-label-selector").split(","))
    assert selector["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert selector["app.kubernetes.io/instance"] == NAME
    assert inputs(plan, SERVICE, f"{NAME}-service")["spec"]["selector"] == selector
    leader = inputs(plan, "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", NAME)["spec"]
    ports = [
        p for c in leader["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"] for p in c.get("ports", [])
    ]
    assert flag(args, "--k8s-port") == str(next(p["containerPort"] for p in ports if p["name"] == "http"))
    # The API port is open to the router on the leaders (their own policy); the group's policy opens every port
    # between the group's pods.
    api = inputs(plan, NETWORK_POLICY, f"{NAME}-api-ingress")["spec"]
    assert api["podSelector"]["matchLabels"] == selector and len(api["ingress"]) == 1
    rules = inputs(plan, NETWORK_POLICY, f"{NAME}-ingress")["spec"]["ingress"]
    assert len(rules) == 1 and "ports" not in rules[0]
