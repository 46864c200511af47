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
"""

from __future__ import annotations

import hashlib
import os
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
