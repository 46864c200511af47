"""The monitoring host of Docker fleets (`monitoring.host`) and the exporters on every Docker host
(components/monitoring/docker_host.py): the config it takes, the files it provisions checked by the real tools
(promtool, amtool, prometheus), the policy's one exception for cAdvisor, and what a second `pulumi up` does after
each day-2 change (the change-impact preview, tools/impact.py, whose rules tests/test_impact_rules.py pins to the
providers' source).

Upstream facts the tests rest on, with their sources:
- Prometheus parses `--storage.tsdb.retention.size` with alecthomas/units ParseBase2Bytes ("MB" = 2^20 bytes) and
  `--storage.tsdb.retention.time` as a model.Duration before it reads its configuration (checked on Debian's
  prometheus 2.42 here: a bad value stops it with "Error parsing commandline arguments").
- Grafana sets `admin_password` only when it creates its database ("Set once on first-run",
  grafana.com/docs/grafana/latest/setup-grafana/configure-grafana/#admin_password): a rotation must reset it.
- cAdvisor's Docker handler reads `<docker root>/image/<driver>/layerdb/mounts/<id>/mount-id` and fails the
  container without it (google/cadvisor v0.55.1, the pinned image, container/docker/handler.go L114), reads disk
  usage only with the `disk` metrics (L248), and takes the host's paths when /rootfs/proc is absent
  (manager/manager.go L188). `container_health_state` exists from v0.54.0 (read from the mirror below).
- Prometheus reads an `authorization.credentials_file` on every scrape (prometheus/common, read from the mirror
  below at the version the pinned Prometheus's go.mod requires).
"""

from __future__ import annotations

import json
import posixpath
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from components.monitoring import docker_host, vllm_metrics_token_file
from components.monitoring.docker_host import (
    ALERTMANAGER_CONFIG,
    GRAFANA_DASHBOARDS,
    PROMETHEUS_CONFIG,
    PROMETHEUS_RULES,
    PROMETHEUS_STACK_FILES,
    VLLM_SCRAPE_FILE,
    targets_file,
)
from domain.dashboard import DASHBOARD_FILE
import rules
from schema import ConfigError, load
from domain.alerts import VLLM_JOB
from schema.monitoring import MonitoringConfig, Retention
from tools.impact import ImpactReport, predict
from tools.impact_rules import Action
from tools.synth import Plan, synthesize, upload_text
from tools.synth_diff import SynthPlan
from conftest import CONTAINER, REMOTE_IMAGE, refused, stack_file, synth_with
import prometheus_versions
import upstream_go

P = "rocm-stack:"
VOLUME = "docker:index/volume:Volume"
SERVERS = ("prometheus", "alertmanager", "grafana")
FILES_WRITER = "gpu-node-1-prometheus-files"


def report_of(base: Plan, head: Plan) -> ImpactReport:
    return predict(*(SynthPlan.model_validate(p.to_json()) for p in (base, head)))


def actions(report: ImpactReport) -> dict[tuple[str, str], Action | None]:
    return {(i.type, i.name): i.action for i in report.impacts}


def upload(plan: Plan, container: str, path: str) -> str:
    """The text of a container's upload: its content, or the file its `source` names (by reference)."""
    uploads = plan.get(CONTAINER, container)["inputs"]["uploads"]
    text = next(upload_text(u) for u in uploads if u["file"] == path)
    assert text is not None
    return text


def refusal_of(stack: str, config: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as error:
        load(stack, config)
    return str(error.value)


# --- the config ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "environment", "has_kubernetes", "expected"),
    [
        (None, "prod", False, "a"),  # on by default in a Docker-only prod stack, on the first host
        (None, "prod", True, None),  # a Kubernetes stack has the cluster's Prometheus
        (None, "dev", False, None),
        (True, "dev", True, "a"),
        ("b", "dev", False, "b"),
        (False, "prod", False, None),
    ],
)
def test_the_monitoring_host_by_default_and_by_choice(host, environment, has_kubernetes, expected):
    assert MonitoringConfig(host=host).monitoring_host(environment, has_kubernetes, ["a", "b"]) == expected


def test_an_unknown_host_is_refused_naming_the_key_and_the_fix():
    message = refusal_of("dev", {P + "monitoring": {"host": "gpu-node-9"}})
    assert message == (
        "rocm-stack:monitoring.host: 'gpu-node-9' is not a host of rocm-stack:hosts (one of ['local']); name one "
        "of them, or set false for no monitoring host"
    )


@pytest.mark.parametrize(
    ("monitoring", "expected"),
    [
        ({"retention": {"time": None, "size": None}}, "rocm-stack:monitoring.retention: set time, size or both"),
        ({"retention": {"size": "10MiB"}}, "rocm-stack:monitoring.retention.size: must be at least 64MiB"),
        ({"receivers": [{"name": "x"}]}, "receiver 'x' needs exactly one of webhook"),
        ({"receivers": [{"name": "x", "webhook": {"url": "ftp://h/x"}}]}, "expected an http:// or https:// URL"),
        (
            {"receivers": [{"name": "x", "email": {"to": ["a@b"], "from": "c@d", "smarthost": "mail"}}]},
            "rocm-stack:monitoring.receivers[0].email.smarthost: expected host:port",
        ),
        (
            {
                "receivers": [
                    {"name": "x", "webhook": {"url": "https://h"}},
                    {"name": "x", "webhook": {"url": "https://i"}},
                ]
            },
            "rocm-stack:monitoring.receivers[1].name: 'x' is already a receiver's name",
        ),
    ],
)
def test_bad_monitoring_config_is_refused_by_key(monitoring, expected):
    assert expected in refusal_of("dev", {P + "monitoring": monitoring})


def test_prod_with_the_host_on_needs_the_grafana_password():
    message = refused(lambda: synth_with("prod", grafanaAdminPassword=None))
    assert "rocm-stack:grafanaAdminPassword: the monitoring host 'gpu-node-1' runs Grafana" in message
    assert "pulumi config set --secret grafanaAdminPassword" in message


@pytest.mark.parametrize(
    ("host", "port", "owner"),
    [
        ("workstation", 8080, "the stack's cAdvisor"),
        ("workstation", 9100, "the stack's node-exporter"),
        ("workstation", 3000, "Grafana of the monitoring host (monitoring.host)"),
    ],
)
def test_a_partition_port_taken_by_monitoring_is_refused(host, port, owner):
    config = stack_file("dev")
    config[P + "monitoring"] = {"host": host}
    config[P + "hosts"][0]["containers"].append(
        {"name": "web", "gpus": [1], "ports": [{"internal": 80, "external": port}]}
    )
    message = refusal_of("dev", config)
    assert f"host port {port} of '{host}' is already published by {owner}" in message


# --- the files, checked by the real tools --------------------------------------------------------------------------


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian: prometheus, prometheus-alertmanager)")
    return path


def test_prometheus_loads_the_uploaded_config_and_rules(prod_plan, tmp_path):
    """promtool checks the exact uploaded prometheus.yml with the rule file, the targets files (file_sd) and the
    keyed hosts' jobs (scrape_config_files) the files container uploads (their paths moved under tmp). A promtool
    before 2.43 refuses `scrape_config_files` (tests/prometheus_versions.py): it checks the configuration 2.43 builds
    from the two files."""
    promtool = tool("promtool")
    rules_file = tmp_path / "rules.yml"
    rules_file.write_text(upload(prod_plan, FILES_WRITER, PROMETHEUS_RULES))
    config = yaml.safe_load(upload(prod_plan, "gpu-node-1-prometheus", PROMETHEUS_CONFIG))
    assert config["rule_files"] == [PROMETHEUS_RULES]
    config["rule_files"] = [str(rules_file)]
    for job in config["scrape_configs"]:
        (sd,) = job["file_sd_configs"]
        assert sd == {"files": [targets_file(job["job_name"])]} and "static_configs" not in job
        (tmp_path / f"{job['job_name']}.yml").write_text(upload(prod_plan, FILES_WRITER, sd["files"][0]))
        sd["files"] = [str(tmp_path / f"{job['job_name']}.yml")]
    # prod is keyed: a job per host with vLLM servers, each reading its host's token file (on the monitoring host: the
    # token container's volume, tests below), which promtool opens.
    assert config["scrape_config_files"] == [VLLM_SCRAPE_FILE]
    per_host = yaml.safe_load(upload(prod_plan, FILES_WRITER, VLLM_SCRAPE_FILE))
    for job in per_host["scrape_configs"]:
        host = job["job_name"].removeprefix(f"{VLLM_JOB}-")
        assert job["authorization"]["credentials_file"] == vllm_metrics_token_file(host)
        (tmp_path / host).write_text("token")
        job["authorization"]["credentials_file"] = str(tmp_path / host)
    (tmp_path / "hosts.scrape.yml").write_text(yaml.safe_dump(per_host))
    config["scrape_config_files"] = [str(tmp_path / "*.scrape.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True
    )
    if not prometheus_versions.reads_scrape_config_files(promtool):
        assert result.returncode == 1 and "field scrape_config_files not found" in result.stdout + result.stderr
        config = prometheus_versions.inlined(config, {str(tmp_path / "hosts.scrape.yml"): yaml.safe_dump(per_host)})
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        result = subprocess.run(
            [promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True
        )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "rules found" in result.stdout
    # promtool reads the targets files as file_sd files: a malformed one fails the check, naming it.
    (tmp_path / "node-exporter.yml").write_text("- targets: 5\n")
    result = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert f'checking SD file "{tmp_path}/node-exporter.yml"' in result.stdout + result.stderr


def test_prometheus_scrapes_what_the_stack_generates(prod_plan):
    """One generated scrape configuration: the monitoring host's is the `prometheusScrapeConfig` output, each shared
    job's static targets in its file_sd file instead, and the per-host jobs whole in VLLM_SCRAPE_FILE."""
    config = yaml.safe_load(upload(prod_plan, "gpu-node-1-prometheus", PROMETHEUS_CONFIG))
    output = yaml.safe_load(prod_plan.outputs["prometheusScrapeConfig"])["scrape_configs"]
    shared = [job for job in output if job["job_name"] in docker_host.SHARED_JOBS]
    per_host = yaml.safe_load(upload(prod_plan, FILES_WRITER, VLLM_SCRAPE_FILE))["scrape_configs"]
    assert shared + per_host == output and len(per_host) == 2  # prod: vLLM servers on gpu-node-3 and gpu-node-4
    assert [job["job_name"] for job in config["scrape_configs"]] == [job["job_name"] for job in shared]
    for job, generated in zip(config["scrape_configs"], shared):
        targets = yaml.safe_load(upload(prod_plan, FILES_WRITER, targets_file(job["job_name"])))
        assert targets == generated.pop("static_configs") and targets
        assert {k: v for k, v in job.items() if k != "file_sd_configs"} == generated
    assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]}


@pytest.mark.parametrize(
    ("receivers", "routed"),
    [("prod", {"warning": "oncall", "critical": "oncall,gpu-team"}), ("none", {"critical": "nowhere"})],
)
def test_alertmanager_accepts_the_uploaded_config_and_routes_by_severity(prod_plan, receivers, routed, tmp_path):
    """amtool checks the exact uploaded alertmanager.yml, then says which receivers an alert of each severity reaches."""
    if receivers == "prod":
        text = upload(prod_plan, "gpu-node-1-alertmanager", ALERTMANAGER_CONFIG)
    else:
        text = yaml.safe_dump(docker_host.alertmanager_config([]))
    config = tmp_path / "alertmanager.yml"
    config.write_text(text)
    result = subprocess.run([tool("amtool"), "check-config", str(config)], capture_output=True, text=True)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    for severity, receivers_reached in routed.items():
        route = subprocess.run(
            [
                tool("amtool"),
                "config",
                "routes",
                "test",
                f"--config.file={config}",
                f"severity={severity}",
                "alertname=X",
            ],
            capture_output=True,
            text=True,
        )
        assert route.stdout.strip() == receivers_reached, route.stdout + route.stderr


def test_the_outputs_say_where_alerts_go(prod_plan, dev_plan):
    assert prod_plan.outputs["alertDestinations"] == (
        "oncall: webhook https://alerts.example.internal/rocm-stack; gpu-team: email to gpu-team@example.internal via "
        "smtp.example.internal:587 (critical only)"
    )
    # On the host's loopback (issue 34 item 7), through the tunnel the next output gives.
    assert prod_plan.outputs["monitoringUrls"] == {
        "prometheus": "http://127.0.0.1:9090",
        "alertmanager": "http://127.0.0.1:9093",
        "grafana": "http://127.0.0.1:3000/d/rocm-stack-gpus",
    }
    assert prod_plan.outputs["monitoringTunnel"] == (
        "ssh -N -L 9090:127.0.0.1:9090 -L 9093:127.0.0.1:9093 -L 3000:127.0.0.1:3000 gpu-node-1.example.internal"
    )
    assert dev_plan.outputs["alertDestinations"].startswith("nowhere: no monitoring host")
    assert docker_host.alert_destinations([]).startswith("nowhere: no monitoring.receivers")


@pytest.mark.parametrize(
    "retention", [Retention(), Retention(time="30d", size="200GiB"), Retention(time=None, size="1TiB")]
)
def test_prometheus_parses_the_retention_flags(retention, tmp_path):
    """The real binary parses its flags before it reads the configuration: a missing one proves them accepted."""
    taken, output = prometheus_versions.takes_flags(tool("prometheus"), retention.flags(), tmp_path)
    assert taken, output


def test_grafana_gets_the_committed_dashboard_and_the_local_prometheus(prod_plan):
    dashboard = upload(prod_plan, "gpu-node-1-grafana", f"{GRAFANA_DASHBOARDS}/rocm-gpus.json")
    assert dashboard == DASHBOARD_FILE.read_text()
    # The dashboard's panels use its `datasource` variable of type prometheus, which Grafana sets to the default
    # datasource of that type: the provisioned one.
    assert {"name": "datasource", "type": "datasource", "query": "prometheus"}.items() <= next(
        v for v in json.loads(dashboard)["templating"]["list"] if v["name"] == "datasource"
    ).items()
    grafana = prod_plan.get(CONTAINER, "gpu-node-1-grafana")["inputs"]
    # The password is in the (secret) environment, so the uploads stay visible to `pulumi preview`.
    assert grafana["envs"] == "[secret]" and "[secret]" not in json.dumps(grafana["uploads"])


# --- containers ----------------------------------------------------------------------------------------------------


def test_every_docker_host_runs_both_exporters_pinned_and_the_servers_only_on_the_monitoring_host(prod_plan):
    hosts = ["gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"]
    names = {c["name"] for c in prod_plan.of_type(CONTAINER)}
    assert all(f"{h}-{e}" in names for h in hosts for e in ("node-exporter", "cadvisor"))
    assert {n for n in names if n.endswith(SERVERS)} == {f"gpu-node-1-{s}" for s in SERVERS}
    images = {r["inputs"]["name"] for r in prod_plan.of_type(REMOTE_IMAGE)}
    pinned = [docker_host.PROMETHEUS_IMAGE, docker_host.ALERTMANAGER_IMAGE, docker_host.GRAFANA_IMAGE]
    pinned += [docker_host.NODE_EXPORTER_IMAGE, docker_host.CADVISOR_IMAGE]
    assert set(pinned) <= images and all("@sha256:" in ref and rules.unpinned_reason(ref) is None for ref in pinned)
    data = [v for v in prod_plan.of_type(VOLUME) if v["inputs"]["name"].endswith("-data")]
    assert {v["inputs"]["name"] for v in data} == {f"rocm-stack-{s}-data" for s in SERVERS}
    assert all(v["retain_on_delete"] for v in data)


def test_node_exporter_sees_the_checkpoint_and_model_cache_filesystems_read_only(prod_plan):
    node_1 = prod_plan.get(CONTAINER, "gpu-node-1-node-exporter")["inputs"]
    assert node_1["volumes"] == [
        {
            "hostPath": "/var/lib/rocm-stack/checkpoints",
            "containerPath": "/var/lib/rocm-stack/checkpoints",
            "readOnly": True,
        }
    ]
    node_3 = prod_plan.get(CONTAINER, "gpu-node-3-node-exporter")["inputs"]
    assert [v["hostPath"] for v in node_3["volumes"]] == ["/var/lib/rocm-stack/huggingface"]
    assert node_1["readOnly"] and node_1["capabilities"] == {"drops": ["ALL"]} and "devices" not in node_1


def test_cadvisor_mounts_exactly_the_policys_set_read_only(prod_plan):
    cadvisor = prod_plan.get(CONTAINER, "gpu-node-2-cadvisor")["inputs"]
    assert {v["hostPath"]: v["containerPath"] for v in cadvisor["volumes"]} == rules.CADVISOR_MOUNTS
    assert all(v["readOnly"] for v in cadvisor["volumes"]) and not cadvisor.get("privileged")
    assert "--enable_metrics=cpu,memory,network,diskIO" in cadvisor["command"]  # no `disk`: see the module doc


# --- the policy's one exception ------------------------------------------------------------------------------------


def cadvisor_props(prod_plan: Plan, **changes: Any) -> dict[str, Any]:
    props = json.loads(json.dumps(prod_plan.get(CONTAINER, "gpu-node-1-cadvisor")["inputs"]))
    props.update(changes)
    return props


def test_the_stacks_cadvisor_passes_and_nothing_else_does(prod_plan):
    assert rules.host_access_problems(CONTAINER, cadvisor_props(prod_plan)) == []
    mounts = cadvisor_props(prod_plan)["volumes"]
    # The same mounts on a partition, or unlabelled, or on a labelled node-exporter: refused.
    partition = [{"label": rules.PARTITION_LABEL, "value": "gpu-node-1/train-a"}, *cadvisor_props(prod_plan)["labels"]]
    for props in (
        cadvisor_props(prod_plan, labels=partition),
        cadvisor_props(prod_plan, labels=[]),
        cadvisor_props(prod_plan, labels=[{"label": rules.MONITORING_LABEL, "value": "node-exporter"}]),
        cadvisor_props(prod_plan, privileged=True),
    ):
        assert any("Docker socket" in p for p in rules.host_access_problems(CONTAINER, props))
    # Writable, moved, or one more system path: refused.
    writable = [{**m, "readOnly": False} if m["hostPath"] == "/var/lib/docker/image" else m for m in mounts]
    moved = [{**m, "containerPath": "/x"} if m["hostPath"] == "/var/lib/docker/image" else m for m in mounts]
    for volumes in (
        writable,
        moved,
        [*mounts, {"hostPath": "/var/lib/docker", "containerPath": "/d", "readOnly": True}],
    ):
        assert rules.host_access_problems(CONTAINER, cadvisor_props(prod_plan, volumes=volumes))


def test_a_partition_still_cannot_mount_the_docker_socket():
    config = stack_file("dev")
    config[P + "hosts"][0]["containers"][0]["volumes"] = [
        {"hostPath": "/var/run/docker.sock", "containerPath": "/var/run/docker.sock", "readOnly": True}
    ]
    config[P + "environment"] = "prod"
    assert "is or holds the Docker socket" in refusal_of("prod-x", config)


# --- day 2: what the second `pulumi up` does -------------------------------------------------------------------------


def monitoring_only(report: ImpactReport) -> set[str]:
    return {i.name for i in report.impacts}


def test_a_rule_change_reloads_prometheus_and_replaces_only_the_files_container(prod_plan):
    """Issue 38: the rule file is an upload (by reference) of the one-shot files container, not of Prometheus: a
    rule change replaces that container (`uploads` ForceNew), which writes the new file into the volume and sends
    Prometheus SIGHUP (a reload of its rule files: tests/e2e/test_e2e_monitoring_host.py runs it); Prometheus is not
    touched."""
    config = stack_file("prod")
    config[P + "monitoring"]["thresholds"] = {"gpuTemperatureCelsius": 90}
    report = report_of(prod_plan, synthesize("prod", config))
    writer = next(i for i in report.impacts if i.name == FILES_WRITER)
    assert writer.action is Action.DELETE_REPLACE and writer.replaced_by[0][0].startswith("uploads")
    assert writer.meaning == (
        "replaces the stack's prometheus-files on `gpu-node-1`: it writes the new alert rules and scrape targets into "
        "their volume, and the running Prometheus reloads them (SIGHUP): Prometheus is not restarted"
    )
    # The Kubernetes PrometheusRule changes with it (one rule definition); no other Docker container is touched.
    docker_changes = {i.name for i in report.impacts if i.type.startswith("docker:")}
    assert docker_changes == {FILES_WRITER}


def test_a_dashboard_change_restarts_grafana_alone(prod_plan, monkeypatch):
    monkeypatch.setattr(docker_host, "dashboard_json_text", lambda: DASHBOARD_FILE.read_text().replace("GPU", "Gpu"))
    report = report_of(prod_plan, synthesize("prod"))
    assert {i.name: i.action for i in report.impacts} == {"gpu-node-1-grafana": Action.DELETE_REPLACE}


def test_a_retention_change_restarts_prometheus_with_its_samples_kept(prod_plan):
    config = stack_file("prod")
    config[P + "monitoring"]["retention"] = {"time": "90d"}
    report = report_of(prod_plan, synthesize("prod", config))
    # The files container joins Prometheus's PID namespace by its ID, which the new container changes: it is
    # replaced too and writes the rules and targets again (ForceNew pid_mode, unknown in the preview).
    impacts = {i.name: i for i in report.impacts}
    assert {name: i.action for name, i in impacts.items()} == {
        "gpu-node-1-prometheus": Action.DELETE_REPLACE,
        FILES_WRITER: Action.DELETE_REPLACE,
    }
    assert impacts["gpu-node-1-prometheus"].replaced_by == [("command", "tfbridge.force-new")]
    assert impacts[FILES_WRITER].replaced_by == [("pidMode", "pulumi.unknown-output")]


def test_a_password_rotation_is_invisible_offline_and_replaces_grafana(prod_plan):
    rotated = synthesize("prod", secrets={P + "grafanaAdminPassword": "rotated-grafana-password"})
    report = report_of(prod_plan, rotated)
    assert report.impacts == []
    grafana = next(s for s in report.secrets if s.name == "gpu-node-1-grafana")
    # envs is ForceNew: the new container's start resets the stored password (docker_host.GRAFANA_START).
    assert grafana.paths == ["envs"] and grafana.if_rotated is Action.DELETE_REPLACE
    assert "reset-admin-password --password-from-stdin" in docker_host.GRAFANA_START


def test_moving_the_monitoring_host_starts_empty_and_keeps_the_old_history_on_the_old_host(prod_plan):
    config = stack_file("prod")
    config[P + "monitoring"]["host"] = "gpu-node-2"
    report = report_of(prod_plan, synthesize("prod", config))
    by = {(i.name, i.action) for i in report.impacts}
    for server in SERVERS:
        assert (f"gpu-node-1-{server}", Action.DELETE) in by and (f"gpu-node-2-{server}", Action.CREATE) in by
        assert (f"gpu-node-1-{server}-data", Action.DELETE) in by and (f"gpu-node-2-{server}-data", Action.CREATE) in by
    old_volume = next(i for i in report.impacts if i.name == "gpu-node-1-prometheus-data")
    assert old_volume.meaning == (
        "forgets volume `rocm-stack-prometheus-data` on `gpu-node-1`: retainOnDelete keeps it, and its data, on the host"
    )
    assert "pulumi.retain-on-delete" in old_volume.rules
    # What is lost on the new host: the samples, silences and Grafana's own state (the dashboard is provisioned).
    new_volume = next(i for i in report.impacts if i.name == "gpu-node-2-prometheus-data")
    assert new_volume.meaning == "creates volume `rocm-stack-prometheus-data` on `gpu-node-2`"
    # The exporters stay where they are.
    assert not any("exporter" in i.name or "cadvisor" in i.name for i in report.impacts)


def test_adding_a_docker_host_adds_its_exporters_and_a_target_without_touching_the_others(prod_plan):
    config = stack_file("prod")
    new_host = json.loads(json.dumps(config[P + "hosts"][3]))
    new_host["name"], new_host["docker"]["host"] = "gpu-node-5", "ssh://deploy@gpu-node-5.example.internal"
    new_host["containers"] = [{"name": "spare", "gpus": list(range(8))}]
    config[P + "hosts"].append(new_host)
    head = synthesize("prod", config)
    report = report_of(prod_plan, head)
    changed = {i.name: i.action for i in report.impacts if i.action is not Action.CREATE}
    # Only the files container, whose targets files gain the new host's targets, is replaced: Prometheus re-reads
    # them (file_sd) and keeps running; its prometheus.yml does not change.
    assert changed == {FILES_WRITER: Action.DELETE_REPLACE}
    created = {i.name for i in report.impacts if i.action is Action.CREATE}
    assert {"gpu-node-5-node-exporter", "gpu-node-5-cadvisor"} <= created
    assert upload(head, "gpu-node-1-prometheus", PROMETHEUS_CONFIG) == upload(
        prod_plan, "gpu-node-1-prometheus", PROMETHEUS_CONFIG
    )
    targets = upload(head, FILES_WRITER, targets_file("node-exporter"))
    assert "gpu-node-5.example.internal" in targets


# --- the vLLM scrape token: its own volume, written by a one-shot container -----------------------------------------

TOKEN_WRITER = "gpu-node-1-prometheus-token"


def mirror_show(repo: str, rev: str, path: str) -> list[str]:
    """The lines of `path` of `repo` at `rev` (tests/upstream_go.py: skips where it is not fetched)."""
    return upstream_go.show(repo, rev, path).splitlines()


def image_tag(reference: str) -> str:
    return reference.split("@")[0].rsplit(":", 1)[1]


def test_prometheus_reads_the_credentials_file_on_every_scrape():
    """Why a rotated token needs no Prometheus restart: the pinned Prometheus's go.mod requires prometheus/common
    v0.65.0, whose http_config.go makes a credentials_file a FileSecret (L786) and whose authorization round tripper
    fetches it on every request (L813, L821), a fetch being an os.ReadFile (L745-746)."""
    go_mod = mirror_show("prometheus/prometheus", image_tag(docker_host.PROMETHEUS_IMAGE), "go.mod")
    (common,) = [line.split()[1] for line in go_mod if line.split()[:1] == ["github.com/prometheus/common"]]
    assert common == "v0.65.0"
    source = mirror_show("prometheus/common", common, "config/http_config.go")
    assert source[785].strip() == "return NewFileSecret(file), nil"
    assert source[744].startswith("func (s *FileSecret) Fetch(") and "os.ReadFile(s.file)" in source[745]
    assert source[812].startswith("func (rt *authorizationCredentialsRoundTripper) RoundTrip(req *http.Request)")
    assert "rt.authCredentials.Fetch(req.Context())" in source[820]


def test_the_pinned_prometheus_reads_scrape_config_files_at_every_load():
    """Why the per-host jobs can live in a file of the files container: the pinned Prometheus (v3.5.0) has
    `scrape_config_files` (config/config.go L275), whose globs GetScrapeConfigs reads and appends (L338-339, L365),
    called by the scrape manager's ApplyConfig (scrape/manager.go L251), a reloader of every configuration load
    (cmd/prometheus/main.go L971), SIGHUP's included. Debian's 2.42, which the tests run, refuses the key
    (test_prometheus_loads_the_uploaded_config_and_rules)."""
    tag = image_tag(docker_host.PROMETHEUS_IMAGE)
    config = mirror_show("prometheus/prometheus", tag, "config/config.go")
    assert "ScrapeConfigFiles []string" in config[274] and 'yaml:"scrape_config_files,omitempty"' in config[274]
    assert config[337].strip() == "for _, pat := range c.ScrapeConfigFiles {"
    assert (
        config[338].strip() == "fs, err := filepath.Glob(pat)" and config[364].strip() == "scfgs = append(scfgs, scfg)"
    )
    manager = mirror_show("prometheus/prometheus", tag, "scrape/manager.go")
    assert manager[250].strip() == "scfgs, err := cfg.GetScrapeConfigs()"
    assert mirror_show("prometheus/prometheus", tag, "cmd/prometheus/main.go")[970].strip() == (
        "reloader: scrapeManager.ApplyConfig,"
    )


def test_the_tokens_are_the_writers_in_a_volume_prometheus_mounts_read_only(prod_plan):
    writer = prod_plan.get(CONTAINER, TOKEN_WRITER)["inputs"]
    prometheus = prod_plan.get(CONTAINER, "gpu-node-1-prometheus")["inputs"]
    (volume,) = writer["volumes"]
    secrets = posixpath.dirname(vllm_metrics_token_file("gpu-node-1"))
    assert volume == {"volumeName": "rocm-stack-prometheus-token", "containerPath": secrets}
    assert {**volume, "readOnly": True} in prometheus["volumes"]
    # The writer's uploads are secret; Prometheus's (its config) stay visible to `pulumi preview`.
    assert writer["uploads"] == "[secret]" and all(isinstance(u["content"], str) for u in prometheus["uploads"])
    # It derives the tokens (busybox: tests/e2e/test_e2e_monitoring_host.py) and writes them as root without a
    # capability (the volume's directory is root's).
    assert writer["entrypoints"] == ["/bin/sh", "-c", docker_host.TOKENS_WRITE] and writer["user"] == "0"
    assert writer["networkMode"] == "none" and writer["capabilities"] == {"drops": ["ALL"]}
    assert writer["restart"] == "no" and not writer["mustRun"] and not writer.get("attach")
    # Nothing waits for the writer: Prometheus reads the file per scrape, not at its start.
    depends_on = prod_plan.get(CONTAINER, "gpu-node-1-prometheus")["depends_on"]
    assert not any(d.endswith(f"Container::{TOKEN_WRITER}") for d in depends_on)


def test_without_an_api_key_there_is_no_token():
    plan = synth_with("dev", monitoring={"host": "workstation"})  # dev has no vllmApiKey (prod requires one)
    assert not [r for r in plan.resources if "prometheus-token" in r["name"]]
    prometheus = plan.get(CONTAINER, "workstation-prometheus")["inputs"]
    assert [v["containerPath"] for v in prometheus["volumes"]] == ["/prometheus", PROMETHEUS_STACK_FILES]
    config = yaml.safe_load(upload(plan, "workstation-prometheus", PROMETHEUS_CONFIG))
    assert not any("authorization" in job for job in config["scrape_configs"])


def test_a_key_rotation_replaces_the_token_writer_alone_and_prometheus_keeps_running(prod_plan):
    """A rotated vllmApiKey is invisible offline; the report's secret inputs say what it does: the writer (its
    `uploads`, ForceNew) is deleted and created again, which rewrites the file in the volume; Prometheus holds no
    secret, so nothing of it changes (the e2e test_e2e_monitoring_host shows the running one taking the new token)."""
    rotated = synthesize("prod", secrets={P + "vllmApiKey": "rotated-key-0123456789abcdef012345"})
    report = report_of(prod_plan, rotated)
    assert report.impacts == []
    by_name = {s.name: s for s in report.secrets}
    writer = by_name[TOKEN_WRITER]
    assert (writer.paths, writer.if_rotated, writer.then) == (["uploads"], Action.DELETE_REPLACE, [])
    assert not any(
        name.startswith("gpu-node-1-") and name != TOKEN_WRITER and "grafana" not in name for name in by_name
    )


def test_the_first_up_with_the_token_volume_restarts_prometheus_once(prod_plan):
    """From a stack of before this change (no token volume and writer): the writer and its volume are created and
    Prometheus is replaced once, for its new mount (`volumes`, ForceNew)."""
    before = json.loads(json.dumps(prod_plan.to_json()))
    before["resources"] = [r for r in before["resources"] if "prometheus-token" not in r["name"]]
    for resource in before["resources"]:
        if resource["name"] == "gpu-node-1-prometheus" and resource["type"] == CONTAINER:
            resource["inputs"]["volumes"] = resource["inputs"]["volumes"][:1]
            resource["depends_on"] = [d for d in resource["depends_on"] if "prometheus-token" not in d]
    report = predict(SynthPlan.model_validate(before), SynthPlan.model_validate(prod_plan.to_json()))
    assert {(i.name, i.action) for i in report.impacts} == {
        ("gpu-node-1-prometheus-token", Action.CREATE),
        (TOKEN_WRITER, Action.CREATE),
        ("gpu-node-1-prometheus", Action.DELETE_REPLACE),
        (FILES_WRITER, Action.DELETE_REPLACE),  # in Prometheus's PID namespace, by its ID
    }


def before_per_host_tokens(plan: Plan) -> dict[str, Any]:
    """The prod plan as the stack of before issue 34 item 9 declared it: one `vllm` job in prometheus.yml reading the
    one fleet-wide token file (its targets in a file_sd file of the files container), and a token container that
    only checked that file (the token was its upload)."""
    before = json.loads(json.dumps(plan.to_json()))
    per_host = yaml.safe_load(upload(plan, FILES_WRITER, VLLM_SCRAPE_FILE))["scrape_configs"]
    targets = [static for job in per_host for static in job["static_configs"]]
    old_job = {
        "job_name": VLLM_JOB,
        "scrape_interval": "30s",
        "metrics_path": "/metrics",
        "authorization": {"type": "Bearer", "credentials_file": "/etc/prometheus/secrets/vllm-metrics-token"},
        "file_sd_configs": [{"files": [targets_file(VLLM_JOB)]}],
    }
    for resource in before["resources"]:
        if resource["type"] != CONTAINER:
            continue
        inputs = resource["inputs"]
        if resource["name"] == "gpu-node-1-prometheus":
            config = yaml.safe_load(inputs["uploads"][0]["content"])
            del config["scrape_config_files"]
            config["scrape_configs"].append(old_job)
            inputs["uploads"][0]["content"] = docker_host._yaml(config)
        elif resource["name"] == FILES_WRITER:
            old = docker_host.generated_upload(targets_file(VLLM_JOB), docker_host._yaml(targets), "0444")
            inputs["uploads"] = [u for u in inputs["uploads"] if u["file"] != VLLM_SCRAPE_FILE] + [
                {"file": old.file, "source": old.source, "sourceHash": old.source_hash, "permissions": "0444"}
            ]
        elif resource["name"] == TOKEN_WRITER:
            inputs["entrypoints"] = ["/bin/sh", "-c", "test -s /etc/prometheus/secrets/vllm-metrics-token"]
            del inputs["user"]
    return before


def test_the_first_up_with_per_host_tokens_replaces_prometheus_and_its_one_shot_containers_once(prod_plan):
    """Issue 34 item 9, day 2: from the stack of before (one fleet-wide token), the next `pulumi up` replaces
    Prometheus once (its prometheus.yml: the `vllm` job moves to the per-host jobs' file), the files container (it
    writes that file, and joins the new Prometheus by its ID) and the token container (its program derives the
    tokens now; it also deletes the old token file from the volume: tests/e2e/test_e2e_monitoring_host.py). The
    proxies' key maps change too (each holds its host's token now), which the offline preview cannot see (they are
    secret): their replacement is a rotation's (tests/test_k8s_day2_secrets.py
    test_docker_vllm_servers_are_replaced_on_rotation_the_key_being_an_uploaded_file)."""
    report = predict(
        SynthPlan.model_validate(before_per_host_tokens(prod_plan)), SynthPlan.model_validate(prod_plan.to_json())
    )
    assert {(i.name, i.action) for i in report.impacts} == {
        ("gpu-node-1-prometheus", Action.DELETE_REPLACE),
        (FILES_WRITER, Action.DELETE_REPLACE),
        (TOKEN_WRITER, Action.DELETE_REPLACE),
    }
    paths = {i.name: sorted(path for path, _ in i.replaced_by) for i in report.impacts}
    assert paths[TOKEN_WRITER] == ["entrypoints[2]", "user"] and paths["gpu-node-1-prometheus"] == ["uploads"]


def test_the_pinned_cadvisor_reports_container_health():
    """ContainerUnhealthy reads `container_health_state`, which cAdvisor exports from v0.54.0 (metrics/prometheus.go;
    v0.52.1, the previous pin, has none): the pinned image's version has it, with 0 for starting or unhealthy."""
    tag = image_tag(docker_host.CADVISOR_IMAGE)
    assert tuple(int(n) for n in tag.removeprefix("v").split(".")) >= (0, 54, 0)
    source = "\n".join(mirror_show("google/cadvisor", tag, "metrics/prometheus.go"))
    assert 'name:      "container_health_state"' in source
    assert re.search(r'case "healthy":\s+value = 1\s+case "": // if container has no health check defined', source)
    assert "container_health_state" not in "\n".join(mirror_show("google/cadvisor", "v0.52.1", "metrics/prometheus.go"))


def test_the_first_up_with_the_files_container_replaces_prometheus_once(prod_plan):
    """From a stack of before issue 38 (the rule file an inline upload of Prometheus, no files volume or container):
    the volume and the files container are created and Prometheus is replaced once (`uploads` and `volumes`,
    ForceNew); from then on a rules or fleet change replaces the files container alone (tests above)."""
    before = json.loads(json.dumps(prod_plan.to_json()))
    before["resources"] = [r for r in before["resources"] if "prometheus-files" not in r["name"]]
    for resource in before["resources"]:
        if resource["name"] == "gpu-node-1-prometheus" and resource["type"] == CONTAINER:
            inputs = resource["inputs"]
            inputs["volumes"] = [v for v in inputs["volumes"] if v["containerPath"] != PROMETHEUS_STACK_FILES]
            inputs["uploads"].append(
                {"file": "/etc/prometheus/rules/rocm-gpu-alerts.rules.yml", "content": "groups: []\n"}
            )
            resource["depends_on"] = [d for d in resource["depends_on"] if "prometheus-files" not in d]
    report = predict(SynthPlan.model_validate(before), SynthPlan.model_validate(prod_plan.to_json()))
    assert {(i.name, i.type, i.action) for i in report.impacts} == {
        (FILES_WRITER, VOLUME, Action.CREATE),
        (FILES_WRITER, CONTAINER, Action.CREATE),
        ("gpu-node-1-prometheus", CONTAINER, Action.DELETE_REPLACE),
    }


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("vllmApiKey", "k", "has 1 characters, fewer than the 32 prod requires"),
        ("vllmApiKey", "x" * 31, "has 31 characters, fewer than the 32 prod requires"),
        ("grafanaAdminPassword", "", "has 0 characters, fewer than the 16 prod requires"),
        ("grafanaAdminPassword", "admin", "is Grafana's default password `admin`"),
        ("grafanaAdminPassword", "short-pass", "has 10 characters, fewer than the 16 prod requires"),
    ],
)
def test_prod_refuses_weak_secrets(key: str, value: str, expected: str):
    """Issue 34 item 9: a 1-character key and an empty or `admin` Grafana password passed prod. The key is guessed
    online with no attempt limit (128 bits: 32 characters); Grafana ignores an empty GF_* variable and `admin` is its
    default."""
    message = refused(lambda: synth_with("prod", secrets={P + key: value}))
    assert f"rocm-stack:{key}: {expected}" in message
    assert f"pulumi config set --secret {key}" in message
    assert len(value) < 6 or value not in message  # the secret itself is never echoed


def test_strong_secrets_pass_prod_and_dev_keeps_short_ones():
    strong = {P + "vllmApiKey": "0123456789abcdef" * 2, P + "grafanaAdminPassword": "correct-horse-battery"}
    assert synth_with("prod", secrets=strong).outputs
    assert synth_with("dev", secrets={P + "vllmApiKey": "k"}).outputs
