"""The rules on credentials and code: vLLM's API key and the strength and form of the secrets a person chooses,
vLLM only behind its proxy, credentials by name and shape, none on a command line or in a plain environment,
texts a process can carry, and a model repository's code only where the config opts in."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .containers import partition_of
from .plan import CONTAINER, _containers, _dig, _mapping, _sequence, pod_specs
from .stacks import _words

_CREDENTIAL_WORDS = frozenset(
    {"password", "passwd", "passphrase", "token", "credential", "credentials", "pat", "apikey"}
)
# One-word names that end in a credential word: PGPASSWORD (libpq's environment variable), GHTOKEN.
_CREDENTIAL_SUFFIXES = ("password", "passwd", "token", "apikey", "secret")
# Last words that make an environment-style name (`OPENAI_KEY`, `AWS_SECRET`, `BASIC_AUTH`) a credential; in a
# camelCase config key they are too common (a taint's `key`, `secretName`).
_ENV_CREDENTIAL_WORDS = frozenset({"key", "secret", "auth"})
_CREDENTIAL_PAIRS = frozenset(
    {
        ("api", "key"),
        ("access", "key"),
        ("private", "key"),
        ("secret", "key"),
        ("client", "secret"),
        ("webhook", "secret"),
    }
)


# --- vLLM's API key and exposure ----------------------------------------------------------------------------

# RFC 6750 §2.1 `b64token`, what a Bearer credential may be: letters, digits, - . _ ~ + / and trailing = padding.
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def api_key_problem(key: str) -> str | None:
    """Why `key` cannot be vLLM's API key (`rocm-stack:vllmApiKey`, which the proxy in front of vLLM compares), or
    None. The config loader applies it to the value; the pack sees only that the key is a secret."""
    if not key.strip():
        return (
            "is empty, which would leave vLLM without a key; set one with `pulumi config set --secret vllmApiKey <key>`"
        )
    if _BEARER_TOKEN.fullmatch(key) is None:
        return (
            "holds characters a Bearer token cannot carry (RFC 6750 section 2.1: letters, digits and - . _ ~ + /, "
            "then = padding); use e.g. `openssl rand -hex 32`"
        )
    return None


# Prod's floor for the secrets a person chooses (the config loader sees their values; the pack sees only that they
# are secrets). Anyone who reaches the published port may guess the vLLM key as often as nginx answers (no attempt
# limit), so it must carry 128 bits: 32 characters, what `openssl rand -hex 16` prints. Grafana's password guards a
# login that counts failures per user (its brute-force lockout), but `admin` is Grafana's own default
# (conf/defaults.ini `admin_password = admin`) and Grafana applies a GF_* variable only when it is non-empty, so an
# empty one leaves that default (issue 34's review, on the real Grafana): 16 characters and not the default.
API_KEY_MIN_LENGTH = 32
GRAFANA_PASSWORD_MIN_LENGTH = 16


# The secret -> (its floor, a command that makes a strong one).
SECRET_FLOORS = {
    "vllmApiKey": (API_KEY_MIN_LENGTH, "`openssl rand -hex 16`"),
    "grafanaAdminPassword": (GRAFANA_PASSWORD_MIN_LENGTH, "`openssl rand -base64 18`"),
}


def weak_secret_problem(value: str, min_length: int, fix: str) -> str | None:
    """Why `value` is too weak for prod, or None: shorter than `min_length`, or Grafana's default `admin`."""
    if value.strip().lower() == "admin":
        return f"is Grafana's default password `admin`, which prod refuses; {fix}"
    if len(value) < min_length:
        return f"has {len(value)} characters, fewer than the {min_length} prod requires; {fix}"
    return None


def _config_set_secret(key: str) -> str:
    return f"`pulumi config set --secret {key} <value>`"


def weak_secrets(
    values: Mapping[str, Any], how_to_set: Callable[[str], str] = _config_set_secret
) -> list[tuple[str, str]]:
    """(key, why) of each secret of SECRET_FLOORS whose decrypted text (`values`, keys without the namespace) is
    too weak for prod; a value that is no text (unset, or not decrypted) is not judged."""
    problems = []
    for key, (min_length, example) in SECRET_FLOORS.items():
        value = values.get(key)
        fix = f"set a stronger one with {how_to_set(key)} (e.g. {example})"
        if isinstance(value, str) and (problem := weak_secret_problem(value, min_length, fix)):
            problems.append((key, problem))
    return problems


# The PEM block labels nginx's ssl_certificate and ssl_certificate_key take (RFC 7468: CERTIFICATE; PRIVATE KEY for
# PKCS #8, RSA/EC PRIVATE KEY for the older forms OpenSSL also reads).
_PEM_LABELS = {
    "vllmTlsCertificate": ("CERTIFICATE",),
    "vllmTlsKey": ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"),
}


def pem_problem(key: str, text: str) -> str | None:
    """Why `text` is not the PEM that `key` holds (a block of one of its labels), or None."""
    labels = _PEM_LABELS[key]
    if any(f"-----BEGIN {label}-----" in text and f"-----END {label}-----" in text for label in labels):
        return None
    return f"holds no PEM block `-----BEGIN {labels[0]}-----`: give the PEM file's text (`cat file.pem | pulumi config set --secret {key}`)"


def pem_problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) of each of the proxies' TLS secrets whose decrypted text (`values`, keys without the namespace) is
    not PEM of its kind; a value that is no text (unset, or not decrypted) is not judged."""
    return [
        (key, problem)
        for key in _PEM_LABELS
        if isinstance(value := values.get(key), str) and (problem := pem_problem(key, value))
    ]


# vLLM's own key guards only paths under /v1 (vllm/entrypoints/openai/api_server.py @ v0.11.2, build_app); so
# /invocations, /tokenize and /pooling answer anyone who reaches vLLM (vllm-project/vllm#58144), and a Host header
# passes its middleware before vLLM 0.22 (GHSA-94f4-hr76-p5j6). Only the authenticating proxy may reach it.
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _vllm_serve_args(command: Any) -> list[str] | None:
    """The arguments after `vllm serve` in a command (also behind `sh -c ... vllm`), or None: no vLLM server."""
    parts = [str(part) for part in _sequence(command)]
    for index, part in enumerate(parts[:-1]):
        if part.rsplit("/", 1)[-1] == "vllm" and parts[index + 1] == "serve":
            return parts[index + 2 :]
    return None


def _listen_host(args: Sequence[str]) -> str:
    """The address `vllm serve` listens on: the last --host given (or abbreviated), else every address (vLLM's
    default)."""
    return vllm_option_value(args, VLLM_HOST) or "0.0.0.0"


def exposed_vllm_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A vLLM server is reachable only through its authenticating proxy: a Docker container running `vllm serve`
    publishes no host port (the proxy's container does) and listens on the loopback of the proxy's network namespace
    (on an address of a bridge network, a neighbour routing to it through the host reaches it where the FORWARD
    policy is ACCEPT: moby#14041); a pod's vLLM listens on the pod's loopback only (the proxy sidecar holds the pod's
    port)."""
    if resource_type == CONTAINER:
        args = _vllm_serve_args(props.get("command"))
        if args is not None and _sequence(props.get("ports")):
            return [
                "publishes vLLM's own port, whose /invocations, /tokenize and /pooling need no key: publish the "
                "authenticating proxy's port instead (set `rocm-stack:vllmApiKey`)"
            ]
        if args is not None and (host := _listen_host(args)) not in _LOOPBACK:
            return [
                f"serves vLLM on {host}, which a neighbour routing the container's network through the host reaches "
                "around the key (moby#14041); listen on 127.0.0.1 in the proxy's network namespace (set "
                "`rocm-stack:vllmApiKey`)"
            ]
    problems = []
    for where, spec in pod_specs(resource_type, props):
        for container in _containers(spec):
            args = _vllm_serve_args([*_sequence(container.get("command")), *_sequence(container.get("args"))])
            if args is None:
                continue
            if (host := _listen_host(args)) not in _LOOPBACK:
                problems.append(
                    f"{where}container '{container.get('name')}' serves vLLM on {host}, reachable by every pod "
                    "around the key check; listen on 127.0.0.1 behind the authenticating proxy (set "
                    "`rocm-stack:vllmApiKey`)"
                )
    return problems


def is_credential_key(key: str) -> bool:
    """By the name's shape: `registryPassword`, `huggingfaceToken`, `grafana.apiKey`, `PGPASSWORD`, `APIKEY`,
    `GITHUB_PAT`, and an environment-style name ending in KEY, SECRET or AUTH (`OPENAI_KEY`). Not `tokenizer`,
    `secretName`, `maxTokens`, a taint's `key`, `AWS_SHARED_CREDENTIALS_FILE`."""
    name = key.rsplit(":", 1)[-1]
    words = _words(name)
    if not words:
        return False
    last = words[-1]
    env_style = name.isupper() and len(words) > 1
    return (
        last in _CREDENTIAL_WORDS
        or tuple(words[-2:]) in _CREDENTIAL_PAIRS
        or words == ["secret"]
        or last.endswith(_CREDENTIAL_SUFFIXES)  # one word: PGPASSWORD, GHTOKEN, APIKEY
        or (env_style and last in _ENV_CREDENTIAL_WORDS)
    )


# Prefixes of credentials issued by well-known services, with the length that follows, so that a value is found
# whatever key holds it (`DATABASE_URL`, `command`, an `extraArgs` flag):
# GitHub ghp_/gho_/ghu_/ghs_/ghr_ + 36 characters and github_pat_ ("About authentication to GitHub", GitHub's token
# formats: https://docs.github.com/en/authentication/keeping-your-account-and-data-secure/about-authentication-to-github#githubs-token-formats;
# https://github.blog/engineering/platform-security/behind-githubs-new-authentication-token-formats/), GitLab glpat-
# (https://docs.gitlab.com/security/tokens/#token-prefixes), Hugging Face hf_ (https://huggingface.co/docs/hub/security-tokens),
# OpenAI sk- / sk-proj- (https://platform.openai.com/docs/api-reference/authentication), Slack xoxb-/xoxp-/...
# (https://api.slack.com/authentication/token-types) and AWS access key IDs AKIA/ASIA + 16 (IAM "Unique identifiers":
# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-unique-ids).
_TOKEN_SHAPES = (
    ("a GitHub token", re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{30,}")),
    ("a GitHub token", re.compile(r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{22,}")),
    ("a GitLab token", re.compile(r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}")),
    ("a Hugging Face token", re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")),
    ("an OpenAI-style API key", re.compile(r"(?<![A-Za-z0-9-])sk-(?:proj-)?[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}")),
    ("an AWS access key ID", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")),
)
# `scheme://user:password@host` (RFC 3986 section 3.2.1: "Use of the format user:password in the userinfo field is
# deprecated"): the password is in the text itself.
# A scheme is matched only from its first character, possessively: linear in the text's length.
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*+://[^\s/@:]*+:[^\s/@]++@")
# A value that names a file holds no credential itself (`GOOGLE_APPLICATION_CREDENTIALS: /path/key.json`, Google's
# recommended form): absolute, relative to the working or home directory, or a file:// URL.
_FILE_REFERENCE = re.compile(r"(/|\./|\.\./|~/|file://)\S*")
# Not credentials whatever the name: switches and counts (`HF_HUB_DISABLE_IMPLICIT_TOKEN: "1"`).
_NOT_A_SECRET = re.compile(r"[0-9]+|true|false|yes|no|on|off", re.IGNORECASE)


def credential_in_value(value: str) -> str | None:
    """What credential a text holds by its shape ("a GitHub token", "a URL with a password"), or None."""
    if _URL_PASSWORD.search(value):
        return "a URL with a password"
    return next((what for what, shape in _TOKEN_SHAPES if shape.search(value)), None)


def credential_problem(key: str | int, value: Any) -> str | None:
    """Why a plain (not `secure:`) config value is a credential in plain text, or None: its text has a
    credential's shape, or its key is named like one and the value is neither a file path nor a switch."""
    if not isinstance(value, str) or not value:
        return None
    if what := credential_in_value(value):
        return f"holds {what}"
    if isinstance(key, str) and is_credential_key(key):
        if _FILE_REFERENCE.fullmatch(value) or _NOT_A_SECRET.fullmatch(value):
            return None
        return f"'{key.rsplit(':', 1)[-1]}' is named like a credential"
    return None


def is_secure(value: Any) -> bool:
    """A Pulumi secret in a stack file: a mapping whose one key `secure` holds text (config object.go L540-550)."""
    return isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get("secure"), str)


def _leaves(config: Any, path: str = "") -> Iterator[tuple[str, str | int, Any]]:
    """(path, key, value) of every leaf of a config; a `secure:` value is one leaf."""
    items = config.items() if isinstance(config, Mapping) else enumerate(_sequence(config))
    for key, value in items:
        child = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
        if isinstance(value, (Mapping, list)) and not is_secure(value):
            yield from _leaves(value, child)
        else:
            yield child, key, value


def secret_texts(written: Mapping[str, Any], decrypted: Mapping[str, Any]) -> set[str]:
    """The decrypted text of each `secure:` value of a stack file's config (`written`), read at the same place in
    the config the engine hands the pack (`decrypted`, PULUMI_CONFIG: every value decrypted, a structured one as JSON:
    pulumi/pulumi pkg/resource/plugin/analyzer_plugin.go constructEnv, constructConfig)."""

    def walk(w: Any, d: Any) -> Iterator[str]:
        if is_secure(w):
            if isinstance(d, str):
                yield d
        elif isinstance(w, Mapping) and isinstance(d, Mapping):
            for key, value in w.items():
                yield from walk(value, d.get(key))
        elif isinstance(w, list) and isinstance(d, list):
            for w_item, d_item in zip(w, d, strict=False):
                yield from walk(w_item, d_item)

    texts: set[str] = set()
    for key, value in written.items():
        engine = decrypted.get(key)
        if isinstance(value, (Mapping, list)) and not is_secure(value) and isinstance(engine, str):
            try:
                engine = json.loads(engine)
            except ValueError:
                continue
        texts.update(walk(value, engine))
    return texts


def environment_credential_problems(
    resource_type: str, props: Mapping[str, Any], secrets: Collection[str]
) -> list[str]:
    """Each environment variable of a declared container (Docker `envs`, a pod's `env[].value`) that is a credential
    by `credential_problem`, the config loader's rule (its name or its value's shape), and holds none of the stack's
    Pulumi secrets (`secrets`): a credential that a plain config value or the program itself put there."""
    problems = []
    for where, entries in _environments(resource_type, props):
        for entry in entries:
            name, _, value = entry.partition("=")
            if value not in secrets and (why := credential_problem(name, value)):
                problems.append(
                    f"{where}environment variable {name}: {why}, and no Pulumi secret holds it: store it with "
                    "`pulumi config set --path --secret` (or give a file's path)"
                )
    return problems


def plaintext_secrets(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(config path `rocm-stack:registry.password`, why) of each credential that is not a `secure:` value. A list
    item is judged by its text only (`command`, `extraArgs`), as is a Docker endpoint (docker_endpoint_problems
    says more)."""
    return [(path, why) for path, key, value in _leaves(config) if (why := credential_problem(key, value))]


# Keys whose list items become a process's arguments, in plain text in the container's or pod's spec.
ARGUMENT_KEYS = ("command", "args", "extraArgs")


def _arguments(config: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(config path `inference[0].extraArgs[1]`, item) of every item of an argument list (ARGUMENT_KEYS)."""
    items = config.items() if isinstance(config, Mapping) else enumerate(_sequence(config))
    for key, child in items:
        at = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
        if key in ARGUMENT_KEYS and isinstance(child, list):
            yield from ((f"{at}[{i}]", arg) for i, arg in enumerate(child))
        elif isinstance(child, (Mapping, list)) and not is_secure(child):
            yield from _arguments(child, at)


def secrets_in_arguments(config: Mapping[str, Any], is_secret: Callable[[Any], bool] = is_secure) -> list[str]:
    """Config paths of secret values inside an argument list: a Pulumi secret there is decrypted into the command
    line, which the container's spec (`docker inspect`, the pod) shows in plain text while synth shows "[secret]".
    `is_secret` says what a secret looks like: a stack file's `secure:` value, or the placeholder synth hands the
    program."""
    return [path for path, arg in _arguments(config) if is_secret(arg)]


def credential_flags(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(config path, why) of each credential flag in an argument list (credential_flag_problem)."""
    return [
        (path, why)
        for path, arg in _arguments(config)
        if isinstance(arg, str) and (why := credential_flag_problem(arg))
    ]


SECRET_IN_ARGUMENTS = (
    "is a secret inside a command line: the container's spec holds it in plain text (`docker inspect`, the pod) and "
    "the program logs it; pass it in an environment variable (`env`, stored with `pulumi config set --path --secret`) "
    "or a file"
)


# How `vllm serve` reads its arguments: vLLM's FlexibleArgumentParser (vllm-project/vllm vllm/utils/argparse_utils.py;
# vllm/utils/__init__.py before the module was split out) is an argparse.ArgumentParser built with
# `super().__init__(*args, **kwargs)`, so argparse's `allow_abbrev=True` default holds: "Allows long options to be
# abbreviated if the abbreviation is unambiguous" (https://docs.python.org/3/library/argparse.html#allow-abbrev;
# `--hos 0.0.0.0` is `--host 0.0.0.0`). Its parse_args first turns `_` into `-` in an option's name up to its first
# `.` (`--trust_remote_code`; `--x.key` sets a key of the JSON option `--x`), and argparse takes `--opt=value` as well
# as `--opt value`, the last occurrence winning for a value.
# vLLM options the rules judge: the listening address, the credentials it takes on its command line, remote code.
VLLM_HOST, VLLM_API_KEY, VLLM_HF_TOKEN = "--host", "--api-key", "--hf-token"
VLLM_CREDENTIAL_OPTIONS = (VLLM_API_KEY, VLLM_HF_TOKEN)


def vllm_options(arg: Any, options: Iterable[str]) -> list[str]:
    """The long options of `options` that argument `arg` may select as vLLM's parser reads it: the one it names
    exactly, else each it abbreviates (an abbreviation shared by several is refused by argparse as ambiguous, so
    judging it as each of them refuses nothing vLLM would run)."""
    if not isinstance(arg, str) or not arg.startswith("--") or arg == "--":
        return []
    name = "--" + arg[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-")
    options = list(options)
    return [name] if name in options else [o for o in options if o.startswith(name)]


def vllm_option_value(args: Sequence[Any], option: str) -> str | None:
    """The value `option` gets from an argument list as vLLM's parser reads it (the last one given), or None."""
    value = None
    for index, arg in enumerate(args):
        if vllm_options(arg, [option]):
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif index + 1 < len(args):
                value = str(args[index + 1])
    return value


# Flags whose name reads as a credential but whose value is a name: the vLLM production-stack router's
# `--session-key` is the request header that names a session (src/vllm_router/parsers/parser.py @ vllm-stack-0.1.12:
# "The key (in the header) to identify a session.").
NOT_CREDENTIAL_FLAGS = frozenset({"--session-key"})


def credential_flag_problem(arg: str) -> str | None:
    """Why a command-line argument is refused: a credential flag (`--api-key`, `--hf-token=...`). vLLM logs its
    non-default arguments at start-up (vllm-project/vllm vllm/entrypoints/utils.py log_non_default_args:
    `logger.info("non-default args: %s", non_default_args)`, unredacted before releases added
    redact_sensitive_args), and any process's arguments show in `ps` on the host and in the container's spec."""
    flag = arg.split("=", 1)[0]
    if not flag.startswith("--") or flag in NOT_CREDENTIAL_FLAGS:
        return None
    if not is_credential_key(flag[2:].replace("-", "_").upper()) and not vllm_options(arg, VLLM_CREDENTIAL_OPTIONS):
        return None
    return (
        f"'{flag}' passes a credential on the command line, which the container's spec and `ps` show and vLLM logs "
        "at start-up; pass it in an environment variable or a file (vLLM reads VLLM_API_KEY: the stack's "
        "`vllmApiKey` secret)"
    )


# Linux refuses an argument or environment string of MAX_ARG_STRLEN (32 pages, 131072 bytes with 4 KiB pages) or
# more with E2BIG (include/uapi/linux/binfmts.h `#define MAX_ARG_STRLEN (PAGE_SIZE * 32)`, fs/exec.c
# copy_strings), and execve takes C strings, so a NUL byte would cut the value short.
MAX_ARG_STRLEN = 131072


def text_problem(value: str) -> str | None:
    """Why a config text cannot become an argument or an environment value of a process, or None."""
    if "\0" in value:
        return "holds a NUL byte, which no program argument or environment value can carry (execve takes C strings)"
    size = len(value.encode())
    if size >= MAX_ARG_STRLEN - 256:  # the environment entry adds its `NAME=`
        return (
            f"is {size} bytes: Linux refuses an argument or environment value of {MAX_ARG_STRLEN} bytes or more "
            "(MAX_ARG_STRLEN); put large content in a file"
        )
    return None


def text_problems(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(config path, why) of each text leaf `text_problem` refuses (keys too: an env name is a text)."""
    problems = []
    for path, key, value in _leaves(config):
        for text in (str(key), value) if isinstance(value, str) else (str(key),):
            if why := text_problem(text):
                problems.append((path, why))
                break
    return problems


def command_lines(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(where, arguments) of each process a Docker container or a pod spec starts."""
    if resource_type == CONTAINER:
        return [("", [str(a) for a in (*_sequence(props.get("entrypoints")), *_sequence(props.get("command")))])]
    return [
        (
            f"{where}container '{c.get('name')}': ",
            [str(a) for a in (*_sequence(c.get("command")), *_sequence(c.get("args")))],
        )
        for where, spec in pod_specs(resource_type, props)
        for c in _containers(spec)
    ]


def _environments(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(where, `NAME=value` entries) of each process's environment, as execve receives it."""
    if resource_type == CONTAINER:
        return [("", [str(e) for e in _sequence(props.get("envs"))])]
    return [
        (
            f"{where}container '{c.get('name')}': ",
            [f"{e.get('name')}={e.get('value')}" for e in map(_mapping, _sequence(c.get("env"))) if "value" in e],
        )
        for where, spec in pod_specs(resource_type, props)
        for c in _containers(spec)
    ]


def command_line_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Credential flags and credentials by shape on a declared command line, and arguments or environment values
    no process can be started with (text_problem), in prod."""
    problems = []
    for where, args in command_lines(resource_type, props):
        for arg in args:
            if why := credential_flag_problem(arg):
                problems.append(where + why)
            elif what := credential_in_value(arg):
                problems.append(f"{where}an argument holds {what}: pass it in an environment variable or a file")
            elif why := text_problem(arg):
                problems.append(f"{where}an argument {why}")
    for where, entries in _environments(resource_type, props):
        problems += [
            f"{where}environment value '{e.split('=', 1)[0]}' {why}" for e in entries if (why := text_problem(e))
        ]
    return problems


TRUST_REMOTE_CODE = "--trust-remote-code"


# The labels of a workload's Kubernetes objects (components/workloads/pods.py labels_of): its kind (`vllm` for an
# inference workload) and its name.
APP_LABEL, INSTANCE_LABEL = "app.kubernetes.io/name", "app.kubernetes.io/instance"


def is_remote_code_flag(arg: Any) -> bool:
    """`--trust-remote-code` as vLLM's parser reads it (vllm_options): also `--trust_remote_code`, with `=value`, and
    abbreviated (`--trust-remote`)."""
    return bool(vllm_options(arg, [TRUST_REMOTE_CODE]))


def remote_code_flags(config: Mapping[str, Any]) -> list[str]:
    """Config paths of the flag written into an argument list (command, args, extraArgs) anywhere in a config:
    prod runs the model repository's code only through `inference[].trustRemoteCode`."""
    return [path for path, arg in _arguments(config) if is_remote_code_flag(arg)]


REMOTE_CODE_FLAG_PROBLEM = "runs the model repository's code; opt in explicitly with `trustRemoteCode: true` instead"


def remote_code_opt_ins(inference: Any) -> set[str]:
    """What names the servers of each inference workload that opts in (`trustRemoteCode: true`) in a stack file's
    `inference`: its name (its Kubernetes objects' INSTANCE_LABEL, with APP_LABEL `vllm`) and its Docker partitions
    (PARTITION_LABEL; a partition serves one workload: schema/derived.py partitions_claimed)."""
    names: set[str] = set()
    for workload in map(_mapping, _sequence(inference)):
        if workload.get("trustRemoteCode") is True:
            names.add(str(workload.get("name")))
            names.update(str(p) for p in _sequence(_mapping(workload.get("docker")).get("partitions")))
    return names


def remote_code_problems(resource_type: str, props: Mapping[str, Any], opted_in: Collection[str]) -> list[str]:
    """vLLM's `--trust-remote-code` runs the model repository's Python code in the server; prod runs it only in the
    servers of an inference workload that opts in (`remote_code_opt_ins`: `inference[].trustRemoteCode: true`, which
    adds the flag to that workload's servers alone)."""
    labels = _mapping(_dig(props, ("metadata", "labels")))
    owner = partition_of(props) if resource_type == CONTAINER else None
    if resource_type != CONTAINER and labels.get(APP_LABEL) == "vllm":
        owner = labels.get(INSTANCE_LABEL)
    if owner in opted_in:
        return []
    return [
        f"{where}runs {TRUST_REMOTE_CODE} without `trustRemoteCode: true` on its own inference workload "
        f"({owner or 'none'})"
        for where, args in command_lines(resource_type, props)
        if any(map(is_remote_code_flag, args))
    ]
