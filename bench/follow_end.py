"""A Kubernetes job's end as its follower sees it, on a real node (tests/controlplane/realnode.py: pods are
containers), for each engine: a chief that prints the time it exits, as its last instruction, and a worker that waits
until the engine stops it as the job succeeds. From the chief's exit until the job's followed log ends (what
`distrain submit --follow` and `distrain logs -f` wait for: a process with no watch of its own, as a terminal's CLI),
beside a fresh read of the job (`distrain get`, every 50 ms) in the same run, which sees the engine's end.
Run: python bench/follow_end.py [times]
"""

from __future__ import annotations

import re
import statistics
import sys
import threading
import time

from harness import control_plane, table

PROGRAM = """import os, signal, sys, time
if os.environ["DISTRAIN_ROLE"] == "chief":
    time.sleep(3)
    print(f"exits {time.time()!r}", flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(600)
"""
EXITS = re.compile(r"exits (\d+\.\d+)")


def measure(times: int = 3) -> list[tuple]:
    from controlplane.cluster import ADMIN, NAMESPACE
    from controlplane.images import PYTHON_IMAGE

    from jupyter_distrain import spec as spec_
    from jupyter_distrain.backends.kubernetes import KubeBackend
    from jupyter_distrain.config import Distrain
    from jupyter_distrain.policy import FINISHED

    rows = []
    with control_plane(engines=True, output_claim=True, real_node=True) as plane, plane.client(ADMIN) as api:
        plane.wait_nodes_ready(1, process="kubelet")
        for engine in ("jobset", "kubeflow"):
            settings = Distrain(root=str(plane.dir / engine), namespace=NAMESPACE, kubernetes_engine=engine)
            followed, read = [], []
            for i in range(times + 1):  # the first warms the node: the image's first containers
                name = f"{engine}-{i}"
                follower, reader = KubeBackend(settings, api), KubeBackend(settings, api)
                follower.submit(spec_.validate({
                    "name": name, "framework": "tensorflow", "image": PYTHON_IMAGE,
                    "command": f"python -c '{PROGRAM}'", "replicas": {"chief": {}, "worker": {}}}))
                seen: list[float] = []

                def fresh_reads() -> None:
                    while reader.get(name, events=0)["phase"] not in FINISHED:
                        time.sleep(0.05)
                    seen.append(time.time())

                thread = threading.Thread(target=fresh_reads)
                thread.start()
                lines = [line.text for line in follower.logs(name, follow=True)]
                ended = time.time()
                thread.join()
                [exited] = [float(t) for line in lines for t in EXITS.findall(line)]
                assert reader.get(name, events=0)["phase"] == "Succeeded"
                if i:
                    followed.append((ended - exited) * 1000)
                    read.append((seen[0] - exited) * 1000)
                follower.delete(name)
            rows.append((f"{engine}: the chief's exit to its followed log's end (a real node), p50 ms",
                         statistics.median(followed), statistics.median(read), "a fresh read's end, every 50 ms",
                         statistics.median(followed) / statistics.median(read), "within 1 s of the read's"))
    return rows


if __name__ == "__main__":
    print(table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3)))
