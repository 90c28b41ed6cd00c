"""The objects that run a job's replicas, as plain dicts: each replica's pod spec (its code fetched, requirements
installed, command run under the log tee, volumes, resources, placement, security) and the engines' objects made
of them (bare pods and Services, a JobSet, a Training Operator job); the product's programs every pod runs them
from (PROGRAMS_DIR). No I/O."""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex

from ... import incluster, snapshot, storage
from ...clusterenv import REPLICA_SITE, Dirs, replica_command, replica_env
from ...config import Distrain
from ...errors import FieldError, SpecError
from ...git import CREDENTIAL_HELPER
from ...policy import success_replicas
from ...spec import gpu_type, gpus, replica_name, replicas
from .naming import (JOB, JOBSET_API, KUBEFLOW, KUBEFLOW_API, KUBEFLOW_INDEX, KUBEFLOW_RESTART, QUEUE_NAME, REPLICA,
                     RESTARTS, RESUME, ROLE, RUN, TFJOB, KubeflowKind, job_owner, labels, metadata, object_name,
                     root_labels, snapshot_name)

HOST_PATHS_BY_DEFAULT: tuple[str, ...] = ()  # a shared node's files are no job's to mount
SIGNALS = list(range(128, 256))  # exit codes of a process killed by a signal: what restart "exit-code" retries
PORTS = {"pytorch": 23456}  # per framework; every other framework uses 2222, as Kubeflow does
WORKSPACE = "/workspace"
SNAPSHOT_DIR, SNAPSHOT_KEY = "/snapshot", "snapshot.bundle"  # where fetch-code finds the bundle (snapshot_secret)
TENSORBOARD_PORT = 6006
# The product's programs (incluster/) and the replicas' sitecustomize.py (clusterenv.REPLICA_SITE), files of the
# namespace's ConfigMap PROGRAMS (render.programs), named by a hash of them: each version's own, made once, never
# changed. Every pod that runs one mounts it read-only at PROGRAMS_DIR, each program a file named as the program,
# without .py (`python /opt/distrain/logtee ...`: the directory Python puts first on the path then holds no module
# to shadow one a program imports), the sitecustomize.py in SITE_DIR.
PROGRAMS_DIR, SITE, PROGRAMS_VOLUME = "/opt/distrain", "python", "distrain-programs"
SITE_DIR = f"{PROGRAMS_DIR}/{SITE}"
PROGRAM_FILES = {**{name: incluster.source(name) for name in incluster.PROGRAMS},
                 "sitecustomize.py": (REPLICA_SITE / "sitecustomize.py").read_text()}
PROGRAMS = "distrain-programs-" + hashlib.sha256(json.dumps(PROGRAM_FILES, sort_keys=True).encode()).hexdigest()[:10]


def program_file(name: str) -> str:
    """Where a pod finds the program `name` (incluster/<name>.py)."""
    return f"{PROGRAMS_DIR}/{name}"


def programs_volume() -> tuple[dict, dict]:
    """The volume of the programs' ConfigMap and its mount, read-only, at PROGRAMS_DIR."""
    items = [{"key": key, "path": key if key in incluster.PROGRAMS else f"{SITE}/{key}"}
             for key in sorted(PROGRAM_FILES)]
    return ({"name": PROGRAMS_VOLUME, "configMap": {"name": PROGRAMS, "items": items, "defaultMode": 0o444}},
            {"name": PROGRAMS_VOLUME, "mountPath": PROGRAMS_DIR, "readOnly": True})


TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default; the log tee writes why the command failed there
# the container's termination message: what it wrote there, else (a failed container) its output's last lines
WHY_FAILED = {"terminationMessagePath": TERMINATION_LOG, "terminationMessagePolicy": "FallbackToLogsOnError"}
VOLUME_LOGS = ".distrain/logs"  # in the output volume: <job's uid>/<run>/<replica>.log (volume_logs)


def kubeflow_refusal(spec: dict) -> FieldError | None:
    """Why the Training Operator cannot keep this job's policy (None if it can). It decides success by
    replica type: a TFJob by its chief (else worker 0, or with AllWorkers every worker), a PyTorchJob or
    PaddleJob by its Master (else every worker). Paddle's Master is the job's ps, which Paddle ends once
    every trainer is done (trainer 0 stops the pservers, or Paddle's launcher does): `all-workers`."""
    framework = spec.get("framework", "python")
    elsewhere = "; run it on the jobset or pods engine"
    if framework not in KUBEFLOW:
        return FieldError("framework", f"the Training Operator runs tensorflow, keras, pytorch and paddle jobs, "
                                       f"not {framework} ones{elsewhere}")
    kind, roles, success = KUBEFLOW[framework], set(spec["replicas"]), spec["policy"]["success"]
    if "evaluator" in roles:
        return FieldError("replicas.evaluator", f"a {kind.kind} succeeds without waiting for its evaluator, "
                                                f"which the job does{elsewhere}")
    if kind is TFJOB:
        keeps = "chief" if "chief" in roles or success == "chief" else "all-workers"
    elif framework == "pytorch":
        keeps = "chief" if "master" in roles else "all-workers"
    else:  # a PaddleJob's Masters (its parameter servers) end once all its trainers are done
        keeps = "all-workers"
    if success == keeps:
        return None
    return FieldError("policy.success", f"a {kind.kind} with these replicas succeeds as {keeps!r} says, "
                                        f"not {success!r}{elsewhere}")


def port(spec: dict) -> int:
    return PORTS.get(spec.get("framework", "python"), 2222)


def host(spec: dict, replica: str, namespace: str, engine: str) -> str:
    """A replica's stable DNS name: its pod's hostname under the JobSet's Service, or its own Service."""
    job = spec["name"]
    if engine == "jobset":  # the JobSet's Job <job>-<replicated job>-0, whose one pod has index 0
        return f"{object_name(job, replica)}-0-0.{job}.{namespace}.svc"
    if engine == "kubeflow":  # the operator's Service <job>-<replica type>-<index>
        role, _, index = replica.rpartition("-")
        return f"{job}-{KUBEFLOW[spec['framework']].types[role].lower()}-{index}.{namespace}.svc"
    return f"{object_name(job, replica)}.{namespace}.svc"


def addresses(spec: dict, namespace: str, engine: str) -> dict[str, list[str]]:
    """Each role's replica addresses, in index order."""
    out: dict[str, list[str]] = {}
    for role, index in replicas(spec):
        out.setdefault(role, []).append(f"{host(spec, replica_name(role, index), namespace, engine)}:{port(spec)}")
    return out


def refusals(spec: dict, engine: str) -> list[FieldError]:
    """Why `engine` cannot run the job as its spec says (none if it can)."""
    out = [refusal] if engine == "kubeflow" and (refusal := kubeflow_refusal(spec)) else []
    if "queue" in spec and engine == "pods":
        out.append(FieldError("queue", "Kueue queues JobSets and the Training Operator's jobs; on this cluster "
                                       "the job would run on bare pods (engine pods)"))
    return out


def runnable(spec: dict, engine: str) -> None:
    """Refuse (SpecError) a job `engine` cannot run as its spec says."""
    if errors := refusals(spec, engine):
        raise SpecError(errors)


def service(spec: dict, role: str, index: int, settings: Distrain, root: dict) -> dict:
    name = object_name(spec["name"], replica_name(role, index))
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": metadata(name, settings, labels(spec["name"], role, index), root),
        "spec": {
            "clusterIP": "None",
            # the name resolves before the pod is ready: workers never race the chief's DNS record
            "publishNotReadyAddresses": True,
            "selector": {JOB: spec["name"], REPLICA: replica_name(role, index)},
            "ports": [{"name": "distrain", "port": port(spec), "targetPort": port(spec)}],
        },
    }


def image(spec: dict, settings: Distrain) -> str:
    return spec.get("image") or settings.default_images.get(spec.get("framework", "python")) or settings.default_images["python"]


def pod(spec: dict, role: str, index: int, settings: Distrain, root: dict, restarts: int = 0, run: int = 1) -> dict:
    """The replica's pod (engine "pods"), labelled with the job's run it belongs to (its logs are archived
    there)."""
    name = replica_name(role, index)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {**metadata(object_name(spec["name"], name), settings,
                                {**labels(spec["name"], role, index), RUN: str(run)}, root),
                     "annotations": {RESTARTS: str(restarts)}},
        "spec": {**pod_spec(spec, role, [index], settings, root, addresses(spec, settings.namespace, "pods"), run),
                 "hostname": object_name(spec["name"], name)},
    }


INSTALL = f"python {program_file('install')} || exit 1"  # requirements.txt, then what the Python has
# every replica's Python: clusterenv.REPLICA_SITE's sitecustomize.py first on PYTHONPATH, before the image's
SITE_SETUP = f'export PYTHONPATH="{SITE_DIR}${{PYTHONPATH:+:$PYTHONPATH}}"'


def program(spec: dict, role: str, index: int, addresses: dict[str, list[str]]) -> tuple[dict[str, str], str]:
    """Replica `role`-`index`'s environment and command, as its container sees them."""
    logdir = f"/output/{spec['tensorboard']['logdir']}/{replica_name(role, index)}"
    resume = spec.get("resume_from")
    dirs = Dirs(input="/input", output="/output", logdir=logdir,
                resume_from=("/resume" if resume.startswith("job:") else resume) if resume else None)
    env = replica_env(spec, addresses, role, index, dirs)
    return env, replica_command(spec, role, env, program_file("await_pservers"))


def pod_spec(spec: dict, role: str, indices: list[int], settings: Distrain, root: dict,
             addresses: dict[str, list[str]], run: int, kubeflow: KubeflowKind | None = None) -> dict:
    """The pod spec of replicas `role`-`indices` in the job's run `run`: one replica's, except on the
    kubeflow engine, where a role's replicas share one template and each runs the branch of its index (the
    operator's label; the kubelet puts it in the log's path too). On that engine the container and port
    have the operator's names and it sets its variables itself."""
    programs = [program(spec, role, index, addresses) for index in indices]
    own = kubeflow.own_env if kubeflow else frozenset()
    envs = [{k: v for k, v in env.items() if k not in own} for env, _ in programs]
    shared = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)}
    env: list[dict] = [{"name": k, "value": v} for k, v in sorted(shared.items())]
    if len(programs) == 1:
        script = f"exec /bin/sh -c {shlex.quote(programs[0][1])}"
        log = f"{volume_logs(root)}/{run}/{replica_name(role, indices[0])}.log"
    else:
        env.append({"name": "DISTRAIN_INDEX",
                    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{KUBEFLOW_INDEX}']"}}})
        branches = ["".join([f"  {index})", *(f" export {k}={shlex.quote(v)};" for k, v in sorted(own_env.items())
                                               if k not in shared and k != "DISTRAIN_INDEX"),
                             f" exec /bin/sh -c {shlex.quote(command)};;"])
                    for index, own_env, (_, command) in zip(indices, envs, programs)]
        script = "\n".join(['case "$DISTRAIN_INDEX" in', *branches,
                            '  *) echo "this job has no replica $DISTRAIN_INDEX" >&2; exit 1;;', "esac"])
        log = f"{volume_logs(root)}/{run}/{role}-${{DISTRAIN_INDEX}}.log"  # the log tee expands it
    volumes, mounts = _volumes(spec, settings, root)
    tools = _stack_tools(settings)
    if tools:
        volumes.append({"name": TOOLS, "emptyDir": {}})
        mounts.append({"name": TOOLS, "mountPath": TOOLS_DIR, "readOnly": True})
    main = {
        "name": kubeflow.container if kubeflow else "main",
        "image": image(spec, settings),
        "workingDir": WORKSPACE,
        "command": ["python", program_file("logtee"), log, TERMINATION_LOG, "/bin/sh", "-c",
                    f"{INSTALL}\n{SITE_SETUP}\n{script}"],
        **WHY_FAILED,
        "env": env,
        "ports": [{"name": kubeflow.port if kubeflow else "distrain", "containerPort": port(spec)}],
        "resources": role_resources(spec, role),
        "volumeMounts": mounts,
    }
    body = {"restartPolicy": "Never", "containers": [main], "volumes": volumes, **_placement(spec, role, settings)}
    inits = [c for c in (_fetch_code(spec, settings), tools) if c]
    if inits:
        body["initContainers"] = inits
    if "snapshot" in spec.get("code", {}):
        body["volumes"] = [*body["volumes"], {"name": "snapshot", "secret": {"secretName": snapshot_name(spec["name"])}}]
    return secured(body, settings)


def literal(container: dict) -> dict:
    """The container with every $ of its command, args and env values escaped as $$: Kubernetes expands $(VAR)
    there, and hands the container $$ as $, so the container gets the strings as rendered (a job's env values
    literal and its command's $VAR the shell's, as on the local backend)."""
    def escaped(text: str) -> str:
        return text.replace("$", "$$")

    out = {**container, **{key: [escaped(part) for part in container[key]]
                           for key in ("command", "args") if key in container}}
    if "env" in container:
        out["env"] = [{**e, "value": escaped(e["value"])} if "value" in e else e for e in container["env"]]
    return out


def secured(pod: dict, settings: Distrain) -> dict:
    """A pod spec as this product hands it to Kubernetes, every pod spec it makes passing through here: its
    containers' strings `literal`, and as the Pod Security Standard `settings.pod_security` wants it. Every pod
    this product makes passes "baseline" as rendered (unless a spec mounts a host path); "restricted" adds a
    non-root user (settings.run_as_user, also the group and the volumes' group), no privilege escalation, no
    capabilities and the runtime's default seccomp profile. HOME is then the writable workspace, where pip
    installs a job's requirements for that user."""
    pod = {**pod, **{key: [literal(c) for c in pod[key]] for key in ("containers", "initContainers") if key in pod}}
    if "serviceAccountName" not in pod:  # a controller's pod alone asks the API server: the others carry no token
        pod["automountServiceAccountToken"] = False
    if settings.pod_security != "restricted":
        return pod
    uid = settings.run_as_user
    confined = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}

    def container(c: dict) -> dict:
        home = [{"name": "HOME", "value": WORKSPACE}] if any(
            m["mountPath"] == WORKSPACE for m in c.get("volumeMounts", [])) else []
        return {**c, "securityContext": confined, **({"env": [*c.get("env", []), *home]} if home else {})}

    return {**pod, "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid,
                                       "seccompProfile": {"type": "RuntimeDefault"}},
            **{key: [container(c) for c in pod[key]] for key in ("containers", "initContainers") if key in pod}}


def jobset(spec: dict, settings: Distrain, root: dict, run: int = 1) -> dict:
    """The job as a JobSet (engine "jobset"): the cluster's controller then enforces policy.py's rules.

    - success: the JobSet completes when the chief (master, or worker 0) succeeds, or with
      `all-workers` when every trainer does, and every evaluator has too; the controller then deletes
      the Jobs still running.
    - failure: a replica's Job fails once its pod failed `max_restarts` + 1 times (`never`: once); with
      `exit-code`, at once unless the main container was killed by a signal (exit code 128-255); a
      failed Job fails the JobSet, which deletes the rest.
    - deadline: every Job's activeDeadlineSeconds (counted from its start, so from admission when queued).
    """
    job, policy = spec["name"], spec["policy"]
    success = {"operator": "All", "targetReplicatedJobs": success_replicas(spec)}
    where = addresses(spec, settings.namespace, "jobset")
    replicated = []
    for role, index in replicas(spec):
        pod_labels = {**labels(job, role, index), RUN: str(run), **root_labels(root)}
        job_spec: dict = {
            "parallelism": 1, "completions": 1, "completionMode": "Indexed",
            "backoffLimit": 0 if policy["restart"] == "never" else policy["max_restarts"],
            "template": {"metadata": {"labels": pod_labels},
                         "spec": pod_spec(spec, role, [index], settings, root, where, run)},
        }
        if policy["restart"] == "exit-code":
            job_spec["podFailurePolicy"] = {"rules": [{"action": "FailJob", "onExitCodes": {
                "containerName": "main", "operator": "NotIn", "values": SIGNALS}}]}
        if policy.get("deadline_seconds"):
            job_spec["activeDeadlineSeconds"] = policy["deadline_seconds"]
        replicated.append({"name": replica_name(role, index), "groupName": role, "replicas": 1,
                           "template": {"metadata": {"labels": pod_labels}, "spec": job_spec}})
    return {
        "apiVersion": JOBSET_API, "kind": "JobSet",
        "metadata": metadata(job, settings, engine_labels(spec, run), root),
        "spec": {"replicatedJobs": replicated, "successPolicy": success, "failurePolicy": {"maxRestarts": 0},
                 "network": {"enableDNSHostnames": True, "subdomain": job, "publishNotReadyAddresses": True},
                 **({"suspend": True} if "queue" in spec else {})},
    }


def engine_labels(spec: dict, run: int) -> dict[str, str]:
    """The engine's object's labels; with a `queue`, Kueue's, so the job starts suspended until Kueue admits it."""
    return {**labels(spec["name"]), RUN: str(run), **({QUEUE_NAME: spec["queue"]} if "queue" in spec else {})}


def kubeflow(spec: dict, settings: Distrain, root: dict, run: int = 1) -> dict:
    """The job as the Training Operator's kind for its framework (engine "kubeflow"), whose controller then
    enforces the lifecycle: success by its rule (see `kubeflow_refusal`, which `check` applies first),
    each replica's restart policy the job's (Kubeflow's ExitCode retries exit codes 128-255), the job's
    backoff limit `max_restarts` (Kubeflow counts the restarts of all replicas together) and its active
    deadline `deadline_seconds`; when the job ends the operator deletes the pods still running and keeps
    the finished ones."""
    job, policy, kind = spec["name"], spec["policy"], KUBEFLOW[spec["framework"]]
    where = addresses(spec, settings.namespace, "kubeflow")
    indices: dict[str, list[int]] = {}
    for role, index in replicas(spec):
        indices.setdefault(role, []).append(index)
    deadline = {"activeDeadlineSeconds": policy["deadline_seconds"]} if policy.get("deadline_seconds") else {}
    replica_specs = {
        kind.types[role]: {
            "replicas": len(numbers), "restartPolicy": KUBEFLOW_RESTART[policy["restart"]],
            # The operator looks at the job's deadline only when some event reconciles the job; the kubelet
            # ends each pod at the same deadline (counted from the pod's start, so never before the job's),
            # which is one.
            "template": {"metadata": {"labels": {**labels(job), ROLE: role, RUN: str(run), **root_labels(root)}},
                         "spec": {**pod_spec(spec, role, numbers, settings, root, where, run, kind), **deadline}}}
        for role, numbers in indices.items()}
    run_policy: dict = {"cleanPodPolicy": "Running", **deadline}
    if policy["restart"] != "never":
        run_policy["backoffLimit"] = policy["max_restarts"]
    if "queue" in spec:
        run_policy["suspend"] = True
    body: dict = {kind.replica_specs: replica_specs, "runPolicy": run_policy}
    if kind is TFJOB and policy["success"] == "all-workers":
        body["successPolicy"] = "AllWorkers"
    if kind.kind == "PyTorchJob":
        body["nprocPerNode"] = "1"  # one process per replica, as on every engine
    return {"apiVersion": KUBEFLOW_API, "kind": kind.kind,
            "metadata": metadata(job, settings, engine_labels(spec, run), root), "spec": body}


def _fetch_code(spec: dict, settings: Distrain) -> dict | None:
    source = spec.get("code", {})
    if "git" not in source:
        return None
    # The workspace (an emptyDir) is root's; under pod_security "restricted" another user clones into it,
    # and git works in another user's directory only when told it is safe.
    in_workspace = f"git -c safe.directory={WORKSPACE} -C {WORKSPACE}"
    checkout = [["checkout", "--quiet", "--detach", source["commit"]]]
    if "snapshot" in source:  # the checkout's changes on top, from the bundle in the job's Secret
        checkout = snapshot.steps(f"{SNAPSHOT_DIR}/{SNAPSHOT_KEY}", source["snapshot"]["commit"])
    script = " && ".join([f"git clone --quiet --no-checkout -- {shlex.quote(source['git'])} {WORKSPACE}",
                          *(f"{in_workspace} {shlex.join(step)}" for step in checkout)])
    env: list[dict] = [{"name": "GIT_TERMINAL_PROMPT", "value": "0"}]
    if source.get("credentials"):
        script = script.replace("git clone", f"git -c credential.helper={shlex.quote(CREDENTIAL_HELPER)} clone", 1)
        env += [{"name": f"DISTRAIN_GIT_{key.upper()}",
                 "valueFrom": {"secretKeyRef": {"name": source["credentials"], "key": key}}}
                for key in ("username", "password", "host")]
    mounts: list[dict] = [{"name": "workspace", "mountPath": WORKSPACE}]
    if "snapshot" in source:
        mounts.append({"name": "snapshot", "mountPath": SNAPSHOT_DIR, "readOnly": True})
    return {"name": "fetch-code", "image": settings.git_image, "command": ["/bin/sh", "-c", script], "env": env,
            "volumeMounts": mounts, **WHY_FAILED}


# py-spy, which takes a replica's stacks (podstacks.py), copied from this product's image into the pod
TOOLS, TOOLS_DIR = "stack-tools", "/distrain-tools"


def _stack_tools(settings: Distrain) -> dict | None:
    """The init container that puts py-spy in volume TOOLS, when this product's image is known."""
    if not settings.controller_image:
        return None
    return {"name": TOOLS, "image": settings.controller_image,
            "command": ["/bin/sh", "-c", f'cp "$(command -v py-spy)" {TOOLS_DIR}/'],
            "volumeMounts": [{"name": TOOLS, "mountPath": TOOLS_DIR}], **WHY_FAILED}


def role_resources(spec: dict, role: str) -> dict:
    """A role's container resources: its CPUs and memory requested (and limited), its GPUs limited."""
    wanted = spec["replicas"][role].get("resources", {})
    amounts = {key: str(wanted[key]) for key in ("cpu", "memory") if key in wanted}
    limits = dict(amounts)
    if gpus(spec, role):
        limits["nvidia.com/gpu"] = str(gpus(spec, role))
    return {key: value for key, value in (("requests", amounts), ("limits", limits)) if value}


def gpu_nodes(spec: dict, role: str, settings: Distrain) -> dict:
    """The admin's GPU type the role names ({} when none): its node_selector and tolerations."""
    kind = gpu_type(spec, role)
    return settings.gpu_types.get(kind, {}) if kind else {}


def _placement(spec: dict, role: str, settings: Distrain) -> dict:
    """Where the scheduler may put a role's pods, and their priority: the admin's GPU type the role names
    and priority class."""
    nodes = gpu_nodes(spec, role, settings)
    placement = {"nodeSelector": nodes.get("node_selector"), "tolerations": nodes.get("tolerations"),
                 "priorityClassName": settings.priority_class}
    return {key: value for key, value in placement.items() if value}


def volume_and_mount(source: dict, name: str, sub: str, read_only: bool) -> tuple[dict, dict]:
    """The volume `source` names (a claim, or a host path) and its mount: of the directory `sub` of a claim."""
    if "host_path" in source:
        return ({"name": name, "hostPath": {"path": source["host_path"], "type": "Directory"}},
                {"name": name, "readOnly": read_only})
    mount = {"name": name, "readOnly": read_only, **({"subPath": sub} if sub else {})}
    return {"name": name, "persistentVolumeClaim": {"claimName": source["volume"], "readOnly": read_only}}, mount


def output_source(spec: dict, settings: Distrain) -> dict:
    """Where the job writes its output: the spec's `output`, else its own directory on the output claim."""
    return spec.get("output", {"volume": settings.output_claim})


def output_volume(spec: dict, settings: Distrain, root: dict, read_only: bool,
                  owners_directory: bool = False) -> tuple[dict, dict]:
    """The job's output volume, mounting the job's own directory of it (storage.output_path), or with
    `owners_directory` its owner's, which holds the job's and its trials' (a sweep's)."""
    owner = job_owner(root)
    sub = "/".join(storage.area(owner)) if owners_directory else storage.output_path(spec, owner)
    return volume_and_mount(output_source(spec, settings), "output", sub, read_only)


def _volumes(spec: dict, settings: Distrain, root: dict) -> tuple[list[dict], list[dict]]:
    """A replica's volumes and its main container's mounts: its workspace, the product's programs, its output, its
    data and what it resumes from."""
    programs, programs_mount = programs_volume()
    volumes = [{"name": "workspace", "emptyDir": {}}, programs]
    mounts: list[dict] = [{"name": "workspace", "mountPath": WORKSPACE}, programs_mount]
    # each volume at its path, and where its field's link_as says the code finds it too
    wanted = [("/output", spec.get("output", {}), output_volume(spec, settings, root, read_only=False))]
    if "data" in spec:
        wanted.append(("/input", spec["data"],
                       volume_and_mount(spec["data"], "input", spec["data"].get("path", ""), True)))
    if resume := json.loads(root["data"].get(RESUME, "null")):
        wanted.append(("/resume", {}, volume_and_mount({"volume": resume["volume"]}, "resume", resume["path"], True)))
    for path, field, (volume, mount) in wanted:
        volumes.append(volume)
        mounts.append({**mount, "mountPath": path})
        if "link_as" in field:
            mounts.append({**mount, "mountPath": posixpath.normpath(f"{WORKSPACE}/{field['link_as']}")})
    return volumes, mounts


def volume_logs(root: dict) -> str:
    """Where the replicas write their log files on the job's output volume, a directory per job (its ConfigMap's
    uid; UID where it is not made yet), so a job made under the name of one deleted with its output kept
    starts with none of the old one's lines."""
    return f"/output/{VOLUME_LOGS}/{root['metadata'].get('uid', 'UID')}"
