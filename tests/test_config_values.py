"""Values a deploy would reject (or silently misread) are refused when the config is loaded, naming the key.

Issue 15 section 2 and issue 11 item 5. Each case says which outside rule it holds the config to.
"""

from __future__ import annotations

import pytest

from conftest import stack_file
from schema import ConfigError, decode, load
from schema.stackfile import as_program_config
from tools.synth import synthesize

P = "rocm-stack:"
TOPOLOGY = "tests/data/topology/handwritten_rocm_smi_8x_mi300x.txt"


def problems(stack: str, config: dict) -> list[str]:
    with pytest.raises(ConfigError) as error:
        load(stack, config)
    return [str(p) for p in error.value.problems]


def hosts(*containers: dict, **host: object) -> dict:
    return {P + "hosts": [{"name": "h1", "gpus": 8, **host, "containers": list(containers)}]}


# (stack, config, the whole line expected among the problems)
REFUSED = {
    # pydantic's lax mode reads `true` as 1: `gpus: true` was one GPU.
    "boolean gpus": (
        "dev",
        {P + "hosts": [{"name": "h1", "gpus": True}]},
        "hosts[0].gpus: expected a number, got the boolean true",
    ),
    "quoted number": (
        "dev",
        hosts({"name": "a", "gpuCount": "4"}),
        "hosts[0].containers[0].gpuCount: expected a number, got the text '4'; write it without quotes",
    ),
    "boolean in a list of GPUs": (
        "dev",
        hosts({"name": "a", "gpus": [0, True]}),
        "hosts[0].containers[0].gpus[1]: expected a number, got the boolean true",
    ),
    # yaml.v3 (resolve.go L52-53) reads `yes` as text; pydantic would then take the text 'yes' for true.
    "yes as a switch": (
        "dev",
        {P + "security": {"allowDebugInProd": "yes"}},
        "security.allowDebugInProd: expected true or false, got the text 'yes'",
    ),
    "boolean meant as a word": (
        "dev",
        hosts({"name": "a", "restart": False}),
        "hosts[0].containers[0].restart: expected text, got the boolean false; write it in "
        "quotes ('false') if you mean the word (YAML reads unquoted true/false as a boolean)",
    ),
    "size without unit": (
        "dev",
        hosts({"name": "a", "shmSize": 64}),
        "hosts[0].containers[0].shmSize: 64 without a unit is 64 bytes, less than 1MiB; write the unit, e.g. 64GiB",
    ),
    # Docker CLI cli/connhelper/ssh/ssh.go ParseURL takes u.Hostname() and u.Port() from Go's net/url, whose
    # port is the text after the last ':' (RFC 3986 3.2.2: an IPv6 literal is written in brackets).
    "ssh port out of range": (
        "dev",
        {P + "hosts": [{"name": "h1", "docker": {"host": "ssh://deploy@gpu1:99999"}}]},
        "hosts[0].docker.host: the port of 'ssh://deploy@gpu1:99999' must be a number from 1 to 65535",
    ),
    "ssh port not a number": (
        "dev",
        {P + "hosts": [{"name": "h1", "docker": {"host": "ssh://gpu1:ssh"}}]},
        "hosts[0].docker.host: the port of 'ssh://gpu1:ssh' must be a number from 1 to 65535",
    ),
    "unbracketed ipv6": (
        "dev",
        {P + "hosts": [{"name": "h1", "docker": {"host": "ssh://deploy@fd00::1"}}]},
        "hosts[0].docker.host: an IPv6 address goes in brackets: ssh://deploy@[fd00::1] "
        "(with a port: ssh://deploy@[fd00::1]:22) (got 'ssh://deploy@fd00::1')",
    ),
    "tcp without port": (
        "dev",
        {P + "hosts": [{"name": "h1", "docker": {"host": "tcp://gpu1"}}]},
        "hosts[0].docker.host: tcp:// needs a port, e.g. tcp://gpu1:2376 (got 'tcp://gpu1')",
    ),
    # numaCpus is read only to give a partition its NUMA node's CPUs, which needs the topology file.
    "numaCpus without topology": (
        "dev",
        {P + "hosts": [{"name": "h1", "gpus": 8, "numaCpus": {0: "0-47"}}]},
        "hosts[0].numaCpus: is used with `topology` (the saved file that says which NUMA "
        "node each GPU is on); add `topology` or remove numaCpus",
    ),
    # moby daemon/daemon_unix.go verifyPlatformContainerResources refuses CPUs the host does not have
    # ("Requested CPUs are not available").
    "cpuset beyond the host's CPUs": (
        "dev",
        hosts({"name": "a", "gpus": [0], "cpuset": "0-3,200"}, topology=TOPOLOGY, numaCpus={0: "0-95", 1: "96-191"}),
        "hosts[0].containers[0].cpuset: CPU 200 is not a CPU of host 'h1' (its numaCpus list 0-191)",
    ),
    # A second container binding a published host port does not start: "Bind for 0.0.0.0:8080 failed: port is
    # already allocated" (moby libnetwork portallocator ErrPortAlreadyAllocated).
    "duplicate published port": (
        "dev",
        hosts(
            {"name": "a", "gpus": [0], "ports": [{"internal": 80, "external": 8090}]},
            {"name": "b", "gpus": [1], "ports": [{"internal": 81, "external": 8090}]},
        ),
        "hosts[0].containers[1].ports[0].external: host port 8090 of 'h1' is already "
        "published by container 'a'; choose another external port",
    ),
    "port on the exporter's": (
        "dev",
        hosts({"name": "a", "ports": [{"internal": 80, "external": 5000}]}),
        "hosts[0].containers[0].ports[0].external: host port 5000 of 'h1' is already published "
        "by the GPU metrics exporter (monitoring.exporterPort); choose another external port",
    ),
    # docker/go-connections nat/nat.go ParsePortSpec: net.ParseIP, else "invalid IP address".
    "port ip not an address": (
        "dev",
        hosts({"name": "a", "ports": [{"internal": 80, "ip": "localhost"}]}),
        "hosts[0].containers[0].ports[0].ip: expected an IP address such as 0.0.0.0, 127.0.0.1 "
        "or ::1 (got 'localhost')",
    ),
    "inference ip not an address": (
        "dev",
        {
            P + "inference": [
                {
                    "name": "q",
                    "model": "Qwen/Qwen2.5-0.5B-Instruct",
                    "docker": {"partitions": ["local/rocm-dev"], "ip": "0.0.0.0:8000"},
                }
            ]
        },
        "inference[0].docker.ip: expected an IP address such as 0.0.0.0, 127.0.0.1 or ::1 (got '0.0.0.0:8000')",
    ),
    # POSIX.1-2017 Base Definitions 8.1 (names of letters, digits and '_', not starting with a digit, no '=').
    "env name with a dash": (
        "dev",
        hosts({"name": "a", "env": {"MY-VAR": "1"}}),
        "hosts[0].containers[0].env.MY-VAR: expected an environment variable name: letters, "
        "digits and '_', not starting with a digit (got 'MY-VAR')",
    ),
    "env name with '='": (
        "dev",
        hosts({"name": "a", "env": {"A=B": "1"}}),
        "hosts[0].containers[0].env.A=B: expected an environment variable name: letters, digits and "
        "'_', not starting with a digit (got 'A=B')",
    ),
    "env name starting with a digit": (
        "dev",
        hosts({"name": "a", "env": {"1X": "1"}}),
        "hosts[0].containers[0].env.1X: expected an environment variable name: "
        "letters, digits and '_', not starting with a digit (got '1X')",
    ),
    "empty containers": ("dev", hosts(), "hosts[0].containers: must have at least 1 item(s)"),
    # The DeviceConfig CRD takes one unit only: amd.com_deviceconfigs.yaml (shared/reference/amd-gpu-operator)
    # L1001 `pattern: ^([0-9]+)(ms|s|m|h)$` for metricsExporter.prometheus.serviceMonitor.interval. The Docker-side
    # scrape interval and the serviceMonitor's are one type (schema/types.py UnitDuration), so both refuse alike.
    "two-unit scrape interval": (
        "dev",
        {P + "monitoring": {"scrapeInterval": "1m30s"}},
        "monitoring.scrapeInterval: expected a number and one unit (ms, s, m or h), e.g. 30s (got '1m30s')",
    ),
    "two-unit serviceMonitor interval": (
        "dev",
        {
            P + "kubernetes": {
                "gpuOperator": {"deviceConfig": {"metricsExporter": {"serviceMonitor": {"interval": "1m30s"}}}}
            }
        },
        "kubernetes.gpuOperator.deviceConfig.metricsExporter.serviceMonitor.interval: expected a number and one unit "
        "(ms, s, m or h), e.g. 30s (got '1m30s')",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_at_config_time(case):
    stack, config, line = REFUSED[case]
    assert f"{P}{line}" in problems(stack, config)


def test_bracketed_ipv6_is_accepted_and_scraped_in_brackets():
    # Prometheus targets are host:port, an IPv6 host in brackets (the unbracketed form yielded target `fd00`).
    plan = synthesize("dev", {P + "hosts": [{"name": "h1", "docker": {"host": "ssh://deploy@[fd00::1]:2222"}}]})
    assert "- '[fd00::1]:5000'" in plan.outputs["prometheusScrapeConfig"].splitlines()[6]


def test_published_port_on_another_address_is_no_clash():
    # Docker binds 127.0.0.1:8080 and 10.0.0.1:8080 separately; only 0.0.0.0 takes every address. The check
    # compares host ports only, which is stricter: two containers on one host port are refused whatever the ip.
    config = hosts(
        {"name": "a", "gpus": [0], "ports": [{"internal": 80, "external": 8090, "ip": "127.0.0.1"}]},
        {"name": "b", "gpus": [1], "ports": [{"internal": 80}]},
    )
    assert load("dev", config).hosts[0].containers[0].ports[0].ip == "127.0.0.1"


@pytest.mark.parametrize(
    "stack, environment",
    [
        ("prod", "prod"),
        ("prod-eu", "prod"),
        # Issue 34 item 11: each of these was judged dev.
        ("Prod", "prod"),
        ("PROD", "prod"),
        ("prod_eu", "prod"),
        ("prod.eu", "prod"),
        ("eu-prod", "prod"),
        ("euProd", "prod"),
        ("production", "prod"),
        ("Production-EU", "prod"),
        ("acme/rocm-stack/PROD", "prod"),
        # `prod` is a word of the name, not any part of a word.
        ("product-demo", "dev"),
        ("preprod", "dev"),
        ("reproduce", "dev"),
        ("dev", "dev"),
        ("org/rocm-stack/prod", "prod"),
    ],
)
def test_a_stack_with_the_word_prod_or_production_in_its_name_is_prod(stack, environment, tmp_path):
    """Pulumi stack names hold letters, digits, `-`, `_` and `.` (`pulumi stack init --help`); a person reads
    `prod_eu`, `eu.prod` and `PROD` as prod. The program's config loader and the pack (from PULUMI_STACK and from
    the resources' URNs) judge with one function, rules.is_prod_stack."""
    from policy.rocm_policy import pack

    assert load(stack, {}).environment == environment
    # The policy pack's enforcement level follows the same rule (rules/stacks.py environment_of).
    assert pack.stack_context(environ={"PULUMI_STACK": stack}).environment == environment
    urn = f"urn:pulumi:{stack.rsplit('/', 1)[-1]}::rocm-stack::pulumi:pulumi:Stack::rocm-stack-x"
    assert pack.stack_context(urns=[urn], environ={}).environment == environment
    if environment == "prod":
        (laxer,) = problems(stack, {P + "environment": "dev"})
        assert "cannot make it laxer" in laxer


def test_config_makes_a_stack_stricter_never_a_prod_stack_laxer():
    """Issue 27 item 1: `environment: dev` switched every prod rule off on the stack `prod`."""
    assert load("product-demo", {P + "environment": "dev"}).environment == "dev"
    assert load("lab", {P + "environment": "prod"}).environment == "prod"
    assert "environment" in problems("dev", {P + "environment": "production"})[0]
    for stack in ("prod", "prod-eu", "acme/rocm-stack/prod"):
        (laxer,) = problems(stack, {P + "environment": "dev"})
        assert laxer.startswith("rocm-stack:environment: stack ") and "cannot make it laxer: remove" in laxer


def test_kubernetes_only_stack_gets_no_docker_host():
    cfg = load("dev", {P + "kubernetes": {"mode": "operator"}})
    assert cfg.hosts == []
    assert [h.name for h in load("dev", {}).hosts] == ["local"]  # neither layer declared: the local host
    plan = synthesize("dev", {P + "kubernetes": {"mode": "operator"}})
    assert not plan.of_type("pulumi:providers:docker")


def test_plain_credentials_in_prod_are_the_policy_packs_findings():
    """One definition: the paths refused at config time are exactly those the pack's no-plaintext-secrets-in-config
    rule reports for the same stack file (rules/secrets.py plaintext_secrets)."""
    import rules

    config = stack_file("prod")
    containers = config[P + "hosts"][0]["containers"]
    containers[0]["env"] = {"API_KEY": "abc", "WANDB_API_KEY": "k", "HF_TOKEN_PATH_NOT": "x", "MODE": "fast"}
    # Already a secret (the whole top-level key is then secret to the program: the CLI lists no deeper path).
    config[P + "inference"][0]["env"] = {"DB_PASSWORD": {"secure": "v1:AAAA"}}
    values, secret_keys = as_program_config(config)
    with pytest.raises(ConfigError) as error:
        load("prod", {k: decode(v) for k, v in values.items()}, secret_keys)
    refused = {f"{P}{p.path}" for p in error.value.problems if "credential in plain text" in p.message}
    plain_config = {k: v for k, v in config.items() if k not in secret_keys}
    assert (
        refused
        == {path for path, _ in rules.plaintext_secrets(plain_config)}
        == {f"{P}hosts[0].containers[0].env.API_KEY", f"{P}hosts[0].containers[0].env.WANDB_API_KEY"}
    )


def test_plain_credentials_pass_in_dev():
    assert load("dev", hosts({"name": "a", "env": {"API_KEY": "abc"}}))


def test_messages_are_sentences():
    """No pydantic prefixes or regular expressions reach the user, for every refused case above."""
    for stack, config, _ in REFUSED.values():
        for line in problems(stack, config):
            assert "Value error" not in line and "String should match" not in line and "^" not in line, line
            assert "Input should" not in line, line


def test_host_access_rules_are_prods_only():
    """The end-to-end tests' stand-in device nodes (devicePaths), a workstation's own mounts and several host entries
    on the local socket stay possible in dev; prod refuses them (tests/attacks)."""
    workstation = {
        P + "hosts": [
            {
                "name": name,
                "devicePaths": {"kfd": "/tmp/standin/kfd", "dri": "/tmp/standin/dri"},
                "containers": [{"name": "a", "volumes": [{"hostPath": "/var/run/docker.sock", "containerPath": "/s"}]}],
            }
            for name in ("h1", "h2")
        ]
    }
    assert load("dev", workstation).hosts[0].device_paths.kfd == "/tmp/standin/kfd"
    refused = problems("prod", {**workstation, P + "security": {"profile": "hardened"}})
    for key in (
        "hosts[0].devicePaths.kfd",
        "hosts[0].devicePaths.dri",
        "hosts[0].containers[0].volumes[0].hostPath",
        "hosts[1].docker.host",
    ):
        assert any(p.startswith(f"rocm-stack:{key}: ") for p in refused), (key, refused)


def test_workload_mounts_and_ports_follow_the_host_access_rules():
    """The host directories Docker workloads bind (checkpoints, model caches) and the API port they publish."""
    config = stack_file("prod")
    config[P + "training"][0]["docker"]["checkpointDir"] = "/etc/rocm"
    config[P + "inference"][0]["docker"].update(modelCacheDir="/var/lib/docker/hf", publishedPort=22)
    values, secret_keys = as_program_config(config, {P + "vllmApiKey": "k", P + "huggingfaceToken": "t"})
    with pytest.raises(ConfigError) as error:
        load("prod", {k: decode(v) for k, v in values.items()}, secret_keys)
    refused = {p.path: p.message for p in error.value.problems}
    assert "system path /etc" in refused["training[0].docker.checkpointDir"]
    assert "system path /var/lib/docker" in refused["inference[0].docker.modelCacheDir"]
    assert "publishes SSH" in refused["inference[0].docker.publishedPort"]


# Python's argparse with allow_abbrev left at True, as vLLM's FlexibleArgumentParser leaves it (an ArgumentParser
# subclass that passes its keyword arguments through: vllm-project/vllm vllm/utils/argparse_utils.py); these are the
# options the rules judge and neighbours vLLM has that share a prefix with them (vllm/engine/arg_utils.py,
# vllm/entrypoints/openai/cli_args.py).
VLLM_LIKE_OPTIONS = ("--host", "--port", "--api-key", "--api-server-count", "--trust-remote-code", "--hf-token")


@pytest.mark.parametrize(
    "arg, selects",
    [
        ("--hos", "--host"),
        ("--host", "--host"),
        ("--ho=0.0.0.0", "--host"),
        ("--trust-remote", "--trust-remote-code"),
        ("--trust_remote", "--trust-remote-code"),  # vLLM turns `_` into `-` before argparse
        ("--api-ke=x", "--api-key"),
        ("--hf-tok=x", "--hf-token"),
        ("--por", "--port"),
        ("--api-", None),  # ambiguous: argparse refuses it
        ("--hostname", None),
    ],
)
def test_vllm_arguments_are_judged_as_its_parser_reads_them(arg, selects):
    """Issue 34 item 8: `--hos 0.0.0.0`, `--trust-remote` and `--api-ke=` passed the rules, which compared names
    exactly. Python's argparse ("allow_abbrev: Allows long options to be abbreviated if the abbreviation is
    unambiguous", https://docs.python.org/3/library/argparse.html#allow-abbrev) run here on vLLM-like options: the
    option it selects is one rules.vllm_options finds (which also names each option of an ambiguous prefix)."""
    import argparse

    import rules

    parser = argparse.ArgumentParser(exit_on_error=False)
    for option in VLLM_LIKE_OPTIONS:
        parser.add_argument(option, nargs="?", const="set")
    name, equals, value = arg.partition("=")
    try:  # vLLM's parse_args turns `_` into `-` in the name first
        parsed = vars(parser.parse_args([name.replace("_", "-") + equals + value]))
        chosen = next(o for o in VLLM_LIKE_OPTIONS if parsed[o[2:].replace("-", "_")] is not None)
    except (argparse.ArgumentError, SystemExit):  # ambiguous or unknown: argparse refuses the command line
        chosen = None
    assert chosen == selects
    found = rules.vllm_options(arg, VLLM_LIKE_OPTIONS)
    assert selects in found if selects else len(found) != 1


@pytest.mark.parametrize("stack", ["dev", "prod"])
@pytest.mark.parametrize(
    "arg, text",
    [
        ("--hos", "is derived from port / tensorParallelSize / gpus / revision"),
        ("--por=9000", "is derived from port / tensorParallelSize / gpus / revision"),
        ("--trust-remote", "runs the model repository's code"),
        ("--api-ke=abc", "'--api-ke' passes a credential on the command line"),
        ("--hf_tok=abc", "'--hf_tok' passes a credential on the command line"),
    ],
)
def test_abbreviated_vllm_flags_in_extra_args_are_refused_in_every_environment(stack, arg, text):
    """The extraArgs reference states them unconditionally (no `--api-key`, no `--trust-remote-code`, nothing the
    keys derive), so dev refuses them too; abbreviated, as vLLM reads them."""
    config = stack_file("dev")
    config.pop(P + "environment")
    config[P + "inference"][0]["extraArgs"] = [arg]
    found = problems(stack, config)
    assert any(line.startswith(P + "inference[0].extraArgs[0]: ") and text in line for line in found), found
