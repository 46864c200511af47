"""One measurement in a fresh interpreter, printed as JSON (run by `python -m bench`, one process per number
so that ru_maxrss is the peak of that run alone).

    python -m bench.worker synth PROJECT [--warmup PROJECT] [--repeat N] [--replay-out FILE]
    python -m bench.worker start PROJECT      # seconds from here until the first resource is registered
    python -m bench.worker import-pulumi      # seconds of `import pulumi` alone
    python -m bench.worker place KIND GPUS SIZES SEED   # seconds of one placement (bench/placement.py)
    python -m bench.worker corpus COUNT SEED            # the placement corpus (bench/placement.py run_corpus)
"""

import time

STARTED = time.perf_counter()  # before any other import: start times are measured from here

import argparse
import json
import resource
import sys
from pathlib import Path
from typing import Any

STACK = "bench"


def replay_list(plan: Any) -> list[dict[str, Any]]:
    """The plan's custom resources as the baseline program declares them (see bench/baseline/__main__.py)."""
    custom = [r for r in plan.resources if r["custom"]]
    keys = {r["urn"] for r in custom}
    image_ids = {urn: outputs["imageId"] for urn, outputs in plan.mock_outputs.items() if "imageId" in outputs}

    def image_of(resource: dict[str, Any], value: Any) -> str | None:
        # The image a container's input came from is among its dependencies. An image id alone does not say
        # which: the mock id derives from the reference, the same on every host (each host has its own image).
        images = [urn for urn in resource["depends_on"] if image_ids.get(urn) == value]
        return images[0] if len(images) == 1 else None

    entries = [
        {
            "key": r["urn"],
            "type": r["type"],
            "name": r["name"],
            "inputs": r["inputs"],
            "provider": r["provider"] if r["provider"] in keys else None,
            "dependsOn": [urn for urn in r["depends_on"] if urn in keys],
            "outputOf": {
                key: {"key": image, "output": "image_id"}
                for key, value in r["inputs"].items()
                if isinstance(value, str) and (image := image_of(r, value)) is not None
            },
        }
        for r in custom
    ]
    return _dependencies_first(entries)


def _dependencies_first(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plan is sorted by URN; the baseline needs every provider, dependency and image declared first."""
    by_key = {entry["key"]: entry for entry in entries}
    ordered: dict[str, dict[str, Any]] = {}

    def visit(entry: dict[str, Any]) -> None:
        if entry["key"] in ordered:
            return
        needs = [entry["provider"], *entry["dependsOn"], *(s["key"] for s in entry["outputOf"].values())]
        for key in filter(None, needs):
            visit(by_key[key])
        ordered[entry["key"]] = entry

    for entry in entries:
        visit(entry)
    return list(ordered.values())


def _synth(project: Path) -> Any:
    from tools.synth import synthesize  # here: a run imports only what it measures

    return synthesize(STACK, project_dir=project)


def counts(plan: Any) -> dict[str, int]:
    return {"resources": len(plan.resources), "custom": sum(r["custom"] for r in plan.resources)}


def measure_synth(project: Path, warmup: Path | None, repeat: int, replay_out: Path | None) -> dict[str, Any]:
    if warmup is not None:
        _synth(warmup)  # lazy SDK imports and first-call caches, so that every repeat times the same work
    seconds: list[float] = []
    for attempt in range(repeat):
        began = time.perf_counter()
        plan = _synth(project)
        seconds.append(time.perf_counter() - began)
        if attempt == 0:
            result = {**counts(plan), "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
            if replay_out is not None:
                replay_out.write_text(json.dumps(replay_list(plan)))
        del plan  # the next repeat must not hold two plans at once
    return {**result, "seconds": seconds}


def measure_start(project: Path) -> dict[str, Any]:
    """Imports, config validation and everything else the program does before its first resource."""
    from pulumi.runtime.mocks import MockMonitor  # here: a run imports only what it measures

    first: list[float] = []
    register = MockMonitor.RegisterResource

    def timed_register(self: MockMonitor, request: Any) -> Any:
        if not first and request.type != "pulumi:pulumi:Stack":
            first.append(time.perf_counter() - STARTED)
        return register(self, request)

    MockMonitor.RegisterResource = timed_register
    _synth(project)
    return {"seconds": first[0]}


def measure_place(kind: str, gpus: int, sizes: tuple[int, ...], seed: int) -> dict[str, Any]:
    """One placement, timed from its input (the topology built or read) to the chosen sets."""
    from bench.placement import place_once  # here: a run imports only what it measures

    began = time.perf_counter()
    sets = place_once(kind, gpus, sizes, seed)
    return {"seconds": time.perf_counter() - began, "sets": sets}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.worker")
    sub = parser.add_subparsers(dest="what", required=True)
    synth = sub.add_parser("synth")
    synth.add_argument("project", type=Path)
    synth.add_argument("--warmup", type=Path)
    synth.add_argument("--repeat", type=int, default=1)
    synth.add_argument("--replay-out", type=Path)
    sub.add_parser("start").add_argument("project", type=Path)
    sub.add_parser("import-pulumi")
    placement = sub.add_parser("place")
    placement.add_argument("kind")
    placement.add_argument("gpus", type=int)
    placement.add_argument("sizes")
    placement.add_argument("seed", type=int)
    corpus = sub.add_parser("corpus")
    corpus.add_argument("count", type=int)
    corpus.add_argument("seed", type=int)
    args = parser.parse_args()
    if args.what == "synth":
        result = measure_synth(args.project, args.warmup, args.repeat, args.replay_out)
    elif args.what == "start":
        result = measure_start(args.project)
    elif args.what == "place":
        result = measure_place(args.kind, args.gpus, tuple(int(size) for size in args.sizes.split(",")), args.seed)
    elif args.what == "corpus":
        from bench.placement import run_corpus  # here: a run imports only what it measures

        result = run_corpus(args.count, args.seed)
    else:
        import pulumi  # noqa: F401

        result = {"seconds": time.perf_counter() - STARTED}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
