"""The rights of the programs this product runs in the cluster (controllers/): the rules of each one's service
account's Role (render.identity), the least its program needs, each rule with why. No I/O.

    monitor    distrain-monitor, every run's monitor in the namespace (controllers/monitor.py)
    sweeper    <sweep>-sweeper, a sweep's controller (controllers/sweep.py), which makes its trials
    janitor    distrain-janitor, the namespace's janitor (controllers/janitor.py)

The Jupyter server makes these Roles (and brings the shared ones an earlier version made up to these rules), and
Kubernetes lets it grant only what it holds itself (the escalation check): every rule here is within its Role,
rbac.yaml's. None of the programs makes controllers (Roles, service accounts, Jobs, CronJobs), takes a pod's logs
or reaches a pod or Service through the API server's proxy; none reads a Secret but a sweep's controller, its own
sweep's snapshot alone, and none makes one but a sweep's controller, for its trials (their snapshot's, their
TensorBoard's); none makes a pod but a sweep's controller whose trials run on "pods". A monitor's webhooks come
through its environment (a secretKeyRef, which the kubelet resolves), not its service account.

Each program reads jobs without supervising those on "pods" (controllers.kube_backend): a Jupyter server
applies the policy to them (restarting a failed replica makes a pod), and a sweep's controller to its own
trials, which it made; stopping a job on "pods" deletes its pods and Services, which needs no pod made."""

from __future__ import annotations

from ...config import Distrain
from .naming import KUBEFLOW, engine_resource, snapshot_name
from .podspec import output_source

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")  # the order a Role lists them in
KUBEFLOW_KINDS = sorted({kind.plural for kind in KUBEFLOW.values()})
JOBSET_GROUP, KUBEFLOW_GROUP, KUEUE_GROUP = "jobset.x-k8s.io", "kubeflow.org", "kueue.x-k8s.io"


def rule(group: str, resources: list[str], verbs: list[str], names: list[str] | None = None) -> dict:
    """A Role's rule: `verbs` on `resources` of API `group` ("": the core API), only the objects `names` if given."""
    return {"apiGroups": [group], "resources": resources, **({"resourceNames": names} if names else {}),
            "verbs": verbs}


def merged(rules: list[dict]) -> list[dict]:
    """`rules`, those on the same resources (and names) made one, with the verbs of all, in the order first named."""
    found: dict[tuple, dict] = {}
    for r in rules:
        key = (tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r.get("resourceNames", ())))
        verbs = [*found[key]["verbs"], *r["verbs"]] if key in found else r["verbs"]
        found[key] = {**r, "verbs": sorted(set(verbs), key=VERBS.index)}
    return list(found.values())


def observing() -> list[dict]:
    """What reading a job as it stands takes (JobObserver.get and list), whatever its engine, once its ConfigMap is
    read: its replicas' pods, listed by its label; the engine's object (a JobSet, a TFJob, PyTorchJob or PaddleJob),
    a JobSet's Jobs (each replica's), and while it is queued Kueue's Workload saying why; the job's events."""
    return [
        rule("", ["pods"], ["list"]),
        rule(JOBSET_GROUP, ["jobsets"], ["get"]),
        rule(KUBEFLOW_GROUP, KUBEFLOW_KINDS, ["get"]),
        rule("batch", ["jobs"], ["list"]),
        rule(KUEUE_GROUP, ["workloads"], ["list"]),
        rule("", ["events"], ["list"]),
    ]


def watching() -> list[dict]:
    """What reading jobs from the watches of their objects takes (backend.observe, or `start` without events): their
    ConfigMaps, their pods, their engines' objects and JobSets' Jobs, each listed by the jobs' labels and then
    watched."""
    return [
        rule("", ["configmaps", "pods"], ["list", "watch"]),
        rule(JOBSET_GROUP, ["jobsets"], ["list", "watch"]),
        rule(KUBEFLOW_GROUP, KUBEFLOW_KINDS, ["list", "watch"]),
        rule("batch", ["jobs"], ["list", "watch"]),
    ]


def stopping() -> list[dict]:
    """What stopping a job takes (backend.stop), on whichever engine runs it: its ConfigMap's status written by
    compare-and-swap (a patch carrying the version read); on an engine its object deleted (its pods follow); on
    "pods" its replicas' pods (by uid) and their Services deleted; the stop recorded as an event on the job."""
    return [
        rule("", ["configmaps"], ["patch"]),
        rule(JOBSET_GROUP, ["jobsets"], ["delete"]),
        rule(KUBEFLOW_GROUP, KUBEFLOW_KINDS, ["delete"]),
        rule("", ["pods", "services"], ["delete"]),
        rule("", ["events"], ["create"]),
    ]


def monitor() -> list[dict]:
    """Every run's monitor in the namespace (controllers/monitor.py): it reads its job, writes its status, keeps its
    stacks, records its warnings and, with on_hang fail, stops it; any job's, on any engine, as one Role serves
    every monitor of the namespace."""
    return merged([
        # its job's ConfigMap: the spec, the status and the run read from its watch, read afresh to be written by
        # compare-and-swap: `hung` while the run is quiet, `told_end` (the one pod of the run's monitors that posts
        # its end), the replicas' stacks kept there when it hung
        rule("", ["configmaps"], ["get", "patch"]),
        *watching(),
        # the stacks of a hung run, dumped in its running replicas' containers (a websocket: get, then create)
        rule("", ["pods/exec"], ["get", "create"]),
        # its warnings (NoProgress, Straggler, WebhookFailed) recorded on the job; its events read as a stop answers
        rule("", ["events"], ["list", "create"]),
        # on_hang fail: the job stopped, as Hung
        *stopping(),
    ])


def janitor() -> list[dict]:
    """The namespace's janitor (controllers/janitor.py): it lists every owner's jobs, and deletes those past their
    time to be kept as `distrain delete` would: stopped first (a job whose end the engine reports but no one recorded;
    a sweep, then its trials), then its ConfigMap deleted, the garbage collector deleting what it owned."""
    return merged([
        # every owner's jobs: their ConfigMaps listed (their status says which are past their time), read, deleted;
        # each one's last run kept in the usage ledger (ledger.py: its ConfigMap made, or a run added to it)
        rule("", ["configmaps"], ["get", "list", "delete", "create", "patch"]),
        # their state, read from watches, and a delete waits until their pods and the engine's object are gone
        *observing(), *watching(),
        *stopping(),
    ])


def sweeper(spec: dict, settings: Distrain, trials: str) -> list[dict]:
    """A sweep's controller (controllers/sweep.py), whose trials run on engine `trials` (the one its server picked
    for them): it writes the sweep's status and makes its trials for the sweep's owner as a server would
    (backend.submit: the objects validated in a dry run, then made), reads the owner's jobs and stops its trials;
    it supervises its trials on "pods". `settings`: the server's, which it makes the trials with."""
    claim = output_source(spec, settings).get("volume")
    board, queued = spec["tensorboard"]["enabled"], "queue" in spec
    rules = [
        # the sweep's ConfigMap: its spec, its server's settings and a stop asked for read, its status (progress,
        # end) written; its trials' made (each owned by the sweep's) and read; a trial whose submit failed half-way
        # deleted again
        rule("", ["configmaps"], ["get", "list", "create", "patch", "delete"]),
        # the sweep's snapshot of changes, if it has one (its trials run the same code): that Secret alone, read
        rule("", ["secrets"], ["get"], [snapshot_name(spec["name"])]),
        # the claims, listed: a trial's volumes must exist
        rule("", ["persistentvolumeclaims"], ["list"]),
        # the owner's jobs read from their watches (its trials among them, taken over by a controller that replaces
        # one)
        *observing(), *watching(),
        # what it did (Launched, EarlyStopped, TrialNotLaunched...) recorded on the sweep, a trial's submit and
        # stop on the trial
        rule("", ["events"], ["create"]),
    ]
    if claim:  # the claim the trials write their outputs to, labelled as holding owners' outputs: that one alone
        rules.append(rule("", ["persistentvolumeclaims"], ["patch"], [claim]))
    if "snapshot" in spec.get("code", {}) or board:  # a trial's Secrets, its snapshot's and its TensorBoard's:
        rules.append(rule("", ["secrets"], ["create"]))  # made, never read back
    if trials == "pods":  # the trials' replicas, which it supervises: their pods and Services made, a failed
        # replica's pod deleted (waited for until gone) and made again, both deleted when the trial ends or stops
        rules += [rule("", ["pods"], ["get", "create", "delete"]), rule("", ["services"], ["create", "delete"])]
    elif trials in ("jobset", "kubeflow"):  # the object that runs a trial on its engine: made, deleted to stop it
        group, resource = engine_resource(spec, trials)
        rules.append(rule(group.split("/")[0], [resource], ["get", "create", "delete"]))
    else:
        raise ValueError(f"no engine runs trials as {trials!r}")
    if board:  # a trial's TensorBoard: its Deployment and Service
        rules += [rule("apps", ["deployments"], ["create"]), rule("", ["services"], ["create"])]
    if queued:  # the trials' queue, which must exist (Kueue's LocalQueues listed)
        rules.append(rule(KUEUE_GROUP, ["localqueues"], ["list"]))
    if settings.network_policy:  # a trial's NetworkPolicy (c.Distrain.network_policy)
        rules.append(rule("networking.k8s.io", ["networkpolicies"], ["create"]))
    return merged(rules)
