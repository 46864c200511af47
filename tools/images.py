"""List every image a stack pulls: `rocm-stack images --stack prod` (input for `crane copy` or `skopeo sync`).

    rocm-stack images --stack prod [--format lines|skopeo] [--project-dir DIR]

Runs the program offline as synth does and prints the stack output `images` (components/supply.py): every image of
both layers, the Docker hosts' and the Kubernetes objects', and those the charts pull (read from each chart's values
at its pinned version), fully qualified (`docker.io/rocm/pytorch:TAG`), with the `@sha256:` digest wherever the stack
pins one.

- `lines` (default): one image a line; with `rocm-stack:mirror` set, followed by its mirror reference: feed
  `crane copy SOURCE MIRROR` line by line;
- `skopeo`: a `skopeo sync --src yaml` source file (registry -> images -> repository -> tags and digests): `skopeo sync
  --src yaml --dest docker --scoped FILE <mirror.registry>` copies each image to the mirror reference the stack pulls.

Exit codes: 0 listed; 2 the stack configuration was refused, or a usage error.

Images of a chart at another version than the one its table was read at are listed as read (stderr says which
chart).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from tools.output import exit_codes
from schema.mirror import MirrorConfig, split_image
from schema.project import ROOT
from schema.stackfile import StackFileError
from components.supply import chart_versions_read
from tools.synth import ProgramRefused, stack_config, synthesize


def skopeo_source(images: list[str]) -> dict[str, Any]:
    """The `skopeo sync --src yaml` file: per registry, per repository, its tags and digests (a reference with both
    is kept by its digest, which is what the stack pulls)."""
    source: dict[str, Any] = {}
    for image in images:
        registry, rest = split_image(image)
        name, _, digest = rest.partition("@")
        repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
        versions = source.setdefault(registry, {"images": {}})["images"].setdefault(repository, [])
        versions.append(digest or tag)
    return source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rocm-stack images", description=__doc__.split("\n\n")[0], epilog=exit_codes(__doc__)
    )
    parser.add_argument("--stack", required=True, help="stack name: reads stacks/Pulumi.STACK.yaml")
    parser.add_argument("--format", choices=("lines", "skopeo"), default="lines")
    parser.add_argument("--project-dir", type=Path, default=ROOT, help="the Pulumi project (default: this one)")
    args = parser.parse_args(argv)

    try:
        plan = synthesize(args.stack, project_dir=args.project_dir.resolve())
    except (ProgramRefused, StackFileError) as refused:
        print(refused, file=sys.stderr)
        return 2
    images: list[str] = plan.outputs["images"]
    for release in plan.of_type("kubernetes:helm.sh/v3:Release"):
        chart = release["inputs"]["chart"].rsplit("/", 1)[-1]
        read = chart_versions_read().get(chart)
        if read is not None and release["inputs"]["version"] != read:
            print(
                f"chart {chart} {release['inputs']['version']}: its images are listed as read at {read}; check its "
                "values (components/supply.py)",
                file=sys.stderr,
            )
    if args.format == "skopeo":
        print(yaml.safe_dump(skopeo_source(images), sort_keys=True), end="")
        return 0
    # The program validated it (a refused one stops above).
    raw = stack_config(args.stack, args.project_dir.resolve()).get("rocm-stack:mirror")
    mirror = MirrorConfig.model_validate(raw) if raw is not None else None
    for image in images:
        print(image if mirror is None else f"{image} {mirror.image(image)}")
    return 0
