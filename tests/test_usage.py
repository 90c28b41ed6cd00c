"""What a job used, against what its processes say they used themselves (getrusage): each replica's CPU seconds,
its own and its child process's, and its largest resident set, within 2%; each run kept in the ledger as a restart
and a delete end it, and the report of them with their cost at the admin's prices."""

import json
import re

import pytest
from conftest import assert_nothing_left, write_spec
from traitlets import TraitError

from jupyter_distrain.config import Distrain

BURN = """
import json, resource, subprocess, sys, time

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

block = bytearray(int(sys.argv[1]) << 20)  # resident once written
block[::4096] = b"x" * len(range(0, len(block), 4096))
burn(3)
child = "import time\\nend = time.process_time() + 1\\nwhile time.process_time() < end: pass"
subprocess.run([sys.executable, "-c", child], check=True)  # its CPU time is the replica's too
own, child = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print("used", json.dumps({"cpu": own.ru_utime + own.ru_stime + child.ru_utime + child.ru_stime,
                          "peak": max(own.ru_maxrss, child.ru_maxrss) * 1024}), flush=True)
"""


def test_each_replicas_cpu_seconds_and_peak_memory_are_its_processes_own(cli, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "burn.py").write_text(BURN)
    spec = write_spec(code, {"name": "burn", "code": {"path": str(code)},
                             "command": "python burn.py $((60 + 20 * DISTRAIN_INDEX))",
                             "replicas": {"worker": {"count": 3}}, "policy": {"success": "all-workers"}})
    assert cli("submit", "-f", str(spec), "--follow").returncode == 0
    job = cli.json("get", "burn")
    logs = cli("logs", "burn").stdout
    said = {replica: json.loads(text) for replica, text in re.findall(r"\[(worker-\d)\] used (.*)", logs)}
    assert len(said) == 3, said
    for replica in job["replicas"]:
        used, own = replica["usage"], said[replica["name"]]
        assert abs(used["cpu_seconds"] - own["cpu"]) <= 0.02 * own["cpu"], (replica["name"], used, own)
        assert abs(used["peak_memory"] - own["peak"]) <= 0.02 * own["peak"], (replica["name"], used, own)
        assert used["gpu_hours"] == 0 and used["wall_seconds"] > 2.5
    total = job["usage"]
    assert abs(total["cpu_seconds"] - sum(own["cpu"] for own in said.values())) <= 0.02 * total["cpu_seconds"]
    assert total["peak_memory"] == max(r["usage"]["peak_memory"] for r in job["replicas"])
    assert "Used:" in cli("get", "burn").stdout
    print({name: (own, next(r["usage"] for r in job["replicas"] if r["name"] == name)) for name, own in said.items()})

    config = tmp_path / "jupyter-config"  # the admin's prices: a CPU-hour measured, 3.6 a second's thousandth
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {
        "prices": {"cpu_hour": 3.6, "currency": "EUR"}}}))
    cli.env["JUPYTER_CONFIG_DIR"] = str(config)
    assert cli.json("get", "burn")["usage"]["cost"] == pytest.approx(total["cpu_seconds"] / 1000, abs=1e-3)
    assert "cost " in cli("get", "burn").stdout
    assert cli("restart", "burn", "--follow").returncode == 0
    again = cli.json("get", "burn")["usage"]
    cli("delete", "burn")

    report = cli.json("usage")  # both runs, kept as the restart and the delete ended them
    assert [(run["job"], run["run"], run["phase"]) for run in report["runs"]] == [("burn", 1, "Succeeded"),
                                                                                  ("burn", 2, "Succeeded")]
    for run, used in zip(report["runs"], (total, again)):
        assert (run["cpu_seconds"], run["peak_memory"], run["gpu_hours"]) == (
            used["cpu_seconds"], used["peak_memory"], used["gpu_hours"])
        assert run["cpu_measured"] and run["cost"] == pytest.approx(run["cpu_seconds"] / 1000, abs=1e-3)
    [owner] = report["owners"]
    assert owner["runs"] == 2 and owner["cost"] == pytest.approx(sum(run["cost"] for run in report["runs"]))
    assert report["currency"] == "EUR" and report["sweeps"] == [] and "budget" not in owner
    said = cli("usage").stdout
    assert re.search(r"2 runs, 0 GPU-hours, [0-9.]+ CPU-hours, cost [0-9.]+ EUR", said), said
    assert [line.split()[:2] for line in said.splitlines() if line.startswith("burn")] == [["burn", "1"],
                                                                                          ["burn", "2"]]
    assert cli.json("usage", "--since", "2999-01-01")["runs"] == []  # runs that ended before: none
    for args, why in ((("--since", "yesterday"), "'yesterday' is neither a date"),
                      (("--owner", "someone-else"), "only an admin")):
        refused = cli("usage", *args, check=False)
        assert refused.returncode != 0 and why in refused.stderr, refused.stderr
    assert_nothing_left(cli.root, timeout=0)


@pytest.mark.parametrize("settings", [{"prices": {"gpu_hour": 2.9}}, {"prices": {"cpu_hour": -1}},
                                      {"prices": {"gpu": {"*": 1}}}, {"budgets": {"alice": "lots"}}])
def test_prices_and_budgets_of_another_shape_are_refused_naming_the_setting(settings):
    with pytest.raises(TraitError, match=rf"Distrain\.{next(iter(settings))}: "):
        Distrain(**settings)
