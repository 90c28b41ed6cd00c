"""Fuzz the whole REST API from its own OpenAPI document, against a real `jupyter server` process."""

import json
import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from conftest import JupyterServer, assert_nothing_left, kill, processes_of
from jupyter_distrain import spec as spec_
from jupyter_distrain.server.openapi import openapi_document
from jupyter_distrain.backends.local.store import Store


# Where the server's (and its jobs') outgoing HTTP goes: a closed port here, so that the webhooks the fuzzing sets
# (any http or https URL) are refused at once and nothing reaches an address off this machine.
NOWHERE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proxied = {**os.environ, "http_proxy": NOWHERE, "https_proxy": NOWHERE, "no_proxy": ""}
    server = JupyterServer(tmp_path_factory.mktemp("fuzz"), env=proxied)
    yield server
    server.stop()
    kill(processes_of(server.root))


# the document the server serves (openapi.json), built from the same files
schema = schemathesis.openapi.from_dict(openapi_document())
# Every request carries the server's token (test_every_route_refuses_unauthenticated_requests covers
# requests without it): a negative case that only drops the Authorization header would be sent with it.
schema.config.generation.update(with_security_parameters=False)


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_answers_every_input_by_its_contract(case, server):
    """No 5xx; every status, header and body as documented; invalid input refused with a 4xx.

    Two checks are left out. Jupyter refuses a request without credentials with 403 where
    missing_required_header insists on 401 (test_every_route_refuses_unauthenticated_requests
    covers authentication). A schema-valid spec may still name a directory or repository that
    does not exist, which is rightly refused with a 400 naming the field, so
    positive_data_acceptance does not hold.
    """
    path_item = openapi_document()["paths"][case.operation.path]
    base_url = server.url + path_item.get("servers", openapi_document()["servers"])[0]["url"]
    excluded = [schemathesis.checks.missing_required_header, schemathesis.checks.positive_data_acceptance]
    if case.operation.path.startswith("/tensorboard/"):
        # a page in the browser: without credentials it redirects to Jupyter's login, as /lab does
        excluded.append(schemathesis.checks.negative_data_rejection)
    case.call_and_validate(base_url=base_url, headers=server.headers, timeout=120, excluded_checks=excluded)


HOSTILE_QUERY = ["9" * 30, "9" * 5000, "-1", "1e400", "NaN", "Infinity", "-Infinity", "0x10", "1.5", "%EF%BC%91",
                 "%FF%FE", "%00", "%E2%80%AE", "", "true%00", "%ED%A0%80"]
HOSTILE_NAMES = ["..", "%2E%2E", "a" * 300, "%00", "%FF", "%C3%B1", "-", "%20"]
HOSTILE_BODIES = [b"\xff\xfe{\x00}\x00", '{"name": "n"}'.encode("utf-16"), b'{"name": NaN}', b"1e400", b"[" * 10_000,
                  b'{"a":' * 5_000, b'"\\ud800"', b"null", b"{}", b'{"name": "\\u0000"}', b"\xc3\x28",
                  b'{"name": "n", "command": "true", "replicas": {"worker": {"count": 1e400}}}',
                  b'{"name": "n", "command": "true", "hyperparameters": {"x": -0.0, "y": 1e-400}}',
                  b'{"username": "u", "password": "p", "host": "\\ud800"}']


def test_hostile_values_on_every_route_get_a_4xx_in_strict_json(server):
    """Beyond what the schema generates: huge and non-finite numbers, odd encodings (invalid UTF-8, UTF-16,
    NUL, lone surrogates) in every query parameter, path segment and body of every documented operation.
    No answer is a 5xx, and every JSON answer parses strictly."""
    import http.client
    from urllib.parse import urlsplit

    assert server.rest("POST", "jobs", json={"name": "target", "command": "true"}).status_code == 201
    document = openapi_document()
    components = document["components"]["parameters"]
    host = urlsplit(server.url).netloc
    answers = []

    def send(method: str, path: str, body: bytes | None = None) -> None:
        connection = http.client.HTTPConnection(host, timeout=120)
        connection.request(method, path, body=body, headers={**server.headers, "Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        connection.close()
        if payload and response.getheader("Content-Type", "").startswith("application/json"):
            json.loads(payload, parse_constant=lambda token: pytest.fail(f"{token} in {method} {path}"))
        answers.append((response.status, method, path, body[:40] if body else None, payload[:200]))

    operations = sorted(((path, item, method, operation) for path, item in document["paths"].items()
                         for method, operation in item.items() if method in ("get", "post", "put", "delete")),
                        key=lambda o: o[2] == "delete")  # the target job is deleted last
    for path, item, method, operation in operations:
        base = item.get("servers", document["servers"])[0]["url"]
        parameters = [components[p["$ref"].rsplit("/", 1)[1]] if "$ref" in p else p
                      for p in item.get("parameters", []) + operation.get("parameters", [])]
        fill = {p["name"]: {"name": "target", "replica": "worker-0", "path": ""}.get(p["name"], "x")
                for p in parameters if p["in"] == "path"}
        route = base + path.format(**fill)
        for parameter in (p for p in parameters if p["in"] == "query"):
            for value in HOSTILE_QUERY:
                send(method.upper(), f"{route}?{parameter['name']}={value}")
        for parameter in (p for p in parameters if p["in"] == "path" and p["name"] != "path"):
            for value in HOSTILE_NAMES:
                send(method.upper(), base + path.format(**{**fill, parameter["name"]: value}))
        if "requestBody" in operation:
            for body in HOSTILE_BODIES:
                send(method.upper(), route, body)
    assert len(answers) > 400
    assert not [a for a in answers if a[0] >= 500], [a for a in answers if a[0] >= 500]


# The operations that make, change or end jobs, in this order (the last deletes the job the others act on).
JOB_OPERATIONS = [("/jobs", "POST"), ("/jobs/{name}/clone", "POST"), ("/jobs/{name}/restart", "POST"),
                  ("/jobs/{name}/stop", "POST"), ("/jobs/{name}", "DELETE")]


def test_fuzzed_jobs_are_whole_or_absent(server):
    """Requests generated for every operation that makes, changes or ends a job (those naming one name a job made
    for them): every job stored after, theirs and any the module's other tests made, is valid and
    complete, and no directory belongs to no job. Then every job is deleted, and nothing of them is left."""
    acted_on = {"name": "acted-on", "command": "sleep 5"}
    assert server.rest("POST", "jobs", json=acted_on).status_code == 201
    for path, method in JOB_OPERATIONS:
        send_generated(schema[path][method], server, {"name": acted_on["name"]})
    store = Store(server.root / "jobs.sqlite")
    jobs = store.jobs()
    assert jobs, "the fuzzing made no job: nothing was checked"
    for job in jobs:
        assert spec_.validate(job["spec"]) == job["spec"]
        assert [r["name"] for r in job["replicas"]] == [f"{role}-{i}" for role, i in spec_.replicas(job["spec"])]
    on_disk = {p.name for p in (server.root / "jobs").iterdir()} if (server.root / "jobs").exists() else set()
    assert on_disk == {job["name"] for job in jobs}
    for job in jobs:
        assert server.rest("DELETE", f"jobs/{job['name']}").status_code == 204
    assert_nothing_left(server.root)
    assert server.rest("GET", "jobs").json() == []


def send_generated(operation, server, path_parameters: dict) -> None:
    """Requests generated for `operation` from its documentation, its path's parameters replaced by ours; none
    is answered with a 5xx."""
    base_url = server.url + openapi_document()["servers"][0]["url"]

    @given(case=operation.as_strategy())
    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
    def send(case):
        if case.path_parameters:
            case.path_parameters = {**case.path_parameters, **path_parameters}
        response = case.call(base_url=base_url, headers=server.headers, timeout=120)
        assert response.status_code < 500, (case.method, case.formatted_path, response.text)

    send()
