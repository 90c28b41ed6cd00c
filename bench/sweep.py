"""A sweep of 1,000 trials on the tests' control plane (JobSet's and Kueue's controllers, kwok's nodes), each trial
queued in Kueue (a ClusterQueue whose quota runs a few at a time): from its submit until every trial is made (its
ConfigMap and JobSet), beside the same trials' rendered objects (`distrain render` of each) created one by one in
another namespace of the same cluster (its own ClusterQueue), as `kubectl create -f` makes them; and the sweep's
controller's peak memory (its process's resident set, sampled): of a sweep of 10 trials made after the 1,000 beside
that of one made before them, and of the 1,000 beside the first 10.

Run: python bench/sweep.py [trials]
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from contextlib import ExitStack

import psutil
from harness import control_plane, table

SMALL = 10
QUOTA = 8  # CPUs of the ClusterQueue: that many 1-CPU trials run at once, the others wait in its queue


class PeakMemory:
    """The highest resident set of the process whose command line holds `words`, sampled every 0.2 s."""

    def __init__(self, *words: str):
        self.words, self.peak, self.stopping = words, 0, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stopping.wait(0.2):
            for process in psutil.process_iter(["cmdline", "memory_info"]):
                if all(word in (process.info["cmdline"] or []) for word in self.words) and process.info["memory_info"]:
                    self.peak = max(self.peak, process.info["memory_info"].rss)

    def stop(self) -> int:
        self.stopping.set()
        self.thread.join()
        return self.peak


def measure(trials: int = 1000) -> list[tuple]:
    from controlplane.cluster import ADMIN, NAMESPACE, local_queue
    from kubernetes import client, dynamic, watch

    from jupyter_distrain import spec as spec_
    from jupyter_distrain import sweep
    from jupyter_distrain.backends.kubernetes import KubeBackend, render
    from jupyter_distrain.config import Distrain

    def swept(name: str, count: int) -> dict:
        return spec_.validate({"name": name, "command": "python train.py --lr {{ lr }}", "queue": "team",
                               "code": {"git": "https://example.com/models.git", "commit": "0" * 40},
                               "replicas": {"worker": {"resources": {"cpu": 1}}},
                               "sweep": {"parameters": {"lr": {"values": [i / 10_000 for i in range(count)]}},
                                         "parallelism": count}})

    with control_plane("by-hand", engines=True, output_claim=True) as plane, plane.client(ADMIN) as api, \
            ExitStack() as stack:
        for node in range(4):
            plane.add_node(f"cpu-{node}", cpu="64", memory="256Gi")
        plane.wait_nodes_ready(4)
        creating = dynamic.DynamicClient(api).resources
        for namespace in (NAMESPACE, "by-hand"):  # each its own quota
            stack.enter_context(local_queue(api, "team", QUOTA, namespace, cluster_queue=namespace))
        jobsets = client.CustomObjectsApi(api)

        def made(namespace: str, count: int, began: float) -> float:
            """Seconds from `began` until `count` JobSets are in the namespace (watched: a list of them every
            moment would be a load of its own on the API server)."""
            listing = jobsets.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets")
            seen = {o["metadata"]["name"] for o in listing["items"]}
            events = watch.Watch().stream(jobsets.list_namespaced_custom_object, "jobset.x-k8s.io", "v1alpha2",
                                          namespace, "jobsets", resource_version=listing["metadata"]["resourceVersion"])
            while len(seen) < count:
                seen.add(next(events)["object"]["metadata"]["name"])
            return time.monotonic() - began

        settings = Distrain(root=str(plane.dir / "home"), namespace=NAMESPACE, kubernetes_engine="jobset",
                            controller_image="registry.example.com/notebook:1", janitor_schedule="")
        server = KubeBackend(settings, api)
        server.start(logging.getLogger("bench"))
        took, peak, total = {}, {}, 0
        # the last beside the first: a namespace of 1,000 other jobs takes none of its controller's memory
        for name, count in (("small", SMALL), ("large", trials), ("again", SMALL)):
            memory = PeakMemory("jupyter_distrain.controllers.sweep", name)
            began, total = time.monotonic(), total + count
            server.submit(swept(name, count))
            took[name] = made(NAMESPACE, total, began)
            time.sleep(5)  # its controller, all trials made, watching them
            peak[name] = memory.stop()
        server.close()

        by_hand = Distrain(namespace="by-hand", kubernetes_engine="jobset")
        programs = render.programs(by_hand)["metadata"]["name"]
        objects = [o for trial in sweep.trials(swept("hand", trials)) for o in render.render(trial, by_hand, "jobset")
                   if o["metadata"]["name"] != programs]
        for obj in objects[:2]:  # kubectl's discovery, cached as its own is
            creating.get(api_version=obj["apiVersion"], kind=obj["kind"])
        began = time.monotonic()
        for obj in objects:
            creating.get(api_version=obj["apiVersion"], kind=obj["kind"]).create(body=obj, namespace="by-hand")
        hand = made("by-hand", trials, began)
    mib = 1 << 20
    return [(f"a sweep of {trials} trials queued in Kueue, submit until every trial is made: s", took["large"], hand,
             "its trials' rendered objects created by hand", took["large"] / hand,
             f"<= 60 s; {trials / 60:.0f} a second"),
            (f"a sweep's controller's peak memory, {SMALL} trials beside {trials + SMALL} other jobs: MiB",
             peak["again"] / mib, peak["small"] / mib, "the same in a namespace of none", peak["again"] / peak["small"],
             "<= 1.1x: its own trials' objects alone"),
            (f"a sweep's controller's peak memory, {trials} trials: MiB", peak["large"] / mib, peak["small"] / mib,
             f"the same, {SMALL} trials", peak["large"] / peak["small"], "its trials' objects, not TensorFlow's 500 MB")]


if __name__ == "__main__":
    print(table(measure(*map(int, sys.argv[1:]))))
