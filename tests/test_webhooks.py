"""Webhooks on the local backend: each event of a job (its end, NoProgress, Straggler) posted once to the admin's
URL and to its owner's, by the job's supervisor, also when no Jupyter server runs; the owner's URL set and shown
(by its host only) through the CLI and the REST API, checked whole, and refused (when set, and again when posted)
where its host is a private address and the admin does not allow these. The hangs' and stragglers' posts are
checked in test_stacks.py and test_progress.py, whose jobs make them. The receivers listen on loopback: the tests
that post to them allow private addresses."""

import json
import stat
import threading

import psutil
import pytest
from conftest import JupyterServer, assert_nothing_left, wait
from webhooks import Misbehaving, Receiver

from jupyter_distrain import notify
from jupyter_distrain.backends.local.processes import free_ports
from jupyter_distrain.backends.local.store import Store

pytestmark = pytest.mark.lane("node")  # its minute beside the real node's tests (conftest.lane_of)

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
        configured(cli, tmp_path, notify_url=admin.url("/admin"), public_url="https://lab.example.org/user/ann/",
                   webhook_allow_private=True)
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
        configured(cli, tmp_path, webhook_allow_private=True)
        cli("webhook", "set", input=failing.url(TOKEN_PATH) + "\n")
        cli("submit", "--name", "unheard", "--", "true")
        job = cli.wait("unheard", until=lambda j: any(e["reason"] == "WebhookFailed" for e in j["events"]))
        assert len(failing.events("unheard")) == 3  # tried three times
        [warned] = [e for e in job["events"] if e["reason"] == "WebhookFailed"]
        port = failing.server.server_address[1]
        assert warned["message"] == (f"the webhook at http://127.0.0.1:{port}/... was not told of unheard's ended: "
                                     "it answered 503")
        tested = cli("webhook", "test", check=False)  # tried once, and said no more of
        assert tested.returncode and tested.stderr.count("not delivered") == 1 and "503" not in tested.stderr
        assert len(failing.posts) == 4
    finally:
        failing.close()


def test_a_receiver_that_answers_in_no_http_or_drips_its_answer_fails_its_post_and_holds_up_nothing(cli, tmp_path):
    """The admin's URL answers what is not HTTP; the owner's sends a status line, then a byte every half second
    forever. The job ends all the same, each failure is a Warning naming why, and its supervisor exits (a post has a
    deadline in all, not only per read)."""
    not_http, dripping = Misbehaving(b"this is not http\r\n\r\n"), Misbehaving(b"HTTP/1.1 200 OK\r\n", drip=True)
    try:
        configured(cli, tmp_path, notify_url=not_http.url(), webhook_allow_private=True)
        cli("webhook", "set", input=dripping.url() + "\n")
        cli("submit", "--name", "unanswered", "--", "true")
        job = cli.wait("unanswered", until=lambda j: sum(e["reason"] == "WebhookFailed" for e in j["events"]) == 2,
                       timeout=60)
        failed = sorted(e["message"] for e in job["events"] if e["reason"] == "WebhookFailed")
        assert failed == [f"the webhook at {url.rpartition('/')[0]}/... was not told of unanswered's ended: {why}"
                          for url, why in sorted([(dripping.url(), "no answer within 5 s"),
                                                  (not_http.url(), "its answer is not HTTP (BadStatusLine)")])]
        assert job["phase"] == "Succeeded" and not_http.connections == 3 and dripping.connections >= 2
        assert_nothing_left(cli.root, timeout=30)
    finally:
        not_http.close()
        dripping.close()


def test_a_read_that_finds_a_runs_end_does_not_wait_for_its_webhook(cli, tmp_path):
    """A job's supervisor killed (both of its processes): the `get` that finds it records the end and returns
    while the webhook has not answered yet; a process of its own posts it, and goes once it is answered."""
    hold = threading.Event()
    held = Receiver(hold=hold)
    try:
        configured(cli, tmp_path, webhook_allow_private=True)
        cli("webhook", "set", input=held.url() + "\n")
        cli("submit", "--name", "orphan", "--", "sleep", "600")
        cli.wait_replica("orphan", "worker-0")
        outer = psutil.Process(Store(cli.root / "jobs.sqlite").job("orphan")["supervisor_pid"])
        [inner] = outer.children()
        outer.kill()
        inner.kill()
        job = cli.json("get", "orphan")
        assert (job["phase"], job["reason"]) == ("Failed", "SupervisorVanished")
        [told] = held.wait("orphan", 1)  # received, not answered yet
        assert (told["phase"], told["reason"], told["event"]) == ("Failed", "SupervisorVanished", "ended")
        hold.set()
        assert_nothing_left(cli.root, timeout=30)
        assert not [e for e in cli.json("get", "orphan")["events"] if e["reason"] == "WebhookFailed"]
    finally:
        hold.set()
        held.close()


def test_a_job_that_ends_while_no_server_runs_is_posted_with_the_servers_link(tmp_path, receiver):
    """Set through the REST API (shown by host only; a bad URL refused naming the field), the webhook hears of a
    job submitted through the server that ends after the server is gone, with the link to it there (the server's
    own address is its public_url)."""
    server = JupyterServer(tmp_path, "--Distrain.webhook_allow_private=True", public=True)
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


PRIVATE = ["http://2130706433/x", "http://0/x", "http://localhost/x", "http://127.0.0.1/x", "http://10.1.2.3/x",
           "http://[::1]/x", "http://[::ffff:127.0.0.1]/x"]


def test_a_webhook_url_is_checked_whole_and_a_private_host_refused_unless_the_admin_allows_it(cli, tmp_path):
    """Addresses inside the network, in any form resolvers read, and localhost are refused naming `url` (and the
    setting that allows them), as are credentials and a lone surrogate; an internationalised host is kept and shown
    in its ASCII form. A URL kept before these checks (a lone surrogate) is shown without failing."""
    server = JupyterServer(tmp_path)
    try:
        for url in PRIVATE:
            refused = server.rest("PUT", "webhook", json={"url": url})
            assert refused.status_code == 400, url
            [error] = refused.json()["errors"]
            assert error["path"] == "url" and "c.Distrain.webhook_allow_private" in error["message"], error
        refused = server.rest("PUT", "webhook", json={"url": "https://user:pw@hooks.example.org/x"})
        assert refused.status_code == 400 and "user name or password" in refused.json()["errors"][0]["message"]
        refused = server.rest("PUT", "webhook", json={"url": "https://hooks.example.org/\ud800"})
        assert (refused.status_code, refused.json()["errors"][0]["path"]) == (400, "url")
        assert server.rest("GET", "webhook").json()["url"] is None
        assert server.rest("PUT", "webhook", json={"url": "https://bücher.example/x"}).status_code == 204
        assert server.rest("GET", "webhook").json()["url"] == "https://xn--bcher-kva.example/..."
    finally:
        server.stop()
    assert cli("webhook", "show").stdout == "https://xn--bcher-kva.example/...\n"
    kept = next((cli.root / "webhooks").iterdir())
    kept.write_text(json.dumps({"url": "https://hooks.example.org/\ud800"}))  # as an older version kept it
    assert cli("webhook", "show").stdout == "(an invalid URL)\n"

    configured(cli, tmp_path, webhook_allow_private=True)
    for url in PRIVATE:
        assert cli("webhook", "set", input=url + "\n").stdout == "webhook set\n"
        assert cli("webhook", "show").stdout == url.replace("/x", "/...\n")


def test_a_redirect_is_not_followed_nor_tried_again(cli, tmp_path):
    """A 302 (to another receiver here) is not delivered, by the test button as by a job's end: one POST each, and
    none reaches the address it names."""
    elsewhere = Receiver()
    redirecting = Receiver(status=302, headers={"Location": elsewhere.url("/elsewhere")})
    try:
        configured(cli, tmp_path, webhook_allow_private=True)
        cli("webhook", "set", input=redirecting.url(TOKEN_PATH) + "\n")
        tested = cli("webhook", "test", check=False)
        assert tested.returncode and tested.stderr.count("not delivered") == 1, tested
        cli("submit", "--name", "moved", "--", "true")
        job = cli.wait("moved", until=lambda j: any(e["reason"] == "WebhookFailed" for e in j["events"]))
        [warned] = [e for e in job["events"] if e["reason"] == "WebhookFailed"]
        assert warned["message"].endswith("moved's ended: it answered 302 (redirects are not followed)"), warned
        assert (redirecting.requests, elsewhere.requests) == ([("POST", TOKEN_PATH)] * 2, [])
    finally:
        redirecting.close()
        elsewhere.close()


def test_the_test_button_says_only_whether_it_was_delivered(tmp_path):
    """Sent a test over the REST API, a closed port, a receiver answering 403 and the Jupyter server itself get the
    same answer, "not delivered" (no status or error to tell them apart by); a receiver that takes it, none."""
    forbidding, taking = Receiver(status=403), Receiver()
    server = JupyterServer(tmp_path, "--Distrain.webhook_allow_private=True")
    try:
        answers = []
        for url in (f"http://127.0.0.1:{free_ports(1)[0]}/hook", forbidding.url(TOKEN_PATH), f"{server.url}/api/x"):
            assert server.rest("PUT", "webhook", json={"url": url}).status_code == 204
            answer = server.rest("POST", "webhook")
            answers.append((answer.status_code, answer.text))
        assert answers[0] == answers[1] == answers[2] and json.loads(answers[0][1]) == {"problems": ["not delivered"]}
        assert forbidding.requests == [("POST", TOKEN_PATH)]  # it was posted, once
        assert server.rest("PUT", "webhook", json={"url": taking.url(TOKEN_PATH)}).status_code == 204
        assert server.rest("POST", "webhook").json() == {"problems": []}
        assert [body["event"] for _, body in taking.posts] == ["test"]
    finally:
        server.stop()
        forbidding.close()
        taking.close()


def test_a_host_that_resolves_to_a_private_address_is_not_posted_to_unless_allowed(cli, tmp_path, receiver):
    """A URL kept while private addresses were allowed, its host a name (localhost) for a loopback address, is
    posted to while they are; once the admin no longer allows them, neither the test button nor a job's supervisor
    posts to it: the name is resolved and the addresses checked where it is posted."""
    port = receiver.server.server_address[1]
    configured(cli, tmp_path, webhook_allow_private=True)
    cli("webhook", "set", input=f"http://localhost:{port}{TOKEN_PATH}\n")
    assert cli("webhook", "test").stdout == "delivered\n"
    configured(cli, tmp_path)
    tested = cli("webhook", "test", check=False)
    assert tested.returncode and tested.stderr.count("not delivered") == 1, tested
    cli("submit", "--name", "inside", "--", "true")
    job = cli.wait("inside", until=lambda j: any(e["reason"] == "WebhookFailed" for e in j["events"]))
    [warned] = [e for e in job["events"] if e["reason"] == "WebhookFailed"]
    assert warned["message"].startswith(f"the webhook at http://localhost:{port}/... was not told of inside's "
                                        "ended: its host resolves to a non-public address ("), warned
    assert receiver.requests == [("POST", TOKEN_PATH)]  # the first test's only


def test_the_link_comes_from_public_url_only(tmp_path, receiver):
    """Without c.Distrain.public_url a job's events carry no link, whatever Host its submit named (a server open
    to remote access takes any); with it, the link leads there (test_a_job_that_ends_while_no_server_runs_...)."""
    server = JupyterServer(tmp_path, "--Distrain.webhook_allow_private=True", "--ServerApp.allow_remote_access=True")
    try:
        assert server.rest("PUT", "webhook", json={"url": receiver.url(TOKEN_PATH)}).status_code == 204
        spec = {"name": "unlinked", "command": "true"}
        assert server.rest("POST", "jobs", json=spec, headers={"Host": "lab.attacker.example"}).status_code == 201
        [ended] = receiver.wait("unlinked", 1)
    finally:
        server.stop()
    assert (ended["phase"], ended["link"]) == ("Succeeded", None)
    wait(lambda: not list((tmp_path / "distrain-home" / "jobs" / "unlinked").glob("workspace")), "the job's end")


def test_a_proxy_in_the_environment_carries_the_post(monkeypatch, receiver):
    """Where the environment names a proxy (http_proxy; no_proxy not naming the host), the post goes to it, which
    resolves the host and decides where this machine's posts may go; nothing is resolved here."""
    monkeypatch.setenv("http_proxy", receiver.url(""))
    monkeypatch.setenv("no_proxy", "")
    body = notify.RunEvent("j", 1, "job", "alice", "local", "Succeeded").body(None)
    assert notify.post({"urls": ["http://hooks.invalid/t0ken"], "link": None}, body) == []
    assert receiver.posts == [("http://hooks.invalid/t0ken", body)]  # the absolute URL, as proxies take it
