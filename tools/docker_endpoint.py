"""A `docker` SDK client for one of the stack's Docker endpoints, with a time limit on connecting and on every call.

unix:// and tcp:// go straight to the SDK (docker 7.2.0), whose `timeout` bounds each call's socket reads.

ssh:// does not go through the SDK's own ssh transport: docker 7.2.0 imports paramiko for it even with
`use_ssh_client=True` (docker/transport/sshconn.py L9, docker/transport/__init__.py L9-12; without paramiko
api/client.py L179-188 raises "Install paramiko package to enable ssh:// support"), and its `ssh` client mode neither
passes any ssh option (sshconn.py L35-43: no `sshOpts`, no ConnectTimeout, no BatchMode) nor times out a read (its
socket's recv reads the ssh process's pipe, L80-84; settimeout applies to an unused socket, L110-113), so a host
that accepts and never answers held verify for ever. Instead each connection runs what the Docker provider runs,
docker/cli's connection helper (cli/connhelper/connhelper.go getConnectionHelper, used by terraform-provider-docker
v4.5.0 internal/provider/config.go L166-180 with the stack's `sshOpts`):
`ssh [sshOpts] -o ConnectTimeout=N -T [-l user] [-p port] -- host docker [--host=unix://PATH] system dial-stdio`,
plus `BatchMode=yes` (a password or host-key prompt would wait for ever), on a private unix socket that the SDK
reads with its own time-outs.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
import docker  # type: ignore[import-untyped]  # docker 7.2.0 ships no type information

# Connecting (ssh's TCP connect, handshake and key exchange; the first API call) and each later API call.
CONNECT_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 60.0


def ssh_command(endpoint: str, ssh_opts: Sequence[str], connect_timeout: float) -> list[str]:
    """The argv docker/cli's connection helper runs for `endpoint` (ssh://[user@]host[:port][/socket path])."""
    url = urllib.parse.urlsplit(endpoint)
    if not url.hostname:
        raise ValueError(f"{endpoint}: no host name")
    flags = list(ssh_opts)
    if "ConnectTimeout" not in "".join(flags):  # the helper's addSSHTimeout: the stack's own value wins
        flags += ["-o", f"ConnectTimeout={max(1, round(connect_timeout))}"]
    flags += ["-o", "BatchMode=yes", "-T"]
    user = ["-l", url.username] if url.username else []
    port = ["-p", str(url.port)] if url.port else []
    remote = ["docker", f"--host=unix://{url.path}"] if url.path.strip("/") else ["docker"]
    return ["ssh", *flags, *user, *port, "--", url.hostname, *remote, "system", "dial-stdio"]


class SSHDialer:
    """A private unix socket (in a 0700 directory) on which each accepted connection becomes the stdin and stdout
    of its own `ssh ... docker system dial-stdio`, as each of the Docker CLI's connections does."""

    def __init__(self, command: list[str]) -> None:
        self._command = command
        self._dir = Path(tempfile.mkdtemp(prefix="rocm-stack-ssh-"))
        self.socket_path = self._dir / "docker.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.socket_path))
        self._listener.listen()
        self._processes: list[tuple[subprocess.Popen[bytes], Any]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, name="ssh-dialer", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed
                return
            stderr = tempfile.TemporaryFile()
            with connection, self._lock:
                self._processes.append(
                    (
                        subprocess.Popen(
                            self._command,
                            stdin=connection.fileno(),
                            stdout=connection.fileno(),
                            stderr=stderr,
                            start_new_session=True,
                        ),
                        stderr,
                    )
                )

    def ssh_error(self) -> str:
        """What the last ssh that ended with an error said on stderr ("" when none did)."""
        with self._lock:
            if self._processes:  # it closes the connection just before it exits
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._processes[-1][0].wait(timeout=1)
            for process, stderr in reversed(self._processes):
                if process.poll() not in (None, 0):
                    stderr.seek(0)
                    said = "; ".join(line.strip() for line in stderr.read().decode(errors="replace").splitlines())
                    return f"ssh exited {process.returncode}: {said or '(no message)'}"
        return ""

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for process, stderr in self._processes:
                if process.poll() is None:
                    process.kill()
                process.wait()
                stderr.close()
        shutil.rmtree(self._dir, ignore_errors=True)


class Unreachable(Exception):
    """The endpoint did not answer the first API call: one sentence for the host's row."""


# ssh's own ConnectTimeout ends first and says why (no route, refused, banner exchange, key): the SDK's first call
# waits this much longer.
SSH_GRACE_S = 5.0


class Endpoint:
    """A connected `docker.DockerClient` (`client`) and what explains its failures."""

    def __init__(self, endpoint: str, client: Any, dialer: SSHDialer | None) -> None:
        self.endpoint, self.client, self._dialer = endpoint, client, dialer

    def explain(self, error: BaseException, timeout: float) -> str:
        """One line: ssh's own message where an ssh ended with an error, else the time-out or the error."""
        said = self._dialer.ssh_error() if self._dialer else ""
        if said:
            return said
        if "timed out" in str(error).lower():
            return f"no answer within {timeout:g} s"
        return f"{type(error).__name__}: {error}"


@contextlib.contextmanager
def connect(
    endpoint: str,
    ssh_opts: Sequence[str] = (),
    connect_timeout: float = CONNECT_TIMEOUT_S,
    call_timeout: float = CALL_TIMEOUT_S,
) -> Iterator[Endpoint]:
    """A client for `endpoint` whose API version is already agreed (that first call within `connect_timeout`) and
    whose every later call waits at most `call_timeout` unless it names its own. Raises Unreachable."""

    dialer = SSHDialer(ssh_command(endpoint, ssh_opts, connect_timeout)) if endpoint.startswith("ssh://") else None
    try:
        first_call = connect_timeout + SSH_GRACE_S if dialer else connect_timeout
        try:
            client = docker.DockerClient(
                base_url=f"unix://{dialer.socket_path}" if dialer else endpoint, timeout=first_call
            )
        except docker.errors.DockerException as error:
            reason = Endpoint(endpoint, None, dialer).explain(error, first_call)
            raise Unreachable(f"cannot reach {endpoint}: {reason}") from None
        client.api.timeout = call_timeout
        try:
            yield Endpoint(endpoint, client, dialer)
        finally:
            client.close()
    finally:
        if dialer:
            dialer.close()
