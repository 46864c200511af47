"""Write a stack's placement lock: `rocm-stack lock --stack prod` (`make lock STACK=prod`).

    rocm-stack lock --stack prod [--relock HOST[/CONTAINER] ...]

Reads `stacks/Pulumi.<stack>.yaml` and the current `stacks/placement.<stack>.yaml`, keeps every partition the lock
holds on its GPUs, places the `gpuCount` partitions it does not hold on the free GPUs, drops entries of partitions
and hosts that no longer exist, and writes the file (commit it). `--relock` releases a host's (or one partition's)
entries first, so they are placed anew: their containers move on the next `pulumi up`; the lock's error messages
say when that is needed (the GPU count, the topology or a partition's size changed).
Exit codes: 0 written (or unchanged), 2 the stack configuration or the lock was refused, a `--relock` name is no
entry of the lock (the messages say why), or a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.output import exit_codes
from domain.topology import Topology, load_topology
from schema import ConfigError, ConfigProblem, load
from schema.docker import HostConfig, HostLock, PlacementLock, host_lock, lock_file, lock_text, read_lock
from schema.project import ROOT
from tools.synth import stack_config
from domain.picture import Partition, host_svg


def relocked(lock: PlacementLock, targets: Sequence[str]) -> PlacementLock:
    """The lock without the entries `targets` name (`host` for all of a host's, `host/container` for one)."""
    hosts: dict[str, HostLock] = {}
    for name, entry in lock.hosts.items():
        if name in targets:
            continue
        partitions = {c: gpus for c, gpus in entry.partitions.items() if f"{name}/{c}" not in targets}
        hosts[name] = entry.model_copy(update={"partitions": partitions})
    return PlacementLock(hosts=hosts)


def unknown_targets(lock: PlacementLock, targets: Sequence[str], stack: str) -> list[ConfigProblem]:
    """A `--relock` target that names no entry of the lock would release nothing (a typo, or a partition never
    locked): refused, naming the entries it can name."""
    known = [*lock.hosts, *(f"{h}/{c}" for h, entry in lock.hosts.items() for c in entry.partitions)]
    return [
        ConfigProblem(
            "",
            (
                f"RELOCK '{target}' names nothing {lock_file(stack)} holds; "
                f"the names are: {', '.join(sorted(known)) or 'none (the lock is empty)'}"
            ),
        )
        for target in targets
        if target not in known
    ]


def locked(stack: str, project_dir: Path = ROOT, relock: Sequence[str] = ()) -> PlacementLock:
    """The new lock of `stack`; ConfigError when the config or an entry that is kept is refused."""
    return _placed(stack, project_dir, relock)[0]


def _placed(stack: str, project_dir: Path, relock: Sequence[str] = ()) -> tuple[PlacementLock, dict[str, str]]:
    """The new lock of `stack` and, per GPU host with partitions, its picture (SVG text)."""
    config = stack_config(stack, project_dir)
    secret_keys = [k for k, v in config.items() if isinstance(v, dict) and set(v) == {"secure"}]
    current, problems = read_lock(stack, project_dir)
    if problems:
        raise ConfigError([ConfigProblem(path, message) for path, message in problems])
    if unknown := unknown_targets(current, relock, stack):
        raise ConfigError(unknown)
    cwd = Path.cwd()
    os.chdir(project_dir)  # topology files are relative to the project directory, as for the program
    try:
        cfg = load(stack, config, secret_keys, lock=relocked(current, list(relock)), place_unlocked=True)
        hosts, pictures = {}, {}
        for host in cfg.hosts:
            topology = load_topology(host.topology) if host.topology is not None else None
            if any(c.gpu_count is not None for c in host.containers):
                entry = host_lock(host, topology)
                # The gap of the placement made now; an entry kept as it was keeps the gap it was locked with.
                kept = current.hosts.get(host.name)
                gap = host.placement_gap if host.placement_gap is not None else kept.gap if kept else None
                hosts[host.name] = entry.model_copy(update={"gap": gap})
            if any(c.gpus for c in host.containers):
                locked_gap = hosts[host.name].gap if host.name in hosts else None
                pictures[host.name] = host_picture(stack, host, topology, locked_gap or 0.0)
    finally:
        os.chdir(cwd)
    return PlacementLock(hosts=hosts), pictures


def host_picture(stack: str, host: HostConfig, topology: Topology | None, gap: float = 0.0) -> str:
    """The host's GPUs and partitions as `rocm-stack lock --svg` draws them (domain/picture.py), with the proven gap
    the lock holds for its placement."""

    mode = f" in {host.compute_partition} ({host.logical_gpus} logical GPUs)" if host.compute_partition else ""
    return host_svg(
        f"{host.name} (stack {stack}): {host.gpus}x {host.gpu_model}{mode}",
        list(range(host.logical_gpus)),
        topology,
        [Partition(c.name, c.gpus) for c in host.containers if c.gpus],
        host.per_gpu,
        gap,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rocm-stack lock", description=__doc__.split("\n\n")[0], epilog=exit_codes(__doc__)
    )
    parser.add_argument("--stack", required=True, help="stack name: reads stacks/Pulumi.STACK.yaml")
    parser.add_argument(
        "--relock",
        action="append",
        default=[],
        metavar="HOST[/CONTAINER]",
        help="place these partitions anew (their containers move); repeatable",
    )
    parser.add_argument("--project-dir", type=Path, default=ROOT, help="the Pulumi project (default: this one)")
    parser.add_argument(
        "--svg",
        type=Path,
        metavar="DIR",
        help="also draw each GPU host's GPUs, links and partitions into DIR/HOST.svg (docs/topology.md)",
    )
    args = parser.parse_args(argv)
    project = args.project_dir.resolve()
    try:
        lock, pictures = _placed(args.stack, project, args.relock)
    except ConfigError as refused:
        print(refused, file=sys.stderr)
        return 2
    except FileNotFoundError as missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    if args.svg is not None:
        try:
            args.svg.mkdir(parents=True, exist_ok=True)
            for host, svg in pictures.items():
                (args.svg / f"{host}.svg").write_text(svg, encoding="utf-8")
        except OSError as error:
            print(f"error: cannot write into {args.svg}: {error.strerror}", file=sys.stderr)
            return 2
        print(f"drew {len(pictures)} host(s) into {args.svg}", file=sys.stderr)
    path = project / lock_file(args.stack)
    if not lock.hosts and not path.is_file():
        print(f"stack '{args.stack}' has no gpuCount partition: nothing to lock")
        return 0
    text = lock_text(args.stack, lock)
    if path.is_file() and path.read_text() == text:
        print(
            f"{lock_file(args.stack)} is up to date ({sum(len(h.partitions) for h in lock.hosts.values())} partitions)"
        )
        return 0
    path.write_text(text)
    print(
        f"{lock_file(args.stack)} written: {sum(len(h.partitions) for h in lock.hosts.values())} partitions on "
        f"{len(lock.hosts)} hosts; review and commit it"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
