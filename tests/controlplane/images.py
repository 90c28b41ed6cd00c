"""Container images for the real node, built here without a registry: a root file system made from Debian
packages (debootstrap) or this control plane's own binaries, packed as an OCI image layout by umoci, saved
as a tar that `ctr images import` reads. Each is cached outside the repository, by a hash of its inputs
(this file, its packages, the binaries it holds), so it is built once per machine and input."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
BIN = HERE / "bin"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jupyter-distrain" / "images"
MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3", "git", "ca-certificates")
PYTHON_IMAGE = "distrain.test/python:3.11"  # Python 3.11, pip and git: the jobs' image and the code fetcher's
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # what holds each pod's namespaces


def pause(rootfs: Path) -> None:
    rootfs.mkdir()
    shutil.copy(BIN / "pause", rootfs / "pause")


def python(rootfs: Path) -> None:
    try:
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE,
                        str(rootfs), MIRROR], check=True, capture_output=True)
    finally:  # what it mounted (/proc, /sys), had it stopped half-way
        subprocess.run(["umount", "--recursive", "--lazy", *mounts_under(rootfs)], capture_output=True)
    (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink()  # pip installs a job's requirements
    shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)


def mounts_under(directory: Path) -> list[str]:
    return [point for point in (line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines())
            if point.startswith(f"{directory}/")]


# name: (how its root file system is made, what else it is made of, its entrypoint)
IMAGES: dict[str, tuple[Callable[[Path], None], list[str], list[str]]] = {
    PAUSE_IMAGE: (pause, [str(BIN / "pause")], ["/pause"]),
    PYTHON_IMAGE: (python, [MIRROR, SUITE, *BASE_PACKAGES], []),
}


def image(name: str) -> Path:
    """The tar of image `name` (IMAGES), built unless the cache has it."""
    make, inputs, entrypoint = IMAGES[name]
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for part in inputs:
        digest.update(Path(part).read_bytes() if part.startswith("/") else part.encode())
    stem = name.replace("/", "_").replace(":", "_")
    tar = CACHE / f"{stem}-{digest.hexdigest()[:16]}.tar"
    if tar.exists():
        return tar
    for stale in CACHE.glob(f"{stem}-*.tar"):  # built from other inputs
        stale.unlink()
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        rootfs, layout, tag = Path(work) / "rootfs", Path(work) / "layout", name.rpartition(":")[2]
        make(rootfs)

        def umoci(*args: str) -> None:
            subprocess.run(["umoci", *args], check=True, capture_output=True)

        umoci("init", "--layout", str(layout))
        umoci("new", "--image", f"{layout}:{tag}")
        umoci("insert", "--image", f"{layout}:{tag}", str(rootfs), "/")
        umoci("config", "--image", f"{layout}:{tag}", "--config.workingdir", "/",
              *(f"--config.entrypoint={part}" for part in entrypoint),
              "--config.env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        partial = tar.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(layout), "-cf", str(partial), "."], check=True)
        partial.rename(tar)
    return tar


if __name__ == "__main__":  # build every image: `python images.py`
    for each in IMAGES:
        print(image(each))
