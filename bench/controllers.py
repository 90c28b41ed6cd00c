"""What the product's controllers ask of the API server with 200 jobs running, idle and busy, beside what the
cluster's own components (kube-controller-manager, the scheduler, kwok's nodes, JobSet's controller...) ask for the
same jobs in the same minutes. A real control plane (tests/controlplane) whose audit log holds every request: the
product's are those its user agent names (apiclient.USER_AGENT), by who made them: the Jupyter server's controller
(the admin here), a sweep's controller (its pod's service account, its process run by the control plane) and runs'
monitors (in this process, as their service account). The bench's own requests (making jobs, ending their pods) are
neither.

- idle: nothing changes for IDLE seconds;
- busy: a job's pods end every second for BUSY seconds (the server's controller records each end, the monitors of
  the ending jobs see theirs, the sweep launches a trial where one ended);
- the janitor's run (controllers/janitor.py, every 10 minutes by default) with those jobs running, none past its time
  to be kept: its requests against one list of the jobs' ConfigMaps.

kwok serves the followed logs of about 110 pods at once here (each takes an inotify instance of its user, of
fs.inotify.max_user_instances: 128 by default); the other pods' follows end at once, as when a kubelet cannot serve
them, and are asked again later and later (FOLLOW_AGAIN): their requests are a row of their own.

Run: python bench/controllers.py [jobs]
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from harness import control_plane, table
from submit import counted

IDLE = BUSY = 30
MONITORED = 20  # jobs whose monitor runs in this process (each a process of its own in a cluster)


def requests_by(audit_log: Path, began: float, ended: float) -> Counter:
    """Requests received between `began` and `ended` (each once, whatever stages the log has of it), by who made
    them: the product's parts, "cluster" for the cluster's own components, "bench" for this benchmark. The
    product's most frequent requests go to stderr."""
    from controlplane.cluster import received

    seen: set[str] = set()
    counts: Counter = Counter()
    asked: Counter = Counter()
    with audit_log.open() as log:
        for event in map(json.loads, log):
            if event["auditID"] in seen or not began <= received(event) < ended:
                continue
            seen.add(event["auditID"])
            user, agent = event["user"]["username"], event.get("userAgent", "")
            if agent.startswith("jupyter-distrain"):
                part = "monitor" if user.endswith(":distrain-monitor") else \
                    "sweeper" if user.endswith("-sweeper") else \
                    "server's follows" if event.get("objectRef", {}).get("subresource") == "log" else "server"
                counts[part] += 1
                asked[part, event["verb"], event.get("objectRef", {}).get("resource", event["requestURI"]),
                      event.get("objectRef", {}).get("subresource", "")] += 1
            else:
                counts["bench" if agent.startswith("OpenAPI-Generator") else "cluster"] += 1
    for request, count in asked.most_common(8):
        print(count, *request, file=sys.stderr)
    return counts


def measure(jobs: int = 200) -> list[tuple]:
    from controlplane.cluster import ADMIN, EXIT_CODE, NAMESPACE
    from kubernetes import client

    from jupyter_distrain import spec as spec_
    from jupyter_distrain.backends.kubernetes import KubeBackend, naming
    from jupyter_distrain.config import Distrain
    from jupyter_distrain.controllers import janitor, kube_backend, monitor

    def job(name: str, **more) -> dict:
        return spec_.validate({"name": name, "framework": "tensorflow", "command": "python train.py",
                               "code": {"git": "https://example.com/models.git", "commit": "0" * 40},
                               "replicas": {"chief": {}, "worker": {}}, **more})

    with control_plane(engines=True, output_claim=True, audit_everyone=True) as plane, \
            plane.client(ADMIN) as theirs, plane.client(ADMIN) as ours:
        core = client.CoreV1Api(ours)
        for node in range(8):
            plane.add_node(f"cpu-{node}", cpu="64", memory="256Gi")
        plane.wait_nodes_ready(8)
        settings = Distrain(root=str(plane.dir / "home"), namespace=NAMESPACE, kubernetes_engine="jobset",
                            controller_image="registry.example.com/notebook:1", janitor_schedule="")
        server = KubeBackend(settings, theirs)
        server.start(logging.getLogger("bench"))
        trials = jobs // 10
        for i in range(jobs - trials):
            server.submit(job(f"job-{i:03d}"))
        server.submit(job("sweep", sweep={"parameters": {"lr": {"values": [i / 1000 for i in range(2 * trials)]}},
                                          "parallelism": trials}))

        logging_pods: set[str] = set()

        def running() -> int:  # each running replica logs a line, as a training's would
            pods = [p.metadata.name for p in core.list_namespaced_pod(NAMESPACE, label_selector=naming.ROLE).items
                    if p.status.phase == "Running"]
            for pod in set(pods) - logging_pods:
                plane.write_log(pod, "epoch 1/100")
                logging_pods.add(pod)
            return len(pods)

        while running() < 2 * jobs:
            time.sleep(1)
        for i in range(MONITORED):
            watching = Distrain(root=str(plane.dir / f"monitor-{i}"), namespace=NAMESPACE, janitor_schedule="",
                                controller_image=settings.controller_image)
            (plane.dir / f"monitor-{i}" / "logs").mkdir(parents=True)
            threading.Thread(target=monitor.watch, daemon=True, args=(
                kube_backend(watching, plane.acting_as(naming.MONITOR)), f"job-{i:03d}", 1,
                plane.dir / f"monitor-{i}" / "logs", plane.dir)).start()
        time.sleep(40)  # the monitors' watches begin, the server follows each pod's log (FOLLOW_AGAIN's longest wait)

        began = time.time()
        time.sleep(IDLE)
        idle = requests_by(plane.audit_log, began, time.time())

        began = time.time()
        ending = [f"job-{i:03d}" for i in range(BUSY)] + [f"sweep-{i}" for i in range(1, 6)]
        for name in ending:
            for pod in core.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}={name},{naming.ROLE}").items:
                core.patch_namespaced_pod(pod.metadata.name, NAMESPACE, {"metadata": {"annotations": {EXIT_CODE: "0"}}})
            time.sleep(BUSY / len(ending))
        busy = requests_by(plane.audit_log, began, time.time())
        with plane.client(ADMIN) as api:  # the janitor's run, none of the jobs past its time
            sent = counted(api)
            assert not list(janitor.delete_expired(NAMESPACE, api))
        server.close()
    parts = [("server", "the Jupyter server's controller, but for following logs", 1, "next to none idle"),
             ("server's follows", "the server's follows of pods' logs asked again", 1,
              "none idle where each pod's log is served"),
             ("sweeper", f"a sweep's controller ({trials} trials running)", 1, "next to none idle"),
             ("monitor", "a run's monitor", MONITORED, "none idle")]
    rows = []
    for when, counts, seconds in (("idle", idle, IDLE), ("busy", busy, BUSY)):
        cluster = counts["cluster"] * 60 / seconds
        for part, what, among, goal in parts:
            per_minute = counts[part] * 60 / seconds / among
            rows.append((f"{when}, {jobs} jobs running: {what}, requests/min", per_minute, cluster,
                         "the cluster's own components", per_minute / cluster, goal))
    return rows + [(f"the janitor's run, {jobs} jobs running: requests", len(sent), 1,
                    "the jobs' ConfigMaps listed", len(sent), "a few: each kind listed once")]


if __name__ == "__main__":
    print(table(measure(*map(int, sys.argv[1:]))))
