"""The command's {{ name }} placeholders: the variable holding each one's value in every replica, the command as
the replicas' shell runs it and as people read it."""

from __future__ import annotations

import json
import re
import shlex

# Names the command may use besides the hyperparameters, and the variable holding each one's value.
BUILTIN_VARIABLES = {"job": "DISTRAIN_JOB", "role": "DISTRAIN_ROLE", "index": "DISTRAIN_INDEX",
                     "input": "DISTRAIN_INPUT_DIR", "output": "DISTRAIN_OUTPUT_DIR", "logdir": "DISTRAIN_LOG_DIR"}
BUILTIN_PLACEHOLDERS = tuple(BUILTIN_VARIABLES)
PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
HEREDOC = re.compile(r"<<(-?)[ \t]*(['\"]?)(\w+)\2")


def placeholder_variable(name: str) -> str:
    """The environment variable that holds placeholder `name`'s value in every replica."""
    return BUILTIN_VARIABLES.get(name) or f"DISTRAIN_HP_{name}"


def hyperparameter_env(spec: dict) -> dict[str, str]:
    """Each hyperparameter's value, as its placeholder's variable."""
    return {placeholder_variable(name): scalar_text(value) for name, value in spec.get("hyperparameters", {}).items()}


def scalar_text(value: str | float | bool) -> str:
    """A spec's scalar as an environment variable holds it (true and false as YAML and JSON write them)."""
    return json.dumps(value) if isinstance(value, bool) else str(value)


def render_command(spec: dict) -> str:
    """The command with each {{ name }} replaced by a reference to the variable holding its value, which the
    shell expands but never evaluates, whatever the value: "${VAR}" where it stands bare, ${VAR} inside
    double quotes or a heredoc's body (where nothing splits it)."""
    command, out, last = spec["command"], [], 0
    for match, context in placeholder_contexts(command):
        variable = placeholder_variable(match.group(1))
        out += [command[last:match.start()], f'"${{{variable}}}"' if context is None else f"${{{variable}}}"]
        last = match.end()
    return "".join(out) + command[last:]


def substituted_command(spec: dict) -> str:
    """The command as its replicas run it, for people to read: each hyperparameter's {{ name }} replaced by its
    value (quoted for the shell where it stands bare); the built-in placeholders, whose values differ from one
    replica to the next, and a sweep's parameters, whose values differ from one trial to the next, stay."""
    command, values, out, last = spec["command"], hyperparameter_env(spec), [], 0
    for match, context in placeholder_contexts(command):
        value = values.get(placeholder_variable(match.group(1)))
        if value is None:
            continue
        out += [command[last:match.start()], shlex.quote(value) if context is None else value]
        last = match.end()
    return "".join(out) + command[last:]


def placeholder_contexts(command: str) -> list[tuple[re.Match, str | None]]:
    """Each placeholder with what it stands in: None (bare), '"', "'" or '`' (quotes), '<<' (a heredoc's
    body) or "<<'" (the body of a heredoc whose delimiter is quoted, where nothing is expanded)."""
    found: list[tuple[re.Match, str | None]] = []
    quote, heredocs, i = None, [], 0
    while i < len(command):
        char = command[i]
        if match := PLACEHOLDER.match(command, i):
            found.append((match, quote))
            i = match.end()
        elif char == "\\" and quote != "'":
            i += 2
        elif quote is None and (here := HEREDOC.match(command, i)):
            heredocs.append(here)
            i = here.end()
        elif quote is None and char == "\n" and heredocs:
            i += 1
            for here in heredocs:  # their bodies follow this line, one after the other
                context = "<<'" if here.group(2) else "<<"
                while i < len(command):
                    end = command.find("\n", i)
                    end = len(command) if end < 0 else end
                    line, start, i = command[i:end], i, end + 1
                    if (line.lstrip("\t") if here.group(1) else line) == here.group(3):
                        break
                    found += [(m, context) for m in PLACEHOLDER.finditer(command, start, end)]
            heredocs = []
        else:
            if quote is None and char in "'\"`":
                quote = char
            elif char == quote:
                quote = None
            i += 1
    return found
