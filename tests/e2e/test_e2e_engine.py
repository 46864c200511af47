"""The e2e harness against the real daemon: the upstream facts the Docker layer must live with."""

from __future__ import annotations

import json

import pytest

from e2e.harness import RENDER_GID, VIDEO_GID, Docker, make_gpu_nodes

# Run in the container: the supplementary groups, /dev/dri's entries, and what open() says for each path.
PROBE = """
import json, os, stat, sys
{setup}
def opened(path):
    try:
        os.close(os.open(path, os.O_RDWR))
        return "ok"
    except OSError as error:
        return error.strerror
print(json.dumps({"groups": sorted(os.getgroups()),
                  "dri": sorted(os.listdir("/dev/dri")) if os.path.isdir("/dev/dri") else None,
                  "open": {p: opened(p) for p in sys.argv[1:]}}))
"""


def probe(docker: Docker, image: str, *run_args: str, paths: tuple[str, ...] = (), setup: str = "") -> dict:
    return json.loads(
        docker.out("run", "--rm", *run_args, image, "python3", "-c", PROBE.replace("{setup}", setup), *paths)
    )


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory):
    return make_gpu_nodes(tmp_path_factory.mktemp("dev"), gpus=2)


def test_a_group_name_missing_from_the_image_stops_the_container(docker: Docker, standin_image: str):
    """Docker resolves `--group-add NAME` in the image's /etc/group, not the host's: moby
    daemon/oci_linux.go getUser() passes the container's /etc/group to runc's
    libcontainer/user.GetAdditionalGroupsPath, which refuses a name it does not find there unless it is a
    number ("Unable to find group %s"). Current rocm/pytorch images have no `render` group
    (ROCm/rocm-libraries PR #6563), so `--group-add render` stops the container before it starts."""
    refused = docker.run("run", "--rm", "--group-add", "render", standin_image, "python3", "-c", "pass", check=False)
    assert refused.returncode != 0
    assert "Unable to find group render" in refused.stderr.decode()


def test_numeric_group_ids_need_no_entry_in_the_image(docker: Docker, standin_image: str):
    """The same runc function takes a number as the GID itself; a name the image has (video) resolves."""
    assert probe(docker, standin_image, "--group-add", str(RENDER_GID), "--group-add", "video")["groups"] == sorted(
        [0, VIDEO_GID, RENDER_GID]
    )


def test_a_container_sees_only_the_render_nodes_mapped_into_it(docker: Docker, standin_image: str, nodes):
    """`--device HOST:CONTAINER` creates that one node in the container and allows it in the device cgroup
    (ROCm docs, "GPU isolation techniques": restrict a container to /dev/kfd plus its renderD nodes).
    A node the container makes itself with mknod for an unmapped GPU is refused by the kernel (EPERM from
    the device cgroup); the mapped one gets past the cgroup and fails only for want of a driver here."""
    mine, other = "/dev/dri/renderD129", "/dev/dri/renderD128"
    seen = probe(docker, standin_image, f"--device={nodes.kfd}:/dev/kfd", f"--device={nodes.render(1)}:{mine}")
    assert seen["dri"] == ["renderD129"]

    # Root in the container has CAP_MKNOD by default: it can make the other GPU's node, not open it.
    forged = probe(
        docker,
        standin_image,
        f"--device={nodes.render(1)}:{mine}",
        paths=(mine, other),
        setup=f"os.mknod({other!r}, 0o660 | stat.S_IFCHR, os.makedev(226, 128))",
    )
    assert forged["open"] == {mine: "No such device or address", other: "Operation not permitted"}


def test_a_whole_dri_directory_maps_every_node(docker: Docker, standin_image: str, nodes):
    """`--device=/dev/dri` (a directory) maps every node under it: no isolation between partitions."""
    seen = probe(docker, standin_image, f"--device={nodes.dri}:/dev/dri")
    assert seen["dri"] == ["card0", "card1", "renderD128", "renderD129"]
