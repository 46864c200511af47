"""A real Docker engine for the end-to-end tests: a private dockerd, stand-in images and GPU device nodes.

The daemon: the one at DOCKER_HOST when that is set; otherwise, as root with Debian's `docker.io` installed
(`.ci/run` installs it), a private dockerd with its own --data-root, --exec-root, pidfile, socket and daemon
config under one temporary directory, started once per test session and removed afterwards.

Networking: the private daemon runs with `--iptables=false --ip-forward=false --ip-masq=false --bridge=none`,
so it changes no firewall rule, sysctl or network interface of the machine. Measured on dockerd 20.10
(Debian bookworm's docker.io):
- a container on the default network gets a network namespace with loopback only (no bridge exists);
  `-p IP:HOST:CONTAINER` is accepted and recorded in HostConfig.PortBindings, but nothing is forwarded;
  a server in the container is reached from inside it (health checks run there) or with `docker exec`;
- `docker network create --driver bridge` still works, but it creates a `br-*` interface on the machine,
  so only test_e2e_vllm_proxy.py does it (the stack's per-server network, removed after it); `--network
  host` would share the machine's ports, so the tests never do that either. test_e2e_neighbours.py runs a daemon
  of its own with its firewall on, in a network namespace of its own (`private_daemon(netns=...)`), where bridges,
  rules and `--network host` touch that namespace alone.
Outside the temporary directory the daemon touches only kernel state it owns and removes: its containers'
cgroups (under the default parent `docker`) and the empty directory /run/docker/plugins, which dockerd
creates at a fixed path.

Stand-in images: nothing can be pulled here, so `docker import` builds one image from a root filesystem
made of this machine's files (the running Python interpreter with its standard library and shared
libraries, /bin/sh, and the stand-in programs of `standin.py`), tagged with each image reference the
stack declares. Its /etc/group is what current official ROCm images ship: `video` (GID 44, Ubuntu's base
image) and no `render` group (ROCm/rocm-libraries PR #6563 dropped it from the rocm/pytorch images).

GPU device nodes: `mknod` character devices in a temporary directory, laid out like /dev (kfd, dri/card*,
dri/renderD*), with the real DRM major 226 (Linux Documentation/admin-guide/devices.txt: "226 char DRI")
and render minors 128 + n. No DRM driver backs them here, so opening one fails with ENXIO even where the
device cgroup allows it: nothing reaches hardware.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.docker.checks import PROGRAMS_VOLUME

HERE = Path(__file__).resolve().parent

# Ubuntu 22.04's base /etc/group up to `video`, as in rocm/pytorch:rocm7.0_ubuntu22.04_*; no `render`.
STANDIN_GROUP_FILE = """\
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
video:x:44:
users:x:100:
nogroup:x:65534:
"""
STANDIN_PASSWD_FILE = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"
STANDIN_PROGRAMS = ("vllm", "torchrun")  # names `standin.py` answers to, besides its default (exporter)

# Group IDs of the stand-in nodes: `video` is 44 on Debian and Ubuntu; `render` has no fixed GID (the
# host's package manager assigns one: 992, 993, 109, 110 are all seen), 993 here.
VIDEO_GID = 44
RENDER_GID = 993
DRM_MAJOR = 226
RENDER_MINOR_BASE = 128
# /dev/kfd's major is assigned dynamically by the kernel; the stand-in takes one from the dynamic range
# that this machine's /proc/devices does not list.
DYNAMIC_CHAR_MAJORS = range(234, 255)

DAEMON_START_TIMEOUT_S = 60
DAEMON_STOP_TIMEOUT_S = 30


class Unavailable(Exception):
    """No Docker engine can be used here; the message says why."""


@dataclass
class Docker:
    """A Docker daemon and the CLI that talks to it, with a CLI config of its own (never ~/.docker)."""

    host: str
    config_dir: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host, "DOCKER_CONFIG": str(self.config_dir)}

    def run(
        self, *args: str, check: bool = True, input: bytes | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[bytes]:
        result = subprocess.run(["docker", *args], env=self.env, input=input, capture_output=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} exited {result.returncode}: {result.stderr.decode(errors='replace').strip()}"
            )
        return result

    def answers(self) -> bool:
        """Whether the daemon answers `docker version` within 10 s: a daemon still starting under load may accept the
        connection and answer late, which is "not yet", not a failure."""
        try:
            return self.run("version", check=False, timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def out(self, *args: str, **kwargs: Any) -> str:
        return self.run(*args, **kwargs).stdout.decode()

    def inspect(self, name: str) -> dict[str, Any]:
        return json.loads(self.out("container", "inspect", name))[0]

    def remove_all_containers(self) -> None:
        ids = self.out("ps", "-aq").split()
        if ids:
            self.run("rm", "--force", "--volumes", *ids)
        # and the hosts' check programs (a named volume, which `rm --volumes` keeps), so each test ships them anew
        volumes = self.out("volume", "ls", "-q", "--filter", f"name={PROGRAMS_VOLUME}").split()
        if volumes:
            self.run("volume", "rm", *volumes)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(DAEMON_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _unmount_below(root: Path) -> None:
    """Mounts a killed dockerd left under `root` (overlay layers, shm): `rm -rf` cannot remove them."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{root}/")), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mount], capture_output=True)


# The private daemon's networking: no firewall rule, sysctl or interface of the machine changed (module docstring).
ISOLATED_NETWORKING = ("--iptables=false", "--ip-forward=false", "--ip-masq=false", "--bridge=none")


@contextlib.contextmanager
def private_daemon(root: Path, config: dict[str, Any] | None = None, netns: Path | None = None) -> Iterator[Docker]:
    """Start dockerd with all its state under `root` and `config` in its daemon.json, yield its client, then remove
    its containers and stop it. `netns`: dockerd runs in that network namespace (a file of /run/netns) with its
    firewall on, as on a real host (iptables, ip-forward, masquerading: its defaults; no default bridge): its rules,
    sysctls and interfaces are that namespace's own, gone with it (tests/e2e/test_e2e_neighbours.py)."""
    dockerd = shutil.which("dockerd")
    if os.geteuid() != 0:
        raise Unavailable("DOCKER_HOST is not set and a private dockerd needs root")
    if dockerd is None or shutil.which("docker") is None:
        raise Unavailable(
            "DOCKER_HOST is not set and dockerd/docker are not installed (apt-get install docker.io, as .ci/run does)"
        )
    socket = root / "docker.sock"
    # dockerd writes its identity key to /etc/docker/key.json unless its config names another path.
    (root / "daemon.json").write_text(json.dumps({**(config or {}), "deprecated-key-path": str(root / "key.json")}))
    log = (root / "dockerd.log").open("wb")
    networking = ["--bridge=none"] if netns else list(ISOLATED_NETWORKING)
    process = subprocess.Popen(
        [
            *(["nsenter", f"--net={netns}"] if netns else []),
            dockerd,
            "--config-file",
            str(root / "daemon.json"),
            "--data-root",
            str(root / "data"),
            "--exec-root",
            str(root / "exec"),
            "--pidfile",
            str(root / "dockerd.pid"),
            "--host",
            f"unix://{socket}",
            *networking,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    docker = Docker(f"unix://{socket}", root / "cli")
    answered = False
    try:
        deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
        while not (answered := docker.answers()):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (root / "dockerd.log").read_text(errors="replace")[-2000:]
                raise Unavailable(f"the private dockerd did not start (exit {process.poll()}):\n{tail}")
            time.sleep(0.1)
        yield docker
    finally:
        try:
            if answered and process.poll() is None:
                docker.remove_all_containers()
        finally:
            _stop(process)
            log.close()
            _unmount_below(root)


@contextlib.contextmanager
def docker_engine() -> Iterator[Docker]:
    """The daemon at DOCKER_HOST, or a private one; raises Unavailable with the reason when neither works."""
    with tempfile.TemporaryDirectory(prefix="rocm-stack-e2e-") as tmp:
        root = Path(tmp)
        if os.environ.get("DOCKER_HOST"):
            docker = Docker(os.environ["DOCKER_HOST"], root / "cli")
            if docker.run("version", check=False, timeout=30).returncode != 0:
                raise Unavailable(f"DOCKER_HOST={docker.host} does not answer `docker version`")
            yield docker
        else:
            with private_daemon(root) as docker:
                yield docker


# --- stand-in image --------------------------------------------------------------------------------------


def _shared_libraries(binaries: Iterable[Path]) -> set[Path]:
    """What the dynamic loader maps for each binary (ldd), the loader itself included."""
    libraries: set[Path] = set()
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0] if parts else ""
            if path.startswith("/"):
                libraries.add(Path(path))
    return libraries


_STDLIB_SKIPPED = {
    "site-packages",
    "dist-packages",
    "test",
    "tests",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
    "__pycache__",
}


def _stdlib_files(stdlib: Path) -> Iterator[Path]:
    for directory, subdirs, files in os.walk(stdlib):
        subdirs[:] = [d for d in subdirs if d not in _STDLIB_SKIPPED and not d.startswith("config-")]
        for name in files:
            yield Path(directory, name)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _add_entry(tar: tarfile.TarFile, name: str, kind: bytes, mode: int = 0o755, target: str = "") -> None:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type, info.mode, info.linkname, info.mtime = kind, mode, target, int(time.time())
    tar.addfile(info)


def _torch_system_libraries() -> list[Path]:
    """The system libraries (libstdc++, ...) that torch's own shared libraries load, so that a torch
    bind-mounted into the stand-in (`on_cpu`) imports; torch's libraries come with the mount."""
    site = torch_site_packages()
    if site is None:
        return []
    return [lib for lib in _shared_libraries((site / "torch" / "lib").glob("*.so*")) if site not in lib.parents]


def standin_rootfs() -> bytes:
    """A tar of the stand-in root filesystem (see the module docstring); files keep their host paths."""
    python = Path(os.path.realpath(sys.executable))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    shell = Path(os.path.realpath("/bin/sh"))
    stdlib_files = list(_stdlib_files(stdlib))
    extensions = [f for f in stdlib_files if f.suffix == ".so"]
    torch_libraries = _torch_system_libraries()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in ("/tmp", "/root", "/dev", "/proc", "/sys", "/etc", "/bin", "/usr/bin", "/usr/local/bin"):
            _add_entry(tar, directory, tarfile.DIRTYPE, 0o1777 if directory == "/tmp" else 0o755)
        copied = {
            python,
            shell,
            *stdlib_files,
            *torch_libraries,
            *_shared_libraries([python, shell, *extensions, *torch_libraries]),
        }
        # A symbolic link (the loader /lib64/ld-linux-x86-64.so.2 is one) is copied with what it names.
        links = {path: Path(os.path.realpath(path)) for path in copied if os.path.realpath(path) != str(path)}
        for path in sorted((copied - links.keys()) | set(links.values())):
            tar.add(str(path), arcname=str(path).lstrip("/"), recursive=False)
        for link, target in sorted(links.items()):
            _add_entry(tar, str(link), tarfile.SYMTYPE, target=str(target))
        if str(shell) != "/bin/sh":
            _add_entry(tar, "/bin/sh", tarfile.SYMTYPE, target=str(shell))
        for link in ("/usr/bin/python3", "/usr/local/bin/python3", "/usr/local/bin/python"):
            if str(python) != link:
                _add_entry(tar, link, tarfile.SYMTYPE, target=str(python))
        _add_bytes(tar, "/etc/group", STANDIN_GROUP_FILE.encode())
        _add_bytes(tar, "/etc/passwd", STANDIN_PASSWD_FILE.encode())
        program = (HERE / "standin.py").read_text().replace("#!/usr/bin/env python3", "#!/usr/local/bin/python3", 1)
        _add_bytes(tar, "/usr/local/bin/standin", program.encode(), 0o755)
        for name in STANDIN_PROGRAMS:
            _add_entry(tar, f"/usr/local/bin/{name}", tarfile.SYMTYPE, target="standin")
    return buffer.getvalue()


def import_standin_image(docker: Docker, references: Iterable[str]) -> str:
    """`docker import` the stand-in root filesystem once and tag it with every reference; returns its id."""
    image_id = docker.out(
        "import",
        "--change",
        "ENV PATH=/usr/local/bin:/usr/bin:/bin",
        "--change",
        'CMD ["/usr/local/bin/standin"]',
        "-",
        input=standin_rootfs(),
    ).strip()
    for reference in sorted(set(references)):
        docker.run("tag", image_id, reference)
    return image_id


# --- stand-in GPU device nodes ---------------------------------------------------------------------------


def _free_dynamic_major() -> int:
    used = {
        int(line.split()[0])
        for line in Path("/proc/devices").read_text().split("Block devices:")[0].splitlines()
        if line.strip()[:1].isdigit()
    }
    return next(m for m in DYNAMIC_CHAR_MAJORS if m not in used)


@dataclass(frozen=True)
class GpuNodes:
    """Stand-in /dev of a host with `gpus` GPUs: <root>/kfd, <root>/dri/card<n>, <root>/dri/renderD<minor of n>
    (128 + n unless `minors` says otherwise: an MI300X host has 128, 136, 144, ...)."""

    root: Path
    gpus: int
    minors: tuple[int, ...] = ()

    @property
    def kfd(self) -> Path:
        return self.root / "kfd"

    @property
    def dri(self) -> Path:
        return self.root / "dri"

    def minor(self, gpu: int) -> int:
        return self.minors[gpu] if self.minors else RENDER_MINOR_BASE + gpu

    def render(self, gpu: int) -> Path:
        return self.dri / f"renderD{self.minor(gpu)}"


def make_gpu_nodes(root: Path, gpus: int, minors: tuple[int, ...] = ()) -> GpuNodes:
    """Character devices owned like a ROCm host's: kfd and renderD* by `render`, card* by `video`, mode 0660."""
    nodes = GpuNodes(root, gpus, minors)
    nodes.dri.mkdir(parents=True)
    entries = [(nodes.kfd, _free_dynamic_major(), 0, RENDER_GID)]
    for gpu in range(gpus):
        entries += [
            (nodes.dri / f"card{gpu}", DRM_MAJOR, gpu, VIDEO_GID),
            (nodes.render(gpu), DRM_MAJOR, nodes.minor(gpu), RENDER_GID),
        ]
    for path, major, minor, gid in entries:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(major, minor))
        os.chown(path, 0, gid)
        os.chmod(path, 0o660)  # after mknod: the umask may have cleared group bits
    return nodes


# --- a synthesized plan, pointed at the test daemon ------------------------------------------------------


def on_test_host(plan: Any, docker_host: str, dev_root: Path) -> Any:
    """The plan with only three things changed: every Docker provider's host is `docker_host`, every device host
    path /dev/X is `dev_root`/X (the stand-in nodes; a host whose `devicePaths` point at them already keeps its
    paths), and the hosts' node-exporter and cAdvisor are left out (below). Everything else is what the program
    declared."""
    from tools.synth import Plan

    # Every host's node-exporter and cAdvisor (HostExporters) are left out: they are pinned by digest, which Docker
    # refuses as a tag for a stand-in, and cAdvisor reads the host's own /var/lib/docker; test_e2e_monitoring_host
    # runs them from the plan's own argv with the real binaries.
    exporters = {r["urn"] for r in plan.resources if r["type"] == "rocm-stack:monitoring:HostExporters"}
    resources = copy.deepcopy([r for r in plan.resources if r["urn"] not in exporters and r["parent"] not in exporters])
    for resource in resources:
        inputs = resource["inputs"]
        if resource["type"] == "pulumi:providers:docker":
            inputs["host"] = docker_host
        for device in inputs.get("devices", []) if resource["type"] == "docker:index/container:Container" else []:
            if device["hostPath"].startswith("/dev/"):
                device["hostPath"] = str(dev_root / device["hostPath"].removeprefix("/dev/"))
            assert device["hostPath"].startswith(f"{dev_root}/"), device
    return Plan(plan.project, plan.stack, resources, plan.outputs, plan.mock_outputs)


def _containers(plan: Any) -> Iterator[dict[str, Any]]:
    return (r["inputs"] for r in plan.resources if r["type"] == "docker:index/container:Container")


def with_health_interval(plan: Any, interval: str = "1s") -> Any:
    """Every health check probes every `interval`. dockerd 20.10 runs a container's first probe one interval after
    it starts (moby daemon/health.go monitor(): `probeInterval` timer before the first probe; a faster start
    interval needs API 1.44 / Docker 25, `--health-start-interval`), so the vLLM container's 30 s interval
    alone would hold `HOST.sh` (which awaits it healthy, as `wait` does) for 30 s."""
    for inputs in _containers(plan):
        if "healthcheck" in inputs:
            inputs["healthcheck"]["interval"] = interval
    return plan


def torch_site_packages() -> Path | None:
    """The site-packages directory of this interpreter's torch (the project's .venv: CPU torch), or None."""
    spec = importlib.util.find_spec("torch")
    return Path(spec.origin).resolve().parent.parent if spec and spec.origin else None


def image_site_packages() -> str:
    """Where the stand-in image's Python (this one's interpreter, without the venv) looks for packages."""
    python = os.path.realpath(sys.executable)
    return subprocess.run(
        [python, "-I", "-c", "import site; print(site.getsitepackages()[0])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def on_cpu(plan: Any) -> Any:
    """The plan of a host whose GPUs are stand-ins, run on the CPU instead: every container gets the project's
    CPU torch bind-mounted read-only at the stand-in image's site-packages (a ROCm image has torch installed
    there; the image itself stays small and is built in seconds), the training program's backend is gloo
    (the plan says nccl: no GPU here), and each GPU check runs gpucheck's CPU mode (gloo, one process, a small
    matrix, no floors: CPU figures are no GPU measurements). The device access, uploads and everything else
    stay what the program declared, except the hostname of a container that has none: `localhost`. The private
    daemon has no bridge network, so Docker writes no address for a container's own hostname into its /etc/hosts
    (measured: getaddrinfo(gethostname()) fails), and torchrun's rendezvous and gloo connect to that name. A
    container in another's network namespace (`container:<id>`) keeps that one's hostname (dockerd refuses both)."""
    site = torch_site_packages()
    assert site is not None, "the project's .venv has torch (requirements-dev.txt)"
    torch_mount = {"hostPath": str(site), "containerPath": image_site_packages(), "readOnly": True}
    for inputs in _containers(plan):
        if not str(inputs.get("networkMode", "")).startswith("container:"):
            inputs.setdefault("hostname", "localhost")
        inputs.setdefault("volumes", []).append(dict(torch_mount))
        inputs["envs"] = ["TRAIN_BACKEND=gloo" if e == "TRAIN_BACKEND=nccl" else e for e in inputs.get("envs", [])]
        command = inputs.get("command", [])
        if command[1:3] == ["-m", "programs.gpucheck"]:
            assert "--expect-gpus" in command, command
            args, kept = iter(command), []
            for arg in args:
                if arg in ("--expect-gpus", "--min-tflops", "--min-busbw"):
                    next(args)  # and its value
                else:
                    kept.append(arg)
            inputs["command"] = [
                *kept,
                "--expect-gpus",
                "0",
                "--backend",
                "gloo",
                "--cpu-processes",
                "1",
                "--matmul-size",
                "64",
            ]
    return plan
