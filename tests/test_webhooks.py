"""Webhooks on the local backend: each event of a job (its end, NoProgress, Straggler) posted once to the admin's
URL and to its owner's, by the job's supervisor, also when no Jupyter server runs; the owner's URL set and shown
(by its host only) through the CLI and the REST API. The hangs' and stragglers' posts are checked in
test_stacks.py and test_progress.py, whose jobs make them."""

import json
import stat

import pytest
from conftest import JupyterServer, wait
from webhooks import Receiver

TOKEN_PATH = "/hooks/T0KEN-abc123"  # a webhook URL's secret part, as chat services make them


@pytest.fixture
def receiver():
    hooks = Receiver()
    yield hooks
    hooks.close()


def configured(cli, tmp_path, **settings) -> None:
    """The Distrain settings `cli` runs with, as an administrator writes them."""
    config = tmp_path / "jupyter-config"
    config.mkdir(exist_ok=True)
    (config / "jupyter_server_config.json").write_text(json.dumps({"Distrain": settings}))
    cli.env["JUPYTER_CONFIG_DIR"] = str(config)


def test_a_jobs_end_is_posted_once_to_the_admins_and_its_owners_webhook(cli, tmp_path, receiver):
    """No Jupyter server: the CLI submits, the supervisor posts. The owner's URL is read from a hidden prompt, kept
    with mode 0600 and shown by its host; each run's end reaches both URLs exactly once, with the job's link."""
    admin = Receiver()
    try:
        configured(cli, tmp_path, notify_url=admin.url("/admin"), public_url="https://lab.example.org/user/ann/")
        assert cli("webhook", "show").stdout == "none\n(every job's events also go to the admin's webhook)\n"
        refused = cli("webhook", "set", input="ftp://files.example.org/x\n", check=False)
        assert refused.returncode and "url: must be an http or https URL" in refused.stderr
        cli("webhook", "set", input=receiver.url(TOKEN_PATH) + "\n")
        kept = cli.root / "webhooks"
        assert [stat.S_IMODE(p.stat().st_mode) for p in kept.iterdir()] == [0o600]
        assert cli("webhook", "show").stdout.startswith(f"http://127.0.0.1:{receiver.server.server_address[1]}/...\n")
        assert cli("webhook", "test").stdout == "delivered\n"
        assert receiver.posts[-1][1]["event"] == "test"

        cli("submit", "--name", "ends", "--", "sh", "-c", "echo training; exit 3")
        [ended] = receiver.wait("ends", 1)
        recorded = cli.json("get", "ends")
        fields = ("job", "kind", "event", "phase", "reason", "replica", "run", "backend", "link")
        assert {k: ended[k] for k in fields} == {
            "job": "ends", "kind": "job", "event": "ended", "phase": "Failed", "reason": recorded["reason"],
            "replica": None, "run": 1, "backend": "local",
            "link": "https://lab.example.org/user/ann/lab?distrain-job=ends"}
        assert ended["message"] == recorded["message"] and recorded["reason"]
        assert receiver.posts[-1][0] == TOKEN_PATH
        assert admin.wait("ends", 1)[0]["id"] == ended["id"]  # one event, the same id to both
        hooks = cli.root / "jobs" / "ends" / "hooks.json"
        assert stat.S_IMODE(hooks.stat().st_mode) == 0o600
        assert "T0KEN" not in cli("get", "ends", "-o", "json").stdout + cli("list", "-o", "json").stdout

        cli("restart", "ends")
        cli.wait("ends", until=lambda job: job["run"] == 2 and job["phase"] == "Failed")
        assert [b["run"] for b in receiver.wait("ends", 2)] == [1, 2]
        assert len(admin.wait("ends", 2)) == 2

        cli("webhook", "delete")
        assert cli("webhook", "show").stdout.startswith("none\n")
        cli("submit", "--name", "after", "--", "true")
        cli.wait("after")
        admin.wait("after", 1)
        assert receiver.events("after") == []  # the owner's no longer
    finally:
        admin.close()


def test_a_webhook_that_fails_is_tried_again_and_named_by_its_host_only(cli, tmp_path):
    failing = Receiver(status=503)
    try:
        cli("webhook", "set", input=failing.url(TOKEN_PATH) + "\n")
        cli("submit", "--name", "unheard", "--", "true")
        job = cli.wait("unheard", until=lambda j: any(e["reason"] == "WebhookFailed" for e in j["events"]))
        assert len(failing.events("unheard")) == 3  # tried three times
        [warned] = [e for e in job["events"] if e["reason"] == "WebhookFailed"]
        port = failing.server.server_address[1]
        assert warned["message"] == (f"the webhook at http://127.0.0.1:{port}/... was not told of unheard's ended: "
                                     "it answered 503")
        assert cli("webhook", "test", check=False).stderr.count("it answered 503") == 1
    finally:
        failing.close()


def test_a_job_that_ends_while_no_server_runs_is_posted_with_the_servers_link(tmp_path, receiver):
    """Set through the REST API (shown by host only; a bad URL refused naming the field), the webhook hears of a
    job submitted through the server that ends after the server is gone, with the link to it there."""
    server = JupyterServer(tmp_path)
    try:
        refused = server.rest("PUT", "webhook", json={"url": "not a url"})
        assert refused.status_code == 400 and refused.json()["errors"][0]["path"] == "url"
        assert server.rest("PUT", "webhook", json={"url": receiver.url(TOKEN_PATH)}).status_code == 204
        shown = server.rest("GET", "webhook").json()
        assert shown == {"url": f"http://127.0.0.1:{receiver.server.server_address[1]}/...", "admin": False}
        assert server.rest("POST", "webhook").json() == {"problems": []}
        assert receiver.posts[-1][1]["event"] == "test"
        spec = {"name": "outlives", "command": "sleep 4; echo done"}
        assert server.rest("POST", "jobs", json=spec).status_code == 201
        link = f"{server.url}/lab?distrain-job=outlives"
    finally:
        server.stop()
    [ended] = receiver.wait("outlives", 1)
    assert (ended["phase"], ended["reason"], ended["link"]) == ("Succeeded", "Completed", link)
    wait(lambda: not list((tmp_path / "distrain-home" / "jobs" / "outlives").glob("workspace")), "the job's end")
