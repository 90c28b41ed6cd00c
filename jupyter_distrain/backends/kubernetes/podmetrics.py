"""What a job's replicas use now, as the cluster's metrics API (metrics.k8s.io, served by a metrics-server) last
sampled their pods: the CPU and memory `metrics` shows of each running replica. Where the cluster serves no such
API, or has not sampled a pod yet, the replica's row says so (what each used is known once it ended: the log tee's
account, in its usage)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from ...policy import Phase
from ...records import ReplicaRecord
from .naming import JOB, ROLE, replica_of
from .watch import api_error

if TYPE_CHECKING:
    from .objects import NamespaceObjects

METRICS_API = ("metrics.k8s.io", "v1beta1")
NOT_SERVED = ("the cluster serves no metrics API (metrics.k8s.io, a metrics-server's): what a replica used is known "
              "once it ended")
NOT_SAMPLED = "the cluster's metrics API has not sampled its pod yet"


def samples(objects: NamespaceObjects, name: str, replicas: list[ReplicaRecord]) -> list[dict]:
    """Each replica's phase, and while it runs its CPU (percent of a core) and memory (bytes) or why not known."""
    running = [r["name"] for r in replicas if r["phase"] == Phase.RUNNING]
    used, unknown = used_now(objects, name) if running else ({}, None)
    found = []
    for r in replicas:
        cpu, memory = used.get(r["name"], (None, None))
        found.append({"replica": r["name"], "phase": r["phase"], "cpu_percent": cpu, "memory_bytes": memory,
                      "gpu_memory_mib": None, "gpu_utilization": None,
                      "unknown": (unknown or NOT_SAMPLED) if r["name"] in running and cpu is None else None})
    return found


def used_now(objects: NamespaceObjects, name: str) -> tuple[dict[str, tuple[float, int]], str | None]:
    """Of each replica of the job whose pod the metrics API sampled, (CPU percent, memory bytes) summed over its
    containers; or, where the cluster serves no metrics API, none and why."""
    try:
        listed = objects.custom.list_namespaced_custom_object(*METRICS_API, objects.ns, "pods",
                                                              label_selector=f"{JOB}={name},{ROLE}")
    except ApiException as e:
        if e.status == 404:
            return {}, NOT_SERVED
        raise api_error(e, f"read what the pods of {name} use (metrics.k8s.io)") from None
    replicas = {pod.metadata.name: replica_of(pod.metadata.labels) for pod in objects.job_pods(name)}
    return {replicas[sample["metadata"]["name"]]: (
        round(float(sum(parse_quantity(c["usage"]["cpu"]) for c in sample["containers"])) * 100, 1),
        int(sum(parse_quantity(c["usage"]["memory"]) for c in sample["containers"])))
        for sample in listed["items"] if sample["metadata"]["name"] in replicas}, None
