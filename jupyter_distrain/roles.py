"""A job's replicas as its spec describes them: their roles in canonical order, names, GPUs."""

from __future__ import annotations

# Canonical order of roles: the chief-like roles first, as TF_CONFIG and ranks expect.
ROLE_ORDER = ("chief", "master", "ps", "worker", "evaluator")


def replicas(spec: dict) -> list[tuple[str, int]]:
    """Every (role, index) of the job, in canonical order; none for a sweep, whose trials run them."""
    if "sweep" in spec:
        return []
    return [
        (role, i)
        for role in ROLE_ORDER
        for i in range(int(spec["replicas"].get(role, {}).get("count", 0)))  # JSON's 2.0 is an integer too
    ]


def chief(spec: dict) -> tuple[str, int]:
    """The replica whose success or failure decides the job: chief, else master, else worker 0."""
    for role in ("chief", "master", "worker"):
        if spec["replicas"].get(role, {}).get("count", 0):
            return role, 0
    return replicas(spec)[0]


def gpus(spec: dict, role: str) -> int:
    """GPUs each replica of `role` asks for."""
    return spec["replicas"].get(role, {}).get("resources", {}).get("gpus", 0)


def gpu_type(spec: dict, role: str) -> str | None:
    """The admin's GPU type the replicas of `role` run on, if the spec names one."""
    return spec["replicas"].get(role, {}).get("resources", {}).get("gpu_type")


def replica_name(role: str, index: int) -> str:
    return f"{role}-{index}"


def cores(spec: dict, role: str) -> float | None:
    """CPU cores each replica of `role` asks for (resources.cpu: 2, 0.5 or 500m), None where it names none."""
    cpu = spec["replicas"].get(role, {}).get("resources", {}).get("cpu")
    if cpu is None:
        return None
    return float(cpu[:-1]) / 1000 if isinstance(cpu, str) and cpu.endswith("m") else float(cpu)
