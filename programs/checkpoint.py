"""Crash-safe checkpoint files: atomic writes, checksummed names, newest-valid resume, retention.

A checkpoint is one `torch.save` file named `ckpt-<step, 9 digits>-<sha256 of the file>.pt`:

* It is written to a hidden temp file in the same directory, fsynced, then `os.replace`d to its final name
  (and the directory fsynced), so a reader never sees a half-written file under a checkpoint name.
* The name carries the SHA-256 of the bytes, so truncation or corruption after the rename (a full disk, a
  torn network-filesystem write, a bit flip) is detected before `torch.load` ever runs.
* `torch.load(weights_only=True)` then has to succeed and yield the expected keys and step; anything else
  makes the file invalid: it is skipped (and, by the writer, renamed `*.invalid`) and the next older one tried.

Files stay loadable with a plain `torch.load(path, weights_only=True)` outside this module.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from collections.abc import Callable, Iterator

import torch

CHECKPOINT_NAME = re.compile(r"^ckpt-(?P<step>\d{9})-(?P<sha256>[0-9a-f]{64})\.pt$")
TEMP_PREFIX = ".ckpt-"
TEMP_SUFFIX = ".tmp"
INVALID_SUFFIX = ".invalid"
REQUIRED_KEYS = frozenset({"step", "model", "optimizer"})
_READ_CHUNK = 8 << 20


class InvalidCheckpoint(Exception):
    """The file is not a complete, intact checkpoint of this program."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    sha256: str


class _HashingWriter:
    """File wrapper that hashes exactly the bytes torch.save writes, so no second read pass is needed."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self._file.write(data)

    def flush(self) -> None:
        self._file.flush()


def _fsync_dir(directory: Path) -> None:
    # The rename itself is only durable once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class CheckpointStore:
    """One directory of checkpoints. Only one process (rank 0) may call the mutating methods."""

    def __init__(self, directory: Path, keep: int, log: Callable[..., None] = lambda event, **fields: None) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = directory
        self.keep = keep
        self._log = log

    def checkpoints(self) -> list[Checkpoint]:
        """Files named like checkpoints, newest step first (validity is not checked here)."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = CHECKPOINT_NAME.match(path.name)
            if match:
                found.append(Checkpoint(path, int(match["step"]), match["sha256"]))
        return sorted(found, key=lambda ckpt: (ckpt.step, ckpt.path.name), reverse=True)

    def save(self, step: int, state: dict[str, Any]) -> Checkpoint:
        """Atomically write `state` (which must hold REQUIRED_KEYS) as the checkpoint of `step`, then prune."""
        missing = REQUIRED_KEYS - state.keys()
        if missing or state["step"] != step:
            raise ValueError(f"checkpoint state needs keys {sorted(REQUIRED_KEYS)} and step={step}")
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=self.directory, prefix=f"{TEMP_PREFIX}{step:09d}-", suffix=TEMP_SUFFIX)
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "wb") as file:
                writer = _HashingWriter(file)
                torch.save(state, writer)  # type: ignore[arg-type]  # torch.save takes any object with write()
                file.flush()
                os.fsync(file.fileno())
            final = self.directory / f"ckpt-{step:09d}-{writer.digest.hexdigest()}.pt"
            os.replace(temp, final)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.directory)
        self.prune()
        return Checkpoint(final, step, writer.digest.hexdigest())

    def prune(self) -> None:
        """Keep the newest `keep` checkpoints; older ones go."""
        for old in self.checkpoints()[self.keep :]:
            old.path.unlink(missing_ok=True)
            self._log("checkpoint_pruned", path=str(old.path), step=old.step)

    def remove_temp_files(self) -> None:
        """Delete temp files a killed writer left behind. Call at start-up, before any save."""
        if not self.directory.is_dir():
            return
        for path in self.directory.glob(f"{TEMP_PREFIX}*{TEMP_SUFFIX}"):
            path.unlink(missing_ok=True)
            self._log("checkpoint_temp_removed", path=str(path))

    def load(self, checkpoint: Checkpoint, map_location: torch.device | str = "cpu") -> dict[str, Any]:
        """Verify checksum and contents, then return the state. Raises InvalidCheckpoint."""
        try:
            actual = _sha256_of(checkpoint.path)
        except OSError as error:
            raise InvalidCheckpoint(f"cannot read: {error}") from error
        if actual != checkpoint.sha256:
            raise InvalidCheckpoint(f"sha256 mismatch: name says {checkpoint.sha256}, content is {actual}")
        try:
            state = torch.load(checkpoint.path, map_location=map_location, weights_only=True)
        except Exception as error:  # any unpickling/zip error means the file is unusable
            raise InvalidCheckpoint(f"torch.load failed: {error}") from error
        if not isinstance(state, dict) or not REQUIRED_KEYS <= state.keys():
            raise InvalidCheckpoint(f"missing keys: expected {sorted(REQUIRED_KEYS)}")
        if state["step"] != checkpoint.step:
            raise InvalidCheckpoint(f"file name says step {checkpoint.step}, content says {state['step']}")
        return state

    def valid_checkpoints(
        self, map_location: torch.device | str = "cpu"
    ) -> Iterator[tuple[Checkpoint, dict[str, Any]]]:
        """Newest first, yield (checkpoint, state) of the ones that pass `load`; quarantine the ones that do not."""
        for checkpoint in self.checkpoints():
            try:
                state = self.load(checkpoint, map_location)
            except InvalidCheckpoint as error:
                self._log("checkpoint_invalid", path=str(checkpoint.path), step=checkpoint.step, reason=str(error))
                self._quarantine(checkpoint.path)
                continue
            yield checkpoint, state

    def _quarantine(self, path: Path) -> None:
        # Renamed, not deleted: it stays for inspection, and a re-save of the same step cannot clash with it.
        try:
            os.replace(path, path.with_name(path.name + INVALID_SUFFIX))
        except OSError as error:
            self._log("checkpoint_quarantine_failed", path=str(path), reason=str(error))

    def latest_valid(self, map_location: torch.device | str = "cpu") -> tuple[Checkpoint, dict[str, Any]] | None:
        return next(self.valid_checkpoints(map_location), None)
