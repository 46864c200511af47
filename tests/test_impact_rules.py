"""The change-impact rules (tools/impact_rules.py) against the providers' own source, read from the upstream sources `make upstream` fetches
at the commits below with tree-sitter's Go grammar (tests/upstream_go.py; skipped where a mirror is absent), and
every Docker input the program declares covered by a rule (everywhere)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools import impact_rules
from components.docker.provider_schema import (
    DOCKER_CONTAINER,
    DOCKER_LIVE_UPDATES,
    DOCKER_NETWORK,
    DOCKER_REMOTE_IMAGE,
    DOCKER_VOLUME,
    LIST,
    LIST_OF_BLOCKS,
    MAP,
    SET,
    SET_OF_BLOCKS,
    VALUE,
    NETWORK,
    ORDER_IGNORED,
    EMPTY_IS_UNCHANGED,
    VOLUME,
    Attribute,
)
from tools.impact_rules import K8S_FORCE_NEW, RULES
from conftest import CONTAINER, REMOTE_IMAGE
from upstream_go import Upstream, parse, resource_schema, string_list_in_function, text, walk

TFD = Upstream("kreuzwerker/terraform-provider-docker", "5074970c71ce6cc393c74942d5d628943834beb9")  # tag v4.5.0
PULUMI_DOCKER = Upstream("pulumi/pulumi-docker", "237b7899bb513613a7645e74d6981c12d054dcc7")  # v5.2.0's bridge
PULUMI_K8S = Upstream("pulumi/pulumi-kubernetes", "94977969d64112b04e19945818a7d5d5f38f631d")  # after v4.32.0
PULUMI = Upstream("pulumi/pulumi", "0ac56e876614aedf12771d73ef7e80959b8a6fd4")  # tag v3.259.0
K8S_DIFF = "provider/pkg/provider/diff.go"
TFD_CONSTANTS = "internal/provider/resource_docker_container_funcs.go"  # containerReadRefreshTimeoutMillisecondsDefault
# A data subset of pulumi-docker's bridge-metadata.json (tests/data/docker/SOURCE.txt), not code: kept in the repo.
RENAMES = json.loads((Path(__file__).parent / "data" / "docker" / "bridge-metadata.renames.json").read_text())[
    "renamedProperties"
]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _go_value(expression: str) -> Any:
    """A schema Default as Go writes it: a literal, or a constant of TFD's provider package."""
    if expression in ("true", "false"):
        return expression == "true"
    if expression.startswith('"'):
        return json.loads(expression)
    if re.fullmatch(r"-?\d+", expression):
        return int(expression)
    constant = re.search(rf"\b{expression}\s*=\s*(\S+)", TFD.read(TFD_CONSTANTS).decode())
    assert constant, f"no constant {expression} in {TFD_CONSTANTS}"
    return _go_value(constant.group(1))


def upstream_table(resource_file: str, top_type: str, nested_prefix: str) -> dict[str, Attribute]:
    """The input attributes of a TFD resource keyed by their Pulumi path: pulumi-docker's renames
    (bridge-metadata.json renamedProperties), otherwise the bridge's camelCase of the Terraform name."""
    top = {tf: pulumi for pulumi, tf in RENAMES.get(top_type, {}).items()}
    nested: dict[str, str] = {}
    for type_token, renames in RENAMES.items():
        if type_token.startswith(nested_prefix):
            nested.update({tf: pulumi for pulumi, tf in renames.items()})
    table = {}
    for a in resource_schema(TFD.read(f"internal/provider/{resource_file}"), TFD.read("internal/provider/helpers.go")):
        if not a.input:
            continue
        first, *rest = a.path.split(".")
        path = ".".join([top.get(first, _camel(first)), *(nested.get(p, _camel(p)) for p in rest)])
        kind = {"schema.TypeSet": SET, "schema.TypeList": LIST, "schema.TypeMap": MAP}.get(a.type, VALUE)
        if a.resource_elem:
            kind = {SET: SET_OF_BLOCKS, LIST: LIST_OF_BLOCKS}[kind]
        # labelSchema's attributes are declared in helpers.go (newLabelSchema), the rest in the resource's file
        in_helpers = a.path.endswith(("labels.label", "labels.value"))
        table[path] = Attribute(
            a.path,
            a.line,
            a.force_new,
            kind,
            "internal/provider/helpers.go" if in_helpers else "",
            a.computed,
            None if a.default is None else _go_value(a.default),
        )
    return table


def test_the_container_table_is_tfds_schema():
    """Every input attribute of docker_container, nested blocks included, with TFD's ForceNew, kind and line."""
    assert DOCKER_CONTAINER == upstream_table(
        "resource_docker_container.go", "docker:index/container:Container", "docker:index/Container"
    )


def test_the_remote_image_table_is_tfds_schema():
    assert DOCKER_REMOTE_IMAGE == upstream_table(
        "resource_docker_image.go", "docker:index/remoteImage:RemoteImage", "docker:index/RemoteImage"
    )


def test_the_volume_table_is_tfds_schema():
    assert DOCKER_VOLUME == upstream_table(
        "resource_docker_volume.go", "docker:index/volume:Volume", "docker:index/Volume"
    )


def test_the_network_table_is_tfds_schema():
    assert DOCKER_NETWORK == upstream_table(
        "resource_docker_network.go", "docker:index/network:Network", "docker:index/Network"
    )


def test_the_order_of_ports_is_ignored_by_their_diff_suppress_func():
    """ORDER_IGNORED: `ports` (a TypeList) has suppressIfPortsDidNotChangeForMigrationV0ToV1 as DiffSuppressFunc,
    which, for lists of the same length, looks each old port up in the new list by internal port."""
    source = TFD.read("internal/provider/resource_docker_container.go")
    lines = source.decode().splitlines()
    assert lines[533].strip() == "DiffSuppressFunc: suppressIfPortsDidNotChangeForMigrationV0ToV1(),"
    assert DOCKER_CONTAINER["ports"].line < 534 < DOCKER_CONTAINER["hosts"].line
    suppress, start, end = function(source, "suppressIfPortsDidNotChangeForMigrationV0ToV1")
    assert (start, end) == (1192, 1247) and ORDER_IGNORED == {CONTAINER: frozenset({"ports"})}
    assert "if len(portsOld) != len(portsNew) {" in suppress
    assert "for _, portNew := range portsNew {" in suppress and "if newInternalPort == oldInternalPort {" in suppress


def test_every_diff_suppress_func_of_the_container_is_modelled():
    """Each container attribute TFD gives a DiffSuppressFunc: `ports` (ORDER_IGNORED, above), and `user` and
    `working_dir`, whose inline function reads a new "" as the old value (EMPTY_IS_UNCHANGED)."""
    attributes = resource_schema(
        TFD.read("internal/provider/resource_docker_container.go"), TFD.read("internal/provider/helpers.go")
    )
    suppressed = {a.path: a.diff_suppress for a in attributes if a.diff_suppress}
    assert sorted(suppressed) == ["ports", "user", "working_dir"]
    assert {DOCKER_CONTAINER[p].tf for p in EMPTY_IS_UNCHANGED[CONTAINER]} == {"user", "working_dir"}
    for path in ("user", "working_dir"):
        body = " ".join(str(suppressed[path]).split())
        assert 'if newV == "" { newV = oldV } return oldV == newV' in body, body


def test_facts_the_scenarios_rest_on():
    """Stated here so that a provider upgrade that changes them fails by name."""
    assert DOCKER_CONTAINER["image"].force_new and DOCKER_CONTAINER["envs"].force_new  # L141, L590
    assert DOCKER_CONTAINER["name"].force_new and DOCKER_CONTAINER["command"].force_new  # L50, L163
    assert not any(a.force_new for p, a in DOCKER_CONTAINER.items() if p.startswith("healthcheck"))  # L1045-1091
    assert not DOCKER_CONTAINER["destroyGraceSeconds"].force_new and DOCKER_CONTAINER["stopTimeout"].force_new
    assert DOCKER_REMOTE_IMAGE["name"].force_new and not DOCKER_REMOTE_IMAGE["keepLocally"].force_new


def test_live_updates_are_what_tfds_update_applies():
    """resourceDockerContainerUpdate's list of attributes it hands ContainerUpdate (funcs.go L1016-1019)."""
    attributes, line = string_list_in_function(
        TFD.read("internal/provider/resource_docker_container_funcs.go"), "resourceDockerContainerUpdate"
    )
    by_tf = {a.tf: path for path, a in DOCKER_CONTAINER.items()}
    assert tuple(by_tf[a] for a in attributes) == DOCKER_LIVE_UPDATES and line == 1016


def function(source: bytes, name: str) -> tuple[str, int, int]:
    for node in walk(parse(source)):
        if node.type == "function_declaration" and text(node.child_by_field_name("name")) == name:
            return text(node), node.start_point[0] + 1, node.end_point[0] + 1
    raise AssertionError(f"no function {name}")


def test_container_delete_stops_with_the_grace_and_update_and_delete_are_where_the_rules_say():
    funcs = TFD.read("internal/provider/resource_docker_container_funcs.go")
    delete, start, _ = function(funcs, "resourceDockerContainerDelete")
    # The stop timeout is destroy_grace_seconds, else 0; a one-shot (attach) container is not stopped first.
    assert re.search(r'if !d\.Get\("attach"\)\.\(bool\) \{\s*// Stop the container', delete)
    assert re.search(r'var timeout int\s*if d\.Get\("destroy_grace_seconds"\)\.\(int\) > 0', delete)
    assert "client.ContainerStop(ctx, d.Id(), *&container.StopOptions{Timeout: &timeout})" in delete
    assert f"L{start}-" in RULES["tfd.container-delete"].source
    _, start, end = function(funcs, "resourceDockerContainerUpdate")
    assert f"L{start}-{end}" in RULES["tfd.container-update"].source


def test_pulumi_docker_deletes_a_container_before_replacing_it_and_forces_no_provider_replace():
    source = PULUMI_DOCKER.read("provider/resources.go")
    lines = source.decode().splitlines()
    resources = {}
    for node in walk(parse(source)):
        if node.type == "keyed_element" and text(node.named_children[0]).startswith('"docker_'):
            resources[text(node.named_children[0]).strip('"')] = (text(node), node.start_point[0] + 1)
    container, line = resources["docker_container"]
    assert (
        re.search(r"DeleteBeforeReplace:\s+true", container)
        and "DeleteBeforeReplace" not in resources["docker_image"][0]
    )
    assert "L112-115" in RULES["pulumi-docker.container-delete-before-replace"].source and line == 112
    assert "DeleteBeforeReplace: true" in lines[113]
    # A network is replaced create-first (tools/impact.py cites resources.go L133).
    assert lines[132].strip() == '"docker_network":        {Tok: dockerResource(dockerMod, "Network")},'
    assert "ForcesProviderReplace" not in source.decode()  # the provider's inputs never replace it
    assert lines[93].strip() == "Config: map[string]*tfbridge.SchemaInfo{"  # resources.go L94, cited


# --- pulumi-kubernetes diff.go ---------------------------------------------------------------------------------


def _lines(source: str) -> tuple[int, int]:
    first, _, last = re.search(r"L(\d+)(-(\d+))?", source).groups()  # type: ignore[union-attr]
    return int(first), int(last or first)


def _literals(node_text_lines: list[str]) -> set[str]:
    return set(re.findall(r'"([^"]*)"', "\n".join(node_text_lines)))


def _function_literals(name: str) -> set[str]:
    return set(re.findall(r'"([^"]*)"', function(PULUMI_K8S.read(K8S_DIFF), name)[0]))


@pytest.mark.parametrize("key", sorted(K8S_FORCE_NEW), ids=lambda k: f"{k[0] or 'core'}/{k[1]}")
def test_kubernetes_replacement_paths_are_pulumi_kubernetes_own(key):
    """Each kind's paths are the literals of the lines cited from diff.go, the label-selector and container helpers
    expanded (labelSelectorForceNewProperties, containerForceNewProperties), and nothing there is missing."""
    lines = PULUMI_K8S.read(K8S_DIFF).decode().splitlines()
    paths, source = K8S_FORCE_NEW[key]
    first, last = _lines(source)
    cited = lines[first - 1 : last]
    literals = _literals(cited)
    selector = {".spec.selector" + s for s in _function_literals("labelSelectorForceNewProperties")}
    container = {
        f"{prefix}{s}"
        for prefix in (".spec.containers[*]", ".spec.initContainers[*]")
        for s in _function_literals("containerForceNewProperties")
    }
    expected = set(literals)
    if any('labelSelectorForceNewProperties(".spec.selector")' in line for line in cited):
        expected |= selector
    if any("containerForceNewProperties(" in line for line in cited):
        expected = (expected - {".spec.containers[*]", ".spec.initContainers[*]"}) | container
    kind = key[1]
    expected -= {kind}  # the map key itself
    assert set(paths) == expected


def test_kubernetes_kinds_not_listed_are_replaced_only_by_name_or_namespace():
    """policy/v1 PodDisruptionBudget: diff.go lists only `policy/v1beta1`; custom resources are not listed."""
    code = PULUMI_K8S.read(K8S_DIFF).decode()
    assert re.search(r'"policy": _versions\{\s*"v1beta1": _kinds\{"PodDisruptionBudget"', code)
    assert "DeviceConfig" not in code and "JobSet" not in code
    assert _function_literals("metadataForceNewProperties") == {".name", ".namespace"}


def test_an_autonamed_object_gets_a_new_name_when_replaced_and_its_readers_move_first():
    """Rule k8s.autoname, at the lines it cites: the provider names an unnamed object `<URN name>-<unique hex>`;
    Check with old inputs only adopts the old autoname, Check without them names afresh, and the engine calls Check
    without them once it decides to replace; an autonamed object is never deleted before its replacement; the
    engine creates the replacement, updates its dependents, then deletes the old one."""
    naming = PULUMI_K8S.read("provider/pkg/metadata/naming.go").decode().splitlines()
    assert naming[34:36] == [
        '\tprefix := urn.Name() + "-"',
        "\tautoname, err := resource.NewUniqueName(randomSeed, prefix, 0, 0, nil)",
    ]
    provider = PULUMI_K8S.read("provider/pkg/provider/provider.go").decode().splitlines()
    check = "\n".join(provider[1245:1274])
    assert "if len(oldInputs.Object) > 0 {" in check and "AdoptOldAutonameIfUnnamed(newInputs, oldInputs" in check
    assert "} else {\n\t\terr = metadata.AssignNameIfAutonamable(" in check
    assert "!metadata.IsAutonamed(newInputs) &&" in "\n".join(provider[1644:1657])
    steps = PULUMI.read("pkg/resource/deploy/step_generator.go").decode().splitlines()
    recheck = "\n".join(steps[2003:2024])
    assert "recompute the default values" in recheck and "prov.Check(context.TODO(), plugin.CheckRequest{" in recheck
    assert "Olds:" not in recheck  # no old inputs: the provider autonames afresh
    assert "updates all dependent resources to point to the new one" in "\n".join(steps[2032:2035])


def test_a_mutable_config_map_is_the_providers_option_unless_declared_immutable():
    """Rule k8s.configmap-mutable: diff.go L32 lists a ConfigMap's data for replacement only while the option is off
    or the object is immutable; provider.go L696-710 reads the option as the string "true"."""
    diff_line = PULUMI_K8S.read(K8S_DIFF).decode().splitlines()[_lines(RULES["k8s.configmap-mutable"].source)[0] - 1]
    assert "clients.IsConfigMap(obj) && (!k.enableConfigMapMutable || clients.IsImmutable(obj))" in diff_line
    provider = PULUMI_K8S.read("provider/pkg/provider/provider.go").decode().splitlines()[695:710]
    assert 'vars["kubernetes:config:enableConfigMapMutable"]' in "\n".join(provider)
    assert "return enabled == trueStr" in "\n".join(provider)


# --- coverage: every input the program declares has a rule --------------------------------------------------------


def input_paths(value: Any, table: dict[str, Attribute], path: str = "") -> Iterator[str]:
    """The Pulumi input paths of a resource's inputs, list indices dropped: `labels`, `labels.label`, ...; not the
    keys of a map attribute (`logOpts`), which are values, not attributes."""
    if path:
        yield path
        if path in table and table[path].kind == MAP:
            return
    if isinstance(value, dict):
        for key, child in value.items():
            yield from input_paths(child, table, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for child in value:
            if isinstance(child, dict):
                yield from (p for p in input_paths(child, table, path) if p != path)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_docker_input_the_program_declares_has_a_rule(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    tables = (
        (CONTAINER, DOCKER_CONTAINER),
        (REMOTE_IMAGE, DOCKER_REMOTE_IMAGE),
        (VOLUME, DOCKER_VOLUME),
        (NETWORK, DOCKER_NETWORK),
    )
    for type_token, table in tables:
        declared = {p for r in plan.of_type(type_token) for p in input_paths(r["inputs"], table)}
        assert declared <= table.keys(), sorted(declared - table.keys())
        assert declared or type_token == NETWORK  # dev runs no vLLM proxy, the only network's user


def test_every_rule_has_a_source_and_every_cited_rule_exists():
    assert all(rule.says and rule.source for rule in RULES.values())
    code = Path(impact_rules.__file__).read_text()
    assert set(re.findall(r'"((?:pulumi|tfbridge|tfd|k8s|synth|pulumi-docker)\.[a-z.-]+)"', code)) <= RULES.keys()
