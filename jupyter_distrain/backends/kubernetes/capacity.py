"""What nodes have free and what replicas ask of them (pure): the numbers behind a refusal of what no node could
ever hold, and behind why a job waits (waiting.py)."""

from __future__ import annotations

from kubernetes.utils import parse_quantity

from ... import waits
from . import podspec
from .state import GPU

RESOURCES = ("cpu", "memory", GPU)  # what a replica asks the scheduler for


def quantity(value: str) -> float:
    """A Kubernetes quantity, in any form the API server keeps (500m, 4, 16Gi, 250u, 1Ei, 1e3), as a number."""
    return float(parse_quantity(value))


def container_requests(containers: list[dict]) -> dict[str, float]:
    """What containers ask for together: their requests, their limits where they request nothing (GPUs)."""
    total = dict.fromkeys(RESOURCES, 0.0)
    for container in containers:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for resource in RESOURCES:
            total[resource] += quantity(str(asked.get(resource, "0")))
    return total


def pod_requests(pod: dict) -> dict[str, float]:
    """What the scheduler reserves for a pod (as the API server sends it): its containers' requests, or its largest
    init container's."""
    main = container_requests(pod["spec"].get("containers") or [])
    init = [container_requests([c]) for c in pod["spec"].get("initContainers") or []]
    return {r: max([main[r], *(i[r] for i in init)]) for r in RESOURCES}


def role_requests(spec: dict, role: str) -> dict[str, float]:
    """What each replica of a role will ask for."""
    resources = podspec.role_resources(spec, role)
    asked = {**resources.get("limits", {}), **resources.get("requests", {})}
    return {r: quantity(str(asked.get(r, "0"))) for r in RESOURCES}


def allocatable(node: dict) -> dict[str, float]:
    """What a node (as the API server sends it) offers its pods."""
    offered = (node.get("status") or {}).get("allocatable") or {}
    return {r: quantity(str(offered.get(r, "0"))) for r in RESOURCES}


def free_on_nodes(nodes: list[dict], pods: list[dict]) -> dict[str, dict]:
    """Each node's labels, allocatable and free amounts (allocatable less what its pods request; none on a node
    cordoned); nodes and pods as the API server sends them."""
    held: dict[str, dict[str, float]] = {}
    for pod in pods:
        if pod["spec"].get("nodeName"):
            on = held.setdefault(pod["spec"]["nodeName"], dict.fromkeys(RESOURCES, 0.0))
            for resource, value in pod_requests(pod).items():
                on[resource] += value
    found = {}
    for node in nodes:
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        offered = allocatable(node)
        used = held.get(node["metadata"]["name"], {})
        found[node["metadata"]["name"]] = {
            "labels": node["metadata"].get("labels") or {}, "allocatable": offered,
            "free": {r: 0.0 if cordoned else max(offered[r] - used.get(r, 0.0), 0.0) for r in RESOURCES}}
    return found


def against_nodes(requested: dict[str, float], nodes: dict[str, dict], selector: dict | None) -> dict:
    """A replica's request against the nodes its selector allows: per resource it asks for (named as the job spec
    names it), the most free and the most allocatable on one node; the nodes with room for all of it now."""
    allowed_ = allowed(nodes, selector)
    rows = []
    for resource in RESOURCES:
        if requested.get(resource):
            node = max(allowed_, key=lambda n: (allowed_[n]["free"][resource], allowed_[n]["allocatable"][resource]),
                       default=None)
            rows.append({"resource": waits.RESOURCE_NAMES[resource], "requested": requested[resource],
                         "largest_free": allowed_[node]["free"][resource] if node else 0, "node": node,
                         "largest_allocatable": max((n["allocatable"][resource] for n in allowed_.values()),
                                                    default=0)})
    room = [name for name, node in allowed_.items()
            if all(node["free"][r] >= value for r, value in requested.items() if value)]
    return {"resources": rows, "nodes_with_room": sorted(room), "nodes": len(allowed_)}


def allowed(nodes: dict[str, dict], selector: dict | None) -> dict[str, dict]:
    """The nodes (of free_on_nodes) whose labels a node selector matches."""
    return {name: node for name, node in nodes.items() if (selector or {}).items() <= node["labels"].items()}
