"""The catalogue's rules on credentials and code: secrets only as Pulumi secrets, none on a command line, vLLM only
behind its authenticating proxy, a model repository's code only where the config opts in."""

from __future__ import annotations

from . import (
    CONTAINER,
    command_line_problems,
    environment_credential_problems,
    exposed_vllm_problems,
    plaintext_secrets,
    remote_code_problems,
)
from .docker_hosts import host, hosts, partition
from .kubernetes import DEPLOYMENT, deployment, inference
from .rule import EVERY_ENVIRONMENT, PROD, Declared, Example, Rule


def with_container(**fields: object) -> dict[str, object]:
    """A stack config of one host `h1` whose partition `a` has `fields` (env, command, ...)."""
    return hosts(host({"name": "a", "gpus": [0], **fields}))


def command_example(description: str, command: list[str]) -> Example:
    """The same container command as the config says it (partition `a` of host `h1`) and as the plan declares it."""
    return Example(
        description,
        with_container(command=command),
        (Declared(CONTAINER, "a", partition("a", (0,), command=command)),),
    )


NO_PLAINTEXT_SECRETS_IN_CONFIG = Rule(
    id="no-plaintext-secrets-in-config",
    statement="Stack config values that are credentials (by the key's name: password, token, api key, PGPASSWORD...; "
    "or by the value's shape: a known token prefix, a URL with a password) are Pulumi secrets, and no secret sits in "
    "a command line (command, args, extraArgs).",
    reason="A plain value stays readable in the stack file, the repository's history and the state; `pulumi config "
    "set --secret` encrypts it (www.pulumi.com/docs/iac/concepts/secrets/). A secret inside a command line is "
    "decrypted into the container's spec, which `docker inspect` and the pod show in plain text. Only the stack "
    "file says which values are `secure:`: the pack reads it (the engine hands the pack every value decrypted). The "
    "config loader refuses in prod; the pack reports in every environment.",
    environments=EVERY_ENVIRONMENT,
    config_keys=("any key (env maps included)", "command[i], args[i], extraArgs[i]"),
    plan_fields=("none: the stack file",),
    check=plaintext_secrets,
    scope="stack",
    passing=(Example("no credential", with_container(env={"LOG_LEVEL": "info"}), ()),),
    failing=(Example("a password in plain text", with_container(env={"PGPASSWORD": "hunter2"}), ()),),
)

PROD_NO_PLAINTEXT_CREDENTIALS_IN_ENVIRONMENT = Rule(
    id="prod-no-plaintext-credentials-in-environment",
    statement="In prod no container's environment holds a credential (by the variable's name or the value's shape, "
    "the config's rule) that is not one of the stack's Pulumi secrets: as the plan declares it, whatever the stack "
    "file says.",
    reason="no-plaintext-secrets-in-config judges what the stack file says; this judges what the program declares, "
    "whatever put the value there (a default, an edit of the program, a config kept outside the stack file). The "
    "SDK hands the pack every input decrypted (pulumi/pulumi-policy v1.21.0 sdk/python/lib/pulumi_policy/deserialize.py deserialize_properties, called by policy.py), so a value is "
    "a secret when it is the text of one of the stack file's `secure:` values. The config's side is "
    "no-plaintext-secrets-in-config.",
    environments=PROD,
    config_keys=(),
    plan_fields=("Container envs", "pod templates' containers[].env[].value"),
    check=environment_credential_problems,
    scope="stack",
    passing=(Example("no credential", {}, (Declared(CONTAINER, "a", partition("a", (0,), envs=["LOG_LEVEL=info"])),)),),
    failing=(
        Example(
            "a password the stack holds in no secret",
            None,
            (Declared(CONTAINER, "a", partition("a", (0,), envs=["PGPASSWORD=hunter2"])),),
        ),
    ),
)

NO_CREDENTIALS_ON_COMMAND_LINES = Rule(
    id="no-credentials-on-command-lines",
    statement="In prod no container's command line carries a credential (a credential flag such as --api-key, or a "
    "value shaped like a token or a URL with a password), and every argument and environment value can be passed to "
    "a process (no NUL byte, under MAX_ARG_STRLEN).",
    reason="A command line is readable by every process of the host (/proc/<pid>/cmdline) and in the container's "
    "spec, and vLLM logs its non-default arguments at start-up (vllm-project/vllm vllm/entrypoints/utils.py "
    "log_non_default_args); vLLM takes its key from VLLM_API_KEY instead. execve takes C strings and refuses an "
    "argument of MAX_ARG_STRLEN (131072 bytes) or more with E2BIG (linux include/uapi/linux/binfmts.h). The config "
    "loader refuses a credential flag in every environment (docs/security.md states it without condition), the "
    "rest in prod.",
    environments=PROD,
    config_keys=("command", "args", "inference[].extraArgs", "any text (NUL, length)"),
    plan_fields=("Container entrypoints, command, envs", "pod templates' containers[].command, args, env"),
    check=command_line_problems,
    scope="resource",
    passing=(command_example("the key in the environment", ["python", "serve.py", "--port", "8000"]),),
    failing=(command_example("a key on the command line", ["python", "serve.py", "--api-key", "abc"]),),
)

REMOTE_CODE_OPT_IN = Rule(
    id="remote-code-opt-in",
    statement="In prod a model repository's code runs (--trust-remote-code) only in the servers of an inference "
    "workload whose stack config opts in (inference[].trustRemoteCode: true), never elsewhere.",
    reason="`--trust-remote-code` runs the model repository's Python code in the server with the server's access "
    "(huggingface.co/docs/transformers/models#custom-models: 'only use it with repositories you trust'); vLLM also "
    "reads `--trust_remote_code` and `=value` (its argparse). The opt-in names the workload, so the flag reaches its "
    "servers alone. The config loader refuses the flag written by hand in every environment.",
    environments=PROD,
    config_keys=("inference[].trustRemoteCode", "command", "args", "inference[].extraArgs"),
    plan_fields=("Container command (partition label)", "pod templates' command, args (app.kubernetes.io labels)"),
    check=remote_code_problems,
    scope="stack",
    passing=(command_example("no remote code", ["vllm", "serve", "m"]),),
    failing=(command_example("the flag written by hand", ["vllm", "serve", "m", "--trust-remote-code"]),),
)

PROD_VLLM_BEHIND_PROXY = Rule(
    id="prod-vllm-behind-proxy",
    statement="In prod no vLLM server is reachable but through its authenticating proxy (Docker: no published port "
    "of its own; Kubernetes: listening on the pod's loopback).",
    reason="vLLM's own key guards only paths under /v1 (vllm/entrypoints/openai/api_server.py @ v0.11.2, "
    "build_app): /invocations, /tokenize and /pooling answer anyone who reaches it (vllm-project/vllm#58144), and a "
    "Host header passes its middleware before vLLM 0.22 (GHSA-94f4-hr76-p5j6). The proxy needs the key: prod "
    "requires `vllmApiKey` as a Pulumi secret, a Bearer token (RFC 6750 section 2.1).",
    environments=PROD,
    config_keys=("vllmApiKey",),
    plan_fields=("Container command (vllm serve), ports", "pod templates' vllm serve --host"),
    check=exposed_vllm_problems,
    scope="resource",
    passing=(
        Example(
            "the key set: vLLM on loopback behind the proxy",
            inference(),
            (Declared(DEPLOYMENT, "llama", deployment(command=["vllm", "serve", "m", "--host", "127.0.0.1"])),),
        ),
    ),
    failing=(
        Example(
            "no key: vLLM on every address",
            {k: v for k, v in inference().items() if k != "vllmApiKey"},
            (Declared(DEPLOYMENT, "llama", deployment(command=["vllm", "serve", "m"])),),
        ),
    ),
)

RULES = (
    NO_PLAINTEXT_SECRETS_IN_CONFIG,
    PROD_NO_PLAINTEXT_CREDENTIALS_IN_ENVIRONMENT,
    NO_CREDENTIALS_ON_COMMAND_LINES,
    REMOTE_CODE_OPT_IN,
    PROD_VLLM_BEHIND_PROXY,
)
