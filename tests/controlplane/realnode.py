"""A real node for the test control plane (ControlPlane(real_node=True)): containerd, runc and the CNI plugins
(Debian packages), a kubelet and CoreDNS (built by build.sh from pinned Go modules) and images built here
without a registry (images.py), imported once into a store each run's containerd starts from (image_store). The
whole cluster, control plane included, runs in the network namespace NETNS, which this module makes and which has
no interface to the outside: a bridge for the pods, no masquerading, CoreDNS answering cluster names only; the
host's forwarding is left as it is. Tests reach the API server through a relay from this machine's loopback over
a Unix socket (socat), at the same port.

Needs root (namespaces, mounts, cgroups). `clean()` removes what a run made, and runs first too, for what a
killed earlier run left: the node's pods' processes, containerd's shims, mounts under RUN, the cgroups under
CGROUP, the namespace."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import suppress
from pathlib import Path

import psutil
import yaml

from . import images

NETNS = "distrain-node"
IN_NETNS = ["nsenter", f"--net=/run/netns/{NETNS}"]
BRIDGE, NODE_IP, POD_SUBNET = "cni0", "10.244.0.1", "10.244.0.0/24"
SERVICE_SUBNET, KUBERNETES_SERVICE = "10.0.0.0/24", "10.0.0.1"  # Services' addresses; the API server's is the first
NODE = "real-node"
RUN = Path("/var/lib/distrain-node")  # containerd's root and state, the kubelet's, pods' logs: on disk
CGROUP = "distrain-node"  # in every cgroup v1 hierarchy: the kubelet's cgroupRoot
CGROUPS = Path("/sys/fs/cgroup")
SOCKET = RUN / "containerd" / "containerd.sock"
ROOT = RUN / "containerd" / "root"  # its content store, snapshots and metadata: a copy of the store (image_store)
GONE = (OSError, psutil.Error)  # what a process, file or cgroup that went meanwhile raises


def in_netns(*command: str, **run) -> subprocess.CompletedProcess:
    return subprocess.run([*IN_NETNS, *command], **{"check": True, "capture_output": True, **run})


def mounts(*under: Path) -> list[str]:
    """The mounts below any of `under` (default: RUN)."""
    points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    return [point for point in points if any(point.startswith(f"{directory}/") for directory in under or [RUN])]


def pod_mounts() -> list[str]:
    """The pods' mounts: their volumes (a token's, a subPath's), their sandboxes' and containers' file systems."""
    return mounts(RUN / "kubelet" / "pods", RUN / "containerd" / "state")


def clean() -> None:
    """Remove every trace of a run: processes of the node (the pods', the shims', containerd's, the kubelet's,
    in the namespace or using RUN), mounts under RUN (deepest first), the cgroups, RUN, the namespace."""
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(RUN) in cmdline or _in_our_netns(process.info["pid"]):
            with suppress(*GONE):
                process.send_signal(signal.SIGKILL)
    psutil.wait_procs([p for p in psutil.process_iter() if str(RUN) in " ".join(_cmdline(p))], timeout=10)
    for mount in sorted(mounts(), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)
    for hierarchy in CGROUPS.iterdir():
        root = hierarchy / CGROUP
        if root.is_dir():
            for directory in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True) + [root]:
                if directory.is_dir():
                    _kill_cgroup(directory)
                    with suppress(*GONE):
                        directory.rmdir()
    shutil.rmtree(RUN, ignore_errors=True)
    if Path(f"/run/netns/{NETNS}").exists():
        subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True)
    for trace in outside_run():
        trace.unlink()
    for directory in OUTSIDE_RUN:  # each made by the node if it was missing; gone if it holds nothing else
        with suppress(*GONE):
            directory.rmdir()


# where the kubelet and containerd write outside RUN whatever they are told (deepest first): the kubelet's links
# to containers' logs and its device plugins' socket, the CNI results cache, the shims' sockets
OUTSIDE_RUN = [Path(p) for p in ("/var/log/containers", "/var/lib/kubelet/device-plugins", "/var/lib/kubelet",
                                 "/var/lib/cni/results", "/var/lib/cni", "/run/containerd/s", "/run/containerd")]


def outside_run() -> list[Path]:
    """The files a run left outside RUN."""
    links = [p for p in OUTSIDE_RUN[0].glob("*") if p.is_symlink() and os.readlink(p).startswith(f"{RUN}/")]
    return [*links, *OUTSIDE_RUN[1].glob("kubelet.sock"), *OUTSIDE_RUN[3].glob("pods-*")]


def traces() -> list[str]:
    """What of a run is left on this machine: nothing after clean()."""
    cgroups = [str(h / CGROUP) for h in CGROUPS.iterdir() if (h / CGROUP).exists()]
    processes = [str(p.pid) for p in psutil.process_iter() if str(RUN) in " ".join(_cmdline(p)) or _in_our_netns(p.pid)]
    netns = [NETNS] if Path(f"/run/netns/{NETNS}").exists() else []
    return [*map(str, outside_run()), *cgroups, *processes, *netns, *([str(RUN)] if RUN.exists() else []),
            *written_in_stores()]


def _cmdline(process: psutil.Process) -> list[str]:
    with suppress(*GONE):
        return process.cmdline()
    return []


def _in_our_netns(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{NETNS}").st_ino and pid != os.getpid()
    except OSError:
        return False


def _kill_cgroup(directory: Path) -> None:
    procs = directory / "cgroup.procs"
    if procs.exists():
        for pid in procs.read_text().split():
            with suppress(*GONE):
                os.kill(int(pid), signal.SIGKILL)


def make_namespace() -> None:
    """The namespace, its loopback, and the pods' bridge with the node's address."""
    subprocess.run(["ip", "netns", "add", NETNS], check=True, capture_output=True)
    in_netns("ip", "link", "set", "lo", "up")
    in_netns("ip", "link", "add", BRIDGE, "type", "bridge")
    in_netns("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
    in_netns("ip", "link", "set", BRIDGE, "up")


def route_kubernetes_service(port: int) -> None:
    """Pods reach the API server (listening at the node's address, on `port`) at the `kubernetes` Service's
    address, as kube-proxy would have them: one DNAT rule, in the namespace's own table."""
    in_netns("iptables", "-t", "nat", "-A", "PREROUTING", "-d", f"{KUBERNETES_SERVICE}/32", "-p", "tcp",
             "--dport", "443", "-j", "DNAT", "--to-destination", f"{NODE_IP}:{port}")


def make_cgroups() -> None:
    """CGROUP in every v1 hierarchy (cpuset's with its parent's CPUs and memory nodes)."""
    for hierarchy in CGROUPS.iterdir():
        if hierarchy.is_dir() and not hierarchy.is_symlink() and hierarchy.name != "unified":
            (hierarchy / CGROUP).mkdir(exist_ok=True)
    cpuset = CGROUPS / "cpuset"
    for name in ("cpuset.cpus", "cpuset.mems"):
        (cpuset / CGROUP / name).write_text((cpuset / name).read_text())


UNUSED_SNAPSHOTTERS = [f"io.containerd.snapshotter.v1.{name}" for name in ("btrfs", "zfs", "devmapper", "aufs")]


def containerd_config(root: Path = ROOT, state: Path = RUN / "containerd" / "state", socket: Path = SOCKET,
                      disabled: tuple[str, ...] = ()) -> str:
    return f"""
version = 2
root = "{root}"
state = "{state}"
disabled_plugins = {json.dumps([*UNUSED_SNAPSHOTTERS, *disabled])}
[grpc]
  address = "{socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE_IMAGE}"
  restrict_oom_score_adj = true  # root here lacks CAP_SYS_RESOURCE
  disable_apparmor = true
  netns_mounts_under_state_dir = true  # pods' network namespaces under RUN, which every run cleans
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{RUN}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{RUN}/cni"
"""


CNI = {"cniVersion": "1.0.0", "name": "pods", "plugins": [{
    "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_IP}]],
             "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(RUN / "ipam")}}]}


def kubelet_config() -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{CGROUP}",
        "containerRuntimeEndpoint": f"unix://{SOCKET}", "address": NODE_IP, "readOnlyPort": 0,
        "clusterDNS": [NODE_IP], "clusterDomain": "cluster.local", "resolvConf": "",
        "failSwapOn": False, "enforceNodeAllocatable": [], "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99, "podLogsDir": str(RUN / "pod-logs"),
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},  # reachable from inside the namespace only
        "serializeImagePulls": False, "syncFrequency": "5s", "fileCheckFrequency": "5s",
    }


COREFILE = """cluster.local:53 in-addr.arpa:53 {{
    errors
    kubernetes cluster.local in-addr.arpa {{
        kubeconfig {kubeconfig} test
        pods insecure
    }}
    cache 5
}}
"""


def prepare() -> None:
    """A clean start: what an earlier run left removed; the namespace, the cgroups and the run directory made."""
    clean()
    make_namespace()
    make_cgroups()
    for directory in ("containerd", "cni", "kubelet", "pod-logs"):
        (RUN / directory).mkdir(parents=True)
    furnish(image_store())
    (RUN / "containerd.toml").write_text(containerd_config())
    (RUN / "cni" / "10-pods.conflist").write_text(json.dumps(CNI))
    (RUN / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config()))


def ctr(*args: str, socket: Path = SOCKET) -> subprocess.CompletedProcess:
    return subprocess.run(["ctr", "--address", str(socket), "--namespace", "k8s.io", *args], check=True,
                          capture_output=True, text=True)


# what containerd writes in place in its root (bolt databases): copied, where the rest of the store is linked
MADE = "made"  # the last file of an image store, the rest being older
WRITTEN_IN_PLACE = ("io.containerd.metadata.v1.bolt/meta.db", "io.containerd.snapshotter.v1.overlayfs/metadata.db")


def image_store() -> Path:
    """A containerd root holding every test image (images.IMAGES), imported and unpacked, as containerd left it
    when stopped: made once per machine, containerd and set of images (their tars' names carry their inputs'
    hashes) in the images' cache, from which each run's root is furnished in seconds (`furnish`), where importing
    the images took minutes."""
    tars = {name: images.image(name) for name in images.IMAGES}
    version = subprocess.run(["containerd", "--version"], check=True, capture_output=True, text=True).stdout
    made_from = [version, inspect.getsource(image_store), inspect.getsource(containerd_config),
                 *(tar.name for tar in tars.values())]
    store = images.CACHE / f"containerd-{hashlib.sha256(repr(made_from).encode()).hexdigest()[:16]}"
    if store.is_dir():
        store.touch()  # used
        return store
    for stale in images.CACHE.glob("containerd-*"):  # other images' store, unused for a week (other checkouts')
        if time.time() - stale.stat().st_mtime > images.STALE_AFTER:
            shutil.rmtree(stale)
    with tempfile.TemporaryDirectory(dir=images.CACHE) as work:
        root, socket, config = Path(work) / "root", Path(work) / "state" / "containerd.sock", Path(work) / "config"
        # the CRI plugin off: nothing but the store's own plugins run, on this machine's network
        config.write_text(containerd_config(root, socket.parent, socket, disabled=("io.containerd.grpc.v1.cri",)))
        with open(Path(work) / "log", "wb") as log:
            containerd = subprocess.Popen(["containerd", "--config", str(config)], stdout=log, stderr=log,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not socket.exists():
                if containerd.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"containerd did not start:\n{(Path(work) / 'log').read_text()[-3000:]}")
                time.sleep(0.2)
            for name, tar in tars.items():
                ctr("images", "import", "--base-name", name.rpartition(":")[0], str(tar), socket=socket)
        finally:
            containerd.terminate()
            containerd.wait(60)
        (root / MADE).touch()
        root.rename(store)
    return store


def written_in_stores() -> list[str]:
    """The files of an image store written since it was made: none, unless a run's containerd wrote in place in a
    file `furnish` linked."""
    return [path for made in images.CACHE.glob(f"containerd-*/{MADE}") for path in subprocess.run(
        ["find", str(made.parent), "-type", "f", "-newer", str(made)], check=True, capture_output=True,
        text=True).stdout.splitlines()]


def furnish(store: Path) -> None:
    """ROOT made from `store`: its files linked (copied where RUN is on another file system), but the databases
    containerd writes in place, copied. containerd only adds files to the rest and removes them: the store stays
    as it was."""
    same = store.stat().st_dev == RUN.stat().st_dev
    subprocess.run(["cp", "-a", "--link" if same else "--reflink=auto", str(store), str(ROOT)], check=True)
    for written in WRITTEN_IN_PLACE:
        (ROOT / written).unlink()
        shutil.copy2(store / written, ROOT / written)
