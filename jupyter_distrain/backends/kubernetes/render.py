"""Kubernetes objects for a job, as plain dicts: pure functions of the spec, the settings (c.Distrain.*) and
the engine that runs the job. No I/O. The replicas' pods and the engines' objects are podspec.py's, the labels
and names every object carries naming.py's.

    ConfigMap <job>                 the job's root: its spec, engine and cluster addresses; owns the rest

engine "jobset": the cluster's JobSet controller enforces the lifecycle
    JobSet    <job>                 one replicated job per replica (grouped by role: each replica's
                                    environment is its own), its success policy the job's, each Job's
                                    backoff limit and pod failure policy its restart policy, each Job's
                                    active deadline the job's; the controller makes a headless Service
                                    <job> giving pod <job>-<role>-<i>-0-0 a stable DNS name

engine "kubeflow": Kubeflow's Training Operator enforces the lifecycle (tensorflow, keras, pytorch, paddle)
    TFJob | PyTorchJob | PaddleJob <job>
                                    one replica type per role (the operator's names: Paddle's ps is its
                                    Master), its success policy, restart policy, backoff limit and active
                                    deadline the job's; the operator makes pod and headless Service
                                    <job>-<type>-<i> for each replica and sets its framework's variables
                                    (TF_CONFIG, MASTER_ADDR...) itself; the others come from clusterenv,
                                    each replica's picked by the index the operator labels its pod with

engine "pods": this Jupyter server supervises (reconcile.py applies policy.py)
    Service   <job>-<role>-<i>      headless, one per replica, so each has a stable DNS name
    Pod       <job>-<role>-<i>      one per replica

With a `queue` (jobset or kubeflow), the JobSet or the operator's job carries Kueue's queue-name label and
starts suspended: Kueue admits it (unsuspends it) when its ClusterQueue has the quota.

A replica's pod, whatever the engine: the code fetched by an init container at the pinned commit,
requirements installed (incluster/install.py, which then reports in one line what the replica's Python has),
the command run under incluster/logtee.py, which stamps each line and writes it both to the container's
output (pods/log) and to /output/.distrain/logs/<run>/<replica>.log.
    Pod       <job>-logs-<hex>      while a server reads those files (they outlive the pods): serves
                                    them read-only from the job's output directory, to requests carrying
                                    the secret in its environment, then is deleted
    Pod       <job>-purge           on `delete --purge-output`: deletes the job's output directory from its
                                    owner's (all it mounts), which the delete waits for
    (both in this product's image, c.Distrain.controller_image, where it is set; else in the job's)
    Secret, Deployment, Service <job>-tensorboard
                                    with tensorboard.enabled: one TensorBoard reading the job's
                                    output volume (every replica a run), answering requests that carry
                                    its Secret's secret; it stays until the job is deleted
    ConfigMap distrain-programs-<hash>
                                    the namespace's, every job's: the product's programs these pods run (the log
                                    tee, the installer, the replicas' sitecustomize.py, the reader, the purger,
                                    the TensorBoard), mounted read-only at /opt/distrain; one per version of them
                                    (its name their hash), made at submit if missing, never changed or deleted
    Secret    <credentials>         made by `set_credentials`, only ever referenced here
    Secret    <job>-notify          with webhooks (notify.py): the run's, which its monitor (or the sweep's
                                    controller) reads through its environment
With a policy.hang_after, several replicas or webhooks (and c.Distrain.controller_image), each run has a
monitor (controllers/monitor.py), so hangs and stragglers are found and told whether or not a Jupyter server
runs:
    ServiceAccount, Role, RoleBinding distrain-monitor
                                    every monitor's identity in the namespace: to read any job, write its
                                    status, take its replicas' stacks (pods/exec) and stop it (roles.monitor);
                                    no Secret (its webhooks come through its environment)
    Job       <job>-monitor-<run>   one pod reading the job's output read-only at /output (the replicas' log
                                    files, their event files) until the run ends; when the run is hung it
                                    warns, keeps the replicas' stacks in the job's ConfigMap and, with
                                    on_hang fail, fails the job; it names stragglers; it posts these and the
                                    run's end to the webhooks
A sweep (engine "sweep") runs no replicas: its controller launches its trials, jobs of their own whose
ConfigMaps the sweep's owns, from the cluster (controllers/sweep.py runs sweep.Controller):
    ServiceAccount, Role, RoleBinding <sweep>-sweeper
                                    the controller's identity: to make its trials on the engine the server
                                    picked for them, read its owner's jobs and stop its trials (roles.sweeper)
    Job       <sweep>-sweeper       one pod at a time running the controller (a new one if it fails, or
                                    its node goes), with the output volume's root at /output: the
                                    trials' event files, the sweep's links to them
The namespace's janitor, every owner's, made with the first job that has a policy.ttl_after_finished (janitor):
    ServiceAccount, Role, RoleBinding, CronJob distrain-janitor
                                    on c.Distrain.janitor_schedule, a pod running controllers/janitor.py deletes the
                                    jobs past that time, whether or not a Jupyter server runs (roles.janitor)
"""

from __future__ import annotations

import base64
import json
import re
import secrets

from ... import notify, storage
from ...config import Distrain
from ...incluster import logreader as reader
from ...incluster import tensorboard as board
from ...progress import Quiet, several
from ...spec import replicas
from ...sweep import is_sweep
from . import roles
from .naming import (BOARD_KEY, COMPONENT, ENGINE, JANITOR, JOB, MANAGED, MONITOR, NOTIFY_KEY, OF_SWEEP, OWNER, RESUME,
                     ROLE, SWEEP, job_owner, label_value, labels, log_reader_name, metadata, monitor_name, notify_name,
                     purger_name, root_labels, snapshot_name, sweeper_name, tensorboard_name)
from .podspec import (PROGRAM_FILES, PROGRAMS, SNAPSHOT_KEY, TENSORBOARD_PORT, addresses, image, jobset, kubeflow,
                      output_source, output_volume, pod, program_file, programs_volume, runnable, secured, service,
                      volume_and_mount, volume_logs)
from .state import new_status

SNAPSHOT_LIMIT = 1 << 20  # the most data a Secret holds
LOG_READER_PORT = 8080
LOG_FILE = re.compile(r"[a-z]+-[0-9]+\.log")  # a replica's log file: <role>-<index>.log


def root(spec: dict, settings: Distrain, engine: str, resume: dict | None = None) -> dict:
    """The job's ConfigMap: its spec, status (as asked for now: a render applied by hand is a job like any other)
    and replicas' addresses; its owner as a label (sanitized, to
    select by) and an annotation (exact, to decide by); the sweep it is or is a trial of as a label; what it
    `resume`s from (a claim's `volume` and `path`), if anything."""
    runnable(spec, engine)
    sweep = spec.get("trial_of") or (spec["name"] if is_sweep(spec) else None)
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": spec["name"], "namespace": settings.namespace,
                     "labels": {**labels(spec["name"]), ENGINE: engine, OWNER: label_value(settings.owner),
                                **({OF_SWEEP: sweep} if sweep else {})},
                     "annotations": {OWNER: settings.owner}},
        "data": {
            "spec.json": json.dumps(spec, sort_keys=True),
            "status.json": json.dumps(new_status(spec)),
            "cluster.json": json.dumps(addresses(spec, settings.namespace, engine), sort_keys=True),
            # a sweep's controller makes its trials as this server would
            **({"settings.json": json.dumps(settings.for_cluster(), sort_keys=True)} if engine == SWEEP else {}),
            **({RESUME: json.dumps(resume, sort_keys=True)} if resume else {}),
        },
    }


def programs(settings: Distrain) -> dict:
    """The namespace's ConfigMap of the programs the product's pods run (podspec.PROGRAM_FILES), which every such pod
    mounts (podspec.programs_volume): named by their hash, so each version of them has its own, and one made is never
    changed (immutable). Shared by every job of the namespace, every owner's and version's: deleting a job never
    deletes it (it is small). Not labelled as a job's objects are (managed-by), which the product lists as its jobs."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": {"name": PROGRAMS, "namespace": settings.namespace,
                         "labels": {"app.kubernetes.io/part-of": "jupyter-distrain", COMPONENT: "programs"}},
            "data": dict(PROGRAM_FILES)}


def hooks_secret(spec: dict, settings: Distrain, root: dict, hooks: dict) -> dict:
    """The Secret holding the run's webhooks (notify.hooks), owned by the job's ConfigMap."""
    meta = metadata(notify_name(spec["name"]), settings, {**labels(spec["name"]), COMPONENT: "webhooks"}, root)
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {**meta, "annotations": {OWNER: job_owner(root)}},
            "data": {NOTIFY_KEY: base64.b64encode(json.dumps(hooks).encode()).decode()}}


def hooks_env(job: str) -> dict:
    """The variable a monitor or a sweep's controller finds the webhooks in: none when the job has none."""
    return {"name": notify.HOOKS_ENV, "valueFrom": {"secretKeyRef": {"name": notify_name(job), "key": NOTIFY_KEY,
                                                                     "optional": True}}}


def snapshot_secret(spec: dict, settings: Distrain, root: dict, bundle: bytes) -> dict:
    """The Secret holding the bundle of the job's code.snapshot, which its pods' fetch-code mounts; owned by
    the job's ConfigMap, so it goes with the job."""
    meta = metadata(snapshot_name(spec["name"]), settings, {**labels(spec["name"]), COMPONENT: "snapshot"}, root)
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {**meta, "annotations": {OWNER: job_owner(root)}},
            "data": {SNAPSHOT_KEY: base64.b64encode(bundle).decode()}}


def board_secret(spec: dict, settings: Distrain, root: dict) -> dict:
    """The Secret holding what the job's TensorBoard asks of every request (incluster/tensorboard.py), made with
    the job and kept across its restarts, so a Jupyter server that read it once keeps it."""
    meta = metadata(tensorboard_name(spec["name"]), settings, {**labels(spec["name"]), COMPONENT: "tensorboard"},
                    root)
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {**meta, "annotations": {OWNER: job_owner(root)}},
            "stringData": {BOARD_KEY: secrets.token_urlsafe(32)}}


def tensorboard(spec: dict, settings: Distrain, root: dict) -> list[dict]:
    """The job's TensorBoard: its Secret (board_secret), a Deployment reading the output volume and asking
    every request for that secret, and its Service; none if disabled."""
    if not spec["tensorboard"]["enabled"]:
        return []
    name, tb_labels = tensorboard_name(spec["name"]), {**labels(spec["name"]), COMPONENT: "tensorboard",
                                                       **root_labels(root)}
    sweep = is_sweep(spec)  # a sweep's reads its owner's directory, where its links to its trials' event files lead
    volume, mount = output_volume(spec, settings, root, read_only=True, owners_directory=sweep)
    programs_source, programs_mount = programs_volume()
    # every event file under the job's output, the replicas' in the logdir (a sweep's: its links to its trials')
    output = f"/output/{spec['name']}" if sweep else "/output"
    container = {
        "name": "tensorboard",
        # this product's image has TensorBoard (a TensorFlow image need not: TensorFlow no longer requires it)
        "image": settings.controller_image or settings.default_images["tensorflow"],
        "command": ["python", program_file("tensorboard"), "--logdir", f"{output}/{spec['tensorboard']['logdir']}",
                    "--distrain_output", output, *(["--distrain_trials"] if sweep else []),
                    "--bind_all", "--port", str(TENSORBOARD_PORT)],
        "env": [{"name": board.SECRET_VARIABLE,
                 "valueFrom": {"secretKeyRef": {"name": name, "key": BOARD_KEY}}}],
        "ports": [{"name": "http", "containerPort": TENSORBOARD_PORT}],
        "readinessProbe": {"httpGet": {"path": board.PROBE_PATH, "port": TENSORBOARD_PORT}},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "volumeMounts": [{**mount, "mountPath": "/output"}, programs_mount],
    }
    selector = {JOB: spec["name"], COMPONENT: "tensorboard"}
    return [
        board_secret(spec, settings, root),
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": metadata(name, settings, tb_labels, root),
         "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                  "template": {"metadata": {"labels": tb_labels},
                               "spec": secured({"containers": [container], "volumes": [volume, programs_source]},
                                               settings)}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": metadata(name, settings, tb_labels, root),
         # headless: its name is the pod's address, for a server in the cluster with or without kube-proxy
         "spec": {"clusterIP": "None", "selector": selector,
                  "ports": [{"name": "http", "port": TENSORBOARD_PORT, "targetPort": TENSORBOARD_PORT}]}},
    ]


def identity(meta: dict, rules: list[dict]) -> list[dict]:
    """A controller's ServiceAccount, Role (its program's `rules`: roles.py) and RoleBinding, each with metadata
    `meta`."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": meta["name"]},
         "subjects": [{"kind": "ServiceAccount", "name": meta["name"], "namespace": meta["namespace"]}]},
    ]


def sweeper(spec: dict, settings: Distrain, root: dict, trials: str) -> list[dict]:
    """The sweep's controller: its identity, whose rights follow the engine its `trials` run on (roles.sweeper),
    and the Job that runs it, acting for the sweep's root."""
    name, ns = sweeper_name(spec["name"]), settings.namespace
    own = {**labels(spec["name"]), COMPONENT: "sweeper"}
    volume, mount = output_volume(spec, settings, root, read_only=False, owners_directory=True)
    container = {
        "name": "sweeper", "image": settings.controller_image,
        "command": ["python", "-m", "jupyter_distrain.controllers.sweep", spec["name"], "--namespace", ns,
                    "--owner", settings.owner, "--output", "/output"],
        "env": [hooks_env(spec["name"])],
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
        "volumeMounts": [{**mount, "mountPath": "/output"}],
    }
    pod = {"serviceAccountName": name, "restartPolicy": "Never", "containers": [container], "volumes": [volume]}
    return [*identity(metadata(name, settings, own, root), roles.sweeper(spec, settings, trials)),
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(name, settings, own, root),
             "spec": {"backoffLimit": 10, "template": {"metadata": {"labels": {**own, **root_labels(root)}},
                                                       "spec": secured(pod, settings)}}}]


def monitor(spec: dict, settings: Distrain, root: dict, run: int, told: bool = False) -> list[dict]:
    """Run `run`'s monitor (controllers/monitor.py), for a job with a policy.hang_after, several replicas or
    webhooks to tell (`told`), when this product's image is known (not a sweep, nor a sweep's trial, whose maker,
    the sweep's controller, makes no controllers): the identity every monitor of the namespace runs as, and the
    Job that runs this one."""
    if not settings.controller_image or is_sweep(spec) or "trial_of" in spec or \
            not (Quiet.of(spec) or several(spec) or told):
        return []
    own = {**labels(spec["name"]), COMPONENT: "monitor"}
    volume, mount = output_volume(spec, settings, root, read_only=True)
    container = {
        "name": "monitor", "image": settings.controller_image,
        "command": ["python", "-m", "jupyter_distrain.controllers.monitor", spec["name"], "--run", str(run),
                    "--namespace", settings.namespace, "--owner", job_owner(root), "--image", settings.controller_image,
                    "--logs", f"{volume_logs(root)}/{run}"],
        "env": [hooks_env(spec["name"])],
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
        "volumeMounts": [{**mount, "mountPath": "/output"}],
    }
    pod = {"serviceAccountName": MONITOR, "restartPolicy": "Never", "containers": [container], "volumes": [volume]}
    return [*identity({"name": MONITOR, "namespace": settings.namespace, "labels": {**MANAGED, COMPONENT: "monitor"}},
                      roles.monitor()),
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(monitor_name(spec["name"], run), settings,
                                                                           own, root),
             "spec": {"backoffLimit": 3, "template": {"metadata": {"labels": {**own, **root_labels(root)}},
                                                      "spec": secured(pod, settings)}}}]


def janitor(settings: Distrain) -> list[dict]:
    """The namespace's janitor, every owner's: its identity and the CronJob that runs controllers/janitor.py on
    `settings.janitor_schedule`, one run at a time, keeping the last run's pod of each outcome."""
    own = {**MANAGED, COMPONENT: "janitor"}
    meta = {"name": JANITOR, "namespace": settings.namespace, "labels": own}
    container = {"name": "janitor", "image": settings.controller_image,
                 "command": ["python", "-m", "jupyter_distrain.controllers.janitor",
                             "--namespace", settings.namespace],
                 "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}}
    pod = {"serviceAccountName": JANITOR, "restartPolicy": "Never", "containers": [container]}
    return [*identity(meta, roles.janitor()),
            {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta, "spec": {
                "schedule": settings.janitor_schedule, "concurrencyPolicy": "Forbid",
                "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1,
                "jobTemplate": {"metadata": {"labels": own}, "spec": {"backoffLimit": 0, "template": {
                    "metadata": {"labels": own}, "spec": secured(pod, settings)}}}}}]


def volume_pod(spec: dict, settings: Distrain, root: dict, name: str, component: str, container: dict,
               volume: tuple[dict, dict]) -> dict:
    """A pod the server makes for a while beside the job (a log reader, a purger) and then deletes, owned by
    the job's ConfigMap: `container`, in this product's image (else the job's), with `volume` (and its mount) at
    /output, and the product's programs (podspec.programs_volume); it ends by itself after 10 minutes."""
    source, mount = volume
    programs_source, programs_mount = programs_volume()
    container = {**container, "image": settings.controller_image or image(spec, settings),
                 "volumeMounts": [{**mount, "mountPath": "/output"}, programs_mount],
                 "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": metadata(name, settings, {**labels(spec["name"]), COMPONENT: component}, root),
            "spec": secured({"containers": [container], "volumes": [source, programs_source], "restartPolicy": "Never",
                             "activeDeadlineSeconds": 600}, settings)}


def log_reader(spec: dict, settings: Distrain, root: dict, secret: str) -> dict:
    """A pod serving, read-only, the log files the job's replicas wrote to its output volume
    (incluster/logreader.py), to requests that carry `secret`."""
    container = {
        "name": "reader",
        "command": ["python", program_file("logreader"), volume_logs(root), str(LOG_READER_PORT)],
        "env": [{"name": reader.SECRET_VARIABLE, "value": secret}],
        "ports": [{"name": "http", "containerPort": LOG_READER_PORT}],
        "readinessProbe": {"httpGet": {"path": "/", "port": LOG_READER_PORT}, "periodSeconds": 1},
    }
    return volume_pod(spec, settings, root, log_reader_name(spec["name"]), "log-reader", container,
                      output_volume(spec, settings, root, read_only=True))


def purger(spec: dict, settings: Distrain, root: dict) -> dict | None:
    """A pod deleting the job's own output directory on its volume (its owner's directory mounted, which no job
    mounts, so none has made a link there), owned by the job's ConfigMap; None where the output is no directory
    of the job's own (a host path, its owner's whole directory, a whole volume: storage.purgeable, or one inside
    another: storage.output_path_problem), which stays."""
    source = output_source(spec, settings)
    parts = storage.output_parts(spec, job_owner(root))
    if "host_path" in source or not storage.purgeable(parts, job_owner(root)) or storage.output_path_problem(spec):
        return None
    container = {"name": "purge", "command": ["python", program_file("purge"), "/output", parts[-1]]}
    return volume_pod(spec, settings, root, purger_name(spec["name"]), "purger", container,
                      volume_and_mount({"volume": source["volume"]}, "output", "/".join(parts[:-1]), read_only=False))


def workload(spec: dict, settings: Distrain, root: dict, engine: str, run: int = 1, trials: str = "") -> list[dict]:
    """What runs the job's replicas on `engine` (a sweep's: its controller, for `trials` on that engine)."""
    if engine == SWEEP:
        return sweeper(spec, settings, root, trials)
    if engine == "jobset":
        return [jobset(spec, settings, root, run)]
    if engine == "kubeflow":
        runnable(spec, engine)
        return [kubeflow(spec, settings, root, run)]
    objects = []
    for role, index in replicas(spec):
        objects += [service(spec, role, index, settings, root), pod(spec, role, index, settings, root, run=run)]
    return objects


def render(spec: dict, settings: Distrain, engine: str, bundle: bytes | None = None,
           hooks: dict | None = None, trials: str = "jobset") -> list[dict]:
    """Every object of the job, the ConfigMap first (the others are owned by it once it exists), then the namespace's
    programs (made if missing), with the Secret of its snapshot's `bundle` and of its webhooks if it has them; a
    sweep's for `trials` on that engine (a cluster that has JobSet runs them there)."""
    head = root(spec, settings, engine)
    secrets = [snapshot_secret(spec, settings, head, bundle)] if bundle is not None else []
    secrets += [hooks_secret(spec, settings, head, hooks)] if hooks else []
    return [head, programs(settings), *secrets, *workload(spec, settings, head, engine, trials=trials),
            *monitor(spec, settings, head, 1, bool(hooks)),
            *tensorboard(spec, settings, head), *network_policy(spec, settings, head)]


def network_policy(spec: dict, settings: Distrain, root: dict) -> list[dict]:
    """With c.Distrain.network_policy, the job's NetworkPolicy: its replicas take connections from its own pods
    only (another job's, another owner's, reach none of their ports); none for a sweep, whose trials have theirs."""
    if not settings.network_policy or is_sweep(spec):
        return []
    own = {JOB: spec["name"]}
    return [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": metadata(spec["name"], settings, labels(spec["name"]), root),
             "spec": {"podSelector": {"matchLabels": own, "matchExpressions": [{"key": ROLE, "operator": "Exists"}]},
                      "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": {"matchLabels": own}}]}]}}]
