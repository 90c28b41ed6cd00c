"""The rights of the programs this product runs in the cluster (backends/kubernetes/roles.py): each within the
Jupyter server's Role (rbac.yaml), which makes them; and, on the test control plane (tests/controlplane), as each
program's service account (a token of it), what its program has no need of answers 403. The tests that run each
program (test_kube_lifecycle.py's monitors, test_kube_sweep.py's sweeper and janitor) run it as its account, so
what it needs is granted."""

from __future__ import annotations

import copy
import json
from contextlib import suppress
from importlib.resources import files

import pytest
import yaml
from conftest import remove_janitor, wait
from controlplane.cluster import NAMESPACE, RESTRICTED
from kube_support import COMMIT, end, pod_name, pods_of, running, settings, tf_spec
from kubernetes import client

from jupyter_distrain import spec as spec_
from jupyter_distrain.backends.kubernetes import KubeBackend, naming, roles
from jupyter_distrain.config import Distrain

MAKING_CONTROLLERS = {"serviceaccounts", "roles", "rolebindings", "jobs", "cronjobs"}


def server_role() -> list[dict]:
    """The rules of the Jupyter server's Role (rbac.yaml)."""
    return next(d for d in yaml.safe_load_all((files("jupyter_distrain") / "rbac.yaml").read_text())
                if d["kind"] == "Role")["rules"]


def not_granted(rule: dict, rules: list[dict]) -> list[tuple]:
    """What of `rule` none of `rules` grants, as Kubernetes' escalation check sees it: each (group, resource, verb,
    name) that no rule covers (a rule naming objects covers those alone)."""
    return [(group, resource, verb, name)
            for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]
            for name in rule.get("resourceNames") or [None]
            if not any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
                       and (not r.get("resourceNames") or name in r["resourceNames"]) for r in rules)]


def sweeps() -> list[tuple[dict, Distrain, str]]:
    """Sweeps of every kind a sweeper's rules depend on: their trials' engine, TensorBoard, snapshot, queue, output
    claim, NetworkPolicy."""
    base = spec_.validate({"name": "hp", "framework": "pytorch", "command": "python train.py",
                           "code": {"git": "https://example.com/models.git", "commit": COMMIT},
                           "replicas": {"master": {}, "worker": {}}, "tensorboard": {"enabled": True},
                           "sweep": {"parameters": {"lr": {"values": [0.1, 0.2]}}}})
    plain = {**copy.deepcopy(base), "tensorboard": {**base["tensorboard"], "enabled": False}}
    snapshot = copy.deepcopy(plain)
    snapshot["code"]["snapshot"] = "changes"
    queued = {**copy.deepcopy(base), "queue": "team", "output": {"volume": "datasets"}}
    found = []
    for spec in (base, plain, snapshot, queued):
        for engine in ("jobset", "kubeflow", "pods"):
            for policy in (False, True):
                found.append((spec, Distrain(namespace=NAMESPACE, network_policy=policy), engine))
    return found


def test_each_program_in_the_cluster_gets_rights_the_server_holds_and_only_a_sweeper_touches_secrets():
    """Kubernetes lets the server grant a Role only what its own grants (the escalation check): every rule of every
    program's is within rbac.yaml's. None makes controllers; the monitor and the janitor touch no Secret, make no
    pod and take no pod's logs; a sweeper makes pods only when its trials run on "pods", makes Secrets only for
    trials that have a snapshot or a TensorBoard, and reads its own sweep's snapshot alone."""
    server = server_role()
    programs = {"monitor": roles.monitor(), "janitor": roles.janitor(),
                **{f"sweeper {engine} {i}": roles.sweeper(spec, settings, engine)
                   for i, (spec, settings, engine) in enumerate(sweeps())}}
    for program, rules in programs.items():
        assert not [(program, missing) for r in rules if (missing := not_granted(r, server))]
        granted = {(res, verb) for r in rules for res in r["resources"] for verb in r["verbs"]}
        assert not {res for res, verb in granted if verb not in ("get", "list", "watch")} & MAKING_CONTROLLERS, program
        assert not {res for res, _ in granted} & {"pods/log", "pods/proxy", "services/proxy"}, program
        # each reads jobs from watches: a monitor its job's objects (by its label), the others the namespace's jobs
        assert {("configmaps", "watch"), ("pods", "watch")} <= granted, program
    for program in ("monitor", "janitor"):
        assert not [r for r in programs[program] if r["resources"] == ["secrets"]]
        assert not [r for r in programs[program] if "pods" in r["resources"] and "create" in r["verbs"]]
    assert [r for r in programs["monitor"] if "pods/exec" in r["resources"]] == [
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}]
    assert not [r for r in programs["janitor"] if "pods/exec" in r["resources"]]
    assert [r["verbs"] for r in programs["monitor"] if "configmaps" in r["resources"]] == [["get", "patch"],
                                                                                         ["list", "watch"]]

    for spec, settings, engine in sweeps():
        rules = roles.sweeper(spec, settings, engine)
        secrets = [r for r in rules if r["resources"] == ["secrets"]]
        made = "snapshot" in spec["code"] or spec["tensorboard"]["enabled"]
        assert secrets == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hp-snapshot"],
                            "verbs": ["get"]}, *([{"apiGroups": [""], "resources": ["secrets"],
                                                   "verbs": ["create"]}] if made else [])]
        pods = next(r["verbs"] for r in rules if r["resources"] == ["pods"])
        assert pods == (["get", "list", "create", "delete"] if engine == "pods" else ["list"])
        claims = [r for r in rules if r["resources"] == ["persistentvolumeclaims"] and "patch" in r["verbs"]]
        assert [r["resourceNames"] for r in claims] == [[spec.get("output", {}).get("volume", "distrain-outputs")]]
        assert bool([r for r in rules if r["resources"] == ["networkpolicies"]]) == settings.network_policy
        made_there = {res for r in rules for res in r["resources"] if "create" in r["verbs"]}
        assert made_there & {"jobsets", "tfjobs", "pytorchjobs", "paddlejobs"} == (
            {"jobsets"} if engine == "jobset" else {"pytorchjobs"} if engine == "kubeflow" else set())
    with pytest.raises(ValueError, match="no engine runs trials as 'sweep'"):
        roles.sweeper(*sweeps()[0][:2], "sweep")


def refused(call, *args, **kwargs) -> None:
    """The call answers 403: its identity may not make it."""
    with pytest.raises(client.ApiException) as answer:
        call(*args, **kwargs)
    assert answer.value.status == 403, (call.__name__, answer.value.status, answer.value.reason)


def earlier_monitors_role() -> dict:
    """The distrain-monitor Role an earlier version made: the server's Role but for making controllers, Secrets
    and pods/exec included."""
    making = {"serviceaccounts", "roles", "rolebindings", "cronjobs"}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": naming.MONITOR, "namespace": NAMESPACE,
                         "labels": {**naming.MANAGED, naming.COMPONENT: "monitor"}},
            "rules": [r for r in server_role() if not making & set(r["resources"])]}


@pytest.mark.usefixtures("fresh_logs")
def test_each_programs_service_account_may_not_do_what_its_program_needs_not(control_plane, backend, admin):
    """A job with a monitor (several replicas, webhooks in a Secret) and a time to be kept (the namespace's janitor),
    and a sweep (its sweeper): their Roles, as the API server holds them, are roles.py's, the monitors' one that an
    earlier version made, with Secrets in it, brought down to this version's. As each service account: no Secret
    read, listed (nor made, but by the sweeper), no pod made or exec'd into (but by the monitor, for stacks), no
    pod's logs, no Role, service account, RoleBinding, Job or CronJob made, no job's ConfigMap deleted by a monitor,
    no claim but the sweep's labelled by its sweeper; each answers 403."""
    rbac = client.RbacAuthorizationV1Api(admin.api_client)
    earlier = earlier_monitors_role()
    try:
        rbac.replace_namespaced_role(naming.MONITOR, NAMESPACE, earlier)
    except client.ApiException as e:
        if e.status != 404:
            raise
        rbac.create_namespaced_role(NAMESPACE, earlier)
    backend.settings.controller_image = "registry.example.com/notebook:1"
    backend.settings.janitor_schedule = "0 0 1 1 *"  # its own runs never start during the test
    hooks = {"urls": ["https://hooks.example.com/T0KEN"], "link": None}
    backend.submit(tf_spec("watched", workers=1, policy={"ttl_after_finished": "1h"}), hooks=hooks)
    sweep = spec_.validate({"name": "hp", "command": "python train.py --lr {{ lr }}",
                            "code": {"git": "https://example.com/models.git", "commit": COMMIT},
                            "replicas": {"worker": {}}, "tensorboard": {"enabled": True},
                            "sweep": {"parameters": {"lr": {"values": [0.1]}}}})
    try:
        assert backend.submit(sweep)["engine"] == "sweep"
        assert backend.engines.trials_engine(sweep) == "jobset"
        held = {name: admin.api_client.sanitize_for_serialization(rbac.read_namespaced_role(name, NAMESPACE).rules)
                for name in (naming.MONITOR, naming.JANITOR, "hp-sweeper")}
        assert held == {naming.MONITOR: roles.monitor(), naming.JANITOR: roles.janitor(),
                        "hp-sweeper": roles.sweeper(sweep, backend.settings, "jobset")}
        replica = pod_name(admin, "watched", "chief-0")
        intruder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder"},
                    "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "intruder"}, "stringData": {"a": "b"}}
        for account in (naming.MONITOR, naming.JANITOR, "hp-sweeper"):
            with control_plane.acting_as(account) as api:
                core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
                as_rbac = client.RbacAuthorizationV1Api(api)
                core.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB)  # what it does need
                refused(core.read_namespaced_secret, naming.notify_name("watched"), NAMESPACE)  # the webhooks
                refused(core.list_namespaced_secret, NAMESPACE)
                refused(core.create_namespaced_pod, NAMESPACE, intruder, dry_run="All")
                refused(core.read_namespaced_pod_log, replica, NAMESPACE)
                for make, body in ((core.create_namespaced_service_account, {"metadata": {"name": "intruder"}}),
                                   (as_rbac.create_namespaced_role, {"metadata": {"name": "intruder"}, "rules": []}),
                                   (as_rbac.create_namespaced_role_binding, {
                                       "metadata": {"name": "intruder"}, "roleRef": {
                                           "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
                                       "subjects": [{"kind": "ServiceAccount", "name": "default",
                                                     "namespace": NAMESPACE}]}),
                                   (batch.create_namespaced_job, {"metadata": {"name": "intruder"}, "spec": {
                                       "template": {"spec": {**intruder["spec"], "restartPolicy": "Never"}}}}),
                                   (batch.create_namespaced_cron_job, {"metadata": {"name": "intruder"}, "spec": {
                                       "schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                                           **intruder["spec"], "restartPolicy": "Never"}}}}}})):
                    refused(make, NAMESPACE, body, dry_run="All")
                # pods/exec as a plain request, no websocket: refused, or (allowed) asked to upgrade
                if account == naming.MONITOR:
                    with pytest.raises(client.ApiException) as answer:
                        core.connect_post_namespaced_pod_exec(replica, NAMESPACE, command=["true"], stdout=True)
                    assert answer.value.status != 403, answer.value.reason
                    refused(core.create_namespaced_secret, NAMESPACE, secret, dry_run="All")
                    refused(core.delete_namespaced_config_map, "watched", NAMESPACE, dry_run="All")
                    refused(core.read_namespaced_secret, naming.snapshot_name("hp"), NAMESPACE)
                else:
                    refused(core.connect_post_namespaced_pod_exec, replica, NAMESPACE, command=["true"], stdout=True)
                    refused(core.connect_get_namespaced_pod_exec, replica, NAMESPACE, command=["true"], stdout=True)
                if account == naming.JANITOR:  # it makes ConfigMaps: the usage ledger's, as it deletes jobs
                    refused(core.create_namespaced_secret, NAMESPACE, secret, dry_run="All")
                if account == "hp-sweeper":
                    refused(core.patch_namespaced_persistent_volume_claim, "datasets", NAMESPACE,
                            {"metadata": {"labels": {naming.HOLDS_OUTPUTS: "true"}}}, dry_run="All")
                    refused(core.read_namespaced_secret, naming.snapshot_name("watched"), NAMESPACE)
    finally:
        remove_janitor(admin)


@pytest.mark.usefixtures("fresh_logs")
def test_a_sweeps_controller_makes_and_supervises_its_trials_on_pods_as_its_service_account(control_plane, admin,
                                                                                           tmp_path):
    """On the `pods` engine, with no Jupyter server running (a CLI submits and goes), the sweep's controller, its pod
    run with its service account's token, makes its trials' pods, Services and TensorBoards, restarts a failed
    replica (its old pod deleted, a new one made), records each trial's end as its pods end and ends the sweep:
    all within its Role, which grants pods and Services because its trials run on pods."""
    cli = KubeBackend(settings(tmp_path / "cli", engine="pods"), control_plane.client(RESTRICTED))
    cli.settings.controller_image = "registry.example.com/notebook:1"
    spec = spec_.validate({"name": "hpp", "command": "python train.py --lr {{ lr }}",
                           "code": {"git": "https://example.com/models.git", "commit": COMMIT},
                           "replicas": {"worker": {}}, "tensorboard": {"enabled": True},
                           "policy": {"restart": "on-failure", "max_restarts": 1},
                           "sweep": {"parameters": {"lr": {"values": [0.1, 0.2]}}, "parallelism": 2}})
    core = client.CoreV1Api(admin.api_client)

    def status(name: str) -> dict:
        return json.loads(core.read_namespaced_config_map(name, NAMESPACE).data["status.json"])

    try:
        cli.submit(spec)
        role = client.RbacAuthorizationV1Api(admin.api_client).read_namespaced_role("hpp-sweeper", NAMESPACE)
        assert admin.api_client.sanitize_for_serialization(role.rules) == roles.sweeper(spec, cli.settings, "pods")
        for trial in ("hpp-1", "hpp-2"):
            wait(lambda: running(admin, trial) == ["worker-0"], f"the controller made {trial}'s pod", 60)
            assert core.read_namespaced_service(f"{trial}-worker-0", NAMESPACE)
            board = f"metadata.name={naming.tensorboard_name(trial)}"  # made after the replicas, which start first
            wait(lambda: core.list_namespaced_secret(NAMESPACE, field_selector=board).items,
                 f"the controller made {trial}'s TensorBoard", 30)
        [first] = pods_of(admin, "hpp-1")
        end(admin, "hpp-1", "worker-0", 1)
        wait(lambda: [(p.metadata.uid != first.metadata.uid, p.status.phase) for p in pods_of(admin, "hpp-1")] in (
            [(True, "Pending")], [(True, "Running")]), "the controller restarts hpp-1's failed replica", 60)
        for trial in ("hpp-1", "hpp-2"):
            end(admin, trial, "worker-0", 0)
        wait(lambda: status("hpp")["phase"] == "Succeeded", "the controller ends the sweep", 60,
             shown=lambda: json.dumps({n: status(n) for n in ("hpp", "hpp-1", "hpp-2")}, indent=1))
        assert [(status(t)["phase"], status(t)["replicas"]["worker-0"]["restarts"]) for t in ("hpp-1", "hpp-2")] == [
            ("Succeeded", 1), ("Succeeded", 0)]
        wait(lambda: not pods_of(admin, "hpp-1") and not pods_of(admin, "hpp-2"), "the trials' pods are deleted")
    finally:
        with suppress(client.ApiException):
            core.delete_namespaced_config_map("hpp", NAMESPACE, propagation_policy="Foreground")
        wait(lambda: not core.list_namespaced_pod(NAMESPACE).items
             and not core.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items,
             "the sweep, its trials and their pods deleted", 60)
        cli.objects.api.close()


def test_whoever_submits_a_job_may_make_the_namespaces_programs():
    """A submit makes the namespace's ConfigMap of the product's programs if it is missing (render.programs), before
    the job's pods, which mount it: the Jupyter server's Role grants it, and so does every sweeper's, which submits its
    trials; a restart of a replica on "pods" (by either) makes it too."""
    make = roles.rule("", ["configmaps"], ["create"])
    for rules in [server_role(), *(roles.sweeper(spec, settings, engine) for spec, settings, engine in sweeps())]:
        assert not not_granted(make, rules)
