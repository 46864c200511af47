"""Values read as the system that receives them reads them (issue 36 items 1-3): Kubernetes quantities as apimachinery
reads them, Docker sizes as docker/go-units reads them, and what a receiver refuses refused first. Each table is the
upstream project's own test table or source, cited; nothing here restates the stack's output."""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import docker.utils
import pytest
import yaml

from schema.types import docker_bytes, duration_seconds, prometheus_bytes, quantity_value
from tools import verify_k8s
from tools.synth import synthesize
from conftest import refusal, stack_file
from prometheus_versions import takes_flags

P = "rocm-stack:"
KI, MI, GI, TI, PI = (1024**n for n in range(1, 6))


# --- Kubernetes quantities: k8s.io/apimachinery pkg/api/resource @ v0.36.3 ------------------------------------------
# quantity_test.go L267-531 TestQuantityParse: input -> decQuantity(mantissa, exponent) (the value mantissa * 10^exp).
APIMACHINERY_PARSES = {
    "0": (0, 0),
    "0n": (0, 0),
    "0Ki": (0, 0),
    "1": (1, 0),
    "1Ki": (1024, 0),
    "7Mi": (7 * MI, 0),
    "3Ei": (3 * 1024**6, 0),
    "1e3": (1, 3),
    "100.035k": (100035, 0),
    "0.0005k": (5, -1),
    "0.5e-2": (5, -3),
    "1.3E+6": (13, 5),
    "1.7E18": (17, 17),
    "8.1k": (81, 2),
    "2.5P": (25, 14),
    "1.01E": (101, 16),
    "3.001n": (4, -9),  # rounds up to whole nanos
    "1.1E-9": (2, -9),
    "0.0000000005": (1, -9),
    "0.00000012345": (124, -9),
    "100.035Ki": (10243584, -2),
    "0.5Mi": (MI // 2, 0),
    ".001": (1, -3),
    "1.": (1, 0),
    "1.G": (1, 9),
}
# quantity_test.go L533-546 (invalid), L268 (the empty string), and suffix.go L113-132 (no `K`, no `Gb`).
APIMACHINERY_REFUSES = [
    "",
    "1.1.M",
    "1+1.0M",
    "0.1mi",
    "0.1am",
    "aoeu",
    ".5i",
    "1i",
    "-3.01e-",
    " 1",
    "1 ",
    "1K",
    "1Gb",
]
# What the client's parse_quantity alone takes but the API server refuses.
CLIENT_ONLY = ["1K", "1_000", "Infinity", "NaN", "1e3k"]


@pytest.mark.parametrize("text", APIMACHINERY_PARSES)
def test_quantities_are_read_as_apimachinery_reads_them(text):
    mantissa, exponent = APIMACHINERY_PARSES[text]
    assert quantity_value(text) == Decimal(mantissa).scaleb(exponent)


@pytest.mark.parametrize("text", sorted({*APIMACHINERY_REFUSES, *CLIENT_ONLY}))
def test_what_apimachinery_refuses_is_no_quantity(text):
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        quantity_value(text)


def test_a_quantity_past_int64_is_refused_not_capped():
    # quantity.go L66-69: "no quantity may represent a number greater than 2^63-1 ... Numbers larger ... will be
    # capped" (TestQuantityParse: "9Ei" -> maxAllowed): refused instead of silently meaning less.
    with pytest.raises(ValueError, match=r"2\^63-1"):
        quantity_value("9Ei")
    assert quantity_value("7Ei") == 7 * 1024**6


def _quota(config: dict[str, Any], queue: str) -> dict[str, Any]:
    gpus = config[P + "kubernetes"]["queues"]["clusterQueues"][queue]["gpus"]["mi300x"]
    if not isinstance(gpus["amd.com/gpu"], dict):
        gpus["amd.com/gpu"] = {"nominal": gpus["amd.com/gpu"]}
    quota: dict[str, Any] = gpus["amd.com/gpu"]
    return quota


def test_a_gpu_quota_of_2k_is_compared_as_the_number_2000():
    """`2k` is a quantity the schema takes; the queue checks read it with float() and ended in a traceback."""
    config = stack_file("prod")
    _quota(config, "pretrain")["nominal"] = "2k"
    message = refusal("prod", config)
    assert "the nominal quotas of amd.com/gpu (2000 pretrain + 8 research + 8 serving = 2016) exceed the 32" in message


def test_gpu_quotas_in_any_quantity_form_count_as_their_number():
    config = stack_file("prod")
    _quota(config, "pretrain")["nominal"] = "1.6e1"  # 16, as the committed stack says
    _quota(config, "research")["nominal"] = "8000m"
    synthesize("prod", config)


@pytest.mark.parametrize("value", ["1500m", "0.5", "2.5", "1e-1"])
def test_a_gpu_quota_that_is_no_whole_number_is_refused_with_its_reason(value):
    # kubernetes pkg/apis/core/validation/validation.go ValidateResourceQuantityValue: an extended resource
    # (IsIntegerResourceName) "must be an integer" in a pod's requests, so a fraction of a GPU in a quota is never used.
    config = stack_file("prod")
    _quota(config, "research")["nominal"] = value
    message = refusal("prod", config)
    assert "clusterQueues.research" in message and "gpus.mi300x.amd.com/gpu" in message
    assert "not a whole number; a pod requests whole GPUs" in message


# --- Kueue's ClusterQueue webhook: pkg/webhooks/clusterqueue_webhook.go @ v0.19.2 --------------------------------------
def test_a_lending_limit_without_a_cohort_is_refused():
    # validateLimit L368-380: "must be nil when cohort is empty" (for lendingLimit as for borrowingLimit).
    config = stack_file("prod")
    queue = config[P + "kubernetes"]["queues"]["clusterQueues"]["pretrain"]
    queue.pop("cohort")
    _quota(config, "pretrain")["lendingLimit"] = 4
    assert "gpus.mi300x.amd.com/gpu.lendingLimit: a lendingLimit needs a cohort to lend to" in refusal("prod", config)


@pytest.mark.parametrize(("nominal", "lending", "refused"), [(8, 9, True), ("1k", "1Ki", True), ("1Ki", "1k", False)])
def test_a_lending_limit_above_the_nominal_quota_is_refused(nominal, lending, refused):
    # validateLendingLimit L383-389: lend.Cmp(nominal) > 0 -> "must be less than or equal to the nominalQuota".
    config = stack_file("prod")
    queue = config[P + "kubernetes"]["queues"]["clusterQueues"]["research"]
    queue["memory"] = {"nominal": nominal, "lendingLimit": lending}
    if refused:
        assert f"memory.lendingLimit: {lending} is more than the nominal {nominal}" in refusal("prod", config)
    else:
        synthesize("prod", config)


# --- Docker sizes: docker/go-units v0.5.0 size.go L86-150 RAMInBytes --------------------------------------------------
# size_test.go TestRAMInBytes (v0.5.0): input -> bytes, and the inputs it refuses.
GO_UNITS_PARSES = {
    "32": 32,
    "32b": 32,
    "32B": 32,
    "32k": 32 * KI,
    "32K": 32 * KI,
    "32kb": 32 * KI,
    "32Kb": 32 * KI,
    "32Kib": 32 * KI,
    "32KIB": 32 * KI,
    "32Mb": 32 * MI,
    "32Gb": 32 * GI,
    "32Tb": 32 * TI,
    "32Pb": 32 * PI,
    "32PB": 32 * PI,
    "32P": 32 * PI,
    "32.3": 32,
    "32.3 mb": int(32.3 * MI),
    "0.3MB": int(0.3 * MI),
}
GO_UNITS_REFUSES = ["", "hello", "-32", " 32 ", "32m b", "32bm", "64Gi"]


@pytest.mark.parametrize("text", GO_UNITS_PARSES)
def test_docker_sizes_are_read_as_go_units_reads_them(text):
    assert docker_bytes(text) == GO_UNITS_PARSES[text]


@pytest.mark.parametrize("text", GO_UNITS_REFUSES)
def test_what_go_units_refuses_is_no_docker_size(text):
    with pytest.raises(ValueError, match="is not a size as Docker reads it"):
        docker_bytes(text)


def test_docker_py_parse_bytes_is_not_dockers_reading():
    """The Docker SDK's parse_bytes (docker/utils/utils.py) is not what dockerd and the CLI read: it refuses `32Kib`
    and `32GiB`, which RAMInBytes takes; hence the stack's own reading of size.go."""
    with pytest.raises(docker.errors.DockerException):
        docker.utils.parse_bytes("32GiB")
    assert docker_bytes("32GiB") == 32 * GI
    assert docker.utils.parse_bytes("16g") == docker_bytes("16g") == 16 * GI  # where they agree, they agree


def _host_shm(value: Any) -> dict[str, Any]:
    config = {P + "hosts": [{"name": "h", "gpus": 8, "containers": [{"name": "a", "gpus": [0, 1], "shmSize": value}]}]}
    plan = synthesize("dev", config)
    [container] = [r for r in plan.of_type("docker:index/container:Container") if r["name"].endswith("h-a")]
    return dict(container["inputs"])


@pytest.mark.parametrize("value", ["16g", "16G", "16GB", "16GiB", "16 g", "16384m"])
def test_a_docker_shm_size_means_what_docker_reads(value):
    """`shmSize: 16g` became `--shm-size=15258m` (pydantic read g as 10^9), where `docker run --shm-size=16g` gives
    16 GiB (opts.MemBytes -> RAMInBytes)."""
    assert _host_shm(value)["shmSize"] == 16384


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("64Gi", "'64Gi' is not a size as Docker reads it: a number and k, m, g, t or p"),
        ("1.00001g", "must be a whole number of MiB"),
    ],
)
def test_a_docker_size_docker_would_not_take_is_refused_naming_key_and_fix(value, message):
    config = {P + "hosts": [{"name": "h", "gpus": 8, "containers": [{"name": "a", "gpus": [0], "shmSize": value}]}]}
    text = refusal("dev", config)
    assert "hosts[0].containers[0].shmSize" in text and message in text and "e.g." in text


def test_a_workload_shm_size_docker_and_kubernetes_read_differently_is_refused():
    """A workload's shmSize is `--shm-size` on Docker and an emptyDir's sizeLimit on Kubernetes: `16G` is 16 GiB to
    Docker (RAMInBytes) and 16 * 10^9 bytes to Kubernetes (decimal SI), so it is refused; 16GiB and 16Gi mean one
    thing to whichever reads them."""
    config = stack_file("prod")
    config[P + "training"][0]["shmSize"] = "16G"
    message = refusal("prod", config)
    assert "training[0].shmSize: '16G' means 17,179,869,184 bytes to Docker" in message
    assert "but 16,000,000,000 to Kubernetes" in message and "e.g. 16GiB" in message
    sizes = set()
    for value in ("16GiB", "16Gi", "16g"):
        config[P + "training"][0]["shmSize"] = value
        sizes.add(str(synthesize("prod", config).to_json()).count("16384Mi"))
    assert len(sizes) == 1 and sizes != {0}


# --- Prometheus sizes: `--storage.tsdb.retention.size` (prometheus v3.5.0 cmd/prometheus/main.go L449-450, kingpin's
# BytesVar), alecthomas/units @ 0f3dac36c52b ParseBase2Bytes -------------------------------------------------------
# bytes_test.go L16-44 TestParseBase2Bytes: input -> bytes, and the inputs it refuses ("kB" is never 1024).
UNITS_PARSES = {"0B": 0, "1KB": KI, "1MB1KB25B": 1049625, "1.5MB": 1572864, "1KiB": KI, "1MiB1KiB25B": 1049625}
UNITS_REFUSES = ["1kB", "1kiB"]


@pytest.mark.parametrize("text", UNITS_PARSES)
def test_prometheus_sizes_are_read_as_alecthomas_units_reads_them(text):
    assert prometheus_bytes(text) == UNITS_PARSES[text]


@pytest.mark.parametrize("text", UNITS_REFUSES)
def test_what_alecthomas_units_refuses_is_no_prometheus_size(text):
    with pytest.raises(ValueError, match="is not a size as Prometheus reads it"):
        prometheus_bytes(text)


@pytest.mark.parametrize(
    "text", ["200g", "200gb", "200GB", "200GiB", "1MiB1KB", "1.5GB", ".5GB", "200", "1 GB", "64Gi", "1e3GB", "1PB"]
)
def test_a_retention_size_is_taken_exactly_when_prometheus_takes_it(text, tmp_path):
    """The real binary parses its flags before it reads its configuration: a missing configuration means the size was
    taken. The stack accepts the text as `monitoring.retention.size` exactly when the binary takes it."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus is not installed (Debian: prometheus)")
    taken, output = takes_flags(prometheus, [f"--storage.tsdb.retention.size={text}"], tmp_path)
    try:
        prometheus_bytes(text)
        read = True
    except ValueError:
        read = False
    assert read == taken, output


def test_a_retention_size_in_dockers_units_is_refused_naming_key_and_fix():
    """Once read with Docker's units (go-units), which Prometheus does not take (`200g`: "units: unknown unit g")."""
    message = refusal("prod", {**stack_file("prod"), P + "monitoring": {"host": True, "retention": {"size": "200g"}}})
    assert "monitoring.retention.size: '200g' is not a size as Prometheus reads it" in message
    assert "Docker reads it, Prometheus does not: its units are capitals, e.g. 200GB" in message


def test_a_pod_memory_is_a_kubernetes_quantity():
    """`kubernetes.memory: 64G` is 64 * 10^9 bytes to Kubernetes; the pod's memory (working set + shm) is written
    in Mi, rounded up so it is never less than asked."""
    config = stack_file("prod")
    config[P + "training"][0]["kubernetes"]["memory"] = "64G"
    plan = synthesize("prod", config)
    text = str(plan.to_json())
    expected = -(-(64 * 10**9 + 64 * GI) // MI)
    assert f"'memory': '{expected}Mi'" in text


# --- Prometheus durations: prometheus/common v0.65.0 (Prometheus v3.5.0's go.mod) model/time.go L205-259 -------------
# time_test.go TestParseBadDuration L407-418 (the cases a stack can write: positive, with units) and TestParseDuration.
PROMETHEUS_REFUSES = ["1", "1y1m1d", "1.5d", "d", "294y", "200y10400w", "107675d", "2584200h", "", "999999999y"]
PROMETHEUS_PARSES = {"324ms": 0.324, "3s": 3, "5m": 300, "1h": 3600, "4d": 4 * 86400, "4d1h": 4 * 86400 + 3600}


@pytest.mark.parametrize("text", PROMETHEUS_REFUSES)
def test_what_prometheus_refuses_is_no_duration(text):
    with pytest.raises(ValueError, match="Prometheus"):
        duration_seconds(text)


@pytest.mark.parametrize("text", PROMETHEUS_PARSES)
def test_durations_are_read_as_prometheus_reads_them(text):
    assert duration_seconds(text) == PROMETHEUS_PARSES[text]


def test_a_duration_prometheus_cannot_hold_is_refused_naming_the_key():
    """`999999999y` passed the pattern; Prometheus stops at start on it ("duration out of range")."""
    message = refusal("dev", {P + "monitoring": {"retention": {"time": "999999999y"}}})
    assert "monitoring.retention.time: '999999999y' is beyond the longest duration Prometheus reads" in message


# --- TCP ports and Docker endpoints -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("receiver", "key"),
    [
        ({"email": {"to": ["a@b"], "from": "c@d", "smarthost": "smtp.example.com:70000"}}, "email.smarthost"),
        ({"webhook": {"url": "https://hooks.example.com:99999/x"}}, "webhook.url"),
    ],
)
def test_a_port_beyond_tcp_is_refused(receiver, key):
    # A TCP port is 16 bits (RFC 9293 section 3.1); Alertmanager takes the digits and fails every notification.
    message = refusal("dev", {P + "monitoring": {"receivers": [{"name": "x", **receiver}]}})
    assert f"monitoring.receivers[0].{key}: the port of" in message and "from 1 to 65535" in message


@pytest.mark.parametrize("environment", ["dev", "prod"])
@pytest.mark.parametrize("endpoint", ["ssh://deploy:hunter2@gpu-1", "ssh://deploy:@gpu-1:2222"])
def test_an_ssh_endpoint_with_a_password_is_refused_everywhere(environment, endpoint):
    """docker/cli v28.5.2 cli/connhelper/ssh/ssh.go L52-55 (the provider's docker/cli): "plain-text password is not
    supported", also for an empty one (url.User.Password's ok)."""
    config = stack_file(environment) if environment == "prod" else {}
    config[P + "hosts"] = [{"name": "h", "docker": {"host": endpoint}, "gpus": 8, "containers": [{"name": "a"}]}]
    message = refusal(environment, config)
    assert "hosts[0].docker.host" in message and "plain-text password is not supported" in message
    assert "hunter2" not in message


# --- host ports the stack publishes twice (issue 36 item 4) -----------------------------------------------------------
@pytest.mark.parametrize(
    ("monitoring", "holder"),
    [
        ({"exporterPort": 9100}, "the stack's node-exporter"),
        ({"exporterPort": 8080}, "the stack's cAdvisor"),
        ({"exporterPort": 9090, "host": "local"}, "Prometheus of the monitoring host"),
        ({"exporterPort": 3000, "host": "local"}, "Grafana of the monitoring host"),
    ],
)
def test_the_exporter_port_on_a_port_the_stack_publishes_already_is_refused(monitoring, holder):
    """Two bindings of one host port: the second container does not start ("port is already allocated")."""
    message = refusal("dev", {P + "monitoring": monitoring})
    assert (
        f"monitoring.exporterPort: host port {monitoring['exporterPort']} of 'local' is already published by {holder}"
        in message
    )


# --- Hugging Face repository ids: huggingface_hub validate_repo_id --------------------------------------------------
# https://huggingface.co/docs/huggingface_hub/package_reference/utilities#huggingface_hub.utils.validate_repo_id:
# "Between 1 and 96 characters", "[a-zA-Z0-9] or '-', '_', '.'", "'--' and '..' are forbidden"; vLLM downloads the
# model through it, so a server with another id never becomes healthy.
@pytest.mark.parametrize(
    "model", ["org/a--b", "org/a..b", "org/model.git", "org/-model", "org/" + "x" * 97, "org/modèle"]
)
def test_a_model_id_the_hub_refuses_is_refused(model):
    config = stack_file("dev")
    config[P + "inference"][0]["model"] = model
    assert "inference[0].model: " in refusal("dev", config)


@pytest.mark.parametrize("address", ["a;b@example.com", "a..b@example.com", ".a@example.com", "a b@example.com"])
def test_an_address_go_net_mail_refuses_is_refused(address):
    """Alertmanager sends to mail.ParseAddressList(to) (Go net/mail: RFC 5322 addr-spec, dot-atoms of atext); an
    address it refuses fails every notification, long after the deploy."""
    receiver = {"name": "x", "email": {"to": [address], "from": "c@example.com", "smarthost": "smtp.example.com:587"}}
    assert "monitoring.receivers[0].email.to[0]: expected an e-mail address" in refusal(
        "dev", {P + "monitoring": {"receivers": [receiver]}}
    )


def test_a_unix_socket_path_longer_than_sun_path_is_refused():
    # unix(7): "sun_path ... 108" bytes including the terminating null byte; connect(2) fails on a longer path.
    path = "/run/" + "d" * 100 + "/docker.sock"
    config = {
        P + "hosts": [{"name": "h", "docker": {"host": f"unix://{path}"}, "gpus": 8, "containers": [{"name": "a"}]}]
    }
    assert "hosts[0].docker.host: the socket path of" in refusal("dev", config)
    config[P + "hosts"][0]["docker"]["host"] = "unix:///" + "d" * 106
    synthesize("dev", config)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("kubernetes.gpuOperator.repository", "https://charts.example.internal:70000/gpu"),
        ("kubernetes.gpuOperator.repository", "ftp://charts.example.internal/gpu"),
        ("mirror.registry", "registry.example.internal:99999/mirror"),
    ],
)
def test_a_repository_helm_or_docker_cannot_reach_is_refused(key, value):
    """Helm fetches a chart repository over http(s) or OCI, Docker pulls from a registry over TCP (16-bit ports,
    RFC 9293 section 3.1): another scheme or port fails at deploy, not before."""
    config = stack_file("dev")
    section, *path, last = key.split(".")
    node = config.setdefault(P + section, {})
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value
    if section == "mirror":
        node.update(charts="oci://registry.example.internal/charts", files="https://files.example.internal")
    assert f"{key}: " in refusal("dev", config)


def test_more_gpu_flavors_than_the_cluster_queue_crd_holds_is_refused():
    # kueue.x-k8s.io_clusterqueues.yaml @ v0.19.2 (tests/data/kubernetes): resourceGroups[].flavors maxItems 64.
    crd = yaml.safe_load(
        (Path(__file__).parent / "data" / "kubernetes" / "kueue.x-k8s.io_clusterqueues.yaml").read_text()
    )
    [v1beta2] = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    group = v1beta2["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["resourceGroups"]["items"]
    assert group["properties"]["flavors"]["maxItems"] == 64
    config = stack_file("prod")
    queue = config[P + "kubernetes"]["queues"]["clusterQueues"]["pretrain"]
    queue["gpus"] = {f"f{n}": {"amd.com/gpu": 1} for n in range(65)}
    assert "clusterQueues.pretrain.gpus: " in refusal("prod", config)


def test_more_flavor_resource_combinations_than_kueues_webhook_takes_is_refused():
    # clusterqueue_webhook.go L213-229 @ v0.19.2: "number of flavor-resource combinations in a resourceGroup must be
    # ≤ 512".
    config = stack_file("prod")
    queue = config[P + "kubernetes"]["queues"]["clusterQueues"]["pretrain"]
    queue["gpus"] = {f"f{n}": {f"example.com/r{m}": 1 for m in range(23)} for n in range(23)}
    assert "23 flavors x 23 resources are 529 flavor-resource combinations" in refusal("prod", config)


def test_a_storage_class_kubernetes_cannot_name_is_refused():
    # A StorageClass's name is a DNS subdomain (kubernetes pkg/apis/storage/validation ValidateStorageClass:
    # ValidateObjectMeta with NameIsDNSSubdomain); a PVC naming another is never bound.
    config = stack_file("prod")
    config[P + "training"][0]["kubernetes"]["checkpoints"] = {"type": "pvc", "storageClass": "Fast_SSD"}
    assert "checkpoints.storageClass: 'Fast_SSD' is no DNS subdomain" in refusal("prod", config)


def test_a_registry_server_docker_cannot_log_in_to_is_refused():
    config = {P + "registry": {"server": "registry.example.com:99999", "username": "ci"}}
    assert "registry.server: the port of" in refusal("dev", config)


@pytest.mark.parametrize(("allocatable", "count"), [("8", 8), ("1k", 1000), ("1234k", 1234000)])
def test_verify_reads_a_nodes_count_in_the_api_servers_canonical_form(allocatable, count):
    """The API server writes quantities in canonical form, 1000 as "1k" (apimachinery quantity_test.go TestNewSet
    L984-992 @ v0.36.3): a node with 1000 RDMA shared devices reports "1k", which int() read as 0."""
    assert verify_k8s.quantity(allocatable) == count
