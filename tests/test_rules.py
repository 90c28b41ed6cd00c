"""The admin's rules (c.Distrain.allowed_host_paths, allowed_images, max_*, gpu_types), enforced before
anything of a job is created, by the REST API, the client and the CLI alike, on the local backend. (On
Kubernetes, and the GPU types' placement: test_kube_owners.py.)"""

import json
import os

import pytest

from conftest import CLI, EXAMPLES, JupyterServer, write_spec
from jupyter_distrain.client import Client
from jupyter_distrain.config import Distrain
from jupyter_distrain.errors import SpecError
from jupyter_distrain.rules import AdminRules

GPU_TYPES = {"a100": {"node_selector": {"gpu": "a100"}}}


def admin_config(allowed) -> dict:
    return {"allowed_host_paths": [str(allowed)], "allowed_images": ["registry.example.com/*"], "max_replicas": 3,
            "max_gpus_per_replica": 1, "max_gpus_per_job": 2, "max_deadline_seconds": 3600, "gpu_types": GPU_TYPES,
            "ttl_after_finished": "7d", "hang_after": "2h"}


def job(name: str, **fields) -> dict:
    return {"name": name, "code": {"path": str(EXAMPLES / "python")}, "command": "true", **fields}


# each rule broken once: the spec's fields, and the field the refusal names with what it says
BROKEN = [
    ({"data": {"host_path": "/etc"}}, "data.host_path", "'/etc' is outside the host directories jobs may mount"),
    ({"output": {"host_path": "ALLOWED/../escaped"}}, "output.host_path", "is outside the host directories"),
    ({"output": {"host_path": "ALLOWED-not"}}, "output.host_path", "is outside the host directories"),
    ({"image": "docker.io/library/python:3"}, "image",
     "'docker.io/library/python:3' is not an image jobs may use here: registry.example.com/*"),
    ({"replicas": {"worker": {"count": 4}}}, "replicas", "4 replicas; a job has at most 3 here"),
    ({"replicas": {"worker": {"resources": {"gpus": 2}}}}, "replicas.worker.resources.gpus",
     "2 GPUs per worker; a replica has at most 1 here"),
    ({"replicas": {"worker": {"count": 3, "resources": {"gpus": 1}}}}, "replicas",
     "3 GPUs in all; a job has at most 2 here"),
    ({"replicas": {"worker": {"resources": {"gpus": 1, "gpu_type": "h100"}}}}, "replicas.worker.resources.gpu_type",
     "'h100' is not a GPU type of this server; types: a100"),
    ({"policy": {"deadline_seconds": 7200}}, "policy.deadline_seconds", "7200 s; jobs here run at most 3600 s"),
]


def test_host_paths_are_compared_by_directory_once_dots_are_resolved():
    rules = AdminRules.from_config(Distrain(allowed_host_paths=["/data/", "/scratch/team"]), None)
    assert [path for path in ("/data", "/data/x/y", "/data/./x", "/scratch/team", "/scratch/team/a")
            if not rules.host_path_allowed(path)] == []
    assert [path for path in ("/database", "/data/../etc", "/scratch", "/scratch/teams", "/", "/etc")
            if rules.host_path_allowed(path)] == []
    assert AdminRules.from_config(Distrain(), None).host_paths is None  # the backend's default: any
    assert AdminRules.from_config(Distrain(), ()).host_paths == ()
    assert AdminRules.from_config(Distrain(allowed_host_paths=[]), None).host_paths == ()


def test_a_time_to_keep_finished_jobs_or_to_call_one_hung_that_is_no_duration_is_a_clear_configuration_error():
    assert Distrain(ttl_after_finished="1d12h").ttl_after_finished == "1d12h"
    with pytest.raises(Exception, match="'7 days' is not a duration such as 30m, 12h, 7d or 2w"):
        Distrain(ttl_after_finished="7 days")
    assert Distrain(hang_after="90s").hang_after == "90s"
    with pytest.raises(Exception, match="Distrain.hang_after: '20 min' is not a duration such as 90s, 20m or 2h"):
        Distrain(hang_after="20 min")


def test_a_malformed_gpu_type_is_a_clear_configuration_error():
    Distrain(gpu_types={"a100": {"node_selector": {"gpu": "a100"}, "tolerations": [{"key": "gpu",
                                                                                    "operator": "Exists"}]}})
    for bad, says in (({"A100": {}}, "a name as resources.gpu_type takes"),
                      ({"a100": {"nodeSelector": {}}}, "a dict of node_selector and tolerations"),
                      ({"a100": {"node_selector": {"gpu": 100}}}, "node_selector must map label names"),
                      ({"a100": {"tolerations": [{"taint": "x"}]}}, "tolerations must be a list")):
        with pytest.raises(Exception) as refused:
            Distrain(gpu_types=bad)
        assert says in str(refused.value), bad


def test_every_rule_is_refused_by_rest_client_and_cli_naming_the_field_and_nothing_is_created(tmp_path):
    allowed = tmp_path / "shared-data"
    (allowed / "results").mkdir(parents=True)
    config_dir = tmp_path / "jupyter-config"
    config_dir.mkdir()
    (config_dir / "jupyter_server_config.json").write_text(json.dumps({"Distrain": admin_config(allowed)}))
    environment = {**os.environ, "JUPYTER_CONFIG_DIR": str(config_dir)}
    server = JupyterServer(tmp_path, env=environment)
    cli = CLI(server.root, tmp_path)
    cli.env.update(JUPYTER_CONFIG_DIR=str(config_dir))
    try:
        cluster = server.rest("GET", "cluster").json()
        assert cluster["limits"] == {"host_paths": [str(allowed)], "images": ["registry.example.com/*"],
                                     "max_replicas": 3, "max_gpus_per_replica": 1, "max_gpus_per_job": 2,
                                     "max_deadline_seconds": 3600, "gpu_types": ["a100"], "ttl_after_finished": "7d",
                                     "hang_after": "2h"}
        client = Client(server.url, JupyterServer.TOKEN)
        for fields, path, says in BROKEN:
            fields = json.loads(json.dumps(fields).replace("ALLOWED", str(allowed)))
            spec = job("refused", **fields)
            for dry_run in ("true", "false"):
                answer = server.rest("POST", "jobs", params={"dry_run": dry_run}, json=spec)
                assert answer.status_code == 400, (fields, answer.text)
                assert [(e["path"], says in e["message"]) for e in answer.json()["errors"]] == [(path, True)], \
                    answer.json()
            with pytest.raises(SpecError) as refused:
                client.submit(spec)
            assert [e.path for e in refused.value.errors] == [path]
            typed = cli("submit", "-f", str(write_spec(tmp_path / "spec", spec)), check=False)
            assert typed.returncode == 1 and path in typed.stderr and says in typed.stderr, typed.stderr
        assert server.rest("GET", "jobs").json() == []
        assert not (server.root / "jobs").exists() or not list((server.root / "jobs").iterdir())

        # within the rules: the admin's deadline is the job's when it names none; output in an allowed directory
        within = job("within", output={"host_path": str(allowed / "results")}, image="registry.example.com/py:3",
                     command="echo kept > $DISTRAIN_OUTPUT_DIR/result.txt", replicas={"worker": {"count": 2}})
        created = server.rest("POST", "jobs", json=within)
        assert created.status_code == 201, created.text
        assert created.json()["spec"]["policy"]["deadline_seconds"] == 3600
        assert created.json()["spec"]["policy"]["hang_after"] == "2h"
        assert cli.wait("within")["phase"] == "Succeeded"
        assert (allowed / "results" / "result.txt").read_text() == "kept\n"
    finally:
        server.stop()
        cli("delete", "within", check=False)


def test_a_restart_runs_under_the_rules_of_now(cli, tmp_path):
    """A job submitted before the admin set a longest deadline gets it when restarted; one whose spec now
    breaks a rule is refused, and keeps its last run."""
    cli("submit", "-f", str(write_spec(tmp_path / "a", job("before"))))
    cli("submit", "-f", str(write_spec(tmp_path / "b", job("wide", replicas={"worker": {"count": 4}}))))
    for name in ("before", "wide"):
        cli.wait(name)
    config_dir = tmp_path / "jupyter-config"
    config_dir.mkdir()
    (config_dir / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {
        "max_deadline_seconds": 600, "max_replicas": 3}}))
    cli.env.update(JUPYTER_CONFIG_DIR=str(config_dir))
    cli("restart", "before")
    restarted = cli.wait("before")
    assert (restarted["run"], restarted["spec"]["policy"]["deadline_seconds"]) == (2, 600)
    refused = cli("restart", "wide", check=False)
    assert refused.returncode == 1 and "replicas: 4 replicas; a job has at most 3 here" in refused.stderr
    assert cli.json("get", "wide")["run"] == 1
