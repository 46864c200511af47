"""How a long-running container stops: one grace period for `pulumi up`'s replace, `docker stop` and a daemon shutdown.

Pulumi deletes a docker.Container before it creates its replacement (pulumi/pulumi-docker provider/resources.go
L112-114 @ 237b7899: `"docker_container": {... DeleteBeforeReplace: true}`), and the provider's delete stops it with a timeout of
`destroy_grace_seconds`, 0 when unset (kreuzwerker/terraform-provider-docker v4.5.0
internal/provider/resource_docker_container_funcs.go L1085-1093, skipped for `attach` containers), then removes it.
The daemon sends the stop signal, waits the timeout, then SIGKILLs (moby/moby v28.5.2 daemon/stop.go L55-57,
L84, L98, L113-116). Without a grace a replace SIGKILLs at once: a training loses every step since its last
checkpoint, a vLLM server its in-flight requests.

`stop_signal` and `stop_timeout` are stored in the container's config (funcs.go L54-76), which `docker stop` without
`-t` and a daemon shutdown use (moby container/container.go L584-602 StopSignal/StopTimeout; daemon/daemon.go
L1222-1234 shutdownContainer), so an operator's stop and a host reboot give the same grace. Both are ForceNew and
read back as the daemon stores them (resource_docker_container.go L314-327; funcs.go L977-978
`d.Set("stop_signal", container.Config.StopSignal)`, `d.Set("stop_timeout", container.Config.StopTimeout)`): the
declared "SIGTERM" and number are kept verbatim by the daemon, so they never show as a diff.
`destroy_grace_seconds` is not ForceNew and is not read back (funcs.go L931: "can't be imported"), but the grace is
`stop_timeout` too: changing it replaces the container, which the delete stops with the old grace.
"""

from __future__ import annotations

from typing import Any

STOP_SIGNAL = "SIGTERM"
# A partition's shell (`sleep infinity`, or the partition's own `command`) is PID 1 of its container, and the kernel
# delivers a signal to a PID namespace's init only where it has a handler (pid_namespaces(7): "the only signals that
# can be sent to the init process are those for which the init process has established a signal handler"; SIGKILL
# from the ancestor namespace always): `sleep` has none, so every stop waited out the grace and ended in SIGKILL
# (exit 137). Docker's `init` runs docker-init (tini) as PID 1, which forwards the stop signal to the command and
# exits with it (tests/e2e/test_e2e_shell.py measures both). `init` is not ForceNew (terraform-provider-docker
# v4.5.0 resource_docker_container.go L1126-1131) and the provider's update never applies it (funcs.go L1016-1019):
# the resource option replaceOnChanges makes a change of it replace the container, or a running shell would keep
# PID 1 `sleep` while the state said otherwise (and the next refresh read `false` back: a diff on every preview).
INIT_REPLACES = ("init",)


def graceful_stop(grace_seconds: int) -> dict[str, Any]:
    """The docker.Container arguments of a container that gets `grace_seconds` from SIGTERM to SIGKILL."""
    return {"destroy_grace_seconds": grace_seconds, "stop_signal": STOP_SIGNAL, "stop_timeout": grace_seconds}


def with_init() -> dict[str, Any]:
    """The docker.Container argument of a container whose command is not a signal-aware PID 1 (see INIT_REPLACES)."""
    return {"init": True}
