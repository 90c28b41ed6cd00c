"""The job spec: one schema, precise errors, defaults, and commands no value can inject into."""

import json
import os
import subprocess

import pytest

from jupyter_distrain import spec as spec_


def errors_of(raw):
    with pytest.raises(spec_.SpecError) as caught:
        spec_.validate(raw)
    return {e.path: e.message for e in caught.value.errors}


def test_defaults_come_from_the_schema():
    spec = spec_.validate({"name": "a", "command": "train"})
    assert spec["framework"] == "python"
    assert spec["replicas"] == {"worker": {"count": 1, "resources": {"gpus": 0}}}
    assert spec["tensorboard"] == {"enabled": False, "logdir": "training_logs"}
    assert spec["policy"] == {"success": "chief", "restart": "never", "max_restarts": 0, "on_hang": "warn"}
    code = spec_.validate({"name": "a", "command": "t", "code": {"git": "https://example.com/r.git"}})["code"]
    assert code == {"git": "https://example.com/r.git", "ref": "HEAD"}


def test_every_error_at_once_with_field_paths_and_allowed_values():
    errors = errors_of({
        "name": "-bad-", "framework": "caffe", "command": "", "colour": "red",
        "replicas": {"worker": {"count": 65, "resources": {"cpu": "lots", "gpus": -1}}},
        "data": {"host_path": "relative/dir"},
        "policy": {"restart": "sometimes"},
    })
    assert set(errors) == {"name", "framework", "command", "", "replicas.worker.count",
                           "replicas.worker.resources.cpu", "replicas.worker.resources.gpus", "data.host_path",
                           "policy.restart"}
    assert "allowed: tensorflow, keras, pytorch, paddle, python, custom" in errors["framework"]
    assert "unknown field(s) colour" in errors[""]
    assert "allowed: never, on-failure, exit-code" in errors["policy.restart"]
    assert "between 0 and 64" in errors["replicas.worker.count"]
    assert "absolute" in errors["data.host_path"]
    assert "500m" in errors["replicas.worker.resources.cpu"]


@pytest.mark.parametrize("url", ["git@github.com:org/repo.git", "ssh://host/repo.git", "ftp://host/repo.git",
                                 "git://host/repo.git"])
def test_only_http_and_local_git_urls(url):
    assert "http:// or https:// URL, or a local path" in errors_of({"name": "a", "command": "t", "code": {"git": url}})["code.git"]


@pytest.mark.parametrize("url", ["https://bob:s3cret-token@github.com/org/repo.git", "http://bob@host/r.git"])
def test_credentials_in_git_urls_are_refused_without_repeating_them(url):
    message = errors_of({"name": "a", "command": "t", "code": {"git": url}})["code.git"]
    assert "carries credentials" in message and "code.credentials" in message
    assert "bob" not in message and "s3cret" not in message


def test_a_url_with_an_unclosed_ipv6_bracket_is_a_field_error():
    assert errors_of({"name": "a", "command": "t", "code": {"git": "http://[::1/r.git"}})["code.git"] == \
        "not a URL: its host has an unclosed '['"


@pytest.mark.parametrize("url", ["https://github.com/org/repo.git", "http://host:8080/r", "/srv/repo", "./repo", "..",
                                 "file:///srv/repo"])
def test_accepted_git_urls(url):
    assert spec_.validate({"name": "a", "command": "t", "code": {"git": url}})["code"]["git"] == url


def test_roles_follow_the_framework():
    assert spec_.roles_by_framework()["pytorch"] == ("master", "worker")
    assert "allowed: ps, worker" in errors_of({"name": "a", "framework": "paddle", "command": "t",
                                               "replicas": {"chief": {"count": 1}}})["replicas"]
    assert "at most 1 chief" in errors_of({"name": "a", "framework": "tensorflow", "command": "t",
                                           "replicas": {"chief": {"count": 2}, "worker": {}}})["replicas.chief.count"]
    assert "at least one replica" in errors_of({"name": "a", "command": "t", "replicas": {"worker": {"count": 0}}})["replicas"]


def test_name_must_fit_kubernetes_names():
    assert spec_.validate({"name": "a" * 50, "command": "t"})
    for bad in ("a" * 51, "Upper", "under_score", "1starts-with-digit", "ends-", ""):
        assert "name" in errors_of({"name": bad, "command": "t"}), bad


def test_hostile_hyperparameters_are_refused_or_never_run(tmp_path):
    errors = errors_of({"name": "a", "command": "t {{ x }}", "hyperparameters": {"x": "a\nb", "y;rm": 1, "z": [1]}})
    assert "control characters" in errors["hyperparameters.x"]
    assert "identifier" in errors["hyperparameters.y;rm"]
    assert "hyperparameters.z" in errors
    assert "reserved" in errors_of({"name": "a", "command": "t", "hyperparameters": {"output": 1}})["hyperparameters.output"]
    hostile = "$(touch pwned); `touch pwned` | rm -rf / && echo '\"\\\"\nEOF"
    spec = spec_.validate({"name": "a", "command": "printf '%s\\n' {{ v }} \"lr={{ lr }}\" {{ flag }} {{ output }}\n"
                                                  "cat <<EOF\nv: {{ v }}\nEOF\ncat <<-'END'\n\tv: $v\n\tEND",
                           "hyperparameters": {"v": hostile.replace("\n", " "), "lr": 0.001, "flag": True}})
    assert "control characters" in errors_of({**spec, "hyperparameters": {"v": hostile}})["hyperparameters.v"]
    env = {**os.environ, **spec_.hyperparameter_env(spec), "DISTRAIN_OUTPUT_DIR": "/out dir", "v": "plain"}
    printed = subprocess.run(["/bin/sh", "-c", spec_.render_command(spec)], capture_output=True, text=True, check=True,
                             env=env, cwd=tmp_path).stdout
    value = hostile.replace("\n", " ")
    assert printed.splitlines() == [value, "lr=0.001", "true", "/out dir", f"v: {value}", "v: $v"]
    assert not (tmp_path / "pwned").exists()  # no value ran as code, the heredoc's included


def test_placeholders_stand_where_the_shell_expands_them():
    for command, where in (("t '{{ x }}'", "single quotes"), ("t `echo {{ x }}`", "backticks"),
                           ("cat <<'EOF'\n{{ x }}\nEOF", "a heredoc with a quoted delimiter")):
        errors = errors_of({"name": "a", "command": command, "hyperparameters": {"x": 1}})
        assert f"stands inside {where}" in errors["command"], command
    ok = spec_.validate({"name": "a", "command": "t --x={{ x }} \"--y={{ x }}\" \\'{{ x }}", "hyperparameters": {"x": 1}})
    assert spec_.render_command(ok) == 't --x="${DISTRAIN_HP_x}" "--y=${DISTRAIN_HP_x}" \\\'"${DISTRAIN_HP_x}"'
    assert "unknown placeholder {{ nope }}" in errors_of({"name": "a", "command": "t {{ nope }}"})["command"]


def test_progress_names_a_hyperparameter_holding_a_whole_number():
    """The spec may say which hyperparameters hold its epochs and steps (eta.py reads them); one it does not have, or
    one that is no whole number, is refused naming the field."""
    job = {"name": "a", "command": "t", "hyperparameters": {"iterations": 5000, "lr": 0.1, "n": 0}}
    assert spec_.validate({**job, "progress": {"steps": "iterations"}})["progress"] == {"steps": "iterations"}
    assert "progress" not in spec_.validate(job)  # none unless given
    assert errors_of({**job, "progress": {"steps": "iters", "epochs": "lr"}}) == {
        "progress.steps": "names no hyperparameter: 'iters'; the job's: iterations, lr, n",
        "progress.epochs": "names 'lr', whose value is not a whole number of at least 1"}
    assert errors_of({**job, "progress": {"epochs": "n"}}) == {
        "progress.epochs": "names 'n', whose value is not a whole number of at least 1"}
    assert errors_of({**job, "progress": {"batches": "n"}}) == {
        "progress": "unknown field(s) batches; allowed: epochs, steps"}


def test_yaml_errors_are_spec_errors():
    with pytest.raises(spec_.SpecError, match="not valid YAML"):
        spec_.load("name: [unclosed")


@pytest.mark.parametrize("value, problem", [
    (".nan", ".nan is not allowed: must be a finite number"),
    ("-.inf", "-.inf is not allowed: must be a finite number"),
    ("1.0e+999", "1.0e+999 is not allowed: must be a finite number"),
    ("2024-01-31", "2024-01-31 is a date, which no JSON holds; quote it to make it text"),
    ("!!binary aGVsbG8=", "aGVsbG8= is binary data, which no JSON holds"),
    ("!!set {a, b}", "A set, which no JSON holds"),
    ("!!omap [{a: 1}]", "An ordered map, which no JSON holds"),
    ("0x" + "f" * 5000, "is beyond the integers every JSON reader keeps exactly"),
    ("9" * 5000, "is beyond the integers every JSON reader keeps exactly"),
    ("9007199254740992", "9007199254740992 is beyond the integers every JSON reader keeps exactly"),
    ("{1: one}", "the key 1 is not text; quote it"),
])
def test_yaml_that_no_json_holds_is_refused_naming_its_line(value, problem):
    """A spec is JSON values (the schema's): YAML's dates, binary, sets, NaN or huge integers would fail later,
    where no one says which line; `validate` and GET repo say it at once."""
    text = f"name: odd\ncommand: python train.py\nhyperparameters:\n  lr: {value}\n"
    with pytest.raises(spec_.SpecError) as caught:
        spec_.load(text)
    message = caught.value.errors[0].message
    assert message.startswith("not valid YAML: ") and problem in message and "line 4" in message, message
    assert spec_.load("a: '2024-01-31'\nb: 9007199254740991\nc: -1.5e+300\n'1': x\n") == {
        "a": "2024-01-31", "b": 9007199254740991, "c": -1.5e300, "1": "x"}


def test_text_that_is_not_unicode_is_refused_where_it_stands():
    errors = errors_of({"name": "a", "command": "python -c 'print(1)' \ud800", "hyperparameters": {"x\udfff": 1}})
    assert errors["command"].startswith("is not valid Unicode: it holds a lone surrogate")
    assert errors["hyperparameters"] == "a key is not valid Unicode: it holds a lone surrogate"


def test_every_duration_has_a_bound_the_product_can_carry():
    for field in ("ttl_after_finished", "hang_after"):
        assert "longer than the longest duration here, 520w" in errors_of(
            {"name": "a", "command": "t", "policy": {field: "999999w"}})[f"policy.{field}"]
        assert spec_.validate({"name": "a", "command": "t", "policy": {field: "520w"}})
    assert list(errors_of({"name": "a", "command": "t", "policy": {"hang_after": "20 min"}})) == ["policy.hang_after"]
    assert spec_.validate({"name": "a", "command": "t", "policy": {"hang_after": "1h30m"}})["policy"]["on_hang"] == "warn"


def test_schema_is_one_json_file_in_the_package():
    from importlib.resources import files

    on_disk = json.loads(files("jupyter_distrain").joinpath("job.schema.json").read_text())
    assert on_disk == spec_.schema()
    assert on_disk["$schema"].endswith("2020-12/schema")


def test_control_characters_in_paths_commands_and_refs_are_refused():
    """A NUL reaching the file system or argv would fail later, half-way; refuse it up front."""
    base = {"name": "a", "command": "x"}
    cases = {
        "code.path": {"code": {"path": "dir\x00"}},
        "code.git": {"code": {"git": "/repo\x00"}},
        "code.ref": {"code": {"git": "https://example.com/r.git", "ref": "main\x00"}},
        "command": {"command": "x\x00"},
        "data.host_path": {"data": {"host_path": "/data\x01"}},
        "output.path": {"output": {"volume": "v", "path": "a\x00"}},
        "resume_from": {"resume_from": "/ckpt\x00"},
        "tensorboard.logdir": {"tensorboard": {"logdir": "logs\x00"}},
    }
    for field, change in cases.items():
        assert field in errors_of({**base, **change}), field


def test_yaml_bombs_deep_nesting_and_huge_specs_are_refused(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
    with pytest.raises(spec_.SpecError, match=r"aliases \(\*name\) are not allowed"):
        spec_.load(bomb)
    with pytest.raises(spec_.SpecError, match="nested too deeply"):
        spec_.load("[" * 5000 + "]" * 5000)
    huge = tmp_path / "distrain.yaml"
    huge.write_text("name: big\ncommand: " + "x" * spec_.MAX_SPEC_BYTES)
    with pytest.raises(spec_.SpecError, match="over 1048576 bytes"):
        spec_.load_file(huge)
    long = errors_of({"name": "a", "command": "echo " + "x" * 16384})
    assert "16384" in long["command"]
    assert "256" in errors_of({"name": "a", "command": "t", "hyperparameters": {f"p{i}": i for i in range(257)}})[
        "hyperparameters"]
