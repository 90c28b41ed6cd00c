"""Two jobs side by side (GET jobs/compare, `distrain diff`, the panel's Compare): a job and its clone with one
hyperparameter and one uncommitted file changed differ in exactly those, over REST, on the command line and in the
panel, from real PyTorch training; two runs of one job, before and after a restart that edited it, too. Their cost at
the admin's prices in the job view, and the panel's usage report."""

import json
import os
import re
import shutil
import time

import pytest
from conftest import CLI, EXAMPLES, JupyterServer, assert_nothing_left, make_checkout
from playwright.sync_api import expect
from test_panel import assert_accessible, lab_page, open_panel, screenshot

from jupyter_distrain import Client

pytestmark = pytest.mark.lane("node")  # its minute beside the real node's tests (conftest.lane_of)


def test_a_job_and_its_clone_with_a_hyperparameter_and_a_file_changed_differ_in_exactly_those(tmp_path):
    config = tmp_path / "jupyter-config"  # the admin's prices: a CPU-hour as measured
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {
        "prices": {"cpu_hour": 3.6, "currency": "EUR"}}}))
    server = JupyterServer(tmp_path, app="lab", env={**os.environ, "JUPYTER_CONFIG_DIR": str(config)})
    try:
        remote = tmp_path / "remote.git"
        checkout = make_checkout(server.root_dir / "work", remote)
        train = checkout / "train.py"
        shutil.copy(EXAMPLES / "pytorch-ddp" / "train.py", train)  # uncommitted: in the first job's snapshot
        code = {"git": str(remote), "ref": "main", "changes_from": "work"}
        spec = {"name": "base", "framework": "pytorch", "code": code, "hyperparameters": {"lr": 0.05},
                "command": "python train.py --epochs 4 --samples 256 --learning_rate {{ lr }}"}
        assert server.rest("POST", "jobs", json=spec).status_code == 201
        train.write_text(train.read_text().replace("FEATURES = 8\n", "FEATURES = 8  # of the synthetic data\n"))
        clone = {"name": "tuned", "hyperparameters": {"lr": 0.1}, "code": code}  # with my changes as they are now
        assert server.rest("POST", "jobs/base/clone", json=clone).status_code == 201
        for name in ("base", "tuned"):
            while (job := server.rest("GET", f"jobs/{name}").json())["finished"] is None:
                time.sleep(0.3)
            assert job["phase"] == "Succeeded", job

        answer = server.rest("GET", "jobs/compare", params={"a": "base", "b": "tuned"})
        assert answer.status_code == 200, answer.text
        found = answer.json()
        assert [(row["field"], row["a"], row["b"]) for row in found["spec"] if row["differs"]] == [
            ("hyperparameters.lr", 0.05, 0.1)]
        assert {row["field"] for row in found["spec"]} >= {"command", "code.commit", "replicas.worker.count"}
        assert found["code"]["files"] == [{"status": "M", "path": "train.py"}] and not found["code"]["unknown"]
        changed = [line for line in found["code"]["diff"].splitlines() if re.match(r"[-+][^-+]", line)]
        assert changed == ["-FEATURES = 8", "+FEATURES = 8  # of the synthetic data"]
        assert found["packages"] == [] and found["image"]["a"] == found["image"]["b"]
        assert [(side["name"], side["phase"]) for side in (found["a"], found["b"])] == [("base", "Succeeded"),
                                                                                       ("tuned", "Succeeded")]
        assert all(side["seconds"] > 0 for side in (found["a"], found["b"]))
        [loss] = [row for row in found["metrics"]["tags"] if row["tag"] == "loss"]
        assert [point["step"] for point in [*loss["a"].values(), *loss["b"].values()]] == [4, 4]  # epochs from 1

        assert Client(server.url, server.TOKEN).compare("base", "tuned") == found
        for query, status, said in [({"a": "base"}, 400, "'a' and 'b'"), ({"a": "base", "b": "gone"}, 404, "gone"),
                                    ({"a": "base", "b": "tuned", "c": "x"}, 400, "'c'")]:
            refused = server.rest("GET", "jobs/compare", params=query)
            assert refused.status_code == status and said in refused.json()["message"], refused.text
        refused = server.rest("POST", "jobs", json={"name": "compare", "command": "true"})
        assert refused.status_code == 400 and [e["path"] for e in refused.json()["errors"]] == ["name"], refused.text

        printed = CLI(server.root, tmp_path)("diff", "base", "tuned").stdout
        assert "Spec: 1 of" in printed and "hyperparameters.lr: 0.05 -> 0.1" in printed, printed
        assert "  M train.py" in printed and "+FEATURES = 8  # of the synthetic data" in printed, printed

        with lab_page(server) as page:
            open_panel(page)
            page.locator('[data-job="base"]').get_by_title("Open base").click()
            cost = server.rest("GET", "jobs/base").json()["usage"]["cost"]
            assert cost > 0  # its CPU seconds at 3.6 an hour
            expect(page.locator(".jp-distrain-job-view dd.jp-distrain-usage")).to_contain_text(f"cost {cost:.2f}")
            page.locator(".jp-distrain-job-view").get_by_role("button", name="Compare…").click()
            dialog = page.locator(".jp-Dialog")
            dialog.locator("select").select_option("tuned")
            dialog.get_by_role("button", name="Ok").click()
            view = page.locator(".jp-distrain-compare")
            expect(view.locator("h2")).to_have_text("base and tuned", timeout=30_000)
            expect(view.locator(".jp-distrain-compare-spec h3")).to_contain_text("1 of")
            expect(view.locator("tr.jp-distrain-differs th")).to_have_text(["hyperparameters.lr"])
            expect(view.locator(".jp-distrain-compare-code h3")).to_have_text("Code: 1 file differs")
            expect(view.locator(".jp-distrain-compare-code li")).to_have_text(["M train.py"])
            expect(view.locator(".jp-distrain-diff-added")).to_have_text(["+FEATURES = 8  # of the synthetic data\n"])
            expect(view.locator(".jp-distrain-chart-legend li")).to_have_count(2, timeout=30_000)  # a line each
            screenshot(page, "panel-compare")
            assert_accessible(page, ".jp-distrain-compare-widget")

            assert server.rest("POST", "jobs/base/restart").status_code == 200  # its run 1 kept
            while (job := server.rest("GET", "jobs/base").json())["finished"] is None:
                time.sleep(0.3)
            page.locator('[data-job="base"]').get_by_title("Open base").click()  # its view again, in front
            page.locator(".jp-distrain-job-view").get_by_role("button", name="Compare…").click()
            dialog.locator("select").select_option("base@1")  # an earlier run of this job, offered first
            dialog.get_by_role("button", name="Ok").click()
            view = page.locator(".jp-distrain-compare").filter(has_text="base and base@1")
            expect(view.locator(".jp-distrain-compare-ends tbody th")).to_have_text(["base (run 2)", "base (run 1)"],
                                                                                   timeout=30_000)
            expect(view.locator(".jp-distrain-compare-spec h3")).to_contain_text("0 of")
            expect(view.locator(".jp-distrain-chart-legend li")).to_have_count(2, timeout=30_000)  # each run's own

            page.get_by_role("button", name="Usage").click()  # the sidebar's: the jobs' runs, their cost in all
            report = page.locator(".jp-distrain-usage-report")
            expect(report.locator(".jp-distrain-usage-runs tbody th")).to_have_text(["base", "tuned", "base"],
                                                                                    timeout=30_000)
            expect(report.locator(".jp-distrain-usage-totals caption")).to_have_text(["By owner"])
            expect(report.locator(".jp-distrain-usage-totals thead")).to_contain_text("Cost (EUR)")
            screenshot(page, "panel-usage")
            assert_accessible(page, ".jp-distrain-usage-report-widget")
        for name in ("base", "tuned"):
            assert server.rest("DELETE", f"jobs/{name}").status_code == 204
        kept = server.rest("GET", "usage").json()  # deleted, their runs stay in the ledger
        assert [(run["job"], run["run"]) for run in kept["runs"]] == [("base", 1), ("tuned", 1), ("base", 2)]
        assert kept["owners"][0]["cost"] == pytest.approx(sum(run["cost"] for run in kept["runs"]))
    finally:
        server.stop()
    assert_nothing_left(server.root)


def test_two_runs_of_one_job_before_and_after_a_restart_that_edited_it(tmp_path):
    """Restarted with one more epoch, a job keeps its first run: `diff NAME@1 NAME` (and REST, NAME@RUN either side)
    shows that one field, how each run ended, and each run's last loss from its own points; the scalars of run 1
    are its own. A side naming no run, or a run the job did not have, is refused saying what to write."""
    server = JupyterServer(tmp_path)
    try:
        code = shutil.copytree(EXAMPLES / "pytorch-ddp", server.root_dir / "ddp")
        spec = {"name": "ddp", "framework": "pytorch", "code": {"path": str(code)}, "hyperparameters": {"epochs": 2},
                "command": "python train.py --epochs {{ epochs }} --samples 128"}
        cli = CLI(server.root, tmp_path)
        (tmp_path / "ddp.yaml").write_text(json.dumps(spec))
        cli("submit", "-f", str(tmp_path / "ddp.yaml"), "--follow")
        (tmp_path / "ddp.yaml").write_text(json.dumps({**spec, "hyperparameters": {"epochs": 3}}))
        cli("restart", "ddp", "-f", str(tmp_path / "ddp.yaml"), "--follow")

        found = cli.json("diff", "ddp@1", "ddp")
        assert [(row["field"], row["a"], row["b"]) for row in found["spec"] if row["differs"]] == [
            ("hyperparameters.epochs", 2, 3)]
        assert [(side["name"], side["run"], side["phase"]) for side in (found["a"], found["b"])] == [
            ("ddp", 1, "Succeeded"), ("ddp", 2, "Succeeded")]
        [loss] = [row for row in found["metrics"]["tags"] if row["tag"] == "loss"]
        assert [point["step"] for point in [*loss["a"].values(), *loss["b"].values()]] == [2, 3]
        rest = server.rest("GET", "jobs/compare", params={"a": "ddp@1", "b": "ddp@2"})
        assert rest.status_code == 200 and rest.json()["spec"] == found["spec"], rest.text
        first = Client(server.url, server.TOKEN).scalars("ddp", "loss", run=1)
        assert [step for points in first["runs"].values() for step, _ in points] == [1, 2], first
        printed = cli("diff", "ddp@1", "ddp").stdout
        assert printed.split()[:2] == ["ddp@1", "ddp@2"] and "hyperparameters.epochs: 2 -> 3" in printed, printed

        for query, status, said in [({"a": "ddp@one", "b": "ddp"}, 400, "NAME@RUN"),
                                    ({"a": "ddp@3", "b": "ddp"}, 400, "job 'ddp' has no run 3; runs: 1 to 2")]:
            refused = server.rest("GET", "jobs/compare", params=query)
            assert refused.status_code == status and said in refused.text, refused.text
        assert "has no run 0" in cli("diff", "ddp@0", "ddp", check=False).stderr
        assert server.rest("DELETE", "jobs/ddp").status_code == 204
    finally:
        server.stop()
    assert_nothing_left(server.root)
