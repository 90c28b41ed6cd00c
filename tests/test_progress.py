"""Stragglers: each replica's pace (steps per second) from its event files, and the replica far slower than the
others named in a warning, on a real local job."""

import re

import pytest

from jupyter_distrain.progress import STRAGGLER_SECONDS, Stragglers
from webhooks import Receiver, allow_private

PACED = """import os, time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

writer = EventFileWriter(os.environ["DISTRAIN_LOG_DIR"])
every = 1.0 if os.environ["DISTRAIN_INDEX"] == "2" else 0.25
for step in range(100000):
    loss = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / (step + 1))])
    writer.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=loss))
    writer.flush()
    time.sleep(every)
"""


def test_a_straggler_is_named_once_per_slow_spell():
    stragglers = Stragglers()
    paces = {"worker-0": 4.0, "worker-1": 4.2, "worker-2": 1.0}
    assert stragglers.update(paces, 0.0) == []
    assert stragglers.update(paces, STRAGGLER_SECONDS - 1) == []  # not for long enough yet
    assert stragglers.update(paces, STRAGGLER_SECONDS) == [("worker-2", 1.0, 4.1)]
    assert stragglers.update(paces, STRAGGLER_SECONDS + 15) == []  # named already
    assert stragglers.update({**paces, "worker-2": 3.9}, 100.0) == []  # caught up
    assert stragglers.update(paces, 115.0) == []  # slow again: a new spell
    assert stragglers.update(paces, 115.0 + STRAGGLER_SECONDS) == [("worker-2", 1.0, 4.1)]
    assert Stragglers().update({"worker-0": 4.0}, STRAGGLER_SECONDS) == []  # no others to be slower than
    assert Stragglers().update({"worker-0": 4.0, "worker-1": 2.9}, 0.0) == []


@pytest.mark.lane("node")  # its 80 s, mostly waiting, beside the real node's tests (conftest.lane_of)
def test_a_replica_far_slower_than_the_others_is_named_a_straggler(cli, tmp_path):
    """Workers 0 and 1 write a step every 0.25 s, worker 2 every second: after a minute below 0.7x the others'
    median, a Straggler warning names worker 2 with the paces; `distrain get` shows each replica's pace."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "paced.py").write_text(PACED)
    receiver = Receiver()
    allow_private(cli)
    cli("webhook", "set", input=receiver.url() + "\n")
    cli("submit", "--name", "paced", "--workers", "3", "--code", str(code), "--", "python", "paced.py")
    job = cli.wait("paced", until=lambda job: any(e["reason"] == "Straggler" for e in job["events"]), timeout=240)
    warned = [e for e in job["events"] if e["reason"] == "Straggler"]
    assert [(e["type"], e["replica"]) for e in warned] == [("Warning", "worker-2")]
    said = re.fullmatch(r"([\d.]+) steps/s, under 0.7x the other replicas' median \(([\d.]+)\) for 60 s",
                        warned[0]["message"])
    assert said and 0.5 < float(said[1]) < 1.05 and 2.0 < float(said[2]) < 4.05, warned
    shown = cli("get", "paced").stdout
    rows = {line.split()[0]: line.split()[-2] for line in shown.splitlines() if line.startswith("worker-")}  # STEPS/S
    assert float(rows["worker-2"]) < 0.7 * float(rows["worker-0"]), shown
    [told] = receiver.wait("paced", 1)  # the owner's webhook, once
    assert (told["event"], told["phase"], told["replica"], told["message"]) == (
        "Straggler", "Running", "worker-2", warned[0]["message"])
    cli("stop", "paced")
    receiver.close()
