"""The job spec: one JSON Schema (job.schema.json) drives validation, defaults and the roles."""

from __future__ import annotations

import copy
import json
import math
import re
import sys
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NoReturn, cast
from urllib.parse import urlsplit

from .clusterenv import reserved_variables
from .errors import FieldError, SpecError
# the spec's own vocabulary, kept in modules of their own (the replicas' environment uses them too)
from .placeholders import (BUILTIN_PLACEHOLDERS, BUILTIN_VARIABLES, PLACEHOLDER, hyperparameter_env,  # noqa: F401
                           placeholder_contexts, placeholder_variable, render_command, scalar_text,
                           substituted_command)
from .roles import ROLE_ORDER, chief, gpu_type, gpus, replica_name, replicas  # noqa: F401

if TYPE_CHECKING:
    from jsonschema import ValidationError

MAX_SPEC_BYTES = 1024 * 1024  # a spec's text (YAML or JSON), and any request body
SAFE_INTEGER = 2**53 - 1  # the largest integer every JSON reader (a browser's too) keeps exactly


@cache
def schema() -> dict:
    return json.loads(files("jupyter_distrain").joinpath("job.schema.json").read_text())


@cache
def _validator():
    if "jsonschema" not in sys.modules:
        # jsonschema imports rfc3987_syntax, when installed, for "format" checks this schema never
        # uses; building its grammar costs seconds on every CLI call.
        sys.modules.setdefault("rfc3987_syntax", None)
    from jsonschema import Draft202012Validator, ValidationError, validators

    def pattern(validator, pattern: str, instance: Any, _schema: dict) -> Iterator[ValidationError]:
        if validator.is_type(instance, "string") and not re.search(ecma_anchors(pattern), instance):
            yield ValidationError(f"{instance!r} does not match {pattern!r}")

    return validators.extend(Draft202012Validator, {"pattern": pattern})(schema())


@cache
def ecma_anchors(pattern: str) -> str:
    """A schema pattern as JSON Schema (ECMA-262) reads it: its `$` ends the text, where Python's `$` also
    matches before a final newline (a name ending in a newline would pass). Every `$` of this schema is an anchor."""
    return pattern.replace("$", r"\Z")


@cache
def roles_by_framework() -> dict[str, tuple[str, ...]]:
    """The roles each framework allows, read from the schema's conditional rules."""
    roles = {}
    for rule in schema()["allOf"]:
        condition = rule["if"]["properties"]["framework"]
        frameworks = condition.get("enum") or [condition["const"]]
        allowed = rule["then"]["properties"]["replicas"]["propertyNames"]["enum"]
        roles.update({f: tuple(allowed) for f in frameworks})
    return roles


NOT_JSON = {"timestamp": "a date", "binary": "binary data", "set": "a set", "omap": "an ordered map",
            "pairs": "a list of pairs"}  # YAML's types beyond JSON's


@cache
def _loader() -> type:
    """A YAML loader that makes JSON values only, or fails naming the line: no aliases (*name: a few hundred
    bytes of nested aliases expand to gigabytes); no dates, binary, sets or ordered maps, which no JSON holds;
    no NaN or infinities; integers that every JSON reader keeps exactly; keys that are text. (YAML is imported
    at its first use, as in load: commands such as `distrain list` never parse any.)"""
    import yaml

    def refuse(node: Any, problem: str) -> NoReturn:
        raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark)

    class JsonValues(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)

        def construct_yaml_int(self, node: Any) -> int:
            # a long one is refused unread: int() of thousands of decimal digits is an error of its own
            if len(node.value) > 80 or abs(value := super().construct_yaml_int(node)) > SAFE_INTEGER:
                refuse(node, f"{node.value[:40]} is beyond the integers every JSON reader keeps exactly "
                             f"(-{SAFE_INTEGER} to {SAFE_INTEGER}); quote it to make it text")
            return value

        def construct_yaml_float(self, node: Any) -> float:
            value = super().construct_yaml_float(node)
            if not math.isfinite(value):
                refuse(node, f"{node.value} is not allowed: must be a finite number")
            return value

        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            mapping = super().construct_mapping(node, deep)
            for key_node, _ in node.value:
                if key_node.tag != "tag:yaml.org,2002:str":
                    refuse(key_node, f"the key {key_node.value[:40]} is not text; quote it")
            return mapping

        def not_json(self, node: Any) -> NoReturn:
            what = NOT_JSON[node.tag.rpartition(":")[2]]
            shown = f"{node.value[:40]} is {what}" if isinstance(node.value, str) else what.capitalize()
            refuse(node, f"{shown}, which no JSON holds; quote it to make it text")

    JsonValues.add_constructor("tag:yaml.org,2002:int", JsonValues.construct_yaml_int)
    JsonValues.add_constructor("tag:yaml.org,2002:float", JsonValues.construct_yaml_float)
    for kind in NOT_JSON:
        JsonValues.add_constructor(f"tag:yaml.org,2002:{kind}", JsonValues.not_json)
    return JsonValues


def load(text: str, field: str = "") -> Any:
    """Parse YAML (or JSON) spec text (or a part of a spec, `field`) into JSON values (_loader): at most
    MAX_SPEC_BYTES."""
    size = len(text.encode(errors="replace"))
    if size > MAX_SPEC_BYTES:
        raise SpecError([FieldError(field, f"{size} bytes; at most {MAX_SPEC_BYTES} (1 MiB)")])
    import yaml

    try:
        return yaml.load(text, Loader=_loader())
    except yaml.YAMLError as e:
        raise SpecError([FieldError(field, f"not valid YAML: {e}")]) from None
    except RecursionError:
        raise SpecError([FieldError(field, "not valid YAML: nested too deeply")]) from None


def load_file(path: str | Path) -> Any:
    with open(path, "rb") as f:
        raw = f.read(MAX_SPEC_BYTES + 1)
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError([FieldError("", f"{path} is over {MAX_SPEC_BYTES} bytes (1 MiB), the most a spec may be")])
    return load(raw.decode(errors="replace"))


def validate(raw: Any) -> dict:
    """Return the spec with defaults filled in, or raise SpecError naming every bad field."""
    errors = list(unportable_values(raw))
    if errors:
        raise SpecError(errors)
    errors = [_describe(e, raw) for e in _validator().iter_errors(raw)]
    errors = sorted(set(errors), key=lambda e: (e.path, e.message))
    if errors:
        raise SpecError(errors)
    spec = with_defaults(raw, schema())
    errors = list(_semantic_errors(spec))
    if errors:
        raise SpecError(errors)
    return spec


DURATION = re.compile(r"(\d+)([smhdw])")
DURATION_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration_seconds(text: str) -> int | None:
    """Seconds in "90m", "12h", "7d", "2w" or a sum of them ("1d12h"); None if `text` is not one."""
    parts = DURATION.findall(text)
    if not parts or "".join(count + unit for count, unit in parts) != text:
        return None
    return sum(int(count) * DURATION_SECONDS[unit] for count, unit in parts)


MAX_DURATION_SECONDS = 520 * DURATION_SECONDS["w"]  # ten years: a job's end plus this is a date every reader holds
DURATION_POLICIES = {"ttl_after_finished": "30m, 12h, 7d or 2w", "hang_after": "90s, 20m or 2h"}  # and examples


def duration_problem(field: str, text: str) -> str | None:
    """What is wrong with `text` as the duration of policy.`field` (one of DURATION_POLICIES); None if nothing."""
    seconds = duration_seconds(text)
    if seconds is None:
        return f"{text[:40]!r} is not a duration such as {DURATION_POLICIES[field]}"
    if seconds > MAX_DURATION_SECONDS:
        return f"{text} is longer than the longest duration here, 520w (ten years)"
    return None


def expires(ttl_after_finished: str | None, finished: float | None) -> float | None:
    """When a job that finished at `finished` is removed, for its policy.ttl_after_finished; None: never."""
    if not ttl_after_finished or finished is None:
        return None
    return finished + cast(int, duration_seconds(ttl_after_finished))


def with_defaults(instance: Any, node: dict) -> Any:
    """A copy of `instance` with the schema's defaults filled in, recursively."""
    node = resolve(node)
    if not isinstance(instance, dict):
        return copy.deepcopy(instance)
    if "oneOf" in node:
        branch = next(
            (b for b in map(resolve, node["oneOf"]) if set(b.get("required", ())) <= instance.keys()),
            None,
        )
        return with_defaults(instance, branch) if branch else copy.deepcopy(instance)
    result = {}
    properties = node.get("properties", {})
    for key, sub in properties.items():
        sub = resolve(sub)
        if key in instance:
            result[key] = with_defaults(instance[key], sub)
        elif "default" in sub and sub["default"] is not None:
            result[key] = with_defaults(copy.deepcopy(sub["default"]), sub)
    extra = node.get("additionalProperties")
    for key, value in instance.items():
        if key not in properties:
            result[key] = with_defaults(value, extra) if isinstance(extra, dict) else copy.deepcopy(value)
    return result


def resolve(node: dict, root: dict | None = None) -> dict:
    """`node` with its "$ref" (to a definition in `root`, by default this package's schema) filled in."""
    ref = node.get("$ref")
    if not ref:
        return node
    target = root or schema()
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def unportable_values(value: Any, path: tuple = ()) -> Iterator[FieldError]:
    """Values that some JSON reader would not keep: NaN, ±Infinity (or beyond ±1.8e308), integers beyond what a
    browser's JSON.parse holds exactly, and text that is not valid Unicode (a lone surrogate, which no UTF-8
    file, log or YAML document can hold). The one rule for the values of a spec."""
    if isinstance(value, float) and not math.isfinite(value):
        yield FieldError(_field_path(path), f"{value} is not allowed: must be a finite number")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > SAFE_INTEGER:
        yield FieldError(_field_path(path), f"must be between -{SAFE_INTEGER} and {SAFE_INTEGER}")
    elif isinstance(value, str) and not valid_unicode(value):
        yield FieldError(_field_path(path), "is not valid Unicode: it holds a lone surrogate (\\ud800-\\udfff)")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not valid_unicode(key):
                yield FieldError(_field_path(path), "a key is not valid Unicode: it holds a lone surrogate")
            yield from unportable_values(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from unportable_values(item, (*path, index))


def valid_unicode(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _field_path(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(error: ValidationError, raw: Any) -> FieldError:
    """Turn a jsonschema error into a message naming the field and what is allowed."""
    path = _field_path(error.absolute_path)
    sub = error.schema if isinstance(error.schema, dict) else {}
    got = json.dumps(error.instance) if not isinstance(error.instance, (dict, list)) else None
    if got and len(got) > 80:
        got = got[:80] + "...\""  # a long value is not repeated whole
    v = error.validator
    value: Any = error.validator_value
    instance: Any = error.instance
    if "propertyNames" in error.absolute_schema_path:
        allowed = ", ".join(value) if v == "enum" else sub.get("description", error.message)
        framework = ""
        if error.absolute_schema_path[0] == "allOf":
            framework = f" for framework {raw.get('framework', 'python')}"
        name = json.dumps(error.instance)
        if v == "enum":
            return FieldError(path, f"{name} is not a role{framework}; allowed: {allowed}")
        return FieldError(_field_path([*error.absolute_path, error.instance]), f"bad name {name}: must be {allowed}")
    if v == "required":
        missing = error.message.split("'")[1]
        return FieldError(_field_path([*error.absolute_path, missing]), "is required")
    if v == "additionalProperties":
        allowed = ", ".join(sub.get("properties", {}))
        extras = ", ".join(sorted(set(instance) - set(sub.get("properties", {}))))
        return FieldError(path, f"unknown field(s) {extras}; allowed: {allowed}")
    if v == "enum":
        return FieldError(path, f"{got} is not allowed; allowed: {', '.join(map(str, value))}")
    if v == "maxLength":
        return FieldError(path, f"{len(instance)} characters; at most {value}")
    if v == "maxProperties":
        return FieldError(path, f"{len(instance)} entries; at most {value}")
    if v in ("pattern", "minLength") and sub.get("description"):
        return FieldError(path, f"{got} is not allowed: must be {sub['description']}")
    if v in ("oneOf", "anyOf"):
        branch = _matching_branch(error)
        if branch:
            return _describe(branch, raw)
        options = [s.get("title") or s.get("description") or s.get("type") for s in map(resolve, value)]
        return FieldError(path, f"must be one of: {'; '.join(map(str, options))}")
    if v in ("minimum", "maximum", "exclusiveMinimum"):
        low = sub.get("minimum", sub.get("exclusiveMinimum"))
        bounds = f"at least {low}" if "maximum" not in sub else f"between {low} and {sub['maximum']}"
        if v == "exclusiveMinimum":
            bounds = f"greater than {low}"
        return FieldError(path, f"{got} is not allowed: must be {bounds}")
    if v == "type":
        return FieldError(path, f"{got if got else 'value'} is not allowed: must be of type {value}")
    return FieldError(path, error.message)


def _matching_branch(error: ValidationError) -> ValidationError | None:
    """For a failed oneOf, the error of the one branch the value was evidently meant for."""
    by_branch: dict[int | str, list[ValidationError]] = {}
    for e in error.context:
        by_branch.setdefault(e.schema_path[0], []).append(e)
    meant = [
        errs
        for errs in by_branch.values()
        if not any(e.validator in ("type", "required") and not e.relative_path for e in errs)
    ]
    if len(meant) == 1:
        return min(meant[0], key=lambda e: -len(e.absolute_path))
    return None


def _semantic_errors(spec: dict) -> Iterator[FieldError]:
    counts = {role: r.get("count", 0) for role, r in spec["replicas"].items()}
    if sum(counts.values()) == 0:
        yield FieldError("replicas", "the job needs at least one replica with count >= 1")
    for role in ("chief", "master"):
        if counts.get(role, 0) > 1:
            yield FieldError(f"replicas.{role}.count", f"at most 1 {role} (got {counts[role]})")
    if counts.get("ps", 0) and not counts.get("worker", 0):
        yield FieldError("replicas.worker.count", "parameter servers need at least one worker")
    for role in spec["replicas"]:
        if gpu_type(spec, role) is not None and not gpus(spec, role):
            yield FieldError(f"replicas.{role}.resources.gpu_type", "a GPU type needs resources.gpus of at least 1")
    try:
        credentials = urlsplit(spec.get("code", {}).get("git", "")).username is not None
    except ValueError:  # an unclosed [ of an IPv6 host
        yield FieldError("code.git", "not a URL: its host has an unclosed '['")
        credentials = False
    if credentials:  # never echoed: the URL may hold a token
        yield FieldError("code.git", "the URL carries credentials (user@ or user:token@), which would be stored "
                                     "with the job and shown in its events; give the URL without them and name a "
                                     "secret in code.credentials (create one with 'distrain secret set NAME "
                                     "--host HOST')")
    for field in DURATION_POLICIES:
        if (text := spec["policy"].get(field)) and (problem := duration_problem(field, text)):
            yield FieldError(f"policy.{field}", problem)
    hyper = spec.get("hyperparameters", {})
    for name in sorted(set(hyper) & set(BUILTIN_PLACEHOLDERS)):
        yield FieldError(f"hyperparameters.{name}", f"{name!r} is reserved for the command's built-in placeholders")
    known = sorted(set(hyper) | set(spec.get("sweep", {}).get("parameters", {})) | set(BUILTIN_PLACEHOLDERS))
    for total, name in spec.get("progress", {}).items():
        if name not in known or name in BUILTIN_PLACEHOLDERS:
            named = sorted(set(known) - set(BUILTIN_PLACEHOLDERS))
            yield FieldError(f"progress.{total}", f"names no hyperparameter: {name!r}; the job's: "
                                                  f"{', '.join(named) or 'none'}")
        elif name in hyper and (not isinstance(hyper[name], int) or isinstance(hyper[name], bool) or hyper[name] < 1):
            yield FieldError(f"progress.{total}", f"names {name!r}, whose value is not a whole number of at least 1")
    for name in PLACEHOLDER.findall(spec["command"]):
        if name not in known:
            yield FieldError("command", f"unknown placeholder {{{{ {name} }}}}; known: {', '.join(known)}")
    yield from _env_errors(spec, known)
    for match, context in placeholder_contexts(spec["command"]):
        if context in ("'", "`", "<<'"):
            where = {"'": "single quotes", "`": "backticks", "<<'": "a heredoc with a quoted delimiter"}[context]
            yield FieldError("command", f"{{{{ {match.group(1)} }}}} stands inside {where}, where the shell expands "
                                        "nothing; write it bare or inside double quotes")


def _env_errors(spec: dict, placeholders: list[str]) -> Iterator[FieldError]:
    """A job's or role's env may not set what distrain sets, nor name an unknown placeholder."""
    fields = [("env", spec["env"])] if "env" in spec else []
    fields += [(f"replicas.{role}.env", r["env"]) for role, r in spec["replicas"].items() if "env" in r]
    reserved = reserved_variables(spec) if fields else set()
    for path, env in fields:
        for name, value in env.items():
            if name in reserved or name.startswith("DISTRAIN_"):
                yield FieldError(f"{path}.{name}", f"{name} is set by distrain in this job's replicas (from its "
                                                   "framework, replicas and hyperparameters): choose another name")
            for unknown in sorted(set(PLACEHOLDER.findall(scalar_text(value))) - set(placeholders)):
                yield FieldError(f"{path}.{name}", f"unknown placeholder {{{{ {unknown} }}}}; known: "
                                                   f"{', '.join(placeholders)}")


SECRET_HOST = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?(:[0-9]{1,5})?")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def secret_name(name: str) -> bool:
    """A name code.credentials may hold (the schema's pattern; also a Kubernetes Secret's name)."""
    git = next(branch for branch in schema()["properties"]["code"]["oneOf"] if "git" in branch["properties"])
    return len(name) <= 63 and re.fullmatch(git["properties"]["credentials"]["pattern"], name) is not None


def credential_errors(name: str, username: Any, password: Any, host: Any) -> list[FieldError]:
    """What is wrong with git credentials to be stored as the secret `name`, for code on `host`."""
    errors = [FieldError("name", f"{name!r} is not a secret name: lowercase letters, digits and hyphens, "
                         "starting and ending with a letter or digit, at most 63")] if not secret_name(name) else []
    for field, value in (("username", username), ("password", password)):
        if not (isinstance(value, str) and value):
            errors.append(FieldError(field, "must be a non-empty string"))
        elif CONTROL.search(value) or not valid_unicode(value):
            errors.append(FieldError(field, "must be valid Unicode without newlines or other control "
                                            "characters, which git's credential requests cannot carry"))
    if not (isinstance(host, str) and SECRET_HOST.fullmatch(host)):
        errors.append(FieldError("host", "must be the git server's host name, with its port if its URLs have "
                                         "one (e.g. github.com or git.example.com:8443)"))
    return errors
