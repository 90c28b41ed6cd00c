"""A submit and the form's check on Kubernetes, in the API server's requests and in time (a real control plane with
JobSet's controller and kwok's nodes, tests/controlplane), each beside the same job made by hand in the same run: its
rendered objects (`distrain render`) created one by one, as `kubectl create -f` does.

- requests per check: the form's check while one types (the server-side dry run, then the outlook), against the
  job's objects (its dry run asks one request of each);
- requests per submit: against the creates of its rendered objects (not counted: the server's controller's copies
  of the jobs' logs, made beside them);
- submit until every replica's pod runs, p50, against its rendered objects created until the same: on kwok's
  nodes, and on a real node (pods run as containers of a local image, tests/controlplane/realnode.py; `measure_real`).

Run: python bench/submit.py [times]
"""

from __future__ import annotations

import logging
import statistics
import sys
import time

from harness import control_plane, table

WORKERS = 3


def counted(api) -> list[str]:
    """The requests `api` sends from now on (method and path)."""
    sent: list[str] = []
    request = api.rest_client.request

    def counting(method, url, *args, **kwargs):
        sent.append(f"{method} {url.split('?')[0]}")
        return request(method, url, *args, **kwargs)

    api.rest_client.request = counting
    return sent


def ours_only(sent: list[str]) -> list[str]:
    """The requests of a check or a submit, not the server's controller's copies of the jobs' logs beside them."""
    return [r for r in sent if not r.endswith("/log")]


def measure(times: int = 5, real_node: bool = False) -> list[tuple]:
    from controlplane.cluster import ADMIN, NAMESPACE
    from controlplane.images import PYTHON_IMAGE
    from kubernetes import client, dynamic

    from jupyter_distrain import spec as spec_
    from jupyter_distrain.backends.kubernetes import KubeBackend, naming, render
    from jupyter_distrain.config import Distrain

    def job(name: str) -> dict:
        if real_node:  # a local image's Python, which waits; no code to fetch (this machine reaches no git host)
            return spec_.validate({"name": name, "framework": "tensorflow", "image": PYTHON_IMAGE,
                                   "command": "python -c 'import time; time.sleep(600)'",
                                   "replicas": {"chief": {}, "worker": {"count": WORKERS}}})
        return spec_.validate({"name": name, "framework": "tensorflow", "command": "python train.py",
                               "code": {"git": "https://example.com/models.git", "commit": "0" * 40},
                               "replicas": {"chief": {}, "worker": {"count": WORKERS}}})

    with control_plane(engines=True, output_claim=True, real_node=real_node) as plane, plane.client(ADMIN) as theirs, \
            plane.client(ADMIN) as ours:
        if not real_node:
            for node in ("cpu-0", "cpu-1"):
                plane.add_node(node)
        plane.wait_nodes_ready(1 if real_node else 2, process="kubelet" if real_node else "kwok")
        core, made = client.CoreV1Api(ours), dynamic.DynamicClient(ours).resources

        def until_running(name: str, began: float) -> float:
            selector = f"{naming.JOB}={name},{naming.ROLE}"
            while len(pods := core.list_namespaced_pod(NAMESPACE, label_selector=selector).items) < WORKERS + 1 \
                    or any(p.status.phase != "Running" for p in pods):
                time.sleep(0.02)
            return (time.perf_counter() - began) * 1000

        settings = Distrain(root=str(plane.dir / "home"), namespace=NAMESPACE, kubernetes_engine="jobset")
        backend = KubeBackend(settings, theirs)
        backend.start(logging.getLogger("bench"))  # as a Jupyter server runs it
        sent = counted(theirs)
        backend.submit(job("warm"))  # the namespace's shared objects made once; on a real node, its image's first pods
        until_running("warm", time.perf_counter())
        programs = render.programs(settings)["metadata"]["name"]
        for obj in render.render(job("kinds"), settings, "jobset"):  # kubectl's discovery, cached as its own is
            made.get(api_version=obj["apiVersion"], kind=obj["kind"])
        checks, submits, took, by_hand = [], [], [], []
        for i in range(times):  # one of each in turn: the machine's load alike for both
            spec = job(f"submitted-{i}")
            sent.clear()
            backend.check(spec)
            backend.outlook(spec)
            checks.append(len(ours_only(sent)))
            sent.clear()
            began = time.perf_counter()
            backend.submit(spec)
            submits.append(len(ours_only(sent)))
            took.append(until_running(spec["name"], began))
            objects = [o for o in render.render(job(f"by-hand-{i}"), settings, "jobset")
                       if o["metadata"]["name"] != programs]
            began = time.perf_counter()
            for obj in objects:
                made.get(api_version=obj["apiVersion"], kind=obj["kind"]).create(body=obj, namespace=NAMESPACE)
            by_hand.append(until_running(f"by-hand-{i}", began))
            if real_node:  # the node's room for the next
                backend.delete(spec["name"])
                core.delete_namespaced_config_map(f"by-hand-{i}", NAMESPACE)
        backend.close()
    check, submit, count = statistics.median(checks), statistics.median(submits), len(objects)
    what = f"the creates of its {count} rendered objects"
    running = (f"submit until all {WORKERS + 1} pods run{' (a real node)' if real_node else ''}: p50 ms",
               statistics.median(took), statistics.median(by_hand), "its rendered objects created until the same",
               statistics.median(took) / statistics.median(by_hand), "<= 2x")
    if real_node:
        return [running]
    return [(f"requests per check (dry run + outlook), {WORKERS + 1} replicas", check, count, what, check / count,
             "<= 1x: a dry run per object"),
            (f"requests per submit, {WORKERS + 1} replicas", submit, count, what, submit / count,
             f"<= {(2 * count + 3) / count:.1f}x: a dry run and a create per object, what the cluster serves, "
             "its event"),
            running]


def measure_real(times: int = 3) -> list[tuple]:
    return measure(times, real_node=True)


if __name__ == "__main__":
    print(table(measure(*map(int, sys.argv[1:])) + measure_real()))
