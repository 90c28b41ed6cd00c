"""The vocabulary of a job's Kubernetes objects: the labels and annotations that tie them to their job, run,
replica and owner, the objects' names, and the engines' APIs and kinds. No I/O."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from ... import snapshot
from ...config import Distrain
from ...spec import replica_name

BACKEND = "kubernetes"  # the backend's name, which its jobs' records give
GROUP = "distrain.jupyter.org"
MANAGED = {"app.kubernetes.io/managed-by": "jupyter-distrain"}
JOB, ROLE, INDEX, REPLICA, RUN, RESTARTS, ENGINE, OWNER = (f"{GROUP}/{k}" for k in (
    "job", "role", "index", "replica", "run", "restarts", "engine", "owner"))
SWEEP = "sweep"  # the engine label of a sweep's ConfigMap
OF_SWEEP = f"{GROUP}/sweep"  # on each object of a sweep and of its trials: the sweep's name (its controller's scope)
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
KUBEFLOW_API = "kubeflow.org/v1"
KUBEFLOW_INDEX = "training.kubeflow.org/replica-index"  # the label the Training Operator gives each pod
KUEUE_API = "kueue.x-k8s.io/v1beta1"
KUEUE_VISIBILITY = ("visibility.kueue.x-k8s.io", "v1beta1")  # Kueue's visibility API: where a workload waits
QUEUE_NAME = "kueue.x-k8s.io/queue-name"  # the label that puts a JobSet or a Training Operator job in a queue
COMPONENT = "app.kubernetes.io/component"
BOARD_SUFFIX, BOARD_KEY = "-tensorboard", "secret"  # the TensorBoard's objects, its Secret's key (board_secret)
# the Secrets a job makes are named after it so: no credentials' name ends so
NOTIFY_SUFFIX, NOTIFY_KEY = "-notify", "hooks.json"  # a job's webhooks (notify.py): its Secret, and the key there
JOB_SECRET_SUFFIXES = {snapshot.SECRET_SUFFIX: "jobs' snapshots of changes", BOARD_SUFFIX: "jobs' TensorBoards",
                       NOTIFY_SUFFIX: "jobs' webhooks"}
HOLDS_OUTPUTS = f"{GROUP}/holds-outputs"  # a claim's label: owners' outputs are in its owners/ directory
TOLD_END = "told_end"  # in a run's status: its end was posted to its webhooks (by one of its monitor's pods)
TOLD_PREVIOUS = "told_previous"  # in a run's status: the end of the run before, which its restart kept, posted
RESUME = "resume.json"  # in a job's ConfigMap: the volume and directory it resumes from (mounted at /resume)
RUNS = "runs.json"  # in a job's ConfigMap: each run a restart ended, by its number (records.run_record)


@dataclass(frozen=True)
class KubeflowKind:
    """How the Training Operator runs a framework: its kind, the field of its replica specs, the container
    and port names it looks for, the replica type of each role, and the variables it sets itself."""

    kind: str
    replica_specs: str
    container: str
    port: str
    types: dict[str, str]
    own_env: frozenset[str]

    @property
    def plural(self) -> str:
        return self.kind.lower() + "s"


TFJOB = KubeflowKind("TFJob", "tfReplicaSpecs", "tensorflow", "tfjob-port",
                     {"chief": "Chief", "ps": "PS", "worker": "Worker", "evaluator": "Evaluator"}, frozenset({"TF_CONFIG"}))
KUBEFLOW = {
    "tensorflow": TFJOB, "keras": TFJOB,
    "pytorch": KubeflowKind("PyTorchJob", "pytorchReplicaSpecs", "pytorch", "pytorchjob-port",
                            {"master": "Master", "worker": "Worker"},
                            frozenset({"PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK",
                                       "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK",
                                       "PET_NPROC_PER_NODE"})),
    "paddle": KubeflowKind("PaddleJob", "paddleReplicaSpecs", "paddle", "master", {"ps": "Master", "worker": "Worker"},
                           frozenset({"PYTHONUNBUFFERED"})),
}
KUBEFLOW_RESTART = {"never": "Never", "on-failure": "OnFailure", "exit-code": "ExitCode"}


def object_name(job: str, replica: str) -> str:
    return f"{job}-{replica}"


def replica_of(labels: dict[str, str]) -> str:
    """The replica a pod (or Job) belongs to, from its labels; the Training Operator's pods carry the role
    (their template's) and the index it gives them."""
    return labels.get(REPLICA) or replica_name(labels[ROLE], int(labels[KUBEFLOW_INDEX]))


def labels(job: str, role: str | None = None, index: int = 0) -> dict[str, str]:
    out = {**MANAGED, JOB: job}
    if role is not None:
        out.update({ROLE: role, INDEX: str(index), REPLICA: replica_name(role, index)})
    return out


def label_value(text: str) -> str:
    """`text` as a label value: at most 63 of [A-Za-z0-9_.-], beginning and ending alphanumeric."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63].strip("-_.")


def root_labels(root: dict) -> dict[str, str]:
    """The labels naming who submitted the job and the sweep it belongs to, as its ConfigMap `root` carries them,
    for every object and pod of the job (whoever renders them: an admin restarting it too)."""
    labels = root["metadata"].get("labels") or {}
    return {key: labels[key] for key in (OWNER, OF_SWEEP) if labels.get(key)}


def of_job(name: str) -> str:
    """The label selector of the job's objects."""
    return f"{JOB}={name}"


def of_sweep(name: str) -> str:
    """The label selector of the sweep's objects and its trials'."""
    return f"{OF_SWEEP}={name}"


def metadata(name: str, settings: Distrain, labels: dict, root: dict) -> dict:
    """Metadata of an object the job's ConfigMap owns, once it exists (has a uid): deleting it deletes them."""
    meta = {"name": name, "namespace": settings.namespace, "labels": {**labels, **root_labels(root)}}
    if root["metadata"].get("uid"):
        meta["ownerReferences"] = [owned_by(root)]
    return meta


def owned_by(root: dict) -> dict:
    """The reference to a job's ConfigMap (a job's own, or the sweep's a trial is) that makes its garbage
    collector delete what it owns."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": root["metadata"]["name"], "uid": root["metadata"]["uid"],
            "blockOwnerDeletion": True}


def notify_name(job: str) -> str:
    return f"{job}{NOTIFY_SUFFIX}"


def snapshot_name(job: str) -> str:
    return f"{job}{snapshot.SECRET_SUFFIX}"


def job_owner(root: dict) -> str:
    """Who submitted the job, as its ConfigMap `root` says ("" for a job made before jobs had owners)."""
    return (root["metadata"].get("annotations") or {}).get(OWNER, "")


def tensorboard_name(job: str) -> str:
    return f"{job}{BOARD_SUFFIX}"  # replicas are <job>-<role>-<index>: no clash


def sweeper_name(sweep: str) -> str:
    return f"{sweep}-sweeper"


JANITOR = "distrain-janitor"
MONITOR = "distrain-monitor"  # the identity every job's monitor runs as


def log_reader_name(job: str) -> str:
    """A new log reader's name, its own: a server and a CLI may read one job's volume at once (one that a
    stopped process left ends by itself, and goes with the job)."""
    return f"{job}-logs-{secrets.token_hex(3)}"


def monitor_name(job: str, run: int) -> str:
    return f"{job}-monitor-{run}"


def purger_name(job: str) -> str:
    return f"{job}-purge"


def engine_resource(spec: dict, engine: str) -> tuple[str, str]:
    """(API version, resource) of the one object that runs the job on an engine ("jobset" or "kubeflow")."""
    if engine == "jobset":
        return JOBSET_API, "jobsets"
    return KUBEFLOW_API, KUBEFLOW[spec["framework"]].plural
