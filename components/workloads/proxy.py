"""The authenticating reverse proxy (nginx) in front of every keyed vLLM server: its configuration, one renderer.

vLLM's own key guards only paths under /v1 (vllm/entrypoints/openai/api_server.py @ v0.11.2, build_app: `if not
url_path.startswith("/v1"): return await call_next(request)`), so `POST /invocations`, /tokenize and /pooling serve
without it (vllm-project/vllm#58144), and a Host-header bypass of that middleware is fixed only in vLLM 0.22
(GHSA-94f4-hr76-p5j6). vLLM's security guide says not to rely on `--api-key` alone. nginx decides on the normalised
path (merged slashes, `..` resolved, %-decoded: ngx_http_parse_complex_uri) and the Authorization header alone; the
Host header plays no part, and it sets the upstream's own Host on what it forwards.

The key sits in a file of its own (API_KEY_MAP, a `map` entry the main configuration includes), handled as a
secret: a Kubernetes Secret in a projected volume, a Docker upload of a secret value, mode 0400, read by the nginx
master (root) at start. It never appears on a command line, in an environment or in the main configuration, which
is plain (a ConfigMap, a Docker upload shown by `pulumi preview`). tests/test_vllm_proxy.py runs this configuration
with the real nginx binary in front of a stand-in upstream.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence

import pulumi

CONFIG_DIR = "/etc/rocm-stack-proxy"
CONFIG_FILE = "nginx.conf"
API_KEY_MAP = "api-key.map"
# The proxies' certificate and key (`vllmTlsCertificate`, `vllmTlsKey`), uploaded beside the key map.
TLS_CERTIFICATE = "tls.crt"
TLS_KEY = "tls.key"
# TLS 1.2 and 1.3 only (Mozilla's "intermediate" configuration), stated rather than left to nginx's default, which
# has changed between releases (nginx.org ngx_http_ssl_module.html#ssl_protocols).
TLS_PROTOCOLS = "TLSv1.2 TLSv1.3"
# Writable runtime directory (pid file, body buffers): the only path nginx writes, an emptyDir on Kubernetes.
RUNTIME_DIR = "/tmp/"
HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"
# What passes without the key: health (the kubelet's and Docker's probes), and on Kubernetes vLLM's Prometheus
# endpoint, which the stack's ServiceMonitor scrapes through the Service (components/monitoring) and which holds
# counters, no prompts. On Docker hosts the API port is published on the host's network: there /metrics needs the
# key or the host's scrape token (metrics_token) that the monitoring host's Prometheus presents, which opens nothing
# else.
POD_OPEN_PATHS = (HEALTH_PATH, METRICS_PATH)
DOCKER_OPEN_PATHS = (HEALTH_PATH,)
DOCKER_SCRAPED_PATHS = (METRICS_PATH,)
# Values of the key map's $authorized: the API key opens everything, the scrape token only the scraped paths.
_API_KEY, _SCRAPE_TOKEN = "1", "2"
# The proxy's port beside vLLM in one network namespace (a pod's, a Docker server's proxy container's), where vLLM
# keeps `port` on LOOPBACK.
POD_PORT = 8080
LOOPBACK = "127.0.0.1"
# Requests carry prompts, base64 images and audio; vLLM bounds the rest.
MAX_BODY = "100m"
# Generations stream for as long as they take; nginx's 60 s default would cut long ones.
READ_TIMEOUT_SECONDS = 3600


def nginx_config(
    listen_port: int,
    upstream: str,
    open_paths: Sequence[str],
    scraped_paths: Sequence[str] = (),
    tls: bool = False,
) -> str:
    """nginx's configuration: `open_paths` (exact) go to the same path upstream without a key, `scraped_paths`
    (exact) with the key or the scrape token, everything else needs `Authorization: Bearer <key>` (else 401).
    `upstream` is vLLM's host:port on the loopback they share. `tls`: HTTPS only on `listen_port`, with TLS_CERTIFICATE
    and TLS_KEY beside the configuration.
    Run as `nginx -p RUNTIME_DIR -e stderr -c CONFIG_DIR/CONFIG_FILE -g 'daemon off;'` (proxy_command)."""

    def location(path: str, check: str) -> str:
        # A fixed URI: the upstream sees exactly this path, whatever spelling matched it.
        return f"        location = {path} {{\n{check}            proxy_pass http://$vllm{path};\n        }}\n"

    scraped = _refuse_unless("$authorized = 0", "            ")
    open_locations = "".join(location(path, "") for path in open_paths) + "".join(
        location(path, scraped) for path in scraped_paths
    )
    return (
        "# Rendered by rocm-stack (components/workloads/proxy.py). The key is in " + API_KEY_MAP + ".\n"
        "worker_processes 1;\n"
        "pid nginx.pid;\n"
        "error_log stderr warn;\n"
        "events {\n    worker_connections 1024;\n}\n"
        "http {\n"
        "    access_log off;\n"
        "    server_tokens off;\n"
        "    client_body_temp_path client-body;\n"
        "    proxy_temp_path proxy;\n"
        "    fastcgi_temp_path fastcgi;\n"
        "    uwsgi_temp_path uwsgi;\n"
        "    scgi_temp_path scgi;\n"
        f"    client_max_body_size {MAX_BODY};\n"
        "    proxy_http_version 1.1;\n"
        # Streamed completions (server-sent events) pass as they come.
        "    proxy_buffering off;\n"
        "    proxy_request_buffering off;\n"
        f"    proxy_read_timeout {READ_TIMEOUT_SECONDS}s;\n"
        f"    proxy_send_timeout {READ_TIMEOUT_SECONDS}s;\n"
        "    map $http_authorization $authorized {\n"
        "        default 0;\n"
        f"        include {API_KEY_MAP};\n"
        "    }\n"
        "    server {\n"
        f"        listen {listen_port}{' ssl' if tls else ''};\n"
        f"{_tls_directives() if tls else ''}"
        f"        set $vllm {upstream};\n"
        f"{open_locations}"
        "        location / {\n"
        f"{_refuse_unless(f'$authorized != {_API_KEY}', '            ')}"
        "            proxy_pass http://$vllm;\n"
        "        }\n"
        "    }\n"
        "}\n"
    )


def _tls_directives() -> str:
    """The server's certificate and key (uploaded beside the configuration) and its protocols."""
    return (
        f"        ssl_certificate {CONFIG_DIR}/{TLS_CERTIFICATE};\n"
        f"        ssl_certificate_key {CONFIG_DIR}/{TLS_KEY};\n"
        f"        ssl_protocols {TLS_PROTOCOLS};\n"
    )


def _refuse_unless(condition: str, indent: str) -> str:
    """401 with the Bearer challenge where `condition` (an nginx `if`) holds."""
    return (
        f"{indent}if ({condition}) {{\n{indent}    add_header WWW-Authenticate Bearer always;\n"
        f"{indent}    return 401;\n{indent}}}\n"
    )


def scrape_secret(key: str) -> str:
    """What every host's scrape token derives from (metrics_token), an HMAC-SHA256 of a fixed label under the vLLM
    API key: it follows the key without a second secret to configure, whoever holds it cannot recover the key, and
    it is no value ever sent (the label differs from the one fleet-wide token of before issue 34 item 9, which went
    over plain HTTP to every host). Only the monitoring host's token container gets it (docker_host.py), which
    derives the tokens of the hosts Prometheus scrapes."""
    return hmac.new(key.encode(), b"rocm-stack vllm metrics scrape secret", hashlib.sha256).hexdigest()


def host_token(secret: str, host: str) -> str:
    """A host's scrape token: SHA-256 (hex) of `<secret>:<host>`, what the monitoring host's token container computes
    with its image's busybox (docker_host.TOKENS_WRITE, `printf | sha256sum`; no HMAC tool there). The secret comes
    first and has a fixed length (64 hex digits, 256 bits), so a token tells nothing of another host's: the one thing
    SHA-256's length extension gives from a token is the token of `<host>` followed by SHA-256's padding bytes (0x80,
    0x00 ...), a name no host has (hosts[].name is a DNS label)."""
    return hashlib.sha256(f"{secret}:{host}".encode()).hexdigest()


def metrics_token(key: str, host: str) -> str:
    """The token the Docker host `host`'s proxies accept on /metrics (and nothing else): one per host, so a token read
    on one host (its proxy's key map, or the wire without TLS) scrapes no other."""
    return host_token(scrape_secret(key), host)


def secret_scrape_secret(key: pulumi.Input[str]) -> pulumi.Output[str]:
    return pulumi.Output.secret(pulumi.Output.from_input(key).apply(scrape_secret))


def key_map(key: str, host: str | None = None) -> str:
    """The key file: the `map` entries that authorize a request, the key's and, on the Docker host `host`, its scrape
    token's (rules.api_key_problem keeps the key a Bearer token, whose characters are plain inside nginx's double
    quotes, and the token is hex). Kubernetes proxies (no `host`) leave /metrics open (POD_OPEN_PATHS) and hold the
    key alone. Regular expressions: nginx compares a map's plain strings case-insensitively (measured:
    tests/test_vllm_proxy.py), which would let `bearer K3Y` pass for `Bearer k3y`; `~` matches case-sensitively."""
    entries = '"~^Bearer ' + re.sub(r"([.+])", r"\\\1", key) + f'$" {_API_KEY};\n'
    if host is not None:
        entries += f'"~^Bearer {metrics_token(key, host)}$" {_SCRAPE_TOKEN};\n'
    return entries


def secret_key_map(key: pulumi.Input[str], host: str | None = None) -> pulumi.Output[str]:
    return pulumi.Output.secret(pulumi.Output.from_input(key).apply(lambda k: key_map(k, host)))


def proxy_command(config_dir: str = CONFIG_DIR, runtime_dir: str = RUNTIME_DIR) -> list[str]:
    return ["nginx", "-p", runtime_dir, "-e", "stderr", "-c", f"{config_dir}/{CONFIG_FILE}", "-g", "daemon off;"]
