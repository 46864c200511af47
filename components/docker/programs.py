"""Files of programs/ copied into Docker containers by reference, so that the Pulumi state never holds their text.

An upload's `content` is an input, which the state keeps (and the provider echoes as an output): 32 KiB of check
programs per check container made 84% of a 1,000-host plan. terraform-provider-docker's `upload.source` names a file
that the provider reads when it creates the container ("a file which will be uploaded as the object content. This
allows for large file uploads that do not get stored in state"), and `source_hash` "will force an update if the file
content has updated but the filename has not"; both are ForceNew (v4.5.0 internal/provider/
resource_docker_container.go L1029-1040; resource_docker_container_funcs.go L537: os.ReadFile(source)). A relative
`source` is read from the provider's working directory, which the Pulumi engine sets to the project directory
(pulumi/pulumi v3.259.0 pkg/engine/deployment.go L57 and project.go getPwdMain: the directory of Pulumi.yaml, which
has no `main`; sdk/go/common/resource/plugin/provider_plugin.go L287 and plugin.go L599: `cmd.Dir = pwd`).

Files the program renders (the monitoring host's alert rules, scrape targets and dashboard, which grow with the
fleet) go the same way: `generated_upload` writes each into GENERATED, named by its SHA-256, when the program
declares the container, so the file is there when the provider creates it.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Iterable, Mapping
from pathlib import Path

import pulumi_docker as docker

from schema.project import PROGRAMS, ROOT


def program_digest(files: Mapping[str, str]) -> str:
    """One digest of named program texts: a new version of any of them is a new digest."""
    digest = hashlib.sha256()
    for name, text in sorted(files.items()):
        digest.update(f"{name}\0{text}\0".encode())
    return digest.hexdigest()


def program_uploads(names: Iterable[str], target: str, source: Path = PROGRAMS) -> list[docker.ContainerUploadArgs]:
    """Files `names` of `source` copied to `target`/name: in the state, the path relative to the project directory
    and the SHA-256 of the bytes the provider will read; never the text."""
    return [
        docker.ContainerUploadArgs(
            file=f"{target}/{name}",
            source=os.path.relpath(source / name, ROOT),
            source_hash=hashlib.sha256((source / name).read_bytes()).hexdigest(),
        )
        for name in sorted(names)
    ]


# Where the program writes the files it renders for `generated_upload` (ignored by git; content-addressed, so two
# stacks or two runs never overwrite each other's file with other bytes).
GENERATED = ROOT / ".uploads"


def generated_upload(target: str, text: str, permissions: str | None = None) -> docker.ContainerUploadArgs:
    """`text` copied to `target` by reference: written to GENERATED/<sha256 prefix>-<name> (atomically: parallel
    runs may write the same file), the state holding its path and SHA-256."""
    data = text.encode()
    digest = hashlib.sha256(data).hexdigest()
    path = GENERATED / f"{digest[:16]}-{posixpath.basename(target)}"
    if not path.is_file():
        GENERATED.mkdir(exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_bytes(data)
        os.replace(partial, path)
    return docker.ContainerUploadArgs(
        file=target, source=os.path.relpath(path, ROOT), source_hash=digest, permissions=permissions
    )
