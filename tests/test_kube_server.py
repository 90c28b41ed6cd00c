"""The Jupyter server and the CLI on the Kubernetes backend (tests/controlplane): REST and CLI, the API
server's refusals, a stalled API server, both backends in one server, the TensorBoard behind the API server's
proxy, watches that resume and a watch version that expired."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from datetime import datetime

import pytest
import requests
import yaml
from conftest import CLI, JupyterServer, assert_nothing_left, wait, write_scalars, write_spec
from controlplane.cluster import ADMIN, HOST_IP, NAMESPACE, RESTRICTED
from kube_support import (COMMIT, CONFIGURED_IMAGE, SETTINGS, cached, chief_spec, configmap, end, pod_name, replica,
                          settings, tf_spec, wait_job)
from kubernetes import client

from jupyter_distrain import storage
from jupyter_distrain.backends.kubernetes import KubeBackend, naming, podmetrics, podspec
from jupyter_distrain.backends.kubernetes.watch import Cache, KubeError, listers
from jupyter_distrain.errors import JobNotFound
from jupyter_distrain.owners import current_owner

pytestmark = pytest.mark.usefixtures("fresh_logs")


def test_the_restricted_token_is_refused_clearly_outside_its_namespace(control_plane, tmp_path):
    kube = KubeBackend(settings(tmp_path, namespace="default"), control_plane.client(RESTRICTED))
    with pytest.raises(KubeError) as refused:
        kube.submit(tf_spec("nope"))
    assert refused.value.status == 403
    assert "Kubernetes refused to" in str(refused.value) and 'User "distrain-jupyter" cannot' in str(refused.value)


def test_rest_api_and_cli_on_the_kubernetes_backend(control_plane, kube_server, admin, tmp_path):
    api, headers = kube_server.api, kube_server.headers
    spec = {"name": "via-rest", "framework": "tensorflow", "command": "python train.py",
            "code": {"git": "https://example.com/models.git", "ref": COMMIT},
            "replicas": {"chief": {}, "ps": {}, "worker": {"count": 1, "resources": {"gpus": 2}}}}
    node = admin.list_node().items[0].metadata.name
    asked = client.V1ResourceRequirements(requests={"cpu": "1500u", "memory": "1Pi"})  # kept as written
    odd = client.V1Pod(metadata=client.V1ObjectMeta(name="odd-quantities"), spec=client.V1PodSpec(
        node_name=node, containers=[client.V1Container(name="c", image="busybox", resources=asked)]))
    admin.create_namespaced_pod("default", odd)  # another team's pod, placed on a node
    try:
        cluster = requests.get(f"{api}/cluster", headers=headers)
        assert cluster.status_code == 200, cluster.text
        assert requests.post(f"{api}/jobs?dry_run=true", json=spec, headers=headers).status_code == 200
    finally:
        admin.delete_namespaced_pod("odd-quantities", "default", grace_period_seconds=0)
    assert cluster.json()["gpus"]["capacity"] == 4
    assert cluster.json()["engine"]["name"] == "jobset"
    assert "the cluster serves JobSet" in cluster.json()["engine"]["reason"]
    too_big = {**spec, "replicas": {"worker": {"resources": {"gpus": 8}}}}
    refused = requests.post(f"{api}/jobs?dry_run=true", json=too_big, headers=headers)
    assert refused.status_code == 400
    assert refused.json()["errors"][0]["path"] == "replicas.worker.resources.gpus"
    assert requests.post(f"{api}/jobs?dry_run=true", json=spec, headers=headers).status_code == 200
    assert not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items

    created = requests.post(f"{api}/jobs", json=spec, headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["backend"] == "kubernetes"
    control_plane.write_log(pod_name(admin, "via-rest", "chief-0"), "hello from the chief")
    wait(lambda: requests.get(f"{api}/jobs/via-rest", headers=headers).json()["phase"] == "Running", "running")

    cli = CLI(kube_server.root, tmp_path)  # a terminal's: the server's config files, as the server exports
    cli.env.update(JUPYTER_CONFIG_DIR=str(kube_server.config_dir), DISTRAIN_BACKEND="kubernetes")
    assert [j["name"] for j in cli.json("list")] == ["via-rest"]
    assert "hello from the chief" in cli("logs", "via-rest", "--replica", "chief-0").stdout
    wait(lambda: "hello from the chief" in requests.get(f"{api}/jobs/via-rest/logs", headers=headers).text,
         "the server copied the chief's log")

    worker = wait(lambda: (r := replica(requests.get(f"{api}/jobs/via-rest", headers=headers).json(), "worker-0"))[
        "started"] and r, "the worker of 2 GPUs runs")  # its GPUs held from its pod's start
    assert worker["usage"]["gpu_hours"] == pytest.approx(2 * worker["usage"]["wall_seconds"] / 3600, abs=1e-6)
    assert worker["usage"]["wall_seconds"] == pytest.approx(
        time.time() - datetime.fromisoformat(worker["started"]).timestamp(), abs=5)
    assert worker["usage"]["cpu_seconds"] is None  # known once its container ended (its log tee's account)
    running = [m for m in requests.get(f"{api}/jobs/via-rest/metrics", headers=headers).json()
               if m["phase"] == "Running"]  # this cluster serves no metrics API: said, not guessed
    assert {"chief-0", "worker-0"} <= {m["replica"] for m in running} and all(
        (m["cpu_percent"], m["memory_bytes"], m["unknown"]) == (None, None, podmetrics.NOT_SERVED) for m in running)
    assert f"Not known: {podmetrics.NOT_SERVED}" in cli("top", "via-rest").stdout
    end(admin, "via-rest", "chief-0", 0)
    job = wait(lambda: (j := cli.json("get", "via-rest"))["phase"] == "Succeeded" and j, "the job succeeds")
    assert {r["name"]: r["phase"] for r in job["replicas"]} == {"chief-0": "Succeeded", "ps-0": "Stopped",
                                                              "worker-0": "Stopped"}
    # the engine deleted the worker's pod as the job ended: its start, recorded as it ran, still counts its GPUs
    assert replica(job, "worker-0")["usage"]["gpu_hours"] >= worker["usage"]["gpu_hours"]
    listed = requests.get(f"{api}/jobs", headers=headers).json()  # the list: replicas counted, no spec
    assert [(j["name"], j["phase"], j["replica_phases"]) for j in listed] == \
        [("via-rest", "Succeeded", {"Succeeded": 1, "Stopped": 2})] and "spec" not in listed[0]
    assert [m["phase"] for m in requests.get(f"{api}/jobs/via-rest/metrics", headers=headers).json()] == \
        ["Succeeded", "Stopped", "Stopped"]

    # clone over REST; stop, restart and delete from the CLI, which renders pods as the server does
    clone = requests.post(f"{api}/jobs/via-rest/clone", headers=headers)
    assert clone.status_code == 201 and clone.json()["name"] == "via-rest-2"
    assert clone.json()["spec"]["code"]["commit"] == COMMIT
    wait(lambda: cli.json("get", "via-rest-2")["phase"] == "Running", "the clone runs")
    cli("stop", "via-rest-2")
    assert cli.json("get", "via-rest-2")["phase"] == "Stopped"
    cli("restart", "via-rest-2")
    wait(lambda: requests.get(f"{api}/jobs/via-rest-2", headers=headers).json()["phase"] == "Running",
         "the restarted clone runs")
    pods = admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}=via-rest-2,{naming.RUN}=2").items
    assert len(pods) == 3 and {p.spec.containers[0].image for p in pods} == {CONFIGURED_IMAGE}
    assert {v.persistent_volume_claim.claim_name for p in pods for v in p.spec.volumes
            if v.persistent_volume_claim} == {"datasets"}
    cli("delete", "via-rest-2")
    assert requests.delete(f"{api}/jobs/via-rest", headers=headers).status_code == 204
    assert requests.get(f"{api}/jobs/via-rest", headers=headers).status_code == 404
    kept = {(run["job"], run["run"]): run for run in requests.get(f"{api}/usage", headers=headers).json()["runs"]}
    assert kept.keys() >= {("via-rest", 1), ("via-rest-2", 1), ("via-rest-2", 2)}, kept.keys()  # each run, deleted
    assert kept["via-rest", 1]["gpu_hours"] >= worker["usage"]["gpu_hours"] > 0  # its 2 GPUs, to its end
    assert not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items


def test_budgets_warn_or_refuse_with_their_numbers_and_the_ledger_keeps_a_deleted_jobs_gpu_hours(control_plane,
                                                                                                   admin, tmp_path):
    """The admin's prices and budgets (3 GPU-hours a month, warned of): a running job of 2 GPUs for an hour at most
    costs its GPU-hours at their price in its view; the form's check of a second such job warns with the numbers
    (1 GPU-hour left of 3, once the first's hour is held); a CLI whose budgets refuse refuses it, and a job of GPUs
    with no deadline, making nothing; the first job deleted, its run is kept in the namespace's ledger, which the
    usage report reads with its GPU-hours, cost and what is left of the budget. A job beyond the budget submitted
    where budgets warn runs, an OverBudget warning on it."""
    config = tmp_path / "jupyter-config"
    config.mkdir()
    distrain = {"backend": "kubernetes", "namespace": NAMESPACE, "kubeconfig": str(control_plane.kubeconfig(RESTRICTED)),
                "default_images": {"python": CONFIGURED_IMAGE}, "prices": {"gpu_hour": {"*": 3.0}, "currency": "EUR"},
                "budgets": {"*": 3}, "budget_action": "warn"}
    (config / "jupyter_server_config.json").write_text(json.dumps({"Distrain": distrain}))
    refusing = tmp_path / "refusing-config"
    refusing.mkdir()
    (refusing / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {**distrain, "budget_action": "refuse"}}))
    server = JupyterServer(tmp_path, env={**os.environ, "JUPYTER_CONFIG_DIR": str(config)})
    api, headers = f"{server.url}/distrain/api", server.headers
    cli = CLI(server.root, tmp_path)
    cli.env.update(JUPYTER_CONFIG_DIR=str(refusing), DISTRAIN_BACKEND="kubernetes")
    spec = {"name": "priced", "framework": "python", "command": "python train.py",
            "replicas": {"worker": {"resources": {"gpus": 2}}}, "policy": {"deadline_seconds": 3600}}
    ledger = "app.kubernetes.io/component=usage-ledger"
    admin.delete_collection_namespaced_config_map(NAMESPACE, label_selector=ledger)  # other tests' deleted jobs'
    try:
        assert requests.post(f"{api}/jobs", json=spec, headers=headers).status_code == 201
        wait(lambda: replica(requests.get(f"{api}/jobs/priced", headers=headers).json(), "worker-0")["started"],
             "the worker of 2 GPUs runs")
        used = requests.get(f"{api}/jobs/priced", headers=headers).json()["usage"]
        assert used["cost"] == pytest.approx(3.0 * used["gpu_hours"], abs=1e-4) and used["gpu_hours"] > 0

        second = {**spec, "name": "second"}
        verdict = requests.post(f"{api}/check", json=second, headers=headers).json()
        assert verdict["errors"] == [] and verdict["spec"]["name"] == "second", verdict
        [warned] = [w for w in verdict["warnings"] if w["path"] == "policy.deadline_seconds"]
        assert re.fullmatch(
            r"the job may use 2\.00 GPU-hours \(2 GPUs for its deadline of 1 h\), more than is left; "
            rf"{current_owner()} may use 3 GPU-hours a month: 0\.0\d used this month, [12]\.\d\d held by unfinished "
            r"jobs \(their GPUs to their deadlines\), 1\.0\d left", warned["message"]), warned
        refused = cli("submit", "-f", str(write_spec(tmp_path / "second", second)), check=False)
        assert refused.returncode != 0 and warned["message"].split(";")[0] in refused.stderr, refused.stderr
        endless = {**spec, "name": "endless", "policy": {}}
        refused = cli("submit", "-f", str(write_spec(tmp_path / "endless", endless)), check=False)
        assert refused.returncode != 0 and "a job of 2 GPUs needs a deadline under a budget" in refused.stderr
        assert {j["name"] for j in cli.json("list")} == {"priced"}

        assert requests.delete(f"{api}/jobs/priced", headers=headers).status_code == 204
        report = requests.get(f"{api}/usage", headers=headers).json()
        [run] = report["runs"]
        assert (run["job"], run["run"], run["phase"], run["cpu_measured"]) == ("priced", 1, "Stopped", False)
        assert run["gpu_hours"] == pytest.approx(2 * run["wall_seconds"] / 3600, abs=1e-6) and run["gpu_hours"] > 0
        assert run["cost"] == pytest.approx(3.0 * run["gpu_hours"], abs=1e-4) and report["currency"] == "EUR"
        [owner] = report["owners"]
        assert owner["budget"] == {"gpu_hours": 3, "used": run["gpu_hours"],
                                   "left": pytest.approx(3 - run["gpu_hours"], abs=1e-6)}
        [kept] = admin.list_namespaced_config_map(NAMESPACE, label_selector=ledger).items
        [(key, row)] = kept.data.items()  # the run's key: its job, when the job was made (ms), its run
        assert re.fullmatch(r"priced\.\d{13}\.1", key) and json.loads(row)["gpu_hours"] == run["gpu_hours"], key
        assert requests.get(f"{api}/usage?since=nonsense", headers=headers).status_code == 400

        greedy = {**spec, "name": "greedy", "policy": {"deadline_seconds": 7200}}  # where budgets warn, it goes on
        created = requests.post(f"{api}/jobs", json=greedy, headers=headers)
        assert created.status_code == 201, created.text
        [warning] = [e for e in created.json()["events"] if e["reason"] == "OverBudget"]
        assert warning["type"] == "Warning" and warning["message"].startswith(
            "the job may use 4.00 GPU-hours (2 GPUs for its deadline of 2 h), more than is left;"), warning
    finally:
        for name in ("priced", "greedy"):
            cli("delete", name, check=False)
        server.stop()
        admin.delete_collection_namespaced_config_map(NAMESPACE, label_selector=ledger)
    assert not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items


def test_forbidden_answers_reach_the_user_as_a_clear_error(control_plane, tmp_path):
    server = JupyterServer(tmp_path, "--Distrain.backend=kubernetes", "--Distrain.namespace=default",
                           f"--Distrain.kubeconfig={control_plane.kubeconfig(RESTRICTED)}")
    try:
        answer = requests.get(f"{server.url}/distrain/api/jobs", headers=server.headers)
        assert answer.status_code == 403
        assert "Kubernetes refused to list jobs" in answer.json()["message"]
        assert 'User \\"distrain-jupyter\\" cannot list resource \\"configmaps\\"' in answer.text
    finally:
        server.stop()


class StallingRelay:
    """A relay on a loopback port to the API server that, while stalled, passes no byte either way: a hung API
    server, whose connections stay open and never answer."""

    def __init__(self, port: int):
        self.target = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.passing = threading.Event()
        self.passing.set()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with suppress(OSError):
            while True:
                downstream = self.listener.accept()[0]
                upstream = socket.create_connection(self.target)
                self.sockets += [downstream, upstream]
                for source, sink in ((downstream, upstream), (upstream, downstream)):
                    threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                self.passing.wait()
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.passing.set()
        for s in [self.listener, *self.sockets]:
            s.close()


def test_a_stalled_api_server_answers_504_and_the_cache_still_answers(control_plane, tmp_path, admin):
    """With the API server stalled (connections open, no answer), each request that needs it fails within the
    server's kubernetes_timeout (504), or at once when many wait already (503), and the job list, served from
    the watch cache, answers meanwhile; once the API server answers again, so does everything."""
    relay = StallingRelay(int(control_plane.url.rsplit(":", 1)[1]))
    kubeconfig = yaml.safe_load(control_plane.kubeconfig(RESTRICTED).read_text())
    kubeconfig["clusters"][0]["cluster"]["server"] = relay.url
    (tmp_path / "relayed.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    server = JupyterServer(tmp_path, "--Distrain.backend=kubernetes", f"--Distrain.namespace={NAMESPACE}",
                           f"--Distrain.kubeconfig={tmp_path / 'relayed.kubeconfig'}",
                           "--Distrain.kubernetes_timeout=2")
    api, headers = f"{server.url}/distrain/api", server.headers
    try:
        spec = {"name": "patient", "command": "python train.py",
                "code": {"git": "https://example.com/models.git", "ref": COMMIT}}
        assert requests.post(f"{api}/jobs", json=spec, headers=headers).status_code == 201
        wait(lambda: [j["name"] for j in requests.get(f"{api}/jobs", headers=headers).json()] == ["patient"],
             "the job listed")
        relay.passing.clear()
        with ThreadPoolExecutor(24) as pool:  # more than wait on Kubernetes at once: some answer 503 at once
            asked = [pool.submit(requests.get, f"{api}/cluster", headers=headers, timeout=120) for _ in range(24)]
            time.sleep(0.5)
            listed = requests.get(f"{api}/jobs", headers=headers, timeout=60)  # before: hung with the threads
            assert listed.status_code == 200 and [j["name"] for j in listed.json()] == ["patient"]
            answers = [a.result() for a in asked]
        assert {a.status_code for a in answers} == {503, 504}
        assert {a.headers["Content-Type"] for a in answers} == {"application/json"}  # as the OpenAPI document says
        no_answer = next(a.json()["message"] for a in answers if a.status_code == 504)
        assert no_answer.startswith("Kubernetes did not answer GET ") and no_answer.endswith(" within 2 s")
        assert "wait for it already" in next(a.json()["message"] for a in answers if a.status_code == 503)
        relay.passing.set()
        wait(lambda: requests.get(f"{api}/cluster", headers=headers).ok, "the server answers again", 60)
        assert requests.delete(f"{api}/jobs/patient", headers=headers).status_code == 204
    finally:
        server.stop()
        relay.close()
        with suppress(client.ApiException):
            admin.delete_namespaced_config_map("patient", NAMESPACE)


def test_one_server_offers_both_backends(control_plane, tmp_path, admin):
    server = JupyterServer(tmp_path, "--Distrain.backends=local", "--Distrain.backends=kubernetes",
                           f"--Distrain.namespace={NAMESPACE}",
                           f"--Distrain.kubeconfig={control_plane.kubeconfig(RESTRICTED)}")
    api, headers = f"{server.url}/distrain/api", server.headers
    try:
        cluster = requests.get(f"{api}/cluster", headers=headers).json()
        assert (cluster["backends"], cluster["default_backend"], cluster["backend"]) == \
            (["local", "kubernetes"], "local", "local")
        assert requests.get(f"{api}/cluster?backend=kubernetes", headers=headers).json()["gpus"]["capacity"] == 4
        bogus = requests.post(f"{api}/jobs?backend=slurm", json={"name": "x", "command": "true"}, headers=headers)
        assert bogus.status_code == 400 and "enabled: local, kubernetes" in bogus.json()["message"]

        in_cluster = {"name": "twin", "command": "python train.py",
                      "code": {"git": "https://example.com/models.git", "ref": COMMIT}}
        assert requests.post(f"{api}/jobs?backend=kubernetes", json=in_cluster, headers=headers).status_code == 201
        here = {"name": "twin", "command": "sleep 30"}
        assert requests.post(f"{api}/jobs", json=here, headers=headers).status_code == 409  # names are shared
        here["name"] = "twin-local"
        assert requests.post(f"{api}/jobs", json=here, headers=headers).status_code == 201
        listed = {j["name"]: j["backend"] for j in requests.get(f"{api}/jobs", headers=headers).json()}
        assert listed == {"twin": "kubernetes", "twin-local": "local"}
        for name in listed:  # each call goes to the job's own backend
            assert requests.post(f"{api}/jobs/{name}/stop", headers=headers).json()["phase"] == "Stopped"
            assert requests.delete(f"{api}/jobs/{name}", headers=headers).status_code == 204
        assert requests.get(f"{api}/jobs", headers=headers).json() == []
        assert not admin.list_namespaced_pod(NAMESPACE, label_selector=naming.JOB).items
        assert_nothing_left(server.root)
    finally:
        server.stop()


def test_a_jobs_tensorboard_runs_in_the_cluster_behind_the_api_servers_proxy(control_plane, kube_server, tmp_path):
    api, headers = kube_server.api, kube_server.headers
    spec = {"name": "tb-job", "framework": "tensorflow", "command": "python train.py",
            "code": {"git": "https://example.com/models.git", "ref": COMMIT},
            "replicas": {"chief": {}, "worker": {"count": 1}}, "tensorboard": {"enabled": True}}
    assert requests.post(f"{api}/jobs", json=spec, headers=headers).status_code == 201
    with control_plane.client(ADMIN) as admin_api:
        apps, core = client.AppsV1Api(admin_api), client.CoreV1Api(admin_api)
        deployment = apps.read_namespaced_deployment("tb-job-tensorboard", NAMESPACE)
        assert [o.name for o in deployment.metadata.owner_references] == ["tb-job"]
        container = deployment.spec.template.spec.containers[0]
        mount = container.volume_mounts[0]
        mine = f"{storage.OWNERS}/{storage.owner_dir(SETTINGS.owner)}"  # the server's owner is this user
        assert (mount.mount_path, mount.sub_path, mount.read_only) == ("/output", f"{mine}/tb-job", True)
        selector = f"{naming.COMPONENT}=tensorboard,{naming.JOB}=tb-job"
        pod = wait(lambda: next((p for p in core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
                                 if p.status.pod_ip == HOST_IP), None), "the TensorBoard pod runs", 60)

        output = control_plane.dir / "volumes" / "datasets" / mine / "tb-job"  # the server's output_claim
        write_scalars(output / "training_logs" / "chief-0", "loss", [1.0, 0.5, 0.25])
        write_scalars(output / "training_logs" / "worker-0", "loss", [2.0, 1.0])
        write_scalars(output / "somewhere" / "log", "loss", [3.0])  # where the code chose: a run named by its path
        (output / ".distrain" / "logs").mkdir(parents=True, exist_ok=True)  # the job's own logs: not the board's
        tensorboard = control_plane.run_here(core, pod, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            direct = f"http://{HOST_IP}:{podspec.TENSORBOARD_PORT}"  # as any pod of the namespace reaches it
            probe = container.readiness_probe.http_get.path

            def ready() -> bool:
                with suppress(requests.ConnectionError):
                    return requests.get(f"{direct}{probe}").ok
                return False

            wait(ready, "the TensorBoard is ready", 60)
            assert requests.get(f"{direct}/data/runs").status_code == 403  # no secret: nothing read
            secret = core.read_namespaced_secret("tb-job-tensorboard", NAMESPACE)
            assert secret.metadata.annotations == {naming.OWNER: SETTINGS.owner}
            assert [o.name for o in secret.metadata.owner_references] == ["tb-job"]
            board = f"{kube_server.url}/distrain/tensorboard/tb-job"
            runs = wait(lambda: (r := requests.get(f"{board}/all/data/runs", headers=headers)).ok and r.json(),
                        "the TensorBoard answers through Jupyter and the API server", 60)
            assert sorted(runs) == ["chief-0", "somewhere/log", "worker-0"]
            scalars = requests.get(f"{board}/all/data/plugin/scalars/scalars", params={"run": "worker-0", "tag": "loss"},
                                   headers=headers).json()
            assert [value for _, _, value in scalars] == [2.0, 1.0]
            # the same numbers in the job's own scalars, asked of its TensorBoard
            answer = requests.get(f"{api}/jobs/tb-job/scalars", headers=headers).json()
            assert answer["written"].keys() == answer["runs"].keys()
            assert {key: value for key, value in answer.items() if key not in ("rates", "written")} == {
                "tags": ["loss"], "tag": "loss", "earlier": {}, "runs": {"chief-0": [[0, 1.0], [1, 0.5], [2, 0.25]],
                                                          "somewhere/log": [[0, 3.0]],
                                                          "worker-0": [[0, 2.0], [1, 1.0]]}}
            write_scalars(output / "later" / "log", "loss", [4.0])  # a directory made once the board runs
            wait(lambda: "later/log" in requests.get(f"{board}/all/data/runs", headers=headers).json(),
                 "the board takes in a new directory", 30)
            page = requests.get(f"{board}/all/", headers=headers)
            assert page.ok and "<tb-webapp>" in page.text  # the page passes the API server's proxy
            fonts = set(re.findall(r"""url\(\s*["']?([^)"']*font-roboto/[^)"']*)""", page.text))
            assert fonts and all(url.startswith("/distrain/tensorboard/tb-job/all/font-roboto/") for url in fonts)
            font = requests.get(f"{kube_server.url}{min(fonts)}", headers=headers)
            assert font.ok and font.headers["Content-Type"] == "font/woff2"
            assert requests.get(f"{board}/all/index.js", headers=headers).headers["Content-Type"].startswith(
                "text/javascript")
            one = requests.get(f"{board}/worker-0/", headers=headers, allow_redirects=False)
            assert one.status_code == 302 and one.headers["Location"].endswith("/worker-0/?runFilter=%5Eworker-0%28%2F%7C%24%29")
            anonymous = requests.get(f"{board}/all/data/runs", allow_redirects=False)  # no Jupyter token
            assert anonymous.status_code == 302 and "/login" in anonymous.headers["Location"]
        finally:
            tensorboard.terminate()
            tensorboard.wait()

        assert requests.delete(f"{api}/jobs/tb-job", headers=headers).status_code == 204
        wait(lambda: not apps.list_namespaced_deployment(NAMESPACE, label_selector=naming.JOB).items
             and not core.list_namespaced_service(NAMESPACE, label_selector=naming.JOB).items
             and not core.list_namespaced_secret(NAMESPACE, label_selector=naming.JOB).items
             and not core.list_namespaced_pod(NAMESPACE, label_selector=naming.JOB).items,
             "the garbage collector deleted the TensorBoard", 60)


def apiserver_requests(control_plane, verb: str, resource: str) -> int:
    """The API server's count of namespaced `verb` requests on `resource`, from its /metrics."""
    metrics = requests.get(f"{control_plane.url}/metrics", verify=str(control_plane.dir / "ca.crt"),
                           headers={"Authorization": f"Bearer {control_plane.tokens[ADMIN]}"}, timeout=10)
    metrics.raise_for_status()
    total = 0
    for line in metrics.text.splitlines():
        if line.startswith("apiserver_request_total{"):
            labels, value = line[len("apiserver_request_total{"):].rsplit("} ", 1)
            fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            if (fields["verb"], fields["resource"], fields["scope"]) == (verb, resource, "namespace"):
                total += int(float(value))
    return total


def test_watches_resume_from_their_version_without_listing_again(control_plane, admin, tmp_path):
    kinds = ("configmaps", "pods", "events", "jobs", "jobsets")
    lists = {k: apiserver_requests(control_plane, "LIST", k) for k in kinds}
    watches = apiserver_requests(control_plane, "WATCH", "configmaps")
    started = time.monotonic()
    kube = KubeBackend(settings(tmp_path / "home"), control_plane.client(RESTRICTED))
    kube.start(logging.getLogger("test"), watch_timeout=1)
    try:
        kube.submit(tf_spec("resumed", workers=1))  # its changes cross many one-second watches
        wait_job(kube, "resumed", lambda j: j["phase"] == "Running", "the job runs")
        end(admin, "resumed", "chief-0", 0)  # its one LIST of pods finds the chief's
        wait_job(kube, "resumed", lambda j: j["phase"] == "Succeeded", "the job succeeds")
        wait(lambda: apiserver_requests(control_plane, "WATCH", "configmaps") >= watches + 4, "four watches ended")
        assert {k: apiserver_requests(control_plane, "LIST", k) - lists[k] for k in kinds} == \
            {"configmaps": 1, "pods": 2, "events": 1, "jobs": 1, "jobsets": 1}
        print(f"{apiserver_requests(control_plane, 'WATCH', 'configmaps') - watches} configmap watches, one LIST per kind,"
              f" {time.monotonic() - started:.1f} s")
    finally:
        if kube.exists("resumed"):
            kube.delete("resumed")
        kube.close()


def test_a_cache_of_one_jobs_objects_finds_the_job_it_resumes_from_beyond_them(control_plane, backend, tmp_path):
    """A run's monitor and a sweep's controller watch their own jobs' objects alone: the job one of theirs
    resumes from is read from the API server (a trial made by its sweep's controller resumes from its output), but
    a read of a job beyond them is not answered half from their cache."""
    backend.submit(chief_spec("earlier", output={"volume": "distrain-outputs", "path": "kept"}))
    watching = KubeBackend(settings(tmp_path / "watching"), control_plane.client(RESTRICTED))
    watching.observe("later")
    try:
        resumed = {"name": "later", "resume_from": "job:earlier"}
        assert watching.engines.resume_source(resumed) == backend.engines.resume_source(resumed)
        assert watching.engines.resume_source(resumed)["path"].endswith("/kept")  # where that job wrote
        assert watching.engines.resume_source({**resumed, "resume_from": "job:never"})["path"].endswith("/never")
        with pytest.raises(JobNotFound):
            watching.get("earlier")
    finally:
        watching.close()


def compact_etcd(control_plane) -> None:
    """Make etcd forget every version before its current one, as the API server does every few minutes."""
    revision = requests.post(f"{control_plane.etcd}/v3/kv/range", json={"key": "AA=="}, timeout=10).json()
    requests.post(f"{control_plane.etcd}/v3/kv/compaction", json={"revision": revision["header"]["revision"]},
                  timeout=10).raise_for_status()


def test_an_expired_watch_version_lists_again_once(control_plane, admin, caplog):
    caplog.set_level(logging.DEBUG, logger="test")
    seen = []
    cache = Cache(lambda: listers(admin.api_client, NAMESPACE, {}), seen.append, logging.getLogger("test")).start()
    try:
        admin.create_namespaced_config_map(NAMESPACE, configmap("expiry", None))
        wait(lambda: cached(cache, "expiry"), "the cache holds the job")
        cache.items("events")
        lists = apiserver_requests(control_plane, "LIST", "events")
        # the events watch fell behind: it resumes from a version etcd has compacted (the API server keeps no
        # watch cache of events), and is told 410 Gone
        cache.versions["events"] = "1"
        compact_etcd(control_plane)
        cache.watches["events"].stop()
        wait(lambda: apiserver_requests(control_plane, "LIST", "events") == lists + 1, "the cache lists events again")
        assert len([r for r in caplog.records if "(410)" in r.getMessage() and "too old" in r.getMessage()]) == 1
        seen.clear()
        admin.create_namespaced_event(NAMESPACE, client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name="expiry."), reason="Checked", message="after the relist",
            involved_object=client.V1ObjectReference(kind="ConfigMap", name="expiry", namespace=NAMESPACE)))
        wait(lambda: "Checked" in [e.reason for e in cache.items("events")], "the watch from the new listing runs")
        assert seen == ["expiry"]
        time.sleep(1)
        assert apiserver_requests(control_plane, "LIST", "events") == lists + 1
        cache.stop()
        for thread in cache.threads:  # each blocked reading its watch (of 300 s) until stop() ended it
            thread.join(10)
        assert not [t.name for t in cache.threads if t.is_alive()]
    finally:
        cache.stop()
        admin.delete_namespaced_config_map("expiry", NAMESPACE)
