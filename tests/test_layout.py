"""The package's layout, held: module and function sizes, no import circle, no import up the floors, and every
reason a job's records are given named in reasons.py. Computed from the package's own source: module-level,
function-local and TYPE_CHECKING imports alike, as a reader follows them."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_distrain"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

# The floors, top to bottom (the picture in docs/architecture.md follows them): a module imports from its own floor or
# the ones below. A name stands for its package's modules too, unless one of them is named on another floor.
FLOORS = {
    "entry points": ["__init__", "server", "cli", "terminal", "magics", "widgets", "controllers"],
    "what they share": ["manager", "jobjson", "joblist", "rules", "client", "flags", "compare", "accounting"],
    "backends": ["backends"],
    "a job's services": ["notify", "sweep", "stacks", "scalars", "waits", "progress", "eta", "usage"],
    "the job and its settings": ["contract", "config", "records", "logs", "policy", "spec", "clusterenv", "repo",
                                 "code", "snapshot", "outbound"],
    "ground": ["errors", "reasons", "hints", "owners", "private", "git", "storage", "placeholders", "roles", "shard",
               "_version", "replica_site", "incluster"],  # incluster: programs a pod runs alone, the stdlib only
}


def modules(package: Path) -> dict[str, Path]:
    """Each module's dotted name, relative to the package ("" for the package itself), and its file."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(package: Path) -> dict[str, set[str]]:
    """Each module's imports of the package's own modules (`from . import x` counts as x, if x is a module)."""
    known = modules(package)

    def module_of(name: str) -> str:
        while name not in known:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in known.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {module_of(alias.name.partition(".")[2]) for alias in node.names
                          if alias.name.split(".")[0] == package.name}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join([*here[:len(here) - node.level + 1], *([node.module] if node.module else [])])
                elif (node.module or "").split(".")[0] == package.name:
                    base = node.module.partition(".")[2]
                else:
                    continue
                base = base.strip(".")
                found |= {f"{base}.{a.name}".strip(".") if f"{base}.{a.name}".strip(".") in known
                          else module_of(base) for a in node.names}
        graph[name] = found - {name}
    return graph


@cache
def own_imports() -> dict[str, set[str]]:
    return imports(PACKAGE)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected set of modules of more than one, as one circle through them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            members = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(members) > 1:
                found.append(circle_through(graph, set(members)))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def circle_through(graph: dict[str, set[str]], members: set[str]) -> list[str]:
    """One circle among `members` (a strongly connected set), from its first member back to it."""
    start = min(members)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        module = frontier.pop(0)
        for other in sorted(graph[module] & members):
            if other == start:
                return [*paths[module], start]
            if other not in paths:
                paths[other] = [*paths[module], other]
                frontier.append(other)
    raise AssertionError(f"{members} is not strongly connected")


def floor_of(module: str, floors: dict[str, list[str]]) -> int:
    """The floor of `module`, 0 the top: that of the longest name in `floors` it is, or is inside ("__init__" is
    the package itself)."""
    named = [(len(name), floor) for floor, names in enumerate(floors.values()) for name in names
             if module == name or module.startswith(f"{name}.") or name == "__init__" and module == ""]
    assert named, f"{module or '__init__'} is on no floor: name it, or its package, in FLOORS"
    return max(named)[1]


def imports_up(graph: dict[str, set[str]], floors: dict[str, list[str]]) -> list[str]:
    names = list(floors)
    return [f"{module} ({names[floor_of(module, floors)]}) imports {other} ({names[floor_of(other, floors)]})"
            for module, others in sorted(graph.items()) for other in sorted(others)
            if floor_of(other, floors) < floor_of(module, floors)]


def long_modules(package: Path) -> dict[str, int]:
    return {name: lines for name, path in modules(package).items()
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}


def long_functions(path: Path) -> list[str]:
    return [f"{path.name}:{node.lineno} {node.name}() has {node.end_lineno - node.lineno + 1} lines"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


# calls that take a reason as a positional argument: the callee's name, and where the reason is
REASON_ARGUMENTS = {"Event": 0, "Decision": 1, "event": 0, "say": 0, "add_event": 1}


def unnamed_reasons(path: Path) -> list[str]:
    """Where a string literal is given as a reason (`reason=`, `"reason": `, `reason = `, tuples unpacked into a
    `reason`, REASON_ARGUMENTS) rather than a name of reasons.py."""
    found = []

    def literal(value: ast.expr) -> bool:
        return isinstance(value, ast.JoinedStr) or isinstance(value, ast.Constant) and isinstance(value.value, str) \
            and value.value != ""

    def check(value: ast.expr) -> None:
        if literal(value):
            found.append(f"{path.parent.name}/{path.name}:{value.lineno} {ast.unparse(value)}")

    def named_reason(target: ast.expr) -> bool:
        return isinstance(target, ast.Name) and target.id == "reason" \
            or isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) \
            and target.slice.value == "reason"

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.keyword) and node.arg == "reason":
            check(node.value)
        elif isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if (at := REASON_ARGUMENTS.get(callee)) is not None and len(node.args) > at:
                check(node.args[at])
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "reason":
                    check(value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if named_reason(target) and node.value is not None:
                    check(node.value)
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for element, value in zip(target.elts, node.value.elts):
                        if named_reason(element):
                            check(value)
    return found


def test_no_module_is_over_its_size():
    over = long_modules(PACKAGE)
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_no_function_is_over_its_size():
    over = [line for path in modules(PACKAGE).values() for line in long_functions(path)]
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(over)


def test_no_import_circle():
    found = circles(own_imports())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(circle) for circle in found)


def test_no_import_goes_up_the_floors():
    up = imports_up(own_imports(), FLOORS)
    assert not up, "imports up the floors:\n" + "\n".join(up)


def test_the_in_cluster_programs_import_nothing_of_the_package():
    """They run alone in a pod (delivered as files, with no package beside them)."""
    graph = own_imports()
    reaching = {module: sorted(graph[module]) for module in graph if module.startswith("incluster") and graph[module]}
    assert not reaching, reaching


def test_every_reason_given_is_named_in_reasons():
    given = [where for path in modules(PACKAGE).values() for where in unnamed_reasons(path)]
    assert not given, "reasons given as literals (name them in reasons.py):\n" + "\n".join(given)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / PACKAGE.name
    root.mkdir()
    (root / "__init__.py").write_text("")
    return root


def test_the_checks_see_a_long_module_a_long_function_a_circle_an_import_up_and_a_literal_reason(package: Path):
    """The rules above fail where they should: on a module of 501 lines, a function of 62, a circle closed by a
    TYPE_CHECKING import, an import up the floors, and a reason given as a string."""
    (package / "a.py").write_text("from . import b\n" + "x = 1\n" * (MAX_MODULE_LINES - 1))
    (package / "b.py").write_text("def f():\n" + "    y = 1\n" * (MAX_FUNCTION_LINES - 1)
                                  + "    from .c import g\n    return g(reason='Broke'), Event('Broken', '')\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    assert long_modules(package) == {}
    assert long_functions(package / "b.py") == [f"b.py:1 f() has {MAX_FUNCTION_LINES + 2} lines"]
    assert circles(imports(package)) == [["a", "b", "c", "a"]]
    assert imports_up(imports(package), {"top": ["a"], "bottom": ["__init__", "b", "c"]}) == [
        "c (bottom) imports a (top)"]
    assert sorted(unnamed_reasons(package / "b.py")) == [f"{package.name}/b.py:{MAX_FUNCTION_LINES + 2} {r}"
                                                         for r in ("'Broke'", "'Broken'")]
    with open(package / "a.py", "a") as more:
        more.write("x = 2\n")
    assert long_modules(package) == {"a": MAX_MODULE_LINES + 1}
    (package / "c.py").write_text("")
    assert circles(imports(package)) == []
