"""The installed package: server extension and prebuilt labextension enabled, the API behind auth."""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest


JUPYTER = str(Path(sys.executable).with_name("jupyter"))


def listing(*args: str) -> list[str]:
    result = subprocess.run([JUPYTER, *args], capture_output=True, text=True)
    return re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr).splitlines()


def test_extensions_are_enabled_and_ok():
    server = listing("server", "extension", "list")
    assert "jupyter_distrain enabled" in [line.strip() for line in server], server
    assert any(re.fullmatch(r"\s*jupyter_distrain [0-9.]+ OK", line) for line in server), server
    lab = [line.split() for line in listing("labextension", "list")]
    version = json.loads((Path(__file__).parents[1] / "package.json").read_text())["version"]
    assert ["jupyter-distrain", f"v{version}", "enabled", "OK", "(python,", "jupyter-distrain)"] in lab, lab
    installed = Path(sys.prefix) / "share/jupyter/labextensions/jupyter-distrain"
    assert json.loads((installed / "package.json").read_text())["name"] == "jupyter-distrain"
    assert list((installed / "static").glob("remoteEntry.*.js"))


def test_server_extension_answers_only_with_a_token(jupyter_server):
    url = jupyter_server.url
    with urllib.request.urlopen(f"{url}/distrain/api/version?token={jupyter_server.TOKEN}") as response:
        from jupyter_distrain import __version__

        assert json.load(response) == {"version": __version__}
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{url}/distrain/api/version")
    assert refused.value.code == 403


def test_frontend_api_types_are_generated_from_the_openapi_document(tmp_path):
    """src/openapi.ts must be what `jlpm build:api` makes of the current document."""
    from jupyter_distrain.server.openapi import openapi_document

    repo = Path(__file__).parents[1]
    document = tmp_path / "openapi.json"
    document.write_text(json.dumps(openapi_document()))
    generated = tmp_path / "openapi.ts"
    bin_dir = repo / "node_modules" / ".bin"
    subprocess.run([str(bin_dir / "openapi-typescript"), str(document), "-o", str(generated)], check=True,
                   capture_output=True)
    formatted = subprocess.run([str(bin_dir / "prettier"), "--stdin-filepath", "src/openapi.ts"], cwd=repo,
                               input=generated.read_text(), capture_output=True, text=True, check=True).stdout
    assert formatted == (repo / "src" / "openapi.ts").read_text(), "run `jlpm build:api` and commit src/openapi.ts"


@pytest.mark.parametrize("script", ["test", "lint:check"])
def test_frontend_unit_tests_and_lint(script):
    """The panel's jest unit tests, and prettier, eslint and the TypeScript checker, all clean."""
    repo = Path(__file__).parents[1]
    jlpm = Path(sys.executable).with_name("jlpm")
    result = subprocess.run([str(jlpm), script], cwd=repo, capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{jlpm.parent}{os.pathsep}{os.environ['PATH']}", "CI": "1"})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
