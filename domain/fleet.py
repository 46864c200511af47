"""What the stack declares of its Docker hosts for monitoring: where each host is reached, its GPU model and
count, and the partitions that must be running on it. The scrape configuration (components/monitoring) and the
declared-state recording rules (domain/alerts.py) are both built from it, so a host, its GPUs and its partitions
are named the same way in targets, rules and alerts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeclaredPartition:
    name: str
    """The partition's Docker container name (cAdvisor's `name` label: the container's first alias)."""
    workload: str
    """`training` or `inference`."""
    start_grace_seconds: int
    """How long the container may take to become healthy after it starts (vLLM: its startup timeout)."""
    metrics_port: int | None = None
    """The host port vLLM's /metrics is scraped on (its published API port); None: nothing to scrape."""


@dataclass(frozen=True)
class DeclaredHost:
    name: str
    address: str
    """Where Prometheus reaches the host's published ports."""
    gpu_model: str
    gpus: int
    """The GPUs the exporter should report: `gpus` x the compute partitions per GPU (HostConfig.logical_gpus)."""
    partitions: tuple[DeclaredPartition, ...] = ()
