"""Where teams run it: JupyterHub on Kubernetes (tests/controlplane/hub.py, from the docs' chart values) on the
real node, each user's server in a pod of its own with the product's extension, its service account as its
credential, reached through the hub's proxy under /user/<name>/ by a real browser and by the hub's API tokens."""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager

import pytest
import requests
import yaml
from conftest import EXAMPLES, furnish, rbac
from controlplane import hub as hubs
from controlplane.hub import HUB_ADMIN, NAMESPACE, PASSWORD, Hub
from controlplane.images import PRODUCT_IMAGE, PYTHON_IMAGE, TENSORFLOW_IMAGE
from kubernetes import client
from playwright.sync_api import TimeoutError, expect, sync_playwright
from test_panel import CHROMIUM_ARGS, open_panel, screenshot
from test_panel_form import train_notebooks_repo
from test_real_pods import git_host, publish, python, wait  # noqa: F401 (git_host is a fixture)

from jupyter_distrain.backends.kubernetes import naming

pytestmark = [pytest.mark.real_pods, pytest.mark.timeout(420, func_only=True)]
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:jupyter-distrain"


def values_here(per_user: bool = False) -> dict:
    """The chart values of docs/jupyterhub.md (`per_user`: with a namespace per user), with this cluster's images
    in place of a registry's."""
    values = hubs.chart_values(per_user)
    name, _, tag = PRODUCT_IMAGE.rpartition(":")
    values["singleuser"]["image"] = {"name": name, "tag": tag, "pullPolicy": "Never"}  # imported, not pulled
    values["singleuser"]["extraFiles"]["distrain"]["data"]["Distrain"].update(
        allowed_images=["distrain.test/*"], git_image=PYTHON_IMAGE,
        default_images={"python": PYTHON_IMAGE, "tensorflow": TENSORFLOW_IMAGE})
    spawner = values["hub"].get("config", {}).get("KubeSpawner", {})
    if "user_namespace_template" in spawner:  # KubeSpawner reads {hubnamespace} from its pod's service account:
        spawner["user_namespace_template"] = spawner["user_namespace_template"].replace(  # this hub runs in none
            "{hubnamespace}", NAMESPACE)
    return values


@pytest.fixture(scope="module")
def hub(real_cluster, tmp_path_factory):
    """A started hub, its namespace furnished as docs/jupyterhub.md's steps say; when it is gone, nothing of it or
    of its users' servers is left: no pod, process or job."""
    furnish(real_cluster, NAMESPACE, as_user=False)
    started = Hub(real_cluster, tmp_path_factory.mktemp("hub"), values_here())
    real_cluster.create(started.files_secret(NAMESPACE))
    started.start()
    try:
        yield started
    finally:
        left = started.stop()
        try:
            assert left == []
            for namespace in namespaces(started):
                wait(lambda: not started.admin.list_namespaced_pod(namespace).items, f"no pod left in {namespace}")
                assert started.admin.list_namespaced_config_map(namespace, label_selector=naming.JOB).items == []
        finally:
            started.close()


def namespaces(hub: Hub) -> list[str]:
    return [ns.metadata.name for ns in hub.admin.list_namespace().items
            if ns.metadata.name == NAMESPACE or ns.metadata.name.startswith(f"{NAMESPACE}-")]


@contextmanager
def logged_in(hub: Hub, user: str):
    """A browser page on `user`'s JupyterLab, reached as they would: logged in at the hub's page, their server
    started by the hub if it was not running."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{hub.url}/hub/login")
        page.locator("#username_input").fill(user)
        page.locator("#password_input").fill(PASSWORD)
        page.locator("#login_submit").click()
        page.wait_for_url(lambda url: "/hub/login" not in url)
        page.goto(f"{hub.url}/hub/spawn")  # the hub starts the server (unless it runs), then sends the browser to it
        try:
            page.wait_for_url(f"**/user/{user}/lab**", timeout=240_000)  # within the hub's start_timeout
        except TimeoutError as e:
            raise AssertionError(hub.servers_state()) from e
        page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=180_000)
        yield page
        browser.close()


class Rest:
    """`user`'s server's REST API through the hub's proxy, with an API token of `user`'s (or of `as_user`)."""

    def __init__(self, hub: Hub, user: str, as_user: str = ""):
        self.base = f"{hub.url}/user/{user}/distrain/api"
        self.headers = {"Authorization": f"token {hub.user_token(as_user or user)}"}

    def __call__(self, method: str, route: str, **options) -> requests.Response:
        return requests.request(method, f"{self.base}/{route}", headers=self.headers, timeout=120, **options)

    def job(self, name: str) -> dict:
        answer = self("GET", f"jobs/{name}")
        answer.raise_for_status()
        return answer.json()

    def wait(self, name: str, phases=("Succeeded", "Failed", "Stopped"), timeout: float = 240) -> dict:
        return wait(lambda: (job := self.job(name))["phase"] in phases and job, f"{name} in {phases}", timeout,
                    lambda: self.job(name))


def tf_repository(tmp_path, git_host) -> str:
    """examples/tf-ps as a user's repository on the git host: its distrain.yaml with no code of its own (the form
    takes the repository's), a notebook; its URL."""
    code = shutil.copytree(EXAMPLES / "tf-ps", tmp_path / "tf-ps")
    spec = yaml.safe_load((code / "distrain.yaml").read_text())
    del spec["code"]
    spec["hyperparameters"]["steps"] = 100
    (code / "distrain.yaml").write_text(yaml.safe_dump(spec))
    (code / "explore.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return publish(code, git_host)


def test_a_user_trains_across_pods_from_her_servers_panel_through_the_hubs_proxy(hub, real_cluster, git_host,
                                                                                 tmp_path):
    """alice logs in; her server's pod runs the product under the chart's service account, configured in the
    cluster (no kubeconfig), with the admin's settings from the mounted file. She clones her repository in it and
    trains it from the panel (chief, ps, 2 workers) to Succeeded, its logs live and its TensorBoard through the
    hub's proxy; the API server saw each of her server's requests as the service account."""
    url = tf_repository(tmp_path, git_host)
    with logged_in(hub, "alice") as page:
        [pod] = hub.server_pods("alice")
        assert (pod.metadata.namespace, pod.spec.service_account_name) == (NAMESPACE, "jupyter-distrain")
        environment = {variable.name: variable.value for variable in pod.spec.containers[0].env}
        assert environment["JUPYTERHUB_USER"] == "alice" and "KUBECONFIG" not in environment
        print(hub.in_server("alice", f"git clone --quiet {url} tf-ps && ls tf-ps"))  # as in her terminal
        page.goto(f"{hub.url}/user/alice/lab/tree/tf-ps")
        page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
        train_notebooks_repo(page)
        form = page.locator(".jp-MainAreaWidget:not(.lm-mod-hidden) .jp-distrain-form")
        expect(form.locator('[data-field="name"] input')).to_have_value("tf-ps", timeout=30_000)
        expect(form.get_by_label("worker count")).to_have_value("2")
        expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=30_000)
        form.get_by_role("button", name="Submit").click()

        view = page.locator(".jp-distrain-job-view")
        expect(view.locator("h2")).to_have_text("tf-ps", timeout=30_000)
        expect(view.locator("[data-replica]")).to_have_count(4, timeout=60_000)
        logs = view.locator(".jp-distrain-logs")  # through the hub's proxy's websocket
        expect(logs.locator(".jp-distrain-logline", has_text="step ").first).to_be_visible(timeout=240_000)
        assert view.locator(".jp-distrain-job-header .jp-distrain-phase").inner_text() == "Running"
        screenshot(page, "hub-logs")
        expect(view.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Succeeded",
                                                                                        timeout=300_000)
        view.locator('[data-replica="chief-0"]').get_by_role("button", name="TensorBoard").click()
        board = page.frame_locator(".jp-MainAreaWidget:not(.lm-mod-hidden) iframe")  # through both proxies
        expect(board.get_by_text("loss").first).to_be_visible(timeout=120_000)
        screenshot(page, "hub-tensorboard")
    rest = Rest(hub, "alice")
    job = rest.job("tf-ps")
    assert job["owner"] == "alice" and job["engine"] == "jobset"
    assert {r["name"]: r["phase"] for r in job["replicas"]} == {
        "chief-0": "Succeeded", "ps-0": "Stopped", "worker-0": "Stopped", "worker-1": "Stopped"}

    # the API server saw her server's requests as the service account, from her server's pod
    made = [event for event in real_cluster.audited(SERVICE_ACCOUNT)
            if event["verb"] == "create" and event["objectRef"].get("resource") == "jobsets"]
    assert {(e["objectRef"]["name"], *e["sourceIPs"]) for e in made} == {("tf-ps", pod.status.pod_ip)}  # dry runs too
    assert rest("DELETE", "jobs/tf-ps").ok


def test_a_colleague_beside_her_sees_and_touches_none_of_her_jobs_and_an_admin_sees_both(hub):
    """bob's server, in the same namespace, lists none of alice's jobs and cannot act on them from his panel, the
    REST API or `distrain` in his terminal; his token opens nothing of her server. The admin's settings from the
    mounted file bind both. The hub's admin's server sees both users' jobs, with their owners."""
    alice, bob = Rest(hub, "alice"), Rest(hub, "bob")
    hub.start_server("alice")
    for rest, user in ((alice, "alice"), (bob, "bob")):
        spec = {"name": f"{user}s", "image": PYTHON_IMAGE, "command": "sleep 600"}
        if user == "bob":
            hub.start_server("bob")
        assert rest("POST", "jobs", json=spec).status_code == 201
        greedy = rest("POST", "jobs", json={**spec, "name": "greedy",
                                            "replicas": {"worker": {"count": 3, "resources": {"gpus": 4}}}})
        assert greedy.status_code == 400 and "12 GPUs in all; a job has at most 8 here" in greedy.text, greedy.text

    assert [job["name"] for job in bob("GET", "jobs").json()] == ["bobs"]
    for method, route in (("GET", "jobs/alices"), ("POST", "jobs/alices/stop"), ("DELETE", "jobs/alices"),
                          ("GET", "jobs/alices/logs")):
        assert bob(method, route).status_code == 404, (method, route)
    bob_at_alices = Rest(hub, "alice", as_user="bob")
    assert bob_at_alices("GET", "jobs").status_code == 403
    terminal = hub.in_server("bob", "distrain list; distrain stop alices; distrain delete alices")
    assert "bobs" in terminal and terminal.count("no job named 'alices'") == 2, terminal
    with logged_in(hub, "bob") as page:
        open_panel(page)
        jobs = page.locator("#jupyter-distrain-panel .jp-distrain-jobs")
        expect(jobs.locator('[data-job="bobs"]')).to_be_visible(timeout=60_000)
        expect(jobs.locator('[data-job="alices"]')).to_have_count(0)
    assert alice.job("alices")["phase"] == "Running"

    hub.start_server(HUB_ADMIN)
    admin = Rest(hub, HUB_ADMIN)
    owners = {job["name"]: job["owner"] for job in admin("GET", "jobs").json()}
    assert owners == {"alices": "alice", "bobs": "bob"}
    for rest, user in ((alice, "alice"), (bob, "bob")):
        assert rest("DELETE", f"jobs/{user}s").ok
    hub.stop_server(HUB_ADMIN)
    hub.stop_server("bob")


def test_her_job_goes_on_when_the_hub_stops_her_server(hub, real_cluster):
    """The hub stops alice's server while her job runs (as the culler would): the cluster ends the job as it
    should, and her next server shows it Succeeded with every replica's lines."""
    hub.start_server("alice")
    alice = Rest(hub, "alice")
    lines = "import time\nfor i in range(8):\n    print('line', i, flush=True)\n    time.sleep(2)\n"
    spec = {"name": "outlives", "image": PYTHON_IMAGE, "command": python(lines), "replicas": {"worker": {"count": 3}},
            "policy": {"success": "all-workers"}}
    assert alice("POST", "jobs", json=spec).status_code == 201
    alice.wait("outlives", ("Running",), 120)
    hub.stop_server("alice")
    jobsets = client.CustomObjectsApi(hub.admin.api_client)
    wait(lambda: any(c["type"] == "Completed" and c["status"] == "True" for c in jobsets.get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", "outlives").get("status", {}).get("conditions", [])),
         "the cluster ends the job", 180)

    hub.start_server("alice")
    alice = Rest(hub, "alice")
    job = alice.job("outlives")
    assert job["phase"] == "Succeeded", job
    logs = lambda: alice("GET", "jobs/outlives/logs").text  # noqa: E731
    last_lines = [f"[{replica}] line 7" for replica in ("worker-0", "worker-1", "worker-2")]
    wait(lambda: all(line in logs() for line in last_lines), "every worker's last line, copied by her new server",
         60, logs)
    assert alice("DELETE", "jobs/outlives").ok
    hub.stop_server("alice")


# what bob's server's own token may read of alice's namespace, run in his pod: the status of each request
READS = """
import sys
from kubernetes import client, config
from kubernetes.client.rest import ApiException
config.load_incluster_config()
api, namespace, pod = client.CoreV1Api(), sys.argv[1], sys.argv[2]
for read in (lambda: api.list_namespaced_config_map(namespace), lambda: api.list_namespaced_pod(namespace),
             lambda: api.read_namespaced_pod_log(pod, namespace), lambda: api.list_namespaced_secret(namespace)):
    try:
        read()
        print(200)
    except ApiException as e:
        print(e.status)
"""


def test_with_a_namespace_per_user_another_users_token_reads_nothing_of_hers(hub, real_cluster):
    """With docs/jupyterhub.md's namespace per user, each given what it says: alice's server and job run in hers,
    and bob's server's service account gets 403 reading its jobs' records, pods, logs or Secrets."""
    hub.stop()
    for user in ("alice", "bob"):
        namespace = f"{NAMESPACE}-{user}"
        furnish(real_cluster, namespace, as_user=False, capacity_pods=False)
        real_cluster.create(hub.files_secret(namespace))
    hub.values = values_here(per_user=True)
    hub.start()
    for user in ("alice", "bob"):  # KubeSpawner keeps a user's namespace in their state: made again, they have none
        hub.api("DELETE", f"users/{user}")
        hub.api("POST", f"users/{user}")
    try:
        hub.start_server("alice")
        hub.start_server("bob")
        assert [pod.metadata.namespace for pod in hub.server_pods("alice")] == [f"{NAMESPACE}-alice"]
        alice = Rest(hub, "alice")
        assert alice("POST", "jobs", json={"name": "hers", "image": PYTHON_IMAGE, "command": "sleep 600"}).ok
        alice.wait("hers", ("Running",), 120)
        [pod] = hub.admin.list_namespaced_pod(f"{NAMESPACE}-alice", label_selector=f"{naming.JOB}=hers").items
        program = READS.replace("sys.argv[1], sys.argv[2]", f"{f'{NAMESPACE}-alice'!r}, {pod.metadata.name!r}")
        assert hub.in_server("bob", python(program)).split() == ["403"] * 4
        assert Rest(hub, "bob")("GET", "jobs").json() == []
        assert alice("DELETE", "jobs/hers").ok
    finally:
        for user in ("alice", "bob"):
            hub.stop_server(user)
        real_cluster.apply(*(doc for doc in rbac(NAMESPACE) if doc["kind"] == "ClusterRole"))  # with pods again
