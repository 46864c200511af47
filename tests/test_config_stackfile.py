"""Stack files are read the way the Pulumi CLI reads them, and a broken one is one line naming FILE:LINE:COLUMN.

The CLI parses `Pulumi.<stack>.yaml` with gopkg.in/yaml.v3 v3.0.1 (pulumi/pulumi v3.259.0
sdk/go/common/encoding/marshal.go L27, sdk/go.mod) in workspace.LoadProjectStackBytes
(sdk/go/common/workspace/loaders.go L173-233). Each test names the upstream file and line it holds synth to.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schema import ConfigError, decode, load, stackfile
from schema.stackfile import SECRET_PLACEHOLDER, StackFileError, as_program_config, read_config
from tools import synth
from tools.synth import ROOT

P = "rocm-stack:"
CONTAINER = "docker:index/container:Container"


def project(tmp_path: Path, stack_text: str, stack: str = "dev") -> Path:
    """The real program with one stack file of the given text (every other entry of the repository linked)."""
    directory = tmp_path / "project"
    directory.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("stacks", ".git", ".venv"):
            (directory / entry.name).symlink_to(entry)
    (directory / "stacks").mkdir()
    (directory / "stacks" / f"Pulumi.{stack}.yaml").write_text(stack_text)
    return directory


def run(tmp_path: Path, stack_text: str, stack: str = "dev", capsys=None) -> tuple[int, str, Path]:
    """tools.synth's main in-process: (exit code, stderr, out folder)."""
    out = tmp_path / "out"
    code = synth.main(["--stack", stack, "--out", str(out), "--project-dir", str(project(tmp_path, stack_text, stack))])
    return code, capsys.readouterr().err if capsys else "", out


def config_of(tmp_path: Path, text: str) -> dict:
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(text)
    return read_config(path, "rocm-stack")


def error_of(tmp_path: Path, text: str) -> str:
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(text)
    with pytest.raises(StackFileError) as error:
        read_config(path, "rocm-stack")
    return str(error.value)


# --- scalars: yaml.v3's resolver, not PyYAML's YAML 1.1 one ---------------------------------------------------


@pytest.mark.parametrize("word", ["no", "yes", "on", "off", "y", "n", "No", "OFF"])
def test_yaml_1_1_booleans_are_text(tmp_path, word):
    # go-yaml v3.0.1 resolve.go L52-53: only true/True/TRUE and false/False/FALSE are booleans.
    assert config_of(tmp_path, f"config:\n  rocm-stack:x:\n    restart: {word}\n") == {P + "x": {"restart": word}}


@pytest.mark.parametrize(
    "text, value",
    [
        ("true", True),
        ("TRUE", True),
        ("False", False),
        ("~", None),
        ("null", None),
        ("017", 15),  # resolve.go L233-236: YAML 1.1 octals are still decoded (Go strconv.ParseInt base 0)
        ("0o17", 15),
        ("0x1F", 31),
        ("0b101", 5),
        ("1_000", 1000),
        ("+12", 12),  # resolve.go L191-192
        ("08", 8.0),  # ParseInt fails, yamlStyleFloat (resolve.go L124) matches
        ("1e3", 1000.0),
        ("1.5", 1.5),
        ("2024-01-02", "2024-01-02 00:00:00 +0000 UTC"),  # time.Time's String() (config object.go L490-491)
        ("'true'", "true"),
        ('"8"', "8"),  # quoted scalars are always text (decode.go L568-570)
    ],
)
def test_plain_scalars_resolve_like_yaml_v3(tmp_path, text, value):
    assert config_of(tmp_path, f"config:\n  rocm-stack:x:\n    v: {text}\n")[P + "x"]["v"] == value


def test_restart_no_is_the_documented_policy_not_a_boolean(tmp_path, capsys):
    code, err, out = run(
        tmp_path,
        "config:\n  rocm-stack:hosts:\n    - name: box\n      containers:\n"
        "        - name: shell\n          restart: no\n",
        capsys=capsys,
    )
    assert code == 0, err
    plan = json.loads((out / "plan.json").read_text())
    (container,) = [r for r in plan["resources"] if r["type"] == CONTAINER and r["name"] == "box-shell"]
    assert container["inputs"]["restart"] == "no"


@pytest.mark.parametrize("text", [".inf", "-.Inf", ".nan"])
def test_infinity_is_refused_as_the_cli_does(tmp_path, text):
    # config object.go L405-407: json.Marshal has no Inf/NaN, so the CLI fails to load the stack.
    assert error_of(tmp_path, f"config:\n  rocm-stack:x:\n    v: {text}\n").endswith(
        f"Pulumi.t.yaml:3:8: {text} cannot be passed to the program (JSON has no infinity or NaN); "
        "the Pulumi CLI refuses it too"
    )


# --- documents: the CLI's errors, as one line naming file, line and column ----------------------------------


@pytest.mark.parametrize(
    "text, where, fragment",
    [
        # decode.go L767-783 (uniqueKeys): `mapping key "a" already defined at line 1`, at any depth.
        (
            "config:\n  rocm-stack:a: 1\n  rocm-stack:a: 2\n",
            "3:3",
            'mapping key "rocm-stack:a" already defined at line 2',
        ),
        (
            "config:\n  rocm-stack:hosts:\n    - name: a\n      gpus: 2\n      gpus: 4\n",
            "5:7",
            'mapping key "gpus" already defined at line 4',
        ),
        ("config:\n  rocm-stack:x: {a: 1, 'a': 2}\n", "2:24", 'mapping key "a" already defined'),  # raw text compared
        # scannerc.go L878-880: a tab cannot start a token.
        ("config:\n\trocm-stack:hosts: []\n", "2:1", "found character that cannot start any token (a tab"),
        ('config:\n  rocm-stack:environment: "dev\n', "3:1", "found unexpected end of stream"),
        ("config:\n  rocm-stack:x: [1, 2\n", "3:1", "invalid YAML"),
        # loaders.go L194 (SimplifyMarshalledProject): "expected project to be an object".
        ("- config\n- hosts\n", "1:1", "expected a mapping with a `config:` key, found a list"),
        # map.go L313: "cannot unmarshal !!seq into map[string]config.Value".
        ("config:\n  - rocm-stack:hosts\n", "2:3", "`config:` must be a mapping"),
        ("config: dev\n", "1:9", "`config:` must be a mapping of `namespace:key: value`, found text"),
        # config/key.go L45-70 ParseKey, the CLI's own words.
        ("config:\n  rocm-stack:hosts:foo: 1\n", "2:3", "could not parse rocm-stack:hosts:foo as a configuration key"),
    ],
)
def test_broken_stack_files_are_one_line_naming_the_place(tmp_path, capsys, text, where, fragment):
    code, err, out = run(tmp_path, text, capsys=capsys)
    assert code == 2 and not out.exists()
    (line,) = err.splitlines()
    assert line.startswith(f"{tmp_path}/project/stacks/Pulumi.dev.yaml:{where}: ") and fragment in line, line


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "config:\n", "secretsprovider: passphrase\n"])
def test_empty_stack_file_is_the_default_dev_stack(tmp_path, text):
    # loaders.go L186-192: an empty document is an empty config.
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(text)
    assert read_config(path, "rocm-stack") == {}


def test_only_the_first_document_is_read(tmp_path):
    # go-yaml yaml.go L54: "Unmarshal decodes the first document found within the in byte slice".
    assert config_of(tmp_path, "config:\n  rocm-stack:a: 1\n---\n: : not yaml [\n") == {P + "a": 1}


def test_merge_keys_are_merged_explicit_keys_win(tmp_path):
    config = config_of(
        tmp_path, "config:\n  rocm-stack:a: &base {gpus: 8, gpuModel: MI300X}\n  rocm-stack:b: {<<: *base, gpus: 4}\n"
    )
    assert config[P + "b"] == {"gpus": 4, "gpuModel": "MI300X"}


# --- aliases (issue 36 item 5) ------------------------------------------------------------------------------------
# yaml.v3 v3.0.1 decode.go L455-491 refuses a document whose values come mostly from aliases ("document contains
# excessive aliasing"): past 1,000 decodes and 100 aliased ones, more than 99% aliased up to 400,000 decodes, falling
# to 10% at 4,000,000. Its own limit tests (limit_test.go L11-42 @ v3.0.1) are read here with the outcome they expect,
# but for "1000kb of maps with 100 aliases" (refused after 2 million decodes: 15 s here, too slow for the suite).
_MAPS = "{a: &a [{a}%s]}"
YAML_V3_LIMIT_TESTS = {
    # name in limit_test.go: (the document, refused)
    "1kb of maps": (_MAPS % (",{a}" * (1 * 1024 // 4 - 1)), False),
    "10kb of maps": (_MAPS % (",{a}" * (10 * 1024 // 4 - 1)), False),
    "100kb of maps": (_MAPS % (",{a}" * (100 * 1024 // 4 - 1)), False),
}


@pytest.mark.parametrize("name", YAML_V3_LIMIT_TESTS)
def test_yaml_v3_limit_tests_have_its_outcome(tmp_path, name):
    document, refused = YAML_V3_LIMIT_TESTS[name]
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(f"config:\n  rocm-stack:x: {document}\n")
    if refused:
        with pytest.raises(StackFileError, match="document contains excessive aliasing"):
            read_config(path, "rocm-stack")
    else:
        assert len(read_config(path, "rocm-stack")[P + "x"]["a"]) == document.count("{a}")


def test_the_allowed_alias_share_falls_with_the_size_as_in_yaml_v3():
    # decode.go L468-482 allowedAliasRatio: 0.99 to 400,000 decodes, then linearly to 0.10 at 4,000,000.
    assert [round(stackfile._allowed_alias_ratio(n), 4) for n in (1001, 400_000, 2_200_000, 4_000_000, 10**8)] == [
        0.99,
        0.99,
        0.545,
        0.10,
        0.10,
    ]


# A 400-byte stack file whose nested aliases stand for 10^9 values: expanded eagerly, synth never ends.
BOMB = "config:\n  rocm-stack:x:\n    a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"    {name}: &{name} [{','.join([f'*{previous}'] * 10)}]\n" for previous, name in zip("abcdefgh", "bcdefghi")
)


def test_an_alias_bomb_is_refused_in_bounded_time(tmp_path):
    assert len(BOMB) < 420
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(BOMB)
    # In a child process, so that on a reader without the limit this fails (after 20 s) instead of hanging the suite.
    code = f"from schema.stackfile import read_config; from pathlib import Path; read_config(Path({str(path)!r}), 'x')"
    try:
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=20, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail("reading an alias bomb did not end within 20 s")
    assert "document contains excessive aliasing" in result.stderr, result.stderr[-2000:]


def test_an_alias_bomb_stops_synth_with_one_line(tmp_path, capsys):
    code, err, _ = run(tmp_path, BOMB, capsys=capsys)
    assert code == 2
    assert err.count("\n") == 1 and "Pulumi.dev.yaml:" in err and ": document contains excessive aliasing (" in err
    assert "Traceback" not in err


# --- nesting (issue 36 item 5): yaml.v3 v3.0.1 reads 10,000 levels (scannerc.go L955-1009 max_flow_level, max_indents),
# libyaml 1,000 (its default max nest level), Python's JSON decoder, through which the runtime hands every structured
# value to the program, about 1,000 (RecursionError). No key is nested more than 10 levels: deeper is refused, named.
def _nested(depth: int, flow: bool) -> str:
    if flow:
        return "config:\n  rocm-stack:x: " + "[" * depth + "]" * depth + "\n"
    return (
        "config:\n  rocm-stack:x:\n"
        + "".join(" " * (4 + i) + "-\n" for i in range(depth - 1))
        + " " * (4 + depth)
        + "- 1\n"
    )


@pytest.mark.parametrize("depth", [101, 500, 999, 1001, 10_001])
@pytest.mark.parametrize("flow", [True, False])
def test_a_value_nested_deeper_than_any_key_is_refused_with_its_reason(tmp_path, depth, flow):
    """Once a RecursionError traceback between about 300 and 1,000 levels."""
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(_nested(depth, flow))
    with pytest.raises(StackFileError, match="nested more than 100 levels deep, which no key of the stack config is"):
        read_config(path, "rocm-stack")


def test_a_value_nested_as_deep_as_the_limit_is_read(tmp_path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(_nested(100, True))
    assert stackfile.nesting_depth(read_config(path, "rocm-stack")[P + "x"]) == 100


def test_a_value_the_cli_hands_over_nested_past_the_json_decoder_is_refused_naming_the_key():
    """`pulumi up`: the CLI reads up to 10,000 levels and hands the value over as JSON text, which Python's decoder
    stops reading near 1,000 (once a RecursionError traceback)."""
    with pytest.raises(ConfigError, match="rocm-stack:hostGroups: the value is nested more than 100 levels deep"):
        load("dev", {P + "hostGroups": decode("[" * 5000 + "]" * 5000)})


def test_an_anchor_containing_itself_is_refused(tmp_path):
    # decode.go L533-537: "anchor '%s' value contains itself".
    assert "contains an alias of itself" in error_of(tmp_path, "config:\n  rocm-stack:x: &a [1, *a]\n")


def test_aliases_in_moderation_are_expanded(tmp_path):
    hosts = "".join(f"    - {{<<: *host, name: node-{n}}}\n" for n in range(300))
    config = config_of(
        tmp_path, "config:\n  rocm-stack:base: &host {gpus: 8, gpuModel: MI300X}\n  rocm-stack:hosts:\n" + hosts
    )
    assert len(config[P + "hosts"]) == 300
    assert config[P + "hosts"][299] == {"gpus": 8, "gpuModel": "MI300X", "name": "node-299"}


# --- tags (issue 24 item 9) ------------------------------------------------------------------------------------
# The CLI decodes the whole file into `any` first (loaders.go L181 `marshaller.Unmarshal(b, &projectStackRaw)`),
# marshals that back and decodes it into ProjectStack (L219-222), whose config values unmarshal through `any` again
# (config value.go L238, object.go L455-461). So only what yaml.v3 makes of a tagged scalar in `any` survives:
# resolve.go L127-130 returns the text of a tag it cannot resolve (`if !resolvableTag(tag) { return tag, in }`) and
# decode.go L612 stores it in the interface: `!secret abc` is the plain string "abc", its meaning gone.


@pytest.mark.parametrize(
    "text, why",
    [
        (
            "!secret abc",
            "the tag !secret means nothing to the Pulumi CLI: it reads the plain text 'abc'; remove the "
            "tag; a secret is set with `pulumi config set --secret` (a `secure:` value in the file)",
        ),
        ("!Ref otherKey", "the tag !Ref means nothing to the Pulumi CLI: it reads the plain text 'otherKey'"),
        ("!!python/name:os.system x", "the tag !!python/name:os.system means nothing to the Pulumi CLI"),
        ("!<tag:example.com,2000:app/x> v", "the tag tag:example.com,2000:app/x means nothing"),
        ("!vault {path: a/b}", "the tag !vault means nothing to the Pulumi CLI: it reads the value without it"),
    ],
)
def test_a_tag_the_cli_ignores_is_refused_naming_what_the_cli_reads(tmp_path, text, why):
    """Synth cannot hand the program another value than the CLI does, and the CLI's value ("abc", not a secret) is
    not what the file says: refused at its line, the fix named."""
    assert f"Pulumi.t.yaml:3:8: {why}" in error_of(tmp_path, f"config:\n  rocm-stack:x:\n    v: {text}\n")


@pytest.mark.parametrize(
    "text, value",
    [
        # decode.go L573-577: !!binary is base64, decoded to the string of its bytes.
        ("!!binary aGVsbG8gd29ybGQ=", "hello world"),
        ("!!binary |\n      aGVsbG8g\n      d29ybGQ=", "hello world"),  # StdEncoding skips line breaks
        # resolve.go L184-188: a !!timestamp is parsed with allowedTimestampFormats (L296-301) into a time.Time,
        # handed on as its String() (config object.go L490-491).
        ("!!timestamp 2001-12-14", "2001-12-14 00:00:00 +0000 UTC"),
        ("!!timestamp 2001-12-14t21:59:43.10Z", "2001-12-14 21:59:43.1 +0000 UTC"),
        ("2001-12-14 21:59:43", "2001-12-14 21:59:43 +0000 UTC"),  # no zone: time.Parse gives UTC
        ("2001-2-3", "2001-02-03 00:00:00 +0000 UTC"),  # layout "2006-1-2" takes one-digit months and days
        ("2001-02-30", "2001-02-30"),  # no date: time.Parse fails, the text stays a string
        # resolve.go L132-150: the value must resolve to the tag's kind; an int also fits !!float.
        ("!!float 0x10", 16.0),
        ("!!int 0o17", 15),
        ("!!str 0x10", "0x10"),
        ("!!bool false", False),
        ("<<", "<<"),  # the !!merge tag of a plain `<<` value is not resolvable: text
    ],
)
def test_standard_tags_decode_as_yaml_v3_decodes_them(tmp_path, text, value):
    assert config_of(tmp_path, f"config:\n  rocm-stack:x:\n    v: {text}\n")[P + "x"]["v"] == value


@pytest.mark.parametrize(
    "text, why",
    [
        # resolve.go L150: failf("cannot decode %s `%s` as a %s", ...): the CLI fails to load the stack.
        ("!!bool yes", "cannot decode !!str `yes` as a !!bool"),  # main read it as false
        ("!!bool 1", "cannot decode !!int `1` as a !!bool"),  # main read it as true
        ("!!null abc", "cannot decode !!str `abc` as a !!null"),  # main read it as null
        ("!!int 1.5", "cannot decode !!float `1.5` as a !!int"),
        ("!!timestamp tomorrow", "cannot decode !!str `tomorrow` as a !!timestamp"),
        # decode.go L574-576.
        ("!!binary '#not base64'", "!!binary value contains invalid base64 data; the Pulumi CLI refuses it too"),
        ("!!binary /w==", "this !!binary value is no UTF-8 text"),
        # time.Parse keeps +02:00 as the machine's zone when that zone has the offset: text that depends on the host.
        ("2001-12-14T21:59:43+02:00", "is a timestamp with a UTC offset"),
    ],
)
def test_a_value_that_does_not_fit_its_tag_is_refused_as_the_cli_refuses_it(tmp_path, text, why):
    assert why in error_of(tmp_path, f"config:\n  rocm-stack:x:\n    v: {text}\n")


def test_merges_of_several_mappings_take_the_first_and_explicit_keys_win(tmp_path):
    """decode.go merge(): a list of mappings merges in order with earlier ones winning; the node's own keys win over
    all of them."""
    config = config_of(
        tmp_path,
        "config:\n  rocm-stack:a: &a {gpus: 8, gpuModel: MI300X}\n  rocm-stack:b: &b {gpus: 4, topology: t}\n"
        "  rocm-stack:c: {<<: [*a, *b], topology: mine}\n",
    )
    assert config[P + "c"] == {"gpus": 8, "gpuModel": "MI300X", "topology": "mine"}
    assert "a merge key `<<` takes a mapping" in error_of(tmp_path, "config:\n  rocm-stack:c: {<<: [1]}\n")


def test_missing_stack_names_the_stacks_that_exist(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tools.synth", "--stack", "staging", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr == "stacks/Pulumi.staging.yaml: no such stack file; the stacks are: dev, prod\n"


# --- keys: namespaces as the CLI gives them --------------------------------------------------------------------


def test_a_bare_key_gets_the_project_namespace(tmp_path):
    # loaders.go L51-89 stackConfigNamespacedWithProject (since v3.44.0), pinned upstream by
    # pkg/workspace/config_project_test.go TestLoadingStackConfigWithoutNamespacingTheProject. Issue 15 asked to
    # refuse bare keys; the CLI namespaces them, so synth does too, and `hosts:` is no longer silently ignored.
    assert config_of(tmp_path, "config:\n  hosts: []\n  docker:host: unix:///x.sock\n") == {
        P + "hosts": [],
        "docker:host": "unix:///x.sock",
    }


def test_the_pre_1_0_config_form_is_the_same_key(tmp_path):
    # config/key.go L57-64: `<namespace>:config:<name>` is `<namespace>:<name>`.
    assert config_of(tmp_path, "config:\n  rocm-stack:config:hosts: []\n") == {P + "hosts": []}


@pytest.mark.parametrize(
    "first, second", [("hosts", "rocm-stack:hosts"), ("rocm-stack:config:hosts", "rocm-stack:hosts")]
)
def test_two_spellings_of_one_key_are_refused(tmp_path, first, second):
    # loaders.go L72-81 writes both into one Go map while ranging over a map: the CLI keeps one at random.
    message = error_of(tmp_path, f"config:\n  {first}: []\n  {second}: []\n")
    assert message.endswith(
        f"Pulumi.t.yaml:3:3: '{second}' is the key 'rocm-stack:hosts' again (first at line 2); keep one of them"
    )


def test_bare_hosts_key_is_the_stacks_hosts(tmp_path, capsys):
    code, err, out = run(tmp_path, "config:\n  hosts:\n    - name: box\n", capsys=capsys)
    assert code == 0, err
    plan = json.loads((out / "plan.json").read_text())
    assert plan["outputs"]["dockerHosts"] == {"box": "unix:///var/run/docker.sock"}


@pytest.mark.parametrize("namespace", ["rocm-stak", "rocm_stack", "rocmstack", "ROCm-Stack", "rcom-stack"])
def test_a_misspelt_namespace_is_refused_with_the_suggestion(tmp_path, capsys, namespace):
    # Stricter than the CLI, which accepts any namespace and hands it to no one (pkg/resource/deploy/target.go
    # L45-71 GetPackageConfig gives a provider only its own namespace): a misspelt `rocm-stack:hosts` would
    # silently deploy the default host instead.
    code, err, _ = run(tmp_path, f"config:\n  {namespace}:hosts: []\n", capsys=capsys)
    assert code == 2
    assert err == (
        f"rocm-stack: '{namespace}:hosts' is in the namespace '{namespace}', which this program never "
        f"reads; did you mean 'rocm-stack:hosts'?\n"
    )


def test_provider_and_engine_namespaces_pass(tmp_path, capsys):
    # pulumi_docker/config/vars.py (docker:host, docker:sshOpts), pulumi_kubernetes (kubernetes:context),
    # the engine's pulumi:tags (sdk/go/common/workspace/project.go L1390).
    code, err, _ = run(
        tmp_path,
        "config:\n  docker:host: unix:///var/run/docker.sock\n  kubernetes:context: kind\n"
        "  pulumi:tags: {team: ml}\n  aws:region: eu-west-1\n",
        capsys=capsys,
    )
    assert code == 0, err


# --- secrets: `secure:` at any depth ---------------------------------------------------------------------------


def test_a_nested_secure_value_makes_its_top_level_key_secret(tmp_path):
    # config object.go L540-550 isSecureValue (a one-key `secure` mapping of text, at any depth); the program
    # gets the object with the value decrypted inline and only the top-level key in PULUMI_CONFIG_SECRET_KEYS
    # (map.go L104-113 SecureKeys; source_eval.go L217-223).
    config = config_of(
        tmp_path,
        "config:\n  rocm-stack:hosts:\n    - name: a\n      containers:\n"
        "        - name: c\n          env:\n            API_KEY:\n"
        "              secure: v1:AAAA\n            N: 3\n",
    )
    values, secret_keys = as_program_config(config)
    assert secret_keys == [P + "hosts"]
    assert json.loads(values[P + "hosts"])[0]["containers"][0]["env"] == {"API_KEY": SECRET_PLACEHOLDER, "N": 3}


def test_what_pulumi_config_set_path_secret_writes_is_accepted(tmp_path, capsys):
    """The policy pack's fix for a plain credential is `pulumi config set --path --secret KEY.PATH`, which writes
    the nested `secure:` below (pkg/cmd/pulumi/config/config.go L850-861, Map.Set; object.go marshalObject)."""
    text = (
        "config:\n  rocm-stack:environment: prod\n  rocm-stack:hosts:\n    - name: box\n"
        "      docker: {host: 'ssh://deploy@box.example.internal'}\n      gpuAccess: all\n"
        "      containers:\n        - name: shell\n          env:\n            API_KEY:\n"
        "              secure: v1:AAAAencrypted\n"
        "  rocm-stack:grafanaAdminPassword:\n    secure: v1:AAAAencrypted\n"
    )
    code, err, out = run(tmp_path, text, stack="prod", capsys=capsys)
    assert code == 0, err
    assert "v1:AAAA" not in (out / "plan.json").read_text()


def test_a_plain_credential_in_prod_names_the_fix(tmp_path, capsys):
    text = (
        "config:\n  rocm-stack:environment: prod\n  rocm-stack:monitoring: {host: false}\n  rocm-stack:hosts:\n"
        "    - name: box\n      docker: {host: 'ssh://deploy@box.example.internal'}\n      gpuAccess: all\n"
        "      containers:\n        - name: shell\n          env: {API_KEY: abc123}\n"
    )
    code, err, _ = run(tmp_path, text, stack="prod", capsys=capsys)
    assert code == 2
    assert (
        "rocm-stack:hosts[0].containers[0].env.API_KEY: holds a credential in plain text ('API_KEY' is named like a "
        "credential), which prod refuses; run `pulumi config set --path --secret "
        "'rocm-stack:hosts[0].containers[0].env.API_KEY' VALUE` (synth alone: write `{secure: v1:REPLACE-ME}` there in "
        "the stack file) to store it encrypted, or give a file's path (rule no-plaintext-secrets-in-config)"
    ) in err.splitlines()
    # What the message says for synth alone is what synth takes (issue 24 item 4).
    followed = text.replace("abc123", "{secure: v1:REPLACE-ME}")
    (tmp_path / "followed").mkdir()
    code, err, _ = run(tmp_path / "followed", followed, stack="prod", capsys=capsys)
    assert code == 0, err


def test_no_internal_placeholder_in_messages(tmp_path, capsys):
    code, err, _ = run(tmp_path, "config:\n  rocm-stack:environment: {secure: v1:AAAA}\n", capsys=capsys)
    assert code == 2
    assert err == "rocm-stack:environment: expected 'dev' or 'prod' (got '[secret]')\n"


# --- the output folder -----------------------------------------------------------------------------------------


def test_out_deletes_only_what_synth_wrote(tmp_path, capsys, dev_plan):
    out = tmp_path / "out"
    synth.write(dev_plan, out)
    (out / "notes.txt").write_text("mine")
    (out / "manifests" / "mine.yaml").write_text("kind: Mine\n")
    (out / "sub").mkdir()
    (out / "sub" / "keep.txt").write_text("mine")
    written = set((out / ".synth-manifest").read_text().splitlines()[1:])
    assert "monitoring/prometheus.yml" in written and "plan.json" in written
    without = type(dev_plan)(dev_plan.project, dev_plan.stack, [], {}, {})
    synth.write(without, out)
    assert (out / "notes.txt").read_text() == "mine" and (out / "manifests" / "mine.yaml").is_file()
    assert (out / "sub" / "keep.txt").is_file()
    assert not (out / "monitoring" / "prometheus.yml").exists() and not list((out / "docker").iterdir())
    assert (out / ".synth-manifest").read_text().splitlines()[1:] == ["plan.json"]


def test_out_never_overwrites_a_tracked_file(tmp_path, capsys):
    repository = tmp_path / "repo"
    (repository / "out").mkdir(parents=True)
    (repository / "out" / "plan.json").write_text("{}\n")
    for args in (["init", "-q"], ["add", "out/plan.json"]):
        subprocess.run(["git", "-C", str(repository), *args], check=True, timeout=60)
    code = synth.main(["--stack", "dev", "--out", str(repository / "out")])
    assert code == 2 and (repository / "out" / "plan.json").read_text() == "{}\n"
    assert capsys.readouterr().err == (
        f"{repository}/out/plan.json is a file tracked by git; synth never "
        "overwrites one (choose another --out folder)\n"
    )


@pytest.mark.parametrize("obstacle", ["file", "folder"])
def test_an_unusable_out_is_one_line(tmp_path, capsys, obstacle):
    out = tmp_path / "out"
    if obstacle == "file":
        out.write_text("not a folder")
        expected = f"{out} is a file, not a folder\n"
    else:
        (out / "plan.json").mkdir(parents=True)
        expected = f"{out}/plan.json is a folder where synth writes a file; move it away\n"
    assert synth.main(["--stack", "dev", "--out", str(out)]) == 2
    assert capsys.readouterr().err == expected


def test_environments_under_a_secret_key_stay_secret_in_the_plan():
    """The program learns only that a top-level key is secret (PULUMI_CONFIG_SECRET_KEYS; map.go L104-113), not
    which nested value was: every environment declared under a secret `hosts`, `training` or `inference` key is
    a Pulumi secret (encrypted in the state), and the other containers' stay readable in `pulumi preview`."""
    from conftest import CONTAINER, stack_file

    config = stack_file("dev")
    config[P + "inference"][0]["env"] = {"API_TOKEN": {"secure": "v1:AAAA"}}
    plan = synth.synthesize("dev", config)
    containers = {r["name"]: r["inputs"] for r in plan.of_type(CONTAINER) if "envs" in r["inputs"]}
    assert containers["workstation-serve"]["envs"] == synth.SECRET  # DockerVllm, from the secret `inference`
    assert isinstance(containers["workstation-train"]["envs"], list)  # DockerTraining: `training` is plain
    # On Kubernetes the workload's environment goes into a Secret the pod refers to; the pod spec stays readable.
    secret = plan.get("kubernetes:core/v1:Secret", "qwen-small-env")["inputs"]
    assert secret["stringData"] == synth.SECRET and "name" not in secret["metadata"]  # auto-named (pods.env_secret)
    pod = plan.get("kubernetes:apps/v1:Deployment", "qwen-small")["inputs"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["API_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "API_TOKEN" and "value" not in env["API_TOKEN"]
    assert env["HF_HOME"]["value"] == "/root/.cache/huggingface"

    config = stack_file("dev")
    config[P + "hosts"][0]["containers"][0]["env"] = {"API_TOKEN": {"secure": "v1:AAAA"}}
    containers = {
        r["name"]: r["inputs"] for r in synth.synthesize("dev", config).of_type(CONTAINER) if "envs" in r["inputs"]
    }
    # Every partition's container and GPU check is then secret; the host preflight has no environment of the stack.
    assert len(containers) > 2
    assert {name for name, inputs in containers.items() if inputs["envs"] != synth.SECRET} == {"workstation-preflight"}


def test_the_synth_alone_advice_of_a_missing_secret_synthesizes():
    """A synth-only user cannot run `pulumi config set --secret`; the message's other advice works (issue 24 item 4)."""
    import re

    import yaml

    from conftest import refusal, stack_file
    from tools.synth import synthesize

    config = stack_file("dev")
    config["rocm-stack:inference"][0]["model"] = "meta-llama/Llama-3.1-8B-Instruct"  # gated: needs the token
    message = refusal("dev", config)
    (snippet,) = re.findall(r"synth alone: `([^`]+)` in the stack file", message)
    config.update(yaml.safe_load(snippet))
    assert synthesize("dev", config).outputs
