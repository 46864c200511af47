"""Monitoring for Docker fleets: node-exporter and cAdvisor on every Docker host, and Prometheus, Alertmanager and
Grafana on the monitoring host (`monitoring.host`), provisioned with the scrape configuration, alert rules and
dashboard the rest of the stack generates (components/monitoring, domain/alerts.py, domain/dashboard.py).

- `HostExporters` (`rocm-stack:monitoring:HostExporters`): node-exporter (the filesystems of the host's checkpoint
  and model-cache directories, CPU, memory) and cAdvisor (each container's state and usage) on one host.
- `MonitoringHost` (`rocm-stack:monitoring:MonitoringHost`): the three servers, each with a named volume, and, when
  a vLLM API key is set, the vLLM scrape token in a volume of its own (below).

The servers use the host's network: Prometheus scrapes the targets of the generated configuration (the hosts'
Docker endpoints' names, `localhost` for a local daemon) exactly as a Prometheus on that host would, and Grafana and
Prometheus reach Alertmanager and Prometheus on 127.0.0.1. All three listen on the host's loopback alone
(LOOPBACK): Alertmanager and Prometheus have no authentication (anyone who reaches :9093 silences every alert), and a
listener on the host's every address is reached by the host's own containers through their bridge gateway and by
anyone who routes to the host. The host's loopback is no address of another network namespace, so neither a
container nor a neighbour reaches it whatever the host's sysctls or Docker version (tests/e2e/test_e2e_neighbours.py,
on the real binaries); people reach them through SSH (`ssh -L`, the `monitoringTunnel` output).

Every configuration file is a Docker upload, which the provider cannot change in place (`uploads` is ForceNew,
tools/impact_rules.py): a new dashboard, receiver or retention replaces the container concerned, which starts on the
new files; the volumes keep the data.

What grows with the fleet (the alert rules, which list every host's declared GPUs, and the scrape targets) is no
upload of Prometheus and no text in the state: a one-shot container (`rocm-stack-prometheus-files`) uploads them by
reference (components/docker/programs.py generated_upload: path and SHA-256 in the state) into a volume of their own,
which Prometheus mounts read-only (PROMETHEUS_STACK_FILES), then sends Prometheus SIGHUP: it shares Prometheus's PID
namespace (`pid_mode` container:..., where Prometheus is PID 1). So the servers' records stay the same size at any
fleet size, and a rules or fleet change replaces that container alone, never Prometheus (prometheus v3.5.0:
docs/configuration/configuration.md L15-19 "A configuration reload is triggered by sending a SIGHUP to the Prometheus
process ... This will also reload any configured rule files", cmd/prometheus/main.go L1175 signal.Notify(hup,
syscall.SIGHUP)). The targets are `file_sd_configs` files, one per job: Prometheus watches their directory and
re-reads them on any change without a reload (discovery/file/file.go L223-238 watchFiles on the parent directory,
L260-275 every event but a chmod re-reads; configuration.md L1483 "Changes to all defined files are detected via disk
watches and applied immediately"). Before the first write both are simply absent: a rule-file path and a file_sd
path are globs (cmd/prometheus/main.go L1008, file.go L211 filepath.Glob), which match nothing, so Prometheus starts
with no rules or targets and takes them at the SIGHUP and the watch. The Grafana dashboard (a constant text, the
largest) goes by reference too, as an upload of Grafana.

The vLLM scrape tokens are one per host (components/workloads/proxy.py `metrics_token`: a host's proxies know their
own alone, so a token read on one host scrapes no other), and Prometheus sets credentials per job: each keyed host
has a job of its own, `vllm-<host>`, reading its token from a file of its own (vllm_metrics_token_file). Those jobs
grow with the fleet, so they are no part of prometheus.yml: the files container writes them to VLLM_SCRAPE_FILE,
which prometheus.yml names in `scrape_config_files` (Prometheus >= 2.43; v3.5.0 config/config.go L324-365
GetScrapeConfigs globs each entry and appends the files' jobs, on every load, cmd/prometheus/main.go L976 in the
reloader's scrape manager, so the SIGHUP that follows the write loads them; a glob that matches nothing, before the
first write, adds none).

No token is an upload of Prometheus: a secret upload would make its whole `uploads` secret, hiding every rule and
scrape change from `pulumi preview`, and a key rotation would restart Prometheus. A one-shot container
(`rocm-stack-prometheus-token`) gets the scrape secret the tokens derive from (proxy.scrape_secret, one value at any
fleet size) and the keyed hosts' names (by reference), computes each host's token as the proxies do
(proxy.host_token, TOKENS_WRITE with the image's busybox) and writes them into a volume of its own
(`rocm-stack-prometheus-token`), which Prometheus mounts read-only at PROMETHEUS_SECRETS; with TLS the proxies'
certificate is uploaded there too (Docker copies an upload through the container's volume mounts: moby v20.10.24
daemon/archive.go L276-281 containerExtractToDir mounts them; v28.5.2 daemon/containerfs_linux.go L56-87
openContainerFS). Prometheus reads a credentials file on every scrape (prometheus/common config/http_config.go:
v0.65.0, which Prometheus v3.5.0's go.mod requires, L636 toSecret -> L786 FileSecret, whose Fetch L745-746
`os.ReadFile` runs in every RoundTrip L813-821; v0.39.0, Debian's prometheus 2.42, L541-542 and L620-622 "This file
is read for every request"). So a rotated key replaces the one-shot container alone (its `uploads`, ForceNew), which
rewrites the files, and the running Prometheus sends the new tokens from its next scrape on.

Why one file: the exporters on every host and the monitoring host's servers share the files container, the volumes
and the scrape targets they are provisioned with; apart, each half would import the other's names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_docker as docker
import yaml

from domain.alerts import CADVISOR_JOB, EXPORTER_JOB, NODE_EXPORTER_JOB, VLLM_JOB, rules_file_text
from domain.dashboard import DASHBOARD_UID, dashboard_json_text
from domain.fleet import DeclaredHost
from rules import CADVISOR, CADVISOR_MOUNTS, MONITORING_LABEL
from schema.docker import LogConfig, PortMapping
from schema.monitoring import (
    ALERTMANAGER_PORT,
    CADVISOR_PORT,
    GRAFANA_PORT,
    NODE_EXPORTER_PORT,
    PROMETHEUS_PORT,
    MonitoringConfig,
    Receiver,
)
from components.docker.deadlines import create_timeouts
from components.docker.environment import container_envs
from components.docker.gpu_host import published, pulled_image
from components.docker.logs import log_args
from components.docker.programs import generated_upload
from components.docker.stop import graceful_stop
from components.monitoring import PROMETHEUS_SECRETS, VLLM_CA_FILE, VLLM_METRICS_TOKEN_PREFIX

# Each image pinned by tag and digest. The digests are those public repositories pin for these tags (found in
# several independent ones, e.g. docker-compose files pinning prom/prometheus:v3.5.0@sha256:63805e...); they were
# not read from the registries here (no network): refresh them with `docker buildx imagetools inspect <tag>`.
# Prometheus v3.5.0 is an LTS release (prometheus.io/docs/introduction/release-cycle).
PROMETHEUS_IMAGE = "prom/prometheus:v3.5.0@sha256:63805ebb8d2b3920190daf1cb14a60871b16fd38bed42b857a3182bc621f4996"
ALERTMANAGER_IMAGE = "prom/alertmanager:v0.28.1@sha256:27c475db5fb156cab31d5c18a4251ac7ed567746a2483ff264516437a39b15ba"
GRAFANA_IMAGE = "grafana/grafana:12.1.1@sha256:a1701c2180249361737a99a01bc770db39381640e4d631825d38ff4535efa47d"
NODE_EXPORTER_IMAGE = (
    "prom/node-exporter:v1.9.1@sha256:d00a542e409ee618a4edc67da14dd48c5da66726bbd5537ab2af9c1dfc442c8a"
)
# cAdvisor >= v0.54.0, the first with `container_health_state` (ContainerUnhealthy reads it; google/cadvisor v0.54.0
# metrics/prometheus.go L139). gcr.io/cadvisor/cadvisor publishes up to v0.55.1 (no v0.53.0/v0.54.0 tags there; later
# releases only on ghcr.io/google/cadvisor). This index digest is the one independent public deployments pin for
# v0.55.1 (found in seven unrelated repositories by exact search; one notes it as the multi-arch manifest list read
# from gcr.io's tags/list); not read from the registry here.
CADVISOR_IMAGE = (
    "gcr.io/cadvisor/cadvisor:v0.55.1@sha256:3de2bd5203120b866d74a9b283b2ffb8ec382fbf9dc321814700c6ea6f44ec57"
)

NODE_EXPORTER = "node-exporter"
PROMETHEUS, ALERTMANAGER, GRAFANA = "prometheus", "alertmanager", "grafana"
# The one-shot container and the volume that hold the vLLM scrape token for Prometheus.
PROMETHEUS_TOKEN = "prometheus-token"
# The one-shot container and the volume that hold the alert rules and scrape targets for Prometheus.
PROMETHEUS_FILES = "prometheus-files"
# They exit once written (`_one_shot`: restart "no", must_run false): a replacement or delete stops nothing running.
ONE_SHOT = (PROMETHEUS_TOKEN, PROMETHEUS_FILES)
# Where each image keeps its configuration and data (the images' own defaults: prom/prometheus Dockerfile
# `--config.file=/etc/prometheus/prometheus.yml --storage.tsdb.path=/prometheus`, prom/alertmanager
# `--storage.path=/alertmanager`, grafana/grafana GF_PATHS_DATA=/var/lib/grafana, GF_PATHS_PROVISIONING).
PROMETHEUS_CONFIG = "/etc/prometheus/prometheus.yml"
# The files volume, one directory: the file_sd watch is on a file's directory, which must exist from the start.
PROMETHEUS_STACK_FILES = "/etc/prometheus/stack"
PROMETHEUS_RULES = f"{PROMETHEUS_STACK_FILES}/rocm-gpu-alerts.rules.yml"
# What the files container runs once its uploads are in the volume: Prometheus (PID 1 of the PID namespace it
# joins) reloads its configuration and rule files.
PROMETHEUS_RELOAD = f"test -s {PROMETHEUS_RULES} && kill -HUP 1"
PROMETHEUS_DATA = "/prometheus"
# Where the three servers listen, on the host's network (the module docstring says why).
LOOPBACK = "127.0.0.1"
ALERTMANAGER_CONFIG = "/etc/alertmanager/alertmanager.yml"
ALERTMANAGER_DATA = "/alertmanager"
GRAFANA_DATA = "/var/lib/grafana"
GRAFANA_DATASOURCES = "/etc/grafana/provisioning/datasources/rocm-stack.yaml"
GRAFANA_DASHBOARD_PROVIDERS = "/etc/grafana/provisioning/dashboards/rocm-stack.yaml"
GRAFANA_DASHBOARDS = "/etc/grafana/dashboards"
# The keyed hosts' vLLM jobs (prometheus_scrape_config: one per host), which prometheus.yml names in
# `scrape_config_files`.
VLLM_SCRAPE_FILE = f"{PROMETHEUS_STACK_FILES}/vllm-hosts.scrape.yml"
# What the token container is given, in its own filesystem (not the volume Prometheus reads): the scrape secret and
# the names of the hosts whose tokens it writes, one a line.
SCRAPE_SECRET = "/tmp/rocm-stack-scrape-secret"
SCRAPE_HOSTS = "/tmp/rocm-stack-scrape-hosts"
# The token container's program (busybox sh; the image runs as nobody, and the token container as root, without a
# capability, to write into its volume, whose directory is root's): each host's token (proxy.host_token, SHA-256 of
# `<secret>:<host>`) replaces that host's file at once (written beside it, renamed over it: Prometheus never reads
# half a token), then every other token file goes, a removed host's (and the one fleet-wide file of before).
TOKENS_WRITE = (
    f'set -e; secret=$(cat {SCRAPE_SECRET}); cd {PROMETHEUS_SECRETS}; keep=" "; '
    f"for host in $(cat {SCRAPE_HOSTS}); do "
    'printf %s:%s "$secret" "$host" | sha256sum | cut -c1-64 > .token; chmod 0444 .token; '
    f'mv -f .token {VLLM_METRICS_TOKEN_PREFIX}"$host"; keep="${{keep}}{VLLM_METRICS_TOKEN_PREFIX}$host "; done; '
    f'for file in {VLLM_METRICS_TOKEN_PREFIX.rstrip("-")}*; do case "$keep" in *" $file "*) ;; *) rm -f "$file" ;; '
    "esac; done"
)
PROMETHEUS_DATASOURCE_UID = "rocm-stack-prometheus"
# The receiver of alerts no configured receiver takes: none of its own (Alertmanager's route needs one).
NOWHERE = "nowhere"

# Memory limits (the provider's MiB; memory_swap equal: no swap, and what the provider reads back, see
# components/docker/gpu_host.py _memory_args). Prometheus's head block holds ~2 h of every series in memory: a
# fleet of tens of hosts (a few thousand series each) needs well under 4 GiB.
MEMORY_MIB = {
    PROMETHEUS: 4096,
    ALERTMANAGER: 256,
    GRAFANA: 1024,
    NODE_EXPORTER: 128,
    CADVISOR: 512,
    PROMETHEUS_TOKEN: 16,
    PROMETHEUS_FILES: 16,
}
# Prometheus writes its head block and closes the TSDB on SIGTERM; the others stop at once (Docker's default 10 s).
STOP_GRACE_SECONDS = {
    PROMETHEUS: 120,
    ALERTMANAGER: 10,
    GRAFANA: 10,
    NODE_EXPORTER: 10,
    CADVISOR: 10,
    PROMETHEUS_TOKEN: 10,
    PROMETHEUS_FILES: 10,
}
# Files the servers (not root in their images: nobody, grafana) read. The scrape token too: prom/prometheus runs as
# nobody (its Dockerfile @ v3.5.0 L19 `USER nobody`) and Docker's copy makes the file root's; only the token's
# one-shot container and Prometheus mount its volume.
READABLE = "0444"


def _limits(name: str) -> dict[str, Any]:
    return {"memory": MEMORY_MIB[name], "memory_swap": MEMORY_MIB[name]}


def _maybe_secret(text: str, secret: bool) -> pulumi.Input[str]:
    return pulumi.Output.secret(text) if secret else text


def _upload(path: str, content: pulumi.Input[str]) -> docker.ContainerUploadArgs:
    return docker.ContainerUploadArgs(file=path, content=content, permissions=READABLE)


def _monitoring_label(name: str) -> list[docker.ContainerLabelArgs]:
    return [docker.ContainerLabelArgs(label=MONITORING_LABEL, value=name)]


def _one_shot(name: str, logs: LogConfig) -> dict[str, Any]:
    """The arguments of a one-shot container that fills a volume for Prometheus: no network, no capability."""
    return {
        "network_mode": "none",
        "capabilities": docker.ContainerCapabilitiesArgs(drops=["ALL"]),
        "security_opts": ["no-new-privileges"],
        "labels": _monitoring_label(name),
        # It exits at once; not `attach`ed (that marks the host checks, whose failure stops `pulumi up`).
        "restart": "no",
        "must_run": False,
        **log_args(logs),
        **_limits(name),
        **graceful_stop(STOP_GRACE_SECONDS[name]),
    }


# --- configuration files ------------------------------------------------------------------------------------------


def targets_file(job: str) -> str:
    return f"{PROMETHEUS_STACK_FILES}/{job}.targets.yml"


# The jobs shared by every host, a fixed number at any fleet size: they stay in prometheus.yml (their targets in
# file_sd files).
SHARED_JOBS = (EXPORTER_JOB, NODE_EXPORTER_JOB, CADVISOR_JOB, VLLM_JOB)


def _shared_jobs(scrape_config: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [job for job in scrape_config["scrape_configs"] if job["job_name"] in SHARED_JOBS]


def host_jobs(scrape_config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The jobs of one host each (a keyed host's `vllm-<host>`), which go to VLLM_SCRAPE_FILE."""
    return [job for job in scrape_config["scrape_configs"] if job["job_name"] not in SHARED_JOBS]


def prometheus_config(cfg: MonitoringConfig, scrape_config: Mapping[str, Any]) -> dict[str, Any]:
    """prometheus.yml of the monitoring host: the shared jobs of the stack's scrape configuration
    (`prometheus_scrape_config`, the same the `prometheusScrapeConfig` output holds), each reading its targets from its
    file (`target_files`) instead of listing them, the per-host jobs' file (`host_scrape_file`), the stack's rule
    file and the local Alertmanager. Its size does not depend on the fleet."""
    jobs = [
        {
            **{key: value for key, value in job.items() if key != "static_configs"},
            "file_sd_configs": [{"files": [targets_file(job["job_name"])]}],
        }
        for job in _shared_jobs(scrape_config)
    ]
    return {
        "global": {"scrape_interval": cfg.scrape_interval, "evaluation_interval": cfg.scrape_interval},
        "rule_files": [PROMETHEUS_RULES],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"{LOOPBACK}:{ALERTMANAGER_PORT}"]}]}]},
        **({"scrape_config_files": [VLLM_SCRAPE_FILE]} if host_jobs(scrape_config) else {}),
        "scrape_configs": jobs,
    }


def target_files(scrape_config: Mapping[str, Any]) -> dict[str, str]:
    """Each shared job's targets file (path -> text): its static configs, the list a file_sd file holds
    (configuration.md `<file_sd_config>`: "a list of static configs")."""
    return {targets_file(job["job_name"]): _yaml(job["static_configs"]) for job in _shared_jobs(scrape_config)}


def host_scrape_file(scrape_config: Mapping[str, Any]) -> str | None:
    """VLLM_SCRAPE_FILE's text, the per-host jobs with their targets (a `scrape_config_files` file holds
    `scrape_configs`, configuration.md); None where there are none."""
    jobs = host_jobs(scrape_config)
    return _yaml({"scrape_configs": jobs}) if jobs else None


def token_hosts(scrape_config: Mapping[str, Any]) -> list[str]:
    """The hosts whose tokens the token container writes: those the per-host jobs scrape."""
    return sorted({static["labels"]["host"] for job in host_jobs(scrape_config) for static in job["static_configs"]})


def _receiver(receiver: Receiver) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": receiver.name}
    if receiver.webhook is not None:
        entry["webhook_configs"] = [{"url": receiver.webhook.url, "send_resolved": True}]
    if receiver.email is not None:
        email = receiver.email
        entry["email_configs"] = [
            {
                "to": ", ".join(email.to),
                "from": email.from_,
                "smarthost": email.smarthost,
                "require_tls": email.require_tls,
                "send_resolved": True,
            }
        ]
    return entry


def alertmanager_config(receivers: Sequence[Receiver]) -> dict[str, Any]:
    """alertmanager.yml: every receiver gets every alert of its severities (one route each, `continue` so the next
    ones see it too); what no route takes goes to NOWHERE, a receiver without destinations."""
    return {
        "route": {
            "receiver": NOWHERE,
            "group_by": ["alertname", "host"],
            "routes": [
                {
                    "receiver": r.name,
                    **({"matchers": [f'severity=~"{"|".join(r.severities)}"']} if r.severities else {}),
                    "continue": True,
                }
                for r in receivers
            ],
        },
        "receivers": [{"name": NOWHERE}, *(_receiver(r) for r in receivers)],
    }


def alert_destinations(receivers: Sequence[Receiver]) -> str:
    """Where alerts go, in words (the `alertDestinations` output)."""
    if not receivers:
        return "nowhere: no monitoring.receivers; alerts are listed only on Alertmanager's page"
    return "; ".join(r.destination() for r in receivers)


def grafana_datasources() -> dict[str, Any]:
    """Grafana's datasource provisioning file (grafana.com/docs/grafana/latest/administration/provisioning/
    #data-sources): the local Prometheus, the default, which the dashboard's `datasource` variable picks."""
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Prometheus",
                "type": "prometheus",
                "uid": PROMETHEUS_DATASOURCE_UID,
                "access": "proxy",
                "url": f"http://{LOOPBACK}:{PROMETHEUS_PORT}",
                "isDefault": True,
                "editable": False,
            }
        ],
    }


def grafana_dashboard_providers() -> dict[str, Any]:
    """Grafana's dashboard provider (provisioning docs, #dashboards): the dashboards uploaded to GRAFANA_DASHBOARDS,
    read-only in the UI (an edit there would be lost at the next `pulumi up`)."""
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "rocm-stack",
                "type": "file",
                "disableDeletion": True,
                "allowUiUpdates": False,
                "options": {"path": GRAFANA_DASHBOARDS},
            }
        ],
    }


def _yaml(data: Mapping[str, Any] | Sequence[Any]) -> str:
    return "# Rendered by rocm-stack (components/monitoring/docker_host.py).\n" + yaml.safe_dump(
        dict(data) if isinstance(data, Mapping) else list(data), sort_keys=False
    )


# --- exporters on every Docker host -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostExportersArgs:
    provider: docker.Provider
    logs: LogConfig
    pull_timeout_seconds: int
    data_dirs: Sequence[str]
    """Host directories whose filesystems node-exporter reports: the host's checkpoint and model-cache roots."""


# node-exporter reads the mounts of its own container (`/proc/1/mountinfo`, PID 1 being itself), so each data
# directory, bind-mounted at its host path, is reported with that path as `mountpoint` and its filesystem's sizes
# (a bind mount's statfs is the filesystem's). The container's own files (/etc/hosts, ...) are left out.
NODE_EXPORTER_COMMAND = ["--collector.filesystem.mount-points-exclude=^/(dev|proc|sys|etc)($|/)"]


class HostExporters(pulumi.ComponentResource):
    """node-exporter and cAdvisor on one Docker host, named after the host (reordering hosts renames nothing)."""

    containers: dict[str, docker.Container]

    def __init__(self, host: str, args: HostExportersArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:monitoring:HostExporters", host, None, opts)
        on_host = pulumi.ResourceOptions(parent=self, provider=args.provider)
        created = pulumi.ResourceOptions.merge(on_host, pulumi.ResourceOptions(custom_timeouts=create_timeouts()))
        common: dict[str, Any] = {
            **log_args(args.logs),
            "restart": "unless-stopped",
            "must_run": True,
            # Nothing to write to: neither exporter keeps state.
            "read_only": True,
            "security_opts": ["no-new-privileges"],
        }
        node_image = pulled_image(f"{host}-{NODE_EXPORTER}", NODE_EXPORTER_IMAGE, args.pull_timeout_seconds, on_host)
        cadvisor_image = pulled_image(f"{host}-{CADVISOR}", CADVISOR_IMAGE, args.pull_timeout_seconds, on_host)
        self.containers = {
            NODE_EXPORTER: docker.Container(
                f"{host}-{NODE_EXPORTER}",
                name=f"rocm-stack-{NODE_EXPORTER}",
                image=node_image.image_id,
                # Its metrics carry no host name: Prometheus's target labels do (the scrape configuration).
                command=NODE_EXPORTER_COMMAND,
                volumes=[
                    docker.ContainerVolumeArgs(host_path=d, container_path=d, read_only=True)
                    for d in sorted(set(args.data_dirs))
                ]
                or None,
                ports=published([PortMapping(internal=NODE_EXPORTER_PORT, external=NODE_EXPORTER_PORT)]),
                labels=_monitoring_label(NODE_EXPORTER),
                capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"]),
                **_limits(NODE_EXPORTER),
                **common,
                **graceful_stop(STOP_GRACE_SECONDS[NODE_EXPORTER]),
                opts=created,
            ),
            # Root in its image, which reading every container's cgroup files and the socket needs; nothing else.
            CADVISOR: docker.Container(
                f"{host}-{CADVISOR}",
                name=f"rocm-stack-{CADVISOR}",
                image=cadvisor_image.image_id,
                command=[
                    "--docker_only=true",
                    # cgroup, not disk usage: that would need the containers' own files (policy CADVISOR_MOUNTS).
                    "--enable_metrics=cpu,memory,network,diskIO",
                    # Metric labels: name, image and the partition (not every label and environment variable).
                    "--store_container_labels=false",
                    "--whitelisted_container_labels=rocm-stack.partition",
                ],
                volumes=[
                    docker.ContainerVolumeArgs(host_path=h, container_path=c, read_only=True)
                    for h, c in sorted(CADVISOR_MOUNTS.items())
                ],
                ports=published([PortMapping(internal=CADVISOR_PORT, external=CADVISOR_PORT)]),
                labels=_monitoring_label(CADVISOR),
                **_limits(CADVISOR),
                **common,
                **graceful_stop(STOP_GRACE_SECONDS[CADVISOR]),
                opts=created,
            ),
        }
        self.register_outputs({"containers": {k: c.name for k, c in self.containers.items()}})


# --- the monitoring host --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MonitoringHostArgs:
    config: MonitoringConfig
    scrape_config: Mapping[str, Any]
    """prometheus_scrape_config(...) of the stack: what Prometheus scrapes."""
    fleet: Sequence[DeclaredHost]
    """declared_fleet(...) of the stack: the rules' declared GPU counts and partitions."""
    provider: docker.Provider
    address: str
    """How users reach the host (its Docker endpoint's host name): the URLs in the outputs."""
    logs: LogConfig
    pull_timeout_seconds: int
    grafana_admin_password: pulumi.Input[str] | None = None
    """None: Grafana's own first-start default (dev only; prod requires the secret)."""
    secret_receivers: bool = False
    """`monitoring` is a secret stack key (a receiver's URL set with `pulumi config set --path --secret`, which marks
    the whole key: StackSecrets.secret_sections): alertmanager.yml is a secret upload and the destinations in words a
    secret output, so no receiver reaches the state, a preview or the PR comment in plain text."""
    vllm_scrape_secret: pulumi.Input[str] | None = None
    """The vLLM scrape secret (proxy.secret_scrape_secret of the API key) where the stack has a key: the token
    container derives each keyed host's token from it, which that host's job of `scrape_config` reads from
    vllm_metrics_token_file(host)."""
    vllm_ca: pulumi.Input[str] | None = None
    """The proxies' certificate (`vllmTlsCertificate`) where they serve HTTPS: written beside the tokens, at
    VLLM_CA_FILE, which the vLLM jobs verify them against."""


class MonitoringHost(pulumi.ComponentResource):
    """Prometheus, Alertmanager and Grafana on the monitoring host, each with a named volume that outlives its
    container. The volumes are kept on the host when the monitoring host moves or the stack is destroyed
    (retain_on_delete): the history stays where it was, and a new host starts empty."""

    containers: dict[str, docker.Container]
    volumes: dict[str, docker.Volume]
    urls: dict[str, str]
    tunnel: str
    alert_destinations: pulumi.Input[str]
    """Where alerts go, in words (the `alertDestinations` output): a secret where the receivers are."""
    """The SSH command that forwards the three servers' ports to the same ports of the caller's loopback."""
    token_writer: docker.Container | None = None
    files_writer: docker.Container

    def __init__(self, host: str, args: MonitoringHostArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:monitoring:MonitoringHost", host, None, opts)
        cfg = args.config
        on_host = pulumi.ResourceOptions(parent=self, provider=args.provider)
        created = pulumi.ResourceOptions.merge(on_host, pulumi.ResourceOptions(custom_timeouts=create_timeouts()))
        self.volumes = {
            name: docker.Volume(
                f"{host}-{name}-data",
                name=f"rocm-stack-{name}-data",
                opts=pulumi.ResourceOptions.merge(on_host, pulumi.ResourceOptions(retain_on_delete=True)),
            )
            for name in (PROMETHEUS, ALERTMANAGER, GRAFANA)
        }
        images = {
            name: pulled_image(f"{host}-{name}", image, args.pull_timeout_seconds, on_host)
            for name, image in (
                (PROMETHEUS, PROMETHEUS_IMAGE),
                (ALERTMANAGER, ALERTMANAGER_IMAGE),
                (GRAFANA, GRAFANA_IMAGE),
            )
        }

        files = docker.Volume(f"{host}-{PROMETHEUS_FILES}", name=f"rocm-stack-{PROMETHEUS_FILES}", opts=on_host)
        prometheus_volumes = [
            docker.ContainerVolumeArgs(volume_name=files.name, container_path=PROMETHEUS_STACK_FILES, read_only=True)
        ]
        if args.vllm_scrape_secret is not None:
            token = self._token(host, args, images[PROMETHEUS].image_id, on_host, created)
            prometheus_volumes.append(
                docker.ContainerVolumeArgs(volume_name=token.name, container_path=PROMETHEUS_SECRETS, read_only=True)
            )

        def server(
            name: str, data: str, volumes: Sequence[docker.ContainerVolumeArgs] = (), **kwargs: Any
        ) -> docker.Container:
            return docker.Container(
                f"{host}-{name}",
                name=f"rocm-stack-{name}",
                image=images[name].image_id,
                network_mode="host",
                volumes=[
                    docker.ContainerVolumeArgs(volume_name=self.volumes[name].name, container_path=data),
                    *volumes,
                ],
                labels=_monitoring_label(name),
                security_opts=["no-new-privileges"],
                restart="unless-stopped",
                must_run=True,
                **log_args(args.logs),
                **_limits(name),
                **graceful_stop(STOP_GRACE_SECONDS[name]),
                opts=created,
                **kwargs,
            )

        self.containers = {
            PROMETHEUS: server(
                PROMETHEUS,
                PROMETHEUS_DATA,
                prometheus_volumes,
                command=[
                    f"--config.file={PROMETHEUS_CONFIG}",
                    f"--storage.tsdb.path={PROMETHEUS_DATA}",
                    *cfg.retention.flags(),
                    f"--web.listen-address={LOOPBACK}:{PROMETHEUS_PORT}",
                ],
                uploads=[_upload(PROMETHEUS_CONFIG, _yaml(prometheus_config(cfg, args.scrape_config)))],
            ),
            ALERTMANAGER: server(
                ALERTMANAGER,
                ALERTMANAGER_DATA,
                command=[
                    f"--config.file={ALERTMANAGER_CONFIG}",
                    f"--storage.path={ALERTMANAGER_DATA}",
                    f"--web.listen-address={LOOPBACK}:{ALERTMANAGER_PORT}",
                    # One Alertmanager, no cluster: the gossip port (:9094 on every interface by default) stays shut.
                    "--cluster.listen-address=",
                ],
                uploads=[
                    _upload(
                        ALERTMANAGER_CONFIG,
                        _maybe_secret(_yaml(alertmanager_config(cfg.receivers)), args.secret_receivers),
                    )
                ],
            ),
            GRAFANA: server(GRAFANA, GRAFANA_DATA, **self._grafana(cfg, args.grafana_admin_password)),
        }
        self.files_writer = self._files(host, args, files, images[PROMETHEUS].image_id, created)
        # On the monitoring host's loopback: reached through the tunnel.
        self.urls = {
            "prometheus": f"http://{LOOPBACK}:{PROMETHEUS_PORT}",
            "alertmanager": f"http://{LOOPBACK}:{ALERTMANAGER_PORT}",
            "grafana": f"http://{LOOPBACK}:{GRAFANA_PORT}/d/{DASHBOARD_UID}",
        }
        forwards = " ".join(
            f"-L {port}:{LOOPBACK}:{port}" for port in (PROMETHEUS_PORT, ALERTMANAGER_PORT, GRAFANA_PORT)
        )
        self.tunnel = f"ssh -N {forwards} {args.address}"
        self.alert_destinations = _maybe_secret(alert_destinations(cfg.receivers), args.secret_receivers)
        self.register_outputs({"urls": self.urls, "alertDestinations": self.alert_destinations})

    def _token(
        self,
        host: str,
        args: MonitoringHostArgs,
        image: pulumi.Input[str],
        on_host: pulumi.ResourceOptions,
        created: pulumi.ResourceOptions,
    ) -> docker.Volume:
        """The scrape tokens' volume, filled by a one-shot container (module docstring). Nothing waits for it: until
        the files are there Prometheus's vLLM scrapes fail (a file is read per scrape, not at start)."""
        assert args.vllm_scrape_secret is not None
        volume = docker.Volume(f"{host}-{PROMETHEUS_TOKEN}", name=f"rocm-stack-{PROMETHEUS_TOKEN}", opts=on_host)
        self.token_writer = docker.Container(
            f"{host}-{PROMETHEUS_TOKEN}",
            name=f"rocm-stack-{PROMETHEUS_TOKEN}",
            image=image,
            # prom/prometheus is built on busybox (its Dockerfile @ v3.5.0 L3): sh, sha256sum, cut. Its exit code
            # (the provider's `exit_code`, `docker ps -a`) says whether the tokens are in place.
            entrypoints=["/bin/sh", "-c", TOKENS_WRITE],
            # Root (the image's user is nobody) to write into the volume's root-owned directory; no capability.
            user="0",
            uploads=[
                docker.ContainerUploadArgs(file=path, content=pulumi.Output.secret(content), permissions=READABLE)
                for path, content in (
                    (SCRAPE_SECRET, args.vllm_scrape_secret),
                    *([(VLLM_CA_FILE, args.vllm_ca)] if args.vllm_ca is not None else []),
                )
            ]
            # The hosts by reference (path and SHA-256): the state stays the same size at any fleet size.
            + [generated_upload(SCRAPE_HOSTS, "".join(f"{h}\n" for h in token_hosts(args.scrape_config)), READABLE)],
            volumes=[docker.ContainerVolumeArgs(volume_name=volume.name, container_path=PROMETHEUS_SECRETS)],
            **_one_shot(PROMETHEUS_TOKEN, args.logs),
            # A rotation replaces it under the same name: the old one goes first.
            opts=pulumi.ResourceOptions.merge(created, pulumi.ResourceOptions(delete_before_replace=True)),
        )
        return volume

    def _files(
        self,
        host: str,
        args: MonitoringHostArgs,
        volume: docker.Volume,
        image: pulumi.Input[str],
        created: pulumi.ResourceOptions,
    ) -> docker.Container:
        """The one-shot container that puts the rules and targets into their volume and has Prometheus reload (module
        docstring). It joins the running Prometheus's PID namespace, so it is created after it."""
        prometheus = self.containers[PROMETHEUS]
        per_host = host_scrape_file(args.scrape_config)
        uploads = [
            generated_upload(PROMETHEUS_RULES, rules_file_text(args.config, args.fleet), READABLE),
            *(
                generated_upload(path, text, READABLE)
                for path, text in sorted(target_files(args.scrape_config).items())
            ),
            *([generated_upload(VLLM_SCRAPE_FILE, per_host, READABLE)] if per_host is not None else []),
        ]
        return docker.Container(
            f"{host}-{PROMETHEUS_FILES}",
            name=f"rocm-stack-{PROMETHEUS_FILES}",
            image=image,
            # prom/prometheus is built on busybox (its Dockerfile @ v3.5.0 L3): a shell with `kill`.
            entrypoints=["/bin/sh", "-c", PROMETHEUS_RELOAD],
            uploads=uploads,
            volumes=[docker.ContainerVolumeArgs(volume_name=volume.name, container_path=PROMETHEUS_STACK_FILES)],
            # By the container's ID, which is what dockerd stores and the provider reads back (funcs.go L955-956;
            # a name would read back as the ID: a diff at every `pulumi up`). A new Prometheus is a new ID: this
            # container is replaced with it and signals the new one. The same user as Prometheus (the image's
            # nobody): signalling it needs no capability.
            pid_mode=prometheus.id.apply(lambda container: f"container:{container}"),
            **_one_shot(PROMETHEUS_FILES, args.logs),
            # A change replaces it under the same name: the old one goes first.
            opts=pulumi.ResourceOptions.merge(
                created, pulumi.ResourceOptions(delete_before_replace=True, depends_on=[prometheus])
            ),
        )

    @staticmethod
    def _grafana(cfg: MonitoringConfig, password: pulumi.Input[str] | None) -> dict[str, Any]:
        """Grafana's arguments: the provisioning files, the dashboard and the admin password.

        The password is an environment variable, not an upload: a secret upload would make the container's whole
        `uploads` secret, and a dashboard change would no longer show in `pulumi preview` (the environment, three
        fixed variables, is hidden instead). Grafana uses `admin_password` only when it creates the admin user, on a
        database without users (pkg/services/sqlstore/sqlstore.go ensureMainOrgAndAdminUser: `if stats.Count > 0
        { return nil }`; conf/defaults.ini: "can be changed before first start of grafana"), so a rotated secret
        would never reach a kept volume: GRAFANA_START resets it with the CLI on every start that finds a database."""
        uploads = [
            _upload(GRAFANA_DATASOURCES, _yaml(grafana_datasources())),
            _upload(GRAFANA_DASHBOARD_PROVIDERS, _yaml(grafana_dashboard_providers())),
        ]
        if cfg.grafana_dashboard:
            uploads.append(generated_upload(f"{GRAFANA_DASHBOARDS}/rocm-gpus.json", dashboard_json_text(), READABLE))
        env: dict[str, pulumi.Input[str]] = {
            "GF_SERVER_HTTP_PORT": str(GRAFANA_PORT),
            # The address Grafana binds ([server] http_addr, grafana.com/docs/grafana/latest/setup-grafana/
            # configure-grafana/#http_addr; empty, its default: every interface).
            "GF_SERVER_HTTP_ADDR": LOOPBACK,
            "GF_ANALYTICS_REPORTING_ENABLED": "false",
        }
        if password is None:
            return {"uploads": uploads, "envs": container_envs(env, secret=False)}
        env["GF_SECURITY_ADMIN_PASSWORD"] = password
        return {
            "uploads": uploads,
            "envs": container_envs(env, secret=True),
            "entrypoints": ["/bin/sh", "-c", GRAFANA_START],
        }


# The grafana/grafana image's entrypoint is /run.sh (its Dockerfile `ENTRYPOINT [ "/run.sh" ]`), which it sets
# GF_PATHS_DATA=/var/lib/grafana and GF_PATHS_HOME=/usr/share/grafana for; the SQLite database is
# `<paths.data>/grafana.db` (conf/defaults.ini [database] `path = grafana.db`, "relative to data_path"). With a
# database, `grafana cli admin reset-admin-password --password-from-stdin` sets the admin's (user id 1) password to
# the first line of its stdin (pkg/cmd/grafana-cli/commands/reset_password_command.go), fed by the shell's printf
# builtin (no command line holds it); a failure (a password Grafana finds too short) stops the start, loudly, rather
# than leave the old password valid. Without one (the first start) the server creates the admin with
# GF_SECURITY_ADMIN_PASSWORD.
GRAFANA_START = (
    'if [ -e "$GF_PATHS_DATA/grafana.db" ]; then printf %s "$GF_SECURITY_ADMIN_PASSWORD" | grafana cli --homepath '
    '"$GF_PATHS_HOME" admin reset-admin-password --password-from-stdin || { echo "rocm-stack: the Grafana admin '
    'password was not reset to grafanaAdminPassword" >&2; exit 1; }; fi; exec /run.sh'
)
