"""How long `pulumi up` (and docker/HOST.sh) lets each Docker resource's create take: one definition.

The Docker provider runs a whole create under one deadline, its resource's create timeout: 20 minutes unless the
program sets `custom_timeouts` (terraform-provider-docker v4.5.0 internal/provider/resource_docker_container.go
L12-14 and L30-34; resource_docker_image.go L10-12 and L24-28, the RemoteImage). A container's create is: the image
looked up (`findImage`; the program passes the RemoteImage's ID, so it is never pulled there), created, files
copied in, started, then `wait` (polls the health check for up to `wait_timeout` s) or `attach` (waits for it to
exit, with no bound of its own), then read back (resource_docker_container_funcs.go L43-673). A RemoteImage's
create and update pull the image (resource_docker_image_funcs.go L34-56, L134-148). Pulumi hands a resource's
`customTimeouts` to the provider as that operation's timeout (pulumi-terraform-bridge pkg/tfbridge/provider.go
newTimeoutOverrides, L1352 create, L1717 update @ 59de6c661).

So each deadline is the longest wait the create makes, from the config, plus MARGIN_SECONDS for the API calls
around it. docker/HOST.sh reads the same numbers from the plan (tools/synth.py).
"""

from __future__ import annotations

import pulumi

MARGIN_SECONDS = 300
"""The Docker API calls around a create's wait (inspect, create, copy the uploads, start, read back) over an ssh
connection to a loaded host: seconds each; five minutes leaves room without hiding a hung daemon for long."""


def deadline_seconds(wait_seconds: int = 0) -> int:
    """A create's deadline: its longest wait (`wait_timeout`, a check's own time limit, an image pull) + margin."""
    return wait_seconds + MARGIN_SECONDS


def create_timeouts(wait_seconds: int = 0) -> pulumi.CustomTimeouts:
    """`custom_timeouts` of a container whose create waits up to `wait_seconds`. In seconds: the engine parses the
    string as a Go duration (no "d" unit)."""
    return pulumi.CustomTimeouts(create=f"{deadline_seconds(wait_seconds)}s")


def pull_timeouts(pull_seconds: int) -> pulumi.CustomTimeouts:
    """`custom_timeouts` of a RemoteImage: its create and its update (a new reference) both pull."""
    deadline = f"{deadline_seconds(pull_seconds)}s"
    return pulumi.CustomTimeouts(create=deadline, update=deadline)
