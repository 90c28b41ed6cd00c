"""Container images for the real node, built here without a registry: a root file system made from Debian
packages (debootstrap, or apt-get run in the image), PyPI wheels or this control plane's own binaries, packed as
an OCI image layout by umoci, saved as a tar that `ctr images import` reads. An image made on another (its base)
adds one layer to it, what its recipe changed in the base's root file system (or, where the recipe only adds
files, those files, the base left packed), so the two share their common layers in the runtime's store. Each is
cached outside the repository, by a hash of its inputs (the code that makes it, its packages, the files it holds,
its base), so it is built once per machine and input."""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BIN = HERE / "bin"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jupyter-distrain" / "images"
MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3", "git", "ca-certificates", "libgomp1")  # Paddle: OpenMP
PYTHON_IMAGE = "distrain.test/python:3.11"  # Python 3.11, pip and git: the jobs' image and the code fetcher's
TENSORFLOW = f"tensorflow=={importlib.metadata.version('tensorflow')}"  # the one the local tests train with
TENSORFLOW_IMAGE = f"distrain.test/tensorflow:{TENSORFLOW.partition('==')[2]}"  # the Python image and TensorFlow
PYTORCH_IMAGE = "distrain.test/pytorch:debian"  # the Python image and Debian's PyTorch (1.13, CPU; PyPI's needs CUDA)
NSLOOKUP_IMAGE = "distrain.test/nslookup:debian"  # the Python image and nslookup: PyTorchJob workers wait with it
PADDLE_REQUIREMENTS = str(REPO / "examples" / "paddle-ps" / "requirements.txt")  # its Paddle, a protobuf it takes
PADDLE_IMAGE = "distrain.test/paddle:ps"  # the Python image and what the paddle-ps example requires
# what the package requires, and what a user's server on JupyterHub runs it in (the versions of this environment)
PRODUCT_REQUIREMENTS = [*tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"],
                        *(f"{name}=={importlib.metadata.version(name)}" for name in ("jupyterlab", "jupyterhub"))]
PRODUCT_BASE_IMAGE = "distrain.test/jupyter-distrain:requirements"  # the Python image and PRODUCT_REQUIREMENTS
PRODUCT_IMAGE = "distrain.test/jupyter-distrain:dev"  # and on that, this checkout's package: its own pods', users' servers
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # what holds each pod's namespaces
STALE_AFTER = 7 * 24 * 3600  # seconds unused after which a cached image built from other inputs goes
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # where the image's Python finds what pip adds


def pause(rootfs: Path) -> None:
    shutil.copy(BIN / "pause", rootfs / "pause")


def python(rootfs: Path) -> None:
    try:
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE,
                        str(rootfs), MIRROR], check=True, capture_output=True)
    finally:  # what it mounted (/proc, /sys), had it stopped half-way
        subprocess.run(["umount", "--recursive", "--lazy", *mounts_under(rootfs)], capture_output=True)
    (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink()  # pip installs a job's requirements
    shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)


def wheels(*requirements: str) -> Callable[[Path], None]:
    """Installs what pip installs for `requirements` (wheels only) in the image's site-packages, their
    commands (tensorboard, say) in /usr/local/bin, run by the image's Python, and their data where Jupyter looks
    (/usr/local/share/jupyter: JupyterLab's pages, the extension; /usr/local/etc/jupyter: what servers load)."""
    def make(rootfs: Path) -> None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--only-binary=:all:", "--target", str(rootfs / SITE_PACKAGES), *requirements],
                       check=True, capture_output=True)
        for data in ("share", "etc"):
            if (rootfs / SITE_PACKAGES / data).is_dir():
                shutil.copytree(rootfs / SITE_PACKAGES / data, rootfs / "usr/local" / data, dirs_exist_ok=True)
                shutil.rmtree(rootfs / SITE_PACKAGES / data)
        commands = rootfs / SITE_PACKAGES / "bin"
        if commands.is_dir():
            (rootfs / "usr/local/bin").mkdir(parents=True, exist_ok=True)
            for command in commands.iterdir():
                first, _, rest = command.read_bytes().partition(b"\n")
                (rootfs / "usr/local/bin" / command.name).write_bytes(
                    (b"#!/usr/bin/python3" if first.startswith(b"#!") and b"python" in first else first) + b"\n" + rest)
                (rootfs / "usr/local/bin" / command.name).chmod(0o755)
            shutil.rmtree(commands)
    return make


def debian(*packages: str) -> Callable[[Path], None]:
    """Installs Debian's `packages` and what they need that the image lacks: its own apt-get, run in it."""
    def make(rootfs: Path) -> None:
        apt = ["chroot", str(rootfs), "apt-get", "--quiet", "--yes", "--no-install-recommends"]
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        resolver = rootfs / "etc/resolv.conf"  # the mirror's name, resolved as here (the kubelet gives pods theirs)
        shutil.copy("/etc/resolv.conf", resolver)
        try:
            for command in (["update"], ["install", *packages], ["clean"]):
                subprocess.run([*apt, *command], check=True, capture_output=True, env=environment)
        finally:
            resolver.unlink()
        for index in (rootfs / "var/lib/apt/lists").glob("*_*"):  # the package lists (`apt-get update` fetches them)
            index.unlink()
    return make


def product(rootfs: Path) -> None:
    """This checkout's package (a wheel built from it) in the image's site-packages, where its base has what it
    requires: a change to the package makes a layer of its own files alone."""
    with tempfile.TemporaryDirectory() as built:
        subprocess.run([Path(sys.executable).with_name("uv"), "build", "--quiet", "--wheel", "--out-dir", built, REPO],
                       check=True, capture_output=True)
        wheels("--no-deps", *map(str, Path(built).glob("*.whl")))(rootfs)


def sources() -> list[str]:
    """What the package is built from."""
    package = [path for path in (REPO / "jupyter_distrain").rglob("*")
               if path.is_file() and "__pycache__" not in path.parts]
    return [str(path) for path in sorted([*package, REPO / "pyproject.toml", REPO / "package.json"])]


def mounts_under(directory: Path) -> list[str]:
    return [point for point in (line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines())
            if point.startswith(f"{directory}/")]


@dataclass
class Image:
    make: Callable[[Path], None]  # changes the root file system: its base's, unpacked, or an empty one
    inputs: list[str]  # what else it is made of: files (absolute paths) and words
    entrypoint: list[str] = field(default_factory=list)
    base: str | None = None
    adds: bool = False  # `make` only adds files: it fills an empty root, inserted as the layer, its base left packed


IMAGES: dict[str, Image] = {
    PAUSE_IMAGE: Image(pause, [str(BIN / "pause")], ["/pause"]),
    PYTHON_IMAGE: Image(python, [MIRROR, SUITE, *BASE_PACKAGES]),
    TENSORFLOW_IMAGE: Image(wheels(TENSORFLOW), [TENSORFLOW], base=PYTHON_IMAGE, adds=True),
    PYTORCH_IMAGE: Image(debian("python3-torch"), ["python3-torch"], base=PYTHON_IMAGE),
    NSLOOKUP_IMAGE: Image(debian("bind9-dnsutils"), ["bind9-dnsutils"], base=PYTHON_IMAGE),
    PADDLE_IMAGE: Image(wheels("--requirement", PADDLE_REQUIREMENTS), [PADDLE_REQUIREMENTS], base=PYTHON_IMAGE,
                        adds=True),
    PRODUCT_BASE_IMAGE: Image(wheels(*PRODUCT_REQUIREMENTS), PRODUCT_REQUIREMENTS, base=PYTHON_IMAGE, adds=True),
    PRODUCT_IMAGE: Image(product, sources(), base=PRODUCT_BASE_IMAGE, adds=True),
}


def image(name: str) -> Path:
    """The tar of image `name` (IMAGES), built unless the cache has it."""
    made = IMAGES[name]
    base = image(made.base) if made.base else None
    digest = hashlib.sha256("".join(map(inspect.getsource, (image, made.make))).encode())  # how it is made
    digest.update(repr((made.entrypoint, made.base, made.adds)).encode())
    for part in made.inputs:
        digest.update(Path(part).read_bytes() if part.startswith("/") else part.encode())
    if base:
        digest.update(base.name.encode())  # its own inputs' hash
    stem = name.replace("/", "_").replace(":", "_")
    tar = CACHE / f"{stem}-{digest.hexdigest()[:16]}.tar"
    if tar.exists():
        tar.touch()  # used
        return tar
    for stale in CACHE.glob(f"{stem}-*.tar"):  # built from other inputs, unused for a week (other checkouts')
        if time.time() - stale.stat().st_mtime > STALE_AFTER:
            stale.unlink()
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        layout, bundle, tag = Path(work) / "layout", Path(work) / "bundle", name.rpartition(":")[2]

        def umoci(*args: str) -> None:
            subprocess.run(["umoci", *args], check=True, capture_output=True)

        if base:  # a copy of the base's layout, its one tag renamed to this image's
            with tarfile.open(base) as archive:
                archive.extractall(layout, filter="tar")
            base_tag = made.base.rpartition(":")[2]
            if base_tag != tag:
                umoci("tag", "--image", f"{layout}:{base_tag}", tag)
                umoci("rm", "--image", f"{layout}:{base_tag}")
        else:
            umoci("init", "--layout", str(layout))
            umoci("new", "--image", f"{layout}:{tag}")
        if made.adds:
            added = Path(work) / "added"
            added.mkdir(mode=0o755)  # the image's root directory, as the layer has it
            made.make(added)
            umoci("insert", "--image", f"{layout}:{tag}", str(added), "/")  # a layer of what it holds
        else:
            umoci("unpack", "--image", f"{layout}:{tag}", str(bundle))
            made.make(bundle / "rootfs")
            umoci("repack", "--image", f"{layout}:{tag}", str(bundle))  # a layer of what changed
        umoci("config", "--image", f"{layout}:{tag}", "--config.workingdir", "/",
              *(f"--config.entrypoint={part}" for part in made.entrypoint),
              "--config.env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        partial = tar.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(layout), "-cf", str(partial), "."], check=True)
        partial.rename(tar)
    return tar


if __name__ == "__main__":  # build every image: `python images.py`
    for each in IMAGES:
        print(image(each))
