"""Why a job waits, on a busy cluster: `waiting()` of a Pending job (its GPUs on no node) and the form's check's
`outlook()` with 300 other pods running on the nodes (a real control plane with kwok's nodes, tests/controlplane),
each beside the API server's list of those pods, as raw bytes, in the same run: what no answer can do without.
Run: python bench/waiting.py [times]
"""

from __future__ import annotations

import statistics
import sys
import time

from harness import control_plane, table

OTHERS = 300  # pods of other workloads, spread over the nodes


def median_ms(call, times: int) -> float:
    took = []
    for _ in range(times):
        began = time.perf_counter()
        call()
        took.append((time.perf_counter() - began) * 1000)
    return statistics.median(took)


def measure(times: int = 20) -> list[tuple]:
    from controlplane.cluster import ADMIN, NAMESPACE
    from kubernetes import client

    from jupyter_distrain import spec as spec_
    from jupyter_distrain.backends.kubernetes import KubeBackend
    from jupyter_distrain.config import Distrain

    with control_plane("others", output_claim=True) as plane:
        nodes = ["cpu-0", "gpu-0", "gpu-1"]
        for node in nodes:
            plane.add_node(node, gpus=0 if node == "cpu-0" else 2)
        plane.wait_nodes_ready(len(nodes))
        with plane.client(ADMIN) as api:
            core = client.CoreV1Api(api)
            for i in range(OTHERS):
                core.create_namespaced_pod("others", {"metadata": {"name": f"other-{i}"}, "spec": {
                    "nodeName": nodes[i % len(nodes)], "containers": [{
                        "name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1m"}}}]}})
            backend = KubeBackend(Distrain(root=str(plane.dir / "home"), namespace=NAMESPACE,
                                           kubernetes_engine="pods"), api)
            spec = spec_.validate({"name": "big-0", "command": "python train.py",
                                   "replicas": {"worker": {"resources": {"gpus": 2}}}})
            for name in ("big-0", "big-1", "waits"):  # the first two hold every GPU
                backend.submit({**spec, "name": name})
            deadline = time.monotonic() + 60
            while backend.get("waits")["replicas"][0]["reason"] != "Unschedulable":
                assert time.monotonic() < deadline, backend.get("waits")
                time.sleep(0.2)
            assert backend.waiting("waits")["replicas"], backend.waiting("waits")
            live = "status.phase!=Succeeded,status.phase!=Failed"
            listing = median_ms(lambda: core.list_pod_for_all_namespaces(
                field_selector=live, _preload_content=False).read(), times)
            waiting = median_ms(lambda: backend.waiting("waits"), times)
            outlook = median_ms(lambda: backend.outlook(spec), times)
    baseline = f"the API server's list of the {OTHERS + 2} live pods (bytes)"
    return [(f"`waiting()` of a Pending job, {OTHERS + 2} pods: p50 ms", waiting, listing, baseline,
             waiting / listing, "<= 3x"),
            (f"`outlook()` (the form's check), {OTHERS + 2} pods: p50 ms", outlook, listing, baseline,
             outlook / listing, "<= 3x")]


if __name__ == "__main__":
    print(table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 20)))
