"""The REST API and the live log stream, against a real Jupyter server running real jobs."""

import asyncio
import json
import re
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from tornado.httpclient import HTTPClientError

from conftest import CLI, EXAMPLES, JupyterServer, assert_nothing_left, own_outputs, kill, processes_of

pytest_plugins = ["pytest_jupyter.jupyter_server"]


@pytest.fixture
def api(jp_fetch, root):
    """Calls the REST API; returns (status, parsed JSON or text). Kills whatever a test left behind."""
    async def call(method, route, body=None, **params):
        if body is None:
            body = "" if method == "POST" else None
        kwargs = {"body": body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)}
        try:
            response = await jp_fetch("distrain", "api", *route.split("/"), method=method, params=params,
                                      allow_nonstandard_methods=True, **kwargs)
        except HTTPClientError as e:
            response = e.response
        text = response.body.decode()
        is_json = response.headers.get("Content-Type", "").startswith("application/json")
        return response.code, json.loads(text) if is_json and text else text

    yield call
    kill(processes_of(root))


async def wait_phase(api, name, phases=("Succeeded", "Failed", "Stopped"), timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, job = await api("GET", f"jobs/{name}")
        assert code == 200, job
        if job["phase"] in phases:
            return job
        await asyncio.sleep(0.2)
    raise AssertionError(f"{name} still {job['phase']}")


def python_job(name, command="python train.py --epochs {{ epochs }}", epochs=20, **extra):
    return {"name": name, "code": {"path": str(EXAMPLES / "python")}, "command": command,
            "hyperparameters": {"epochs": epochs}, **extra}


async def read_stream(ws):
    """Every message until the server closes the stream."""
    messages = []
    while (message := await ws.read_message()) is not None:
        messages.append(json.loads(message))
    return messages


async def test_job_lifecycle_through_rest(api, jp_ws_fetch, root):
    code, job = await api("POST", "jobs", python_job("fit"))
    assert code == 201, job
    assert job["phase"] in ("Pending", "Running") and [r["name"] for r in job["replicas"]] == ["worker-0"]

    ws = await jp_ws_fetch("distrain", "api", "jobs", "fit", "logs", "stream")
    messages = await read_stream(ws)
    assert messages[-1] == {"type": "end", "phase": "Succeeded", "run": 1}
    text = "".join(m["data"] for m in messages if m["type"] == "lines" and m["replica"] == "worker-0")
    assert "done epoch 20 loss" in text

    code, job = await api("GET", "jobs/fit")
    assert job["phase"] == "Succeeded" and job["exit_code"] == 0
    replica = job["replicas"][0]
    assert replica["phase"] == "Succeeded" and replica["exit_code"] == 0 and replica["started"] and replica["finished"]
    assert [e["reason"] for e in job["events"]][:2] == ["Submitted", "Started"]

    code, logs = await api("GET", "jobs/fit/logs", tail="1")
    assert code == 200 and logs.startswith("[worker-0] done epoch 20 loss") and logs.count("\n") == 1
    code, found = await api("GET", "jobs/fit/logs/search", q="DONE epoch 20 ")  # searched on the server
    [hit] = found["hits"]
    assert found["complete"] and hit["replica"] == "worker-0" and hit["text"].startswith("done epoch 20 loss")
    assert hit["before"] == 20 and hit["from"] < hit["offset"]
    for bad in ({"q": ""}, {"q": "a\nb"}, {"q": "x" * 1001}, {"q": "loss", "limit": "0"}, {"q": "loss", "limit": "1001"}):
        code, error = await api("GET", "jobs/fit/logs/search", **bad)
        assert code == 400 and ("'q'" in error["message"] or "'limit'" in error["message"]), (bad, error)
    code, logs = await api("GET", "jobs/fit/logs", replica="worker-0", timestamps="true")
    assert code == 200 and re.fullmatch(r"20\d\d-\d\d-\d\dT[\d:.]+Z done epoch 20 loss [\d.]+", logs.splitlines()[-1])

    # restart with an edited spec, then clone with a changed hyperparameter
    code, job = await api("POST", "jobs/fit/restart", python_job("fit", epochs=3))
    assert code == 200 and job["run"] == 2
    job = await wait_phase(api, "fit")
    assert job["phase"] == "Succeeded"
    code, logs = await api("GET", "jobs/fit/logs", tail="1")
    assert "done epoch 3 loss" in logs
    code, clone = await api("POST", "jobs/fit/clone", {"hyperparameters": {"epochs": 5}})
    assert code == 201 and clone["name"] == "fit-2" and clone["spec"]["code"] == job["spec"]["code"]
    assert (await wait_phase(api, "fit-2"))["phase"] == "Succeeded"
    code, logs = await api("GET", "jobs/fit-2/logs", tail="1")
    assert "done epoch 5 loss" in logs

    code, jobs = await api("GET", "jobs")
    assert [j["name"] for j in jobs] == ["fit", "fit-2"]
    code, fit = await api("GET", "jobs/fit")  # the list has each job's own fields and its replicas counted
    assert jobs[0] == {key: fit[key] for key in jobs[0]} and jobs[0]["replica_phases"] == {"Succeeded": 1}
    assert not {"spec", "replicas", "events", "logs", "output_dir"} & set(jobs[0])
    assert [j["name"] for j in (await api("GET", "jobs", q="FIT-2 succeeded"))[1]] == ["fit-2"]
    code, metrics = await api("GET", "jobs/fit/metrics")
    assert code == 200 and metrics[0]["replica"] == "worker-0" and metrics[0]["cpu_percent"] is None

    code, listed = await api("GET", "job-changes")  # as the panel follows the list
    assert code == 200 and listed["complete"] and listed["jobs"] == jobs
    assert (await api("GET", "job-changes", since=listed["version"]))[1] == {**listed, "complete": False, "jobs": []}
    assert (await api("DELETE", "jobs/fit", purge_output="true"))[0] == 204
    code, changes = await api("GET", "job-changes", since=listed["version"])
    assert changes["jobs"] == [] and changes["removed"] == ["fit"] and changes["version"] != listed["version"]
    assert (await api("DELETE", "jobs/fit-2", purge_output="true"))[0] == 204
    assert (await api("GET", "jobs/fit"))[0] == 404
    assert not (root / "jobs" / "fit").exists() and not (own_outputs(root) / "fit").exists()
    assert_nothing_left(root)


async def test_a_restart_begins_a_run_with_its_own_logs_and_ends_the_earlier_runs_stream(api, jp_ws_fetch, root):
    command = "echo run {{ epochs }} begins; sleep 600"
    assert (await api("POST", "jobs", python_job("rerun", command=command, epochs=1)))[0] == 201
    first = await jp_ws_fetch("distrain", "api", "jobs", "rerun", "logs", "stream")  # follows run 1
    message = json.loads(await first.read_message())
    assert message["replica"] == "worker-0" and message["data"].endswith(" run 1 begins\n")

    code, job = await api("POST", "jobs/rerun/restart", python_job("rerun", command=command, epochs=2))
    assert code == 200 and job["run"] == 2
    rest = await read_stream(first)  # run 1's stream ends, saying which run it followed
    assert rest[-1]["type"] == "end" and rest[-1]["run"] == 1
    assert "run 2" not in "".join(m.get("data", "") for m in rest)

    second = await jp_ws_fetch("distrain", "api", "jobs", "rerun", "logs", "stream", params={"run": "2"})
    assert json.loads(await second.read_message())["data"].endswith(" run 2 begins\n")
    earlier = await jp_ws_fetch("distrain", "api", "jobs", "rerun", "logs", "stream", params={"run": "1"})
    messages = await read_stream(earlier)  # an earlier run: its lines, then the end at once
    assert [m["data"].split(" ", 1)[1] for m in messages[:-1]] == ["run 1 begins\n"]
    assert messages[-1] == {"type": "end", "phase": "Running", "run": 1}

    assert await api("GET", "jobs/rerun/logs") == (200, "[worker-0] run 2 begins\n")
    assert await api("GET", "jobs/rerun/logs", run="1") == (200, "[worker-0] run 1 begins\n")
    for run in ("0", "3"):
        for route in ("logs", "logs/stream"):
            code, error = await api("GET", f"jobs/rerun/{route}", run=run)
            assert (code, error["message"]) == (400, f"job 'rerun' has no run {run}; runs: 1 to 2"), route
    code, error = await api("GET", "jobs/rerun/logs", run="-1")
    assert code == 400 and "'run'" in error["message"]

    assert (await api("POST", "jobs/rerun/stop"))[0] == 200
    assert (await read_stream(second))[-1] == {"type": "end", "phase": "Stopped", "run": 2}
    logs = root / "jobs" / "rerun" / "logs"
    assert sorted(str(p.relative_to(logs)) for p in logs.rglob("*.log")) == \
        ["1/setup.log", "1/worker-0.log", "2/setup.log", "2/worker-0.log"]
    assert (await api("DELETE", "jobs/rerun"))[0] == 204
    assert not (root / "jobs" / "rerun").exists()


async def test_stop_from_rest_leaves_nothing(api, root):
    spec = python_job("sleeper", command="echo started; sleep 600")
    assert (await api("POST", "jobs", spec))[0] == 201
    job = await wait_phase(api, "sleeper", phases=("Running",))
    code, metrics = await api("GET", "jobs/sleeper/metrics")
    assert code == 200 and metrics[0]["phase"] == "Running" and metrics[0]["memory_bytes"] > 0
    assert metrics[0]["cpu_percent"] >= 0 and metrics[0]["gpu_memory_mib"] is None
    code, job = await api("POST", "jobs/sleeper/stop")
    assert code == 200 and job["phase"] == "Stopped"
    assert job["replicas"][0]["phase"] == "Stopped"
    assert_nothing_left(root)


async def test_cli_and_rest_see_the_same_jobs(api, root, tmp_path):
    cli = CLI(root, tmp_path)
    cli("submit", "-f", str(EXAMPLES / "python" / "distrain.yaml"), "--name", "from-cli")
    code, job = await api("GET", "jobs/from-cli")
    assert code == 200 and job["spec"]["name"] == "from-cli"
    assert (await api("POST", "jobs", python_job("from-rest", epochs=2)))[0] == 201
    await wait_phase(api, "from-rest")
    assert {j["name"] for j in cli.json("list")} == {"from-cli", "from-rest"}
    assert [j["name"] for j in cli.json("list", "REST", "local")] == ["from-rest"]  # every word, any case
    assert "done epoch 2" in cli("logs", "from-rest").stdout


async def test_bad_requests_get_clear_errors_and_create_nothing(api, root):
    code, error = await api("POST", "jobs", {"name": "Bad_Name", "command": "x", "replicas": {"worker": {"count": 99}},
                                             "hyperparameters": {"lr": [1]}})
    assert code == 400
    paths = {e["path"]: e["message"] for e in error["errors"]}
    assert set(paths) == {"name", "replicas.worker.count", "hyperparameters.lr"}, paths
    assert "between 0 and 64" in paths["replicas.worker.count"]

    code, error = await api("POST", "jobs", python_job("ok", command="python {{ missing }}"))
    assert code == 400 and "unknown placeholder" in error["errors"][0]["message"]
    code, error = await api("POST", "jobs", {**python_job("ok"), "code": {"path": "/no/such/dir"}})
    assert code == 400 and error["errors"][0]["path"] == "code.path"
    code, error = await api("POST", "jobs", {**python_job("ok"), "data": {"host_path": "/no/such/data"}})
    assert code == 400 and error["errors"][0]["path"] == "data.host_path"

    code, error = await api("POST", "jobs", {**python_job("ok"), "name": "Bad_Name"}, dry_run="true")
    assert code == 400 and [e["path"] for e in error["errors"]] == ["name"]
    code, dry = await api("POST", "jobs", {**python_job("dry"), "code": {"path": "."}}, dry_run="true")
    assert code == 200 and Path(dry["code"]["path"]).is_absolute() and dry["replicas"]["worker"]["count"] == 1

    for body in ("[1, 2]", "null", '"text"'):
        code, error = await api("POST", "jobs", body.encode())
        kind = {"[1, 2]": "an array", "null": "null", '"text"': "a string"}[body]
        assert (code, error["message"]) == (400, f"the request body must be a JSON object {{...}}, not {kind}")
    assert (await api("GET", "jobs/ghost"))[0] == 404
    assert (await api("POST", "jobs/ghost/stop"))[0] == 404
    assert (await api("POST", "jobs/ghost/clone"))[0] == 404
    assert (await api("GET", "jobs/ghost/logs"))[0] == 404
    for tail in ("-1", "²"):  # the second is a digit to str.isdigit, not to int()
        code, error = await api("GET", "jobs/ghost/logs", tail=tail)
        assert code == 400 and "'tail'" in error["message"]
    assert (await api("GET", "jobs"))[1] == []
    assert not (root / "jobs").exists() or not any((root / "jobs").iterdir())

    assert (await api("POST", "jobs", python_job("twice", epochs=1)))[0] == 201
    for dry_run in ("false", "true"):
        code, error = await api("POST", "jobs", python_job("twice", epochs=1), dry_run=dry_run)
        assert code == 409 and "exists" in error["message"]
    code, error = await api("POST", "jobs/twice/restart", python_job("renamed"))
    assert code == 400 and error["errors"][0]["path"] == "name"
    code, error = await api("POST", "jobs/twice/clone", {"name": "twice"})
    assert code == 409
    for route in ("clone", "restart"):
        for body in (b"null", b'["not", "an", "object"]', b'"text"'):
            code, error = await api("POST", f"jobs/twice/{route}", body)
            assert code == 400 and error["message"].startswith("the request body must be a JSON object"), error
    code, error = await api("GET", "jobs/twice/logs", replica="worker-9")
    assert code == 400 and "worker-0" in error["message"]
    for cursor in ("worker-0", "worker-0:²", ":5"):
        code, error = await api("GET", "jobs/twice/logs/stream", cursor=cursor)
        assert code == 400 and "cursor" in error["message"], cursor
    code, error = await api("GET", "jobs/twice/logs", since="yesterday")
    assert code == 400 and "duration" in error["message"]
    await wait_phase(api, "twice")
    assert [j["name"] for j in (await api("GET", "jobs"))[1]] == ["twice"]


async def test_check_answers_a_verdict_and_a_clone_can_be_edited_first(api, root):
    """The form checks as the person types: a refused draft is a 200 verdict, not a failed request."""
    code, verdict = await api("POST", "check", {**python_job("ok"), "name": "Bad_Name"})
    assert code == 200 and verdict["spec"] is None and [e["path"] for e in verdict["errors"]] == ["name"]
    code, error = await api("POST", "check", python_job("fine"), backend="nowhere")  # a bad request, not a draft
    assert code == 400 and "not enabled" in error["message"]
    for body in ("[1, 2]", "null"):
        assert (await api("POST", "check", json.loads(body)))[0] == 400
    code, verdict = await api("POST", "check", python_job("fine", epochs=1))
    assert code == 200 and verdict["errors"] == [] and verdict["spec"]["hyperparameters"] == {"epochs": 1}
    assert verdict["warnings"] == []  # a job here starts at once
    assert (await api("GET", "jobs"))[1] == []

    assert (await api("POST", "jobs", python_job("base", epochs=1)))[0] == 201
    code, verdict = await api("POST", "check", python_job("base", epochs=1))
    assert code == 200 and verdict["errors"][0]["path"] == "name" and "exists" in verdict["errors"][0]["message"]
    code, spec = await api("POST", "jobs/base/clone", dry_run="true")
    assert code == 200 and spec["name"] == "base-2" and spec["code"] == (await api("GET", "jobs/base"))[1]["spec"]["code"]
    assert [j["name"] for j in (await api("GET", "jobs"))[1]] == ["base"]  # nothing started
    ended = await wait_phase(api, "base")
    code, waiting = await api("GET", "jobs/base/waiting")
    assert code == 200 and waiting == {"name": "base", "phase": ended["phase"], "waiting": False, "sentence": "",
                                       "replicas": [], "queue": None}


EMIT = """
import os, pathlib, sys, time, types
sys.modules["tensorboard.compat.notf"] = types.ModuleType("notf")  # TensorBoard's own switch: no TensorFlow import
from tensorboard.summary import Writer

writer = Writer(os.environ["DISTRAIN_LOG_DIR"])
# given a directory (as Keras' callback in TensorFlow's parameter-server tutorial is): the loss there too
elsewhere = sys.argv[1:] and Writer(os.path.join(os.environ["DISTRAIN_OUTPUT_DIR"], sys.argv[1]))
for step in range(40):
    writer.add_scalar("loss", 1 / (step + 1), step)
    writer.add_scalar("learning_rate", 0.5, step)
    writer.flush()
    if elsewhere:
        elsewhere.add_scalar("loss", 2 / (step + 1), step)
        elsewhere.flush()
    while step == 2 and not pathlib.Path("go").exists():  # the test sees the job running, then lets it go on
        time.sleep(0.05)
writer.close()
"""


async def test_a_running_jobs_scalars_move_as_it_writes_them(api, root, tmp_path):
    """Its replica's, in its own directory (the run worker-0), and those it writes elsewhere in its output
    directory (a run named by its path there)."""
    code = tmp_path / "emit"
    code.mkdir()
    (code / "emit.py").write_text(EMIT)
    spec = {"name": "live", "code": {"path": str(code)}, "command": "python emit.py somewhere/log",
            "tensorboard": {"enabled": True}}
    code_, job = await api("POST", "jobs", spec)
    assert code_ == 201, job
    deadline = time.monotonic() + 120
    while [len((found := (await api("GET", "jobs/live/scalars"))[1])["runs"].get(run, [])) > 2
           for run in ("worker-0", "somewhere/log")] != [True, True]:
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.1)
    first_steps = [[0, 1.0], [1, 0.5], [2, pytest.approx(1 / 3)]]
    elsewhere = [[0, 2.0], [1, 1.0], [2, pytest.approx(2 / 3)]]
    assert found["rates"]["worker-0"] > 0
    assert found["written"]["worker-0"] >= found["written"]["somewhere/log"] - 60  # its last point's time
    assert {key: value for key, value in found.items() if key not in ("rates", "written")} == {
        "tags": ["learning_rate", "loss"], "tag": "loss", "runs": {"somewhere/log": elsewhere, "worker-0": first_steps},
        "earlier": {}}
    assert (await api("GET", "jobs/live"))[1]["phase"] == "Running"
    (root / "jobs" / "live" / "workspace" / "go").touch()  # the replica's working directory
    job = await wait_phase(api, "live")
    assert job["phase"] == "Succeeded", job
    points = (await api("GET", "jobs/live/scalars"))[1]["runs"]["worker-0"]
    assert len(points) == 40 and points[-1] == [39, pytest.approx(1 / 40)]
    assert (await api("GET", "jobs/live/scalars", tag="learning_rate"))[1]["runs"]["worker-0"][-1] == [39, 0.5]
    assert (await api("GET", "jobs/live/scalars"))[1]["runs"]["somewhere/log"][-1] == [39, pytest.approx(2 / 40)]
    assert "Metric:    loss: somewhere/log 0.05 (step 39), worker-0 0.025 (step 39)\n" in \
        CLI(root, tmp_path)("get", "live").stdout

    # restarted, it writes steps 0, 1, 2 again (to a new event file of the same directory): the current run's
    # points are those, the first run's are apart
    assert (await api("POST", "jobs/live/restart"))[0] == 200
    while (found := (await api("GET", "jobs/live/scalars"))[1])["runs"].get("worker-0") != first_steps:
        assert time.monotonic() < deadline + 120, found
        await asyncio.sleep(0.1)
    assert sorted(found["earlier"]) == ["somewhere/log", "worker-0"]
    assert [len(run) for run in found["earlier"]["worker-0"]] == [40]
    (root / "jobs" / "live" / "workspace" / "go").touch()
    assert (await wait_phase(api, "live"))["phase"] == "Succeeded"


async def test_stream_resumes_from_cursor_without_loss_or_repeat(api, jp_ws_fetch, root):
    command = "for i in $(seq 1 400); do echo line $i; sleep 0.005; done"
    assert (await api("POST", "jobs", python_job("count", command=command)))[0] == 201
    assert await api("GET", "jobs/count/logs/stream") == (  # a plain GET, not a WebSocket: said in JSON
        400, {"message": "this endpoint streams over a WebSocket: send 'Upgrade: websocket'"})

    received, cursor = [], {}
    for _ in range(1000):  # reconnect after every second message until the end
        params = {"cursor": ",".join(f"{r}:{o}" for r, o in cursor.items())} if cursor else {}
        ws = await jp_ws_fetch("distrain", "api", "jobs", "count", "logs", "stream", params=params)
        messages = []
        while len(messages) < 2 and (raw := await ws.read_message()) is not None:
            messages.append(json.loads(raw))
        ws.close()
        for m in messages:
            if m["type"] == "lines":
                received += [line.split(" ", 1)[1] for line in m["data"].splitlines() if m["replica"] == "worker-0"]
                cursor[m["replica"]] = m["offset"]
        if any(m["type"] == "end" for m in messages):
            break
    assert received == [f"line {i}" for i in range(1, 401)]

    ws = await jp_ws_fetch("distrain", "api", "jobs", "count", "logs", "stream", params={"replica": "worker-0",
                                                                                          "tail": "2"})
    messages = await read_stream(ws)
    assert messages[0]["data"].splitlines()[-1].endswith("line 400") and len(messages[0]["data"].splitlines()) == 2


async def test_cluster_schema_and_openapi(api):
    code, cluster = await api("GET", "cluster")
    assert code == 200 and cluster["backend"] == "local" and cluster["gpus"]["capacity"] >= 0
    assert cluster["default_images"]["tensorflow"].startswith("tensorflow/")
    code, schema = await api("GET", "schema")
    from jupyter_distrain.spec import schema as job_schema

    assert schema == job_schema()
    code, document = await api("GET", "openapi.json")
    assert document["openapi"].startswith("3.1") and "JobSpec" in document["components"]["schemas"]
    assert "#/$defs/" not in json.dumps(document)


def test_openapi_documents_exactly_the_registered_routes():
    from jupyter_distrain.server import routes
    from jupyter_distrain.server.openapi import openapi_document

    def templated(pattern):
        path = re.sub(r"\(\?P<(\w+)>[^)]*\)\??", lambda m: "{" + m.group(1) + "}", pattern)
        return path.replace("{job}", "{name}").replace("}{path}", "}/{path}")

    registered = {templated(pattern): handler for pattern, handler, *_ in routes()}
    document = openapi_document()
    documented = {}
    for path, item in document["paths"].items():
        server = item.get("servers", document["servers"])[0]["url"]
        parameters = [p for op in item.values() if isinstance(op, dict) for p in op.get("parameters", [])]
        parameters = [document["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]] if "$ref" in p else p
                      for p in parameters + item.get("parameters", [])]
        documented[server.lstrip("/") + path] = {p["name"] for p in parameters if p["in"] == "query"}
    assert set(registered) == set(documented)
    for path, handler in registered.items():
        if hasattr(handler, "query_params"):
            assert set(handler.query_params) == documented[path], path


async def test_every_route_refuses_unauthenticated_requests(jp_serverapp, http_server_client, jp_base_url, api):
    """Enumerates the extension's registered handlers, so a new unprotected route fails here."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    assert (await api("POST", "jobs", python_job("secret-job", epochs=1)))[0] == 201
    def handler_rules(router):
        for rule in router.rules:
            yield from handler_rules(rule.target) if hasattr(rule.target, "rules") else [rule]

    ours = [rule for rule in handler_rules(jp_serverapp.web_app.default_router)
            if getattr(rule.target, "__module__", "").startswith("jupyter_distrain")]
    assert len(ours) >= 14
    values = {"name": "secret-job", "job": "secret-job", "replica": "worker-0", "path": "/"}
    for rule in ours:
        path = re.sub(r"\(\?P<(\w+)>[^)]*\)\??", lambda m: values[m.group(1)], rule.matcher.regex.pattern.rstrip("$"))
        for method in ("GET", "POST", "PUT", "DELETE", "PATCH"):
            response = await http_server_client.fetch(path, method=method, raise_error=False, follow_redirects=False,
                                                      body=b"{}" if method in ("POST", "PUT", "PATCH") else None,
                                                      allow_nonstandard_methods=True)
            assert response.code in (302, 403, 405), (rule.target.__name__, method, path, response.code)
            assert b"secret-job" not in response.body and b"worker-0" not in response.body
            if response.code == 302:
                assert "/login" in response.headers["Location"], path
        url = http_server_client.get_url(path).replace("http", "ws", 1)
        with pytest.raises(HTTPClientError) as refused:
            await websocket_connect(HTTPRequest(url))
        assert refused.value.code in (403, 405), (rule.target.__name__, path)
    code, job = await api("GET", "jobs/secret-job")
    assert code == 200 and job["run"] == 1  # nothing the anonymous requests sent took effect
    await wait_phase(api, "secret-job")


async def test_numbers_are_finite_and_bounded_and_every_answer_is_json(api, jp_fetch):
    """NaN, Infinity, 1e400 or a 30-digit number never get in: a 400 names the field, and no answer
    carries a token a browser's JSON.parse refuses."""
    async def post(text: str):
        try:
            response = await jp_fetch("distrain", "api", "jobs", method="POST", body=text, params={"dry_run": "true"})
        except HTTPClientError as e:
            response = e.response
        return response.code, json.loads(response.body)

    for token in ("NaN", "Infinity", "-Infinity"):
        code, body = await post('{"name": "n", "command": "true", "hyperparameters": {"lr": %s}}' % token)
        assert code == 400 and body["message"] == f"the request body is not valid JSON: {token} is not a JSON number"
    code, body = await post('{"name": "n", "command": "true", "hyperparameters": {"lr": 1e400, "n": %s}}'
                            % ("9" * 30))
    assert code == 400 and body["errors"] == [
        {"path": "hyperparameters.lr", "message": "inf is not allowed: must be a finite number"},
        {"path": "hyperparameters.n", "message": "must be between -9007199254740991 and 9007199254740991"}]
    code, body = await post(json.dumps({"name": "n", "command": "true", "policy": {"deadline_seconds": 10**9},
                                        "replicas": {"worker": {"resources": {"cpu": 1e-300}}}}))
    assert code == 400 and [e["path"] for e in body["errors"]] == ["policy.deadline_seconds",
                                                                  "replicas.worker.resources.cpu"], body
    deep = "[" * 100_000 + "]" * 100_000
    assert (await post(deep)) == (400, {"message": "the request body is nested too deeply"})
    big = json.dumps({"name": "n", "command": "x" * (1 << 20)})
    assert (await post(big)) == (400, {"message": f"the request body is {len(big)} bytes; at most 1048576 (1 MiB)"})

    assert (await api("POST", "jobs", python_job("quiet", command="true")))[0] == 201
    await wait_phase(api, "quiet")
    huge = "9" * 30
    for params, message in (({"tail": huge}, "query parameter 'tail' must be a whole number from 0 to "),
                            ({"tail": "9" * 5000}, "query parameter 'tail' must be a whole number from 0 to "),
                            ({"since": huge + "s"}, "query parameter 'since': a duration reaching back at most"),
                            ({"since": "0001-01-01T00:00:00Z"}, "query parameter 'since': a time from 1970 on")):
        code, body = await api("GET", "jobs/quiet/logs", **params)
        assert code == 400 and body["message"].startswith(message), body
    assert (await api("GET", "jobs/quiet/logs", tail=str(2**53 - 1)))[0] == 200


async def test_the_schemas_extremes_are_carried_through_submit_list_get_and_end(api, root):
    """Every duration and number at the edge of what the schema allows is a job that lists, shows and ends;
    beyond it, a 400 naming the field."""
    extremes = {"name": "edges", "command": "true", "policy": {
        "ttl_after_finished": "520w", "deadline_seconds": 31536000, "max_restarts": 100, "restart": "on-failure"},
        "replicas": {"worker": {"count": 1, "resources": {"cpu": 4096, "memory": "999999999999999Ti"}}},
        "hyperparameters": {"big": 2**53 - 1, "small": -(2**53 - 1), "huge": 1.7e308, "tiny": -1.7e308,
                            "least": 5e-324, "text": "x" * 4096}}
    code, job = await api("POST", "jobs", extremes)
    assert code == 201, job
    job = await wait_phase(api, "edges")
    assert job["phase"] == "Succeeded" and job["spec"]["hyperparameters"] == extremes["hyperparameters"]
    assert datetime.fromisoformat(job["expires"]) - datetime.fromisoformat(job["finished"]) == timedelta(weeks=520)
    assert [(j["name"], j["expires"]) for j in (await api("GET", "jobs"))[1]] == [("edges", job["expires"])]
    assert (await api("GET", "jobs/edges/logs"))[0] == 200
    code, _ = await api("POST", "jobs/edges/restart")
    assert code == 200 and (await wait_phase(api, "edges"))["run"] == 2
    assert (await api("DELETE", "jobs/edges"))[0] == 204

    beyond = {"policy.ttl_after_finished": {"policy": {"ttl_after_finished": "521w"}},
              "policy.deadline_seconds": {"policy": {"deadline_seconds": 31536001}},
              "policy.max_restarts": {"policy": {"max_restarts": 101}},
              "replicas.worker.resources.cpu": {"replicas": {"worker": {"resources": {"cpu": 4097}}}},
              "hyperparameters.big": {"hyperparameters": {"big": 2**53}}}
    for field, change in beyond.items():
        code, error = await api("POST", "jobs", {"name": "beyond", "command": "true", **change})
        assert code == 400 and [e["path"] for e in error["errors"]] == [field], (field, error)
    assert (await api("GET", "jobs"))[1] == []


def test_the_server_deletes_the_jobs_past_their_time_to_be_kept_and_keeps_their_output(tmp_path):
    """The server's default time (1s) for a job naming none, its own (1h) for the other: the first goes, with its
    logs, once that time is over after it finished; its output stays."""
    server = JupyterServer(tmp_path, "--Distrain.ttl_after_finished=1s", "--Distrain.ttl_check_interval=0.2")
    try:
        assert server.rest("GET", "cluster").json()["limits"]["ttl_after_finished"] == "1s"
        jobs = {}
        for name, policy in (("brief", {}), ("kept", {"ttl_after_finished": "1h"})):
            spec = {"name": name, "command": "echo result > $DISTRAIN_OUTPUT_DIR/result.txt", "policy": policy}
            answer = server.rest("POST", "jobs", json=spec)
            assert answer.status_code == 201, answer.text
            jobs[name] = answer.json()
        assert jobs["brief"]["spec"]["policy"]["ttl_after_finished"] == "1s"  # the server's, filled in at submit
        deadline = time.monotonic() + 60
        while server.rest("GET", "jobs/brief").status_code != 404:
            assert time.monotonic() < deadline, "the job outlived its time to be kept"
            time.sleep(0.2)
        assert (Path(jobs["brief"]["output_dir"]) / "result.txt").read_text() == "result\n"
        assert not (server.root / "jobs" / "brief").exists()
        kept = server.rest("GET", "jobs/kept").json()
        assert kept["phase"] == "Succeeded" and datetime.fromisoformat(kept["expires"]) == \
            datetime.fromisoformat(kept["finished"]) + timedelta(hours=1)
    finally:
        server.stop()
