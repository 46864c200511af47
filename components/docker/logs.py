"""The log rotation of every container rocm-stack runs on a Docker host."""

from __future__ import annotations

from typing import Any

from schema.docker import LogConfig


def log_args(logs: LogConfig) -> dict[str, Any]:
    """`log_driver` and `log_opts` of a docker.Container on a host with these `logs` (hosts[].logs).

    json-file is named, not left to the daemon's default: max-size and max-file are its options (under journald
    or syslog the daemon refuses the container, measured on dockerd 20.10: "unknown log opt 'max-size' for
    journald log driver"). Both are declared as the provider reads them back (terraform-provider-docker v4.5.0
    resource_docker_container_funcs.go L951-952: HostConfig.LogConfig.Type, and the options map as the daemon
    keeps it)."""
    return {"log_driver": "json-file", "log_opts": logs.opts}
