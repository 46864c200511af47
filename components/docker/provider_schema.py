"""terraform-provider-docker v4.5.0 ("TFD", what pulumi_docker 5.2.0 bridges): every input attribute of the Docker
resources this program declares, with its kind and ForceNew, in one table, and how the provider's diff compares a
value of each kind.

Both the change-impact preview (tools/impact.py) and the read-back table (components/docker/readback.py) compare
inputs by this table; tests/test_impact_rules.py checks it against TFD's schema read from the upstream source `make upstream` fetches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

CONTAINER = "docker:index/container:Container"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
VOLUME = "docker:index/volume:Volume"
NETWORK = "docker:index/network:Network"

# Keyed by the Pulumi input path (pulumi-docker bridge-metadata.json renamedProperties), as plan.json has them.

SET, SET_OF_BLOCKS, LIST, LIST_OF_BLOCKS, MAP, VALUE = "set", "set of blocks", "list", "list of blocks", "map", "value"


@dataclass(frozen=True)
class Attribute:
    tf: str  # TFD's attribute path
    line: int  # of its `"name": {` in `file`
    force_new: bool
    kind: str
    file: str = ""  # default: the resource's file (DOCKER_FILES)
    computed: bool = False  # Optional and Computed: left out of the config, the state keeps its value
    default: Any = None  # its schema Default: what the provider reads for it when left out


_A = Attribute

DOCKER_FILES = {
    CONTAINER: "internal/provider/resource_docker_container.go",
    REMOTE_IMAGE: "internal/provider/resource_docker_image.go",
    VOLUME: "internal/provider/resource_docker_volume.go",
    NETWORK: "internal/provider/resource_docker_network.go",
}

DOCKER_CONTAINER: dict[str, Attribute] = {
    "name": _A("name", 50, True, VALUE),
    "rm": _A("rm", 57, False, VALUE, default=False),
    "readOnly": _A("read_only", 64, True, VALUE, default=False),
    "start": _A("start", 72, False, VALUE, default=True),
    "wait": _A("wait", 79, False, VALUE, default=False),
    "waitTimeout": _A("wait_timeout", 86, False, VALUE, default=60),
    "attach": _A("attach", 93, False, VALUE, default=False),
    "logs": _A("logs", 100, False, VALUE, default=False),
    "mustRun": _A("must_run", 122, False, VALUE, default=True),
    "image": _A("image", 141, True, VALUE),
    "hostname": _A("hostname", 148, True, VALUE, computed=True),
    "domainname": _A("domainname", 156, True, VALUE),
    "command": _A("command", 163, True, LIST, computed=True),
    "entrypoints": _A("entrypoint", 172, True, LIST, computed=True),
    "user": _A("user", 181, True, VALUE),
    "dns": _A("dns", 196, True, SET),
    "dnsOpts": _A("dns_opts", 205, True, SET),
    "dnsSearches": _A("dns_search", 214, True, SET),
    "publishAllPorts": _A("publish_all_ports", 223, True, VALUE),
    "restart": _A("restart", 230, False, VALUE, default="no"),
    "maxRetryCount": _A("max_retry_count", 238, False, VALUE),
    "workingDir": _A("working_dir", 243, True, VALUE),
    "removeVolumes": _A("remove_volumes", 256, False, VALUE, default=True),
    "capabilities": _A("capabilities", 262, True, SET_OF_BLOCKS),
    "capabilities.adds": _A("capabilities.add", 271, True, SET),
    "capabilities.drops": _A("capabilities.drop", 280, True, SET),
    "securityOpts": _A("security_opts", 291, True, SET, computed=True),
    "runtime": _A("runtime", 300, True, VALUE, computed=True),
    "platform": _A("platform", 307, True, VALUE, computed=True),
    "stopSignal": _A("stop_signal", 314, True, VALUE, computed=True),
    "stopTimeout": _A("stop_timeout", 321, True, VALUE, computed=True),
    "mounts": _A("mounts", 328, True, SET_OF_BLOCKS),
    "mounts.target": _A("mounts.target", 335, False, VALUE),
    "mounts.source": _A("mounts.source", 340, False, VALUE),
    "mounts.type": _A("mounts.type", 345, False, VALUE),
    "mounts.readOnly": _A("mounts.read_only", 351, False, VALUE),
    "mounts.bindOptions": _A("mounts.bind_options", 356, False, LIST_OF_BLOCKS),
    "mounts.bindOptions.propagation": _A("mounts.bind_options.propagation", 363, False, VALUE),
    "mounts.volumeOptions": _A("mounts.volume_options", 372, False, LIST_OF_BLOCKS),
    "mounts.volumeOptions.noCopy": _A("mounts.volume_options.no_copy", 379, False, VALUE),
    "mounts.volumeOptions.labels": _A("mounts.volume_options.labels", 384, False, SET_OF_BLOCKS),
    "mounts.volumeOptions.labels.label": _A(
        "mounts.volume_options.labels.label", 60, True, VALUE, "internal/provider/helpers.go"
    ),
    "mounts.volumeOptions.labels.value": _A(
        "mounts.volume_options.labels.value", 66, True, VALUE, "internal/provider/helpers.go"
    ),
    "mounts.volumeOptions.driverName": _A("mounts.volume_options.driver_name", 390, False, VALUE),
    "mounts.volumeOptions.driverOptions": _A("mounts.volume_options.driver_options", 395, False, MAP),
    "mounts.volumeOptions.subpath": _A("mounts.volume_options.subpath", 401, True, VALUE),
    "mounts.tmpfsOptions": _A("mounts.tmpfs_options", 410, True, LIST_OF_BLOCKS),
    "mounts.tmpfsOptions.sizeBytes": _A("mounts.tmpfs_options.size_bytes", 418, False, VALUE),
    "mounts.tmpfsOptions.mode": _A("mounts.tmpfs_options.mode", 423, False, VALUE),
    "volumes": _A("volumes", 434, True, SET_OF_BLOCKS),
    "volumes.fromContainer": _A("volumes.from_container", 441, True, VALUE),
    "volumes.containerPath": _A("volumes.container_path", 447, True, VALUE),
    "volumes.hostPath": _A("volumes.host_path", 453, True, VALUE),
    "volumes.volumeName": _A("volumes.volume_name", 460, True, VALUE),
    "volumes.readOnly": _A("volumes.read_only", 466, True, VALUE),
    "volumes.selinuxRelabel": _A("volumes.selinux_relabel", 472, True, VALUE),
    "tmpfs": _A("tmpfs", 482, False, MAP),
    "ports": _A("ports", 487, True, LIST_OF_BLOCKS),
    "ports.internal": _A("ports.internal", 494, True, VALUE),
    "ports.external": _A("ports.external", 501, True, VALUE, computed=True),
    "ports.ip": _A("ports.ip", 509, True, VALUE, default="0.0.0.0"),
    "ports.protocol": _A("ports.protocol", 525, True, VALUE, default="tcp"),
    "hosts": _A("host", 537, True, SET_OF_BLOCKS),
    "hosts.ip": _A("host.ip", 544, True, VALUE),
    "hosts.host": _A("host.host", 551, True, VALUE),
    "ulimits": _A("ulimit", 561, True, SET_OF_BLOCKS),
    "ulimits.name": _A("ulimit.name", 568, True, VALUE),
    "ulimits.soft": _A("ulimit.soft", 574, True, VALUE),
    "ulimits.hard": _A("ulimit.hard", 580, True, VALUE),
    "envs": _A("env", 590, True, SET, computed=True),
    "privileged": _A("privileged", 656, True, VALUE),
    "devices": _A("devices", 663, True, SET_OF_BLOCKS),
    "devices.hostPath": _A("devices.host_path", 670, True, VALUE),
    "devices.containerPath": _A("devices.container_path", 676, True, VALUE),
    "devices.permissions": _A("devices.permissions", 682, True, VALUE, default="rwm"),
    "deviceReadBps": _A("device_read_bps", 693, False, SET_OF_BLOCKS),
    "deviceReadBps.path": _A("device_read_bps.path", 699, False, VALUE),
    "deviceReadBps.rate": _A("device_read_bps.rate", 704, False, VALUE),
    "deviceReadIops": _A("device_read_iops", 713, False, SET_OF_BLOCKS),
    "deviceReadIops.path": _A("device_read_iops.path", 719, False, VALUE),
    "deviceReadIops.rate": _A("device_read_iops.rate", 724, False, VALUE),
    "deviceWriteBps": _A("device_write_bps", 733, False, SET_OF_BLOCKS),
    "deviceWriteBps.path": _A("device_write_bps.path", 739, False, VALUE),
    "deviceWriteBps.rate": _A("device_write_bps.rate", 744, False, VALUE),
    "deviceWriteIops": _A("device_write_iops", 753, False, SET_OF_BLOCKS),
    "deviceWriteIops.path": _A("device_write_iops.path", 759, False, VALUE),
    "deviceWriteIops.rate": _A("device_write_iops.rate", 764, False, VALUE),
    "deviceRequests": _A("device_requests", 774, True, SET_OF_BLOCKS),
    "deviceRequests.driver": _A("device_requests.driver", 782, True, VALUE, default="cdi"),
    "deviceRequests.count": _A("device_requests.count", 789, True, VALUE, default=0),
    "deviceRequests.deviceIds": _A("device_requests.device_ids", 796, True, SET),
    "deviceRequests.capabilities": _A("device_requests.capabilities", 805, True, SET),
    "deviceRequests.options": _A("device_requests.options", 814, True, MAP),
    "destroyGraceSeconds": _A("destroy_grace_seconds", 827, False, VALUE),
    "labels": _A("labels", 833, True, SET_OF_BLOCKS, computed=True),
    "labels.label": _A("labels.label", 60, True, VALUE, "internal/provider/helpers.go"),
    "labels.value": _A("labels.value", 66, True, VALUE, "internal/provider/helpers.go"),
    "memory": _A("memory", 842, False, VALUE),
    "memoryReservation": _A("memory_reservation", 848, False, VALUE, default=0),
    "memorySwap": _A("memory_swap", 856, False, VALUE),
    "shmSize": _A("shm_size", 863, True, VALUE, computed=True),
    "cpuShares": _A("cpu_shares", 872, False, VALUE),
    "cpuSet": _A("cpu_set", 879, False, VALUE),
    "logDriver": _A("log_driver", 886, True, VALUE, computed=True),
    "logOpts": _A("log_opts", 894, True, MAP),
    "networkMode": _A("network_mode", 901, True, VALUE, default="bridge"),
    "networksAdvanced": _A("networks_advanced", 909, True, SET_OF_BLOCKS),
    "networksAdvanced.name": _A("networks_advanced.name", 916, True, VALUE),
    "networksAdvanced.aliases": _A("networks_advanced.aliases", 922, True, SET),
    "networksAdvanced.ipv4Address": _A("networks_advanced.ipv4_address", 930, True, VALUE),
    "networksAdvanced.ipv6Address": _A("networks_advanced.ipv6_address", 936, True, VALUE),
    "networksAdvanced.linkLocalIps": _A("networks_advanced.link_local_ips", 942, True, SET),
    "networksAdvanced.macAddress": _A("networks_advanced.mac_address", 950, True, VALUE),
    "networksAdvanced.driverOpts": _A("networks_advanced.driver_opts", 956, True, SET),
    "networksAdvanced.gwPriority": _A("networks_advanced.gw_priority", 963, True, VALUE),
    "pidMode": _A("pid_mode", 974, True, VALUE),
    "usernsMode": _A("userns_mode", 980, True, VALUE),
    "uploads": _A("upload", 987, True, SET_OF_BLOCKS),
    "uploads.content": _A("upload.content", 994, True, VALUE),
    "uploads.contentBase64": _A("upload.content_base64", 1002, True, VALUE),
    "uploads.file": _A("upload.file", 1009, True, VALUE),
    "uploads.executable": _A("upload.executable", 1015, True, VALUE, default=False),
    "uploads.permissions": _A("upload.permissions", 1022, True, VALUE),
    "uploads.source": _A("upload.source", 1029, True, VALUE),
    "uploads.sourceHash": _A("upload.source_hash", 1035, True, VALUE),
    "healthcheck": _A("healthcheck", 1045, False, LIST_OF_BLOCKS, computed=True),
    "healthcheck.tests": _A("healthcheck.test", 1053, False, LIST),
    "healthcheck.interval": _A("healthcheck.interval", 1059, False, VALUE, default="0s"),
    "healthcheck.timeout": _A("healthcheck.timeout", 1066, False, VALUE, default="0s"),
    "healthcheck.startPeriod": _A("healthcheck.start_period", 1073, False, VALUE, default="0s"),
    "healthcheck.startInterval": _A("healthcheck.start_interval", 1080, False, VALUE, default="0s"),
    "healthcheck.retries": _A("healthcheck.retries", 1087, False, VALUE, default=0),
    "containerReadRefreshTimeoutMilliseconds": _A(
        "container_read_refresh_timeout_milliseconds", 1098, False, VALUE, default=15000
    ),
    "sysctls": _A("sysctls", 1105, True, MAP),
    "ipcMode": _A("ipc_mode", 1111, True, VALUE, computed=True),
    "groupAdds": _A("group_add", 1118, True, SET),
    "init": _A("init", 1126, False, VALUE, computed=True),
    "tty": _A("tty", 1132, True, VALUE, default=False),
    "stdinOpen": _A("stdin_open", 1139, True, VALUE, default=False),
    "storageOpts": _A("storage_opts", 1146, True, MAP),
    "gpus": _A("gpus", 1152, True, VALUE),
    "cpus": _A("cpus", 1158, True, VALUE),
    "cpuPeriod": _A("cpu_period", 1164, False, VALUE),
    "cpuQuota": _A("cpu_quota", 1170, False, VALUE),
    "cgroupnsMode": _A("cgroupns_mode", 1176, True, VALUE),
    "cgroupParent": _A("cgroup_parent", 1182, True, VALUE),
}

DOCKER_REMOTE_IMAGE: dict[str, Attribute] = {
    "name": _A("name", 36, True, VALUE),
    "keepLocally": _A("keep_locally", 55, False, VALUE),
    "pullTriggers": _A("pull_triggers", 61, True, SET),
    "forceRemove": _A("force_remove", 70, False, VALUE),
    "build": _A("build", 76, False, SET_OF_BLOCKS),
    "build.dockerfile": _A("build.dockerfile", 103, True, VALUE, default="Dockerfile"),
    "build.tags": _A("build.tag", 110, False, LIST),
    "build.remove": _A("build.remove", 118, False, VALUE, default=True),
    "build.secrets": _A("build.secrets", 124, False, LIST_OF_BLOCKS),
    "build.secrets.id": _A("build.secrets.id", 130, True, VALUE),
    "build.secrets.src": _A("build.secrets.src", 137, True, VALUE),
    "build.secrets.env": _A("build.secrets.env", 144, True, VALUE),
    "build.label": _A("build.label", 154, False, MAP),
    "build.suppressOutput": _A("build.suppress_output", 162, True, VALUE),
    "build.remoteContext": _A("build.remote_context", 168, True, VALUE),
    "build.noCache": _A("build.no_cache", 174, True, VALUE),
    "build.forceRemove": _A("build.force_remove", 180, True, VALUE),
    "build.pullParent": _A("build.pull_parent", 186, True, VALUE),
    "build.isolation": _A("build.isolation", 192, True, VALUE),
    "build.cpuSetCpus": _A("build.cpu_set_cpus", 198, True, VALUE),
    "build.cpuSetMems": _A("build.cpu_set_mems", 204, True, VALUE),
    "build.cpuShares": _A("build.cpu_shares", 210, True, VALUE),
    "build.cpuQuota": _A("build.cpu_quota", 216, True, VALUE),
    "build.cpuPeriod": _A("build.cpu_period", 222, True, VALUE),
    "build.memory": _A("build.memory", 228, True, VALUE),
    "build.memorySwap": _A("build.memory_swap", 234, True, VALUE),
    "build.cgroupParent": _A("build.cgroup_parent", 240, True, VALUE),
    "build.networkMode": _A("build.network_mode", 246, True, VALUE),
    "build.shmSize": _A("build.shm_size", 252, True, VALUE),
    "build.ulimits": _A("build.ulimit", 258, False, LIST_OF_BLOCKS),
    "build.ulimits.name": _A("build.ulimit.name", 264, True, VALUE),
    "build.ulimits.hard": _A("build.ulimit.hard", 270, True, VALUE),
    "build.ulimits.soft": _A("build.ulimit.soft", 276, True, VALUE),
    "build.buildArgs": _A("build.build_args", 285, True, MAP),
    "build.authConfigs": _A("build.auth_config", 295, False, LIST_OF_BLOCKS),
    "build.authConfigs.hostName": _A("build.auth_config.host_name", 301, False, VALUE),
    "build.authConfigs.userName": _A("build.auth_config.user_name", 306, False, VALUE),
    "build.authConfigs.password": _A("build.auth_config.password", 311, False, VALUE),
    "build.authConfigs.auth": _A("build.auth_config.auth", 316, False, VALUE),
    "build.authConfigs.email": _A("build.auth_config.email", 321, False, VALUE),
    "build.authConfigs.serverAddress": _A("build.auth_config.server_address", 326, False, VALUE),
    "build.authConfigs.identityToken": _A("build.auth_config.identity_token", 331, False, VALUE),
    "build.authConfigs.registryToken": _A("build.auth_config.registry_token", 336, False, VALUE),
    "build.context": _A("build.context", 344, True, VALUE),
    "build.additionalContexts": _A("build.additional_contexts", 350, True, LIST),
    "build.labels": _A("build.labels", 360, True, MAP),
    "build.squash": _A("build.squash", 370, True, VALUE),
    "build.cacheFroms": _A("build.cache_from", 376, True, LIST),
    "build.cacheTo": _A("build.cache_to", 386, True, LIST),
    "build.securityOpts": _A("build.security_opt", 396, True, LIST),
    "build.extraHosts": _A("build.extra_hosts", 406, True, LIST),
    "build.target": _A("build.target", 416, True, VALUE),
    "build.sessionId": _A("build.session_id", 422, True, VALUE),
    "build.platform": _A("build.platform", 428, True, VALUE),
    "build.version": _A("build.version", 434, True, VALUE),
    "build.buildId": _A("build.build_id", 440, True, VALUE),
    "build.useLegacyBuilder": _A("build.use_legacy_builder", 446, True, VALUE, default=False),
    "build.builder": _A("build.builder", 453, True, VALUE),
    "build.buildLogFile": _A("build.build_log_file", 460, True, VALUE),
    "build.provenance": _A("build.provenance", 466, True, VALUE),
    "build.sbom": _A("build.sbom", 472, True, VALUE),
    "triggers": _A("triggers", 84, True, MAP),
    "platform": _A("platform", 90, True, VALUE, default=""),
}

# pulumi-docker replaces a volume create-first (no DeleteBeforeReplace for docker_volume, provider/resources.go L136).
DOCKER_VOLUME: dict[str, Attribute] = {
    "name": _A("name", 41, True, VALUE, computed=True),
    "labels": _A("labels", 48, True, SET_OF_BLOCKS),
    "labels.label": _A("labels.label", 60, True, VALUE, "internal/provider/helpers.go"),
    "labels.value": _A("labels.value", 66, True, VALUE, "internal/provider/helpers.go"),
    "driver": _A("driver", 55, True, VALUE, computed=True),
    "driverOpts": _A("driver_opts", 62, True, MAP),
    "cluster": _A("cluster", 73, False, LIST_OF_BLOCKS),
    "cluster.scope": _A("cluster.scope", 85, True, VALUE, default="single"),
    "cluster.sharing": _A("cluster.sharing", 93, True, VALUE, default="none"),
    "cluster.type": _A("cluster.type", 101, True, VALUE, default="block"),
    "cluster.topologyPreferred": _A("cluster.topology_preferred", 109, True, VALUE, default=""),
    "cluster.topologyRequired": _A("cluster.topology_required", 116, True, VALUE, default=""),
    "cluster.requiredBytes": _A("cluster.required_bytes", 123, True, VALUE),
    "cluster.limitBytes": _A("cluster.limit_bytes", 129, True, VALUE),
    "cluster.group": _A("cluster.group", 135, True, VALUE, default=""),
    "cluster.availability": _A("cluster.availability", 142, False, VALUE, default="active"),
}

DOCKER_NETWORK: dict[str, Attribute] = {
    "name": _A("name", 25, True, VALUE),
    "labels": _A("labels", 32, True, SET_OF_BLOCKS),
    "labels.label": _A("labels.label", 60, True, VALUE, "internal/provider/helpers.go"),
    "labels.value": _A("labels.value", 66, True, VALUE, "internal/provider/helpers.go"),
    "driver": _A("driver", 40, True, VALUE, computed=True),
    "options": _A("options", 48, True, MAP, computed=True),
    "internal": _A("internal", 56, True, VALUE, computed=True),
    "attachable": _A("attachable", 64, True, VALUE),
    "ingress": _A("ingress", 71, True, VALUE),
    "ipv6": _A("ipv6", 78, True, VALUE),
    "ipamDriver": _A("ipam_driver", 85, True, VALUE, default="default"),
    "ipamOptions": _A("ipam_options", 92, True, MAP),
    "ipamConfigs": _A("ipam_config", 99, True, SET_OF_BLOCKS, computed=True),
    "ipamConfigs.subnet": _A("ipam_config.subnet", 108, True, VALUE),
    "ipamConfigs.ipRange": _A("ipam_config.ip_range", 115, True, VALUE),
    "ipamConfigs.gateway": _A("ipam_config.gateway", 122, True, VALUE),
    "ipamConfigs.auxAddress": _A("ipam_config.aux_address", 129, True, MAP),
}

DOCKER_SCHEMAS = {
    CONTAINER: DOCKER_CONTAINER,
    REMOTE_IMAGE: DOCKER_REMOTE_IMAGE,
    VOLUME: DOCKER_VOLUME,
    NETWORK: DOCKER_NETWORK,
}

# TFD resourceDockerContainerUpdate's list of what it applies with ContainerUpdate (funcs.go L1016-1019), as Pulumi
# inputs; plus mustRun, which starts a stopped container (L998-1013).
DOCKER_LIVE_UPDATES = (
    "restart",
    "maxRetryCount",
    "cpuShares",
    "memory",
    "memoryReservation",
    "cpuSet",
    "memorySwap",
    "deviceReadBps",
    "deviceReadIops",
    "deviceWriteBps",
    "deviceWriteIops",
)
# Those a removal never reaches: the update sends 0 or "" (the block-IO sets: nothing), which dockerd reads as
# "unchanged" (moby container/container_unix.go UpdateContainer L270-303 @ v28.5.2); the restart policy is sent whole.
DOCKER_UNREMOVABLE = tuple(p for p in DOCKER_LIVE_UPDATES if p not in ("restart", "maxRetryCount"))

# A TypeList whose order the provider's diff mostly ignores: `ports` has a DiffSuppressFunc that suppresses the change
# of a list of the same length where each old port's first match in the new list (the same internal port and
# protocol) has the same external port and address (resource_docker_container.go L534,
# suppressIfPortsDidNotChangeForMigrationV0ToV1 L1192-1247; `ports_unchanged`): a reordering is no diff, unless one
# internal port is published twice.
ORDER_IGNORED = {CONTAINER: frozenset({"ports"})}

# The attributes whose DiffSuppressFunc reads a new "" (also one left out: the SDK diffs it as "") as the old value,
# Docker's default: `user` (resource_docker_container.go L187-192) and `working_dir` (L248-254). Both are ForceNew,
# yet removing them is no diff: the running container keeps its user and working directory.
EMPTY_IS_UNCHANGED = {CONTAINER: frozenset({"user", "workingDir"})}


class SetValue(tuple[Any, ...]):
    """A TypeSet's elements in a canonical order, duplicates dropped: terraform-plugin-sdk keys each element by its
    hash (helper/schema/set.go), so two sets are the same whatever their order. Compared whole, never by position."""


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=list)


def canonical(type_token: str, value: Any, path: str = "") -> Any:
    """`value` (a resource's inputs, or the input at `path`) as the provider's diff compares it, by the kind of each
    attribute in DOCKER_SCHEMAS: a set as a SetValue, a list in order, a map and a block by key. A type without a
    table, or a path the table lacks, is compared as it is. Compare two values after `as_diffed`."""
    attribute = DOCKER_SCHEMAS.get(type_token, {}).get(path)
    kind = attribute.kind if attribute is not None else None
    if kind == MAP:
        return value
    if kind in (SET, SET_OF_BLOCKS):
        elements = value if isinstance(value, list) else [value]  # a MaxItems-1 block is one object in Pulumi
        items = [_fields(type_token, e, path) if isinstance(e, dict) else e for e in elements]
        return SetValue(sorted({_key(i): i for i in items}.values(), key=_key))
    if isinstance(value, dict):
        return _fields(type_token, value, path)
    if isinstance(value, list):
        return [_fields(type_token, e, path) if isinstance(e, dict) else e for e in value]
    return value


def _fields(type_token: str, block: dict[str, Any], path: str) -> dict[str, Any]:
    return {k: canonical(type_token, v, f"{path}.{k}" if path else k) for k, v in block.items()}


def defaults(type_token: str, block: str = "") -> dict[str, Any]:
    """The schema Defaults of the attributes of a block (`ports`; "": the resource's own), by their input name."""
    depth = block.count(".") + 1 if block else 0
    return {
        path.rsplit(".", 1)[-1]: attribute.default
        for path, attribute in DOCKER_SCHEMAS.get(type_token, {}).items()
        if attribute.default is not None and path.count(".") == depth and path.startswith(f"{block}." if block else "")
    }


def _with_defaults(type_token: str, value: Any, path: str = "") -> Any:
    """`value` with every attribute it leaves out that has a Default, in blocks too: terraform-plugin-sdk v2.40.1
    reads a left-out attribute as its Default (helper/schema/field_reader_config.go L230 readPrimitive)."""
    attribute = DOCKER_SCHEMAS[type_token].get(path)
    block = not path or (attribute is not None and attribute.kind in (SET_OF_BLOCKS, LIST_OF_BLOCKS))
    if block and isinstance(value, list):
        return [_with_defaults(type_token, element, path) for element in value]
    if block and isinstance(value, dict):
        given = {k: _with_defaults(type_token, v, f"{path}.{k}" if path else k) for k, v in value.items()}
        return {**defaults(type_token, path), **given}
    return value


def ports_unchanged(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> bool:
    """TFD's `ports` DiffSuppressFunc (resource_docker_container.go L1192-1247) on two lists with their defaults:
    the same length, and each old port's first new port of the same internal port (another of its protocol, where
    the first has another) with the same protocol, external port and address."""
    if len(old) != len(new):
        return False
    for port in old:
        same = [p for p in new if p.get("internal") == port.get("internal")]
        of_protocol = [p for p in same if p.get("protocol") == port.get("protocol")]
        match = of_protocol[0] if of_protocol else None
        if match is None or (match.get("external"), match.get("ip")) != (port.get("external"), port.get("ip")):
            return False
    return True


def as_diffed(type_token: str, old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two inputs of one resource (the state's, the program's) as the provider's diff compares them (terraform-plugin-
    sdk v2.40.1 helper/schema/schema.go): an attribute left out is its Default on both sides; an Optional and Computed
    one left out keeps the old value (diffString L1750 `removed && schema.Computed`, diffList L1351, diffSet L1592);
    a DiffSuppressFunc's unchanged values keep the old value (schema.go L1313: EMPTY_IS_UNCHANGED, ORDER_IGNORED's
    `ports_unchanged`). pulumi-docker's bridge plans through the SDK the same way: the prior state and the config
    merged by objchange.ProposedNew (a null Optional+Computed attribute takes the prior value), then the SDK's
    PlanResourceChange (pulumi-terraform-bridge pkg/tfshim/sdk-v2/provider2.go L302-309 @ v3.136.0). Another type
    is compared as it is. Then compare them by `canonical`."""
    schema = DOCKER_SCHEMAS.get(type_token)
    if schema is None:
        return old, new
    old, new = _with_defaults(type_token, old), _with_defaults(type_token, new)
    for key, value in old.items():
        attribute = schema.get(key)
        if attribute is None:
            continue
        if (
            (key not in new and attribute.computed)
            or (key in EMPTY_IS_UNCHANGED.get(type_token, ()) and new.get(key, "") == "")
            or (key in ORDER_IGNORED.get(type_token, ()) and ports_unchanged(value, new.get(key) or []))
        ):
            new = {**new, key: value}
    return old, new
