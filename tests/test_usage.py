"""What a job used, against what its processes say they used themselves (getrusage): each replica's CPU seconds,
its own and its child process's, and its largest resident set, within 2%."""

import json
import re

from conftest import assert_nothing_left, write_spec

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
    cli("delete", "burn")
    assert_nothing_left(cli.root, timeout=0)
