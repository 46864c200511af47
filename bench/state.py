"""State bytes per Docker host: how much of plan.json (the resource inputs a Pulumi state holds, which the Docker
provider also echoes as outputs) one more GPU host of the prod shape costs, and how much one more partition adds.

    python -m bench.state [--hosts 3] [--partitions 8]

synthesizes the benchmark fleet (bench/fleet.py: prod, then generated hosts of prod's shape) twice in-process:
with one generated host, then with `--hosts` more of prod's shape and as many with `--partitions` partitions each.
Per host, a host's own records count (its Docker provider, its GpuHost and every resource on its daemon, as
plan.json spells them); the growth of the whole file between the two plans says whether anything else grows with
the hosts. `python -m bench` prints the same line for the 1,000-host plan it writes.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import fleet
from tools.synth import synthesize

LIMIT_BYTES = 32 * 1024  # per host of the prod shape (issue 26)
# What one more partition may add: its shell and its GPU check (~2 KiB each), never a copy of the programs (32 KiB).
PARTITION_LIMIT_BYTES = 8 * 1024
# prod's own hosts carry more than the shape: a vLLM server behind its nginx proxy (proxy container, network, two
# images) and a training run; with node-exporter and cAdvisor (issue 23) they measure 35 KiB. They get the shape's
# limit plus one extra partition's allowance, so they still cannot carry a copy of the programs (34 KiB alone).
PROD_HOST_LIMIT_BYTES = LIMIT_BYTES + PARTITION_LIMIT_BYTES
WIDE_PATTERN = "wide-{index:04d}"
GPU_HOST = "rocm-stack:docker:GpuHost"
HOST_EXPORTERS = "rocm-stack:monitoring:HostExporters"  # node-exporter and cAdvisor, named after their host
# The monitoring host's Prometheus, Alertmanager and Grafana (one host per stack, not a per-host cost): counted apart.
MONITORING_HOST = "rocm-stack:monitoring:MonitoringHost"
SERVERS = "monitoring servers"
INFERENCE = "rocm-stack:inference"
DOCKER_PROVIDER = "pulumi:providers:docker"


def record_bytes(record: Mapping[str, Any]) -> int:
    """The bytes of one resource record in plan.json (synth's indent 2, one level inside `resources`)."""
    text = json.dumps(record, indent=2, sort_keys=True)
    return len(text.encode()) + 4 * (text.count("\n") + 1) + len(",\n")


def is_server(record: Mapping[str, Any]) -> bool:
    """One of the monitoring host's servers' records (the MonitoringHost component or a resource under it)."""
    return MONITORING_HOST in (record["type"], (record.get("parent") or "").rsplit("::", 1)[0].rsplit("$", 1)[-1])


def server_inputs_bytes(plan: Mapping[str, Any]) -> int:
    """The bytes of the monitoring servers' inputs alone (plan.json's indent), without URNs and references."""
    return sum(
        len(json.dumps(r.get("inputs", {}), indent=2, sort_keys=True).encode())
        for r in plan["resources"]
        if is_server(r)
    )


def host_bytes(plan: Mapping[str, Any]) -> dict[str, int]:
    """Host name -> the plan.json bytes of its Docker provider, its GpuHost and everything on its daemon; the
    monitoring host's servers under SERVERS instead of their host."""
    providers = {r["urn"]: r["name"] for r in plan["resources"] if r["type"] == DOCKER_PROVIDER}
    sizes: dict[str, int] = defaultdict(int)
    for record in plan["resources"]:
        host = providers.get(record["urn"]) or providers.get(record.get("provider") or "")
        if record["type"] in (GPU_HOST, HOST_EXPORTERS):
            host = record["name"]
        if is_server(record):
            host = SERVERS
        if host is not None:
            sizes[host] += record_bytes(record)
    return dict(sizes)


def wide_template(partitions: int) -> dict[str, Any]:
    """The prod host shape with its GPUs split into `partitions` partitions (their images alternate as in prod)."""
    template = fleet.host_template()
    shapes = template["containers"]
    per = fleet.GPUS_PER_HOST // partitions
    template["containers"] = [
        {**shapes[i % len(shapes)], "name": f"part-{i}", "gpus": list(range(i * per, (i + 1) * per)), "shmSize": "8GiB"}
        for i in range(partitions)
    ]
    return template


def fleet_config(hosts: int, wide: int, partitions: int) -> dict[str, Any]:
    """The benchmark fleet with `hosts` generated hosts of prod's shape and `wide` of `partitions` partitions."""
    config, _ = fleet.fleet_config(len(fleet.template_config()[fleet.HOSTS]) + hosts)
    if wide:
        config[fleet.GROUPS] = [
            *config[fleet.GROUPS],
            {"template": wide_template(partitions), "namePattern": WIDE_PATTERN, "count": wide},
        ]
    return config


def measure(work: Path, hosts: int = 3, partitions: int = 8) -> dict[str, Any]:
    """Two plans (one generated host; then `hosts` more of prod's shape and `hosts` of `partitions` partitions)."""

    plans = {}
    for label, config in (
        ("one", fleet_config(1, 0, partitions)),
        ("more", fleet_config(1 + hosts, hosts, partitions)),
    ):
        plan = synthesize(fleet.STACK, project_dir=fleet.our_project(work / label, config))
        plans[label] = (len(plan.text().encode()), host_bytes(plan.to_json()))
        inputs = server_inputs_bytes(plan.to_json())
    (one_total, one_hosts), (more_total, per_host) = plans["one"], plans["more"]
    # The monitoring host's Prometheus config and rules list every host's targets and declared GPUs.
    servers_growth = per_host.get(SERVERS, 0) - one_hosts.get(SERVERS, 0)
    generated = [fleet.name(len(fleet.template_config()[fleet.HOSTS]) + i) for i in range(1 + hosts)]
    wide = [WIDE_PATTERN.format(index=i) for i in range(hosts)]
    return summary(
        {
            "prod_shape": [per_host[h] for h in generated],
            "wide": [per_host[h] for h in wide],
            "partitions": partitions,
            "prod_hosts": {h: per_host[h] for h in fleet_prod_hosts()},
            # Everything the new hosts added to the file beyond their own records.
            "monitoring_servers": per_host.get(SERVERS, 0),
            "monitoring_inputs": inputs,
            "monitoring_per_host": servers_growth / (2 * hosts),
            "outside_per_host": (
                more_total - one_total - servers_growth - sum(per_host[h] for h in generated[1:] + wide)
            )
            / (2 * hosts),
        }
    )


# Issue 38: the monitoring host's servers (Prometheus, Alertmanager, Grafana and what they need) hold their files by
# reference, so their records do not grow with the fleet: measured at these fleet sizes, held to this many bytes.
SERVER_FLEETS = (4, 100, 1000)
SERVERS_LIMIT_BYTES = 16 * 1024


def serving_everywhere(config: dict[str, Any], hosts: int) -> dict[str, Any]:
    """The benchmark fleet of `hosts` hosts with prod's keyed Docker vLLM served on every generated host's `serve-b`
    too (prod serves it on two hosts): each such host has a scrape token and a Prometheus job of its own (issue 34
    item 9), which must not grow the servers' records either."""
    config = copy.deepcopy(config)
    own = len(fleet.template_config()[fleet.HOSTS])
    (inference,) = config[INFERENCE]
    inference["docker"]["partitions"] += [f"{fleet.NAME_PATTERN.format(index=i)}/serve-b" for i in range(own, hosts)]
    # Rolled in at most 10 steps: one server at a time over 1,000 hosts chains 1,000 dependencies, deeper than the
    # Pulumi SDK's cycle check recurses (RecursionError in resource_cycle_breaker._with_transitive_deps, measured).
    inference["docker"]["maxUnavailable"] = max(1, -(-len(inference["docker"]["partitions"]) // 10))
    for group in config.get(fleet.GROUPS, []):
        for container in group["template"]["containers"]:
            if container["name"] == "serve-b":  # what the inference decides for its partitions
                for key in ("image", "command", "shmSize"):
                    container.pop(key, None)
    return config


def measure_servers(work: Path, sizes: tuple[int, ...] = SERVER_FLEETS) -> dict[int, tuple[int, int]]:
    """Fleet size -> (the plan.json bytes of the monitoring host's servers' records (host_bytes' SERVERS), of their
    inputs alone) in the benchmark fleet of that many hosts (prod's own, then generated ones of its shape), the keyed
    vLLM served on every host (serving_everywhere)."""

    found = {}
    for hosts in sizes:
        config = serving_everywhere(fleet.fleet_config(hosts)[0], hosts)
        plan = synthesize(fleet.STACK, project_dir=fleet.our_project(work / str(hosts), config)).to_json()
        found[hosts] = (host_bytes(plan)[SERVERS], server_inputs_bytes(plan))
    return found


def servers_line(found: Mapping[int, tuple[int, int]]) -> str:
    return (
        "monitoring servers (records / inputs): "
        + ", ".join(f"{r / 1024:.1f} / {i / 1024:.1f} KiB at {hosts:,} hosts" for hosts, (r, i) in found.items())
        + f" (target: inputs <= {SERVERS_LIMIT_BYTES // 1024} KiB)"
    )


def fleet_prod_hosts() -> list[str]:
    return [h["name"] for h in fleet.template_config()[fleet.HOSTS]]


def summary(numbers: dict[str, Any]) -> dict[str, Any]:
    prod_shape = statistics.median(numbers["prod_shape"])
    per_partition = (statistics.median(numbers["wide"]) - prod_shape) / (numbers["partitions"] - 2)
    return {**numbers, "per_host": prod_shape, "per_partition": per_partition}


def from_plan_file(plan_file: Path) -> dict[str, Any]:
    """The per-host figures of a plan.json that `python -m bench` wrote (prod's hosts and generated ones)."""
    per_host = host_bytes(json.loads(plan_file.read_text()))
    prod = fleet_prod_hosts()
    return {
        "per_host": statistics.median(b for h, b in per_host.items() if h not in (*prod, SERVERS))
        if len(set(per_host) - {SERVERS}) > len(prod)
        else None,
        "prod_hosts": {h: per_host[h] for h in prod if h in per_host},
        "monitoring_servers": per_host.get(SERVERS, 0),
        "hosts": len(per_host) - (SERVERS in per_host),
    }


def line(result: Mapping[str, Any]) -> str:
    parts = []
    if result.get("per_host") is not None:
        parts.append(f"{result['per_host'] / 1024:.1f} KiB per generated host of the prod shape (median)")
    prod = result["prod_hosts"]
    if prod:
        parts.append(
            f"prod's own hosts (with their workloads) {max(prod.values()) / 1024:.1f} KiB at most"
            f" (<= {PROD_HOST_LIMIT_BYTES // 1024} KiB)"
        )
    if "per_partition" in result:
        parts.append(f"{result['per_partition'] / 1024:.1f} KiB per extra partition")
        parts.append(f"{result['outside_per_host']:.0f} B per host outside its own records")
    if result.get("monitoring_servers"):
        parts.append(
            f"the monitoring host's servers {result['monitoring_servers'] / 1024:.1f} KiB apart"
            + (f" (+{result['monitoring_per_host']:.0f} B per host)" if "monitoring_per_host" in result else "")
        )
    return "state bytes per host: " + "; ".join(parts) + f" (target <= {LIMIT_BYTES // 1024} KiB)"


def met(result: Mapping[str, Any]) -> bool:
    shape_met = result.get("per_host") is None or result["per_host"] <= LIMIT_BYTES
    return shape_met and max(result["prod_hosts"].values(), default=0) <= PROD_HOST_LIMIT_BYTES


def target(result: Mapping[str, Any]) -> tuple[str, bool, str]:
    """`python -m bench`'s line for the plan.json of its largest fleet."""
    return (
        f"state bytes per host <= {LIMIT_BYTES // 1024} KiB (plan.json of {result['hosts']} hosts)",
        met(result),
        line(result).removeprefix("state bytes per host: "),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.state", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=3, help="generated hosts of each shape added to the fleet")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the wide hosts")
    parser.add_argument(
        "--servers",
        action="store_true",
        help=f"instead: the monitoring servers' bytes at {', '.join(map(str, SERVER_FLEETS))} hosts",
    )
    args = parser.parse_args(argv)
    if args.servers:
        with tempfile.TemporaryDirectory(prefix="rocm-stack-servers-") as work:
            found = measure_servers(Path(work))
        print(servers_line(found))
        return 0 if max(inputs for _, inputs in found.values()) <= SERVERS_LIMIT_BYTES else 1
    with tempfile.TemporaryDirectory(prefix="rocm-stack-state-") as work:
        result = measure(Path(work), args.hosts, args.partitions)
    print(line(result))
    return 0 if met(result) else 1


if __name__ == "__main__":
    sys.exit(main())
