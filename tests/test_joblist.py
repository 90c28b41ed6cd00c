"""The job list and sweeps' tables as readers follow them (joblist.ListChanges, TrialChanges) and the list's filter
rule, without a server: the REST routes over them are tested in test_server.py and test_sweep.py, the panel's use
of them in test_panel.py."""

from __future__ import annotations

from jupyter_distrain import joblist
from jupyter_distrain.joblist import ListChanges, TrialChanges, matches


def job(name: str, phase: str = "Running", owner: str = "alice") -> dict:
    return {"name": name, "phase": phase, "backend": "local", "owner": owner}


def test_a_reader_is_sent_the_whole_list_once_then_only_what_changed():
    listed = [job("a"), job("b"), job("c")]
    changes = ListChanges(lambda: list(listed), dict)
    first = changes.since(None)
    assert first["complete"] and first["jobs"] == listed and first["removed"] == []
    same = changes.since(first["version"])
    assert same == {"version": first["version"], "complete": False, "jobs": [], "removed": []}

    listed[1] = job("b", "Succeeded")
    listed.remove(job("a"))
    listed.append(job("d"))
    then = changes.since(first["version"])
    assert not then["complete"]
    assert then["jobs"] == [job("b", "Succeeded"), job("d")] and then["removed"] == ["a"]
    assert changes.since(then["version"])["jobs"] == []
    # a reader still at the first version is told of everything since it, not only of the last change
    listed.append(job("a"))  # a removed name made again is a new job, not a removal
    again = changes.since(first["version"])
    assert again["jobs"] == [job("b", "Succeeded"), job("d"), job("a")] and again["removed"] == []
    assert changes.since(then["version"]) == {**again, "jobs": [job("a")]}


def test_a_version_not_answerable_from_gets_the_whole_list(monkeypatch):
    monkeypatch.setattr(joblist, "REMOVALS_KEPT", 2)
    listed = [job(name) for name in "abcd"]
    changes = ListChanges(lambda: list(listed), dict)
    first = changes.since("")["version"]
    for version in ("", "nonsense", f"other.{first.partition('.')[2]}", first.partition(".")[0] + ".99"):
        assert changes.since(version)["complete"], version  # none, unparsed, another server's, one never given
    listed.pop(0)
    kept = changes.since(first)
    assert kept["removed"] == ["a"]
    listed.pop(0)
    listed.pop(0)  # three removals: the first is forgotten
    behind = changes.since(first)
    assert behind["complete"] and behind["jobs"] == [job("d")] and behind["removed"] == []
    assert changes.since(kept["version"])["removed"] == ["b", "c"]


def test_a_sweeps_table_is_followed_by_its_changed_trials_and_every_trials_place():
    def trial(name: str, value: float | None = None) -> dict:
        return {"name": name, "phase": "Running" if value is None else "Succeeded", "value": value}

    tables = {"a": [trial("a-1"), trial("a-2")], "b": [trial("b-1")]}
    changes = TrialChanges(lambda sweep: {"name": sweep, "best": None, "trials": list(tables[sweep])})
    first = changes.since("a", "")
    assert first == {"name": "a", "best": None, "trials": tables["a"], "order": ["a-1", "a-2"], "complete": True,
                     "version": first["version"]}
    assert changes.since("b", "")["trials"] == tables["b"]  # each sweep its own
    tables["a"] = [trial("a-2", 0.5), trial("a-1")]  # a-2 ended, and ranks first
    then = changes.since("a", first["version"])
    assert not then["complete"] and then["trials"] == [trial("a-2", 0.5)] and then["order"] == ["a-2", "a-1"]
    assert changes.since("a", then["version"])["trials"] == []
    assert changes.since("b", then["version"])["complete"]  # a's version is not b's


def test_the_filter_needs_every_word_in_the_name_phase_backend_or_owner():
    mnist = job("mnist-run", "Failed", owner="Alice")
    assert matches(mnist, "") and matches(mnist, "  ")
    assert matches(mnist, "mni run") and matches(mnist, "alice MNIST") and matches(mnist, "local failed")
    assert not matches(mnist, "mnist running") and not matches(mnist, "bob")
