"""The installed package: server extension and prebuilt labextension enabled, the API behind auth."""

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from jupyter_distrain.backends.procs import free_ports

JUPYTER = str(Path(sys.executable).with_name("jupyter"))


def test_extensions_are_enabled_and_ok():
    server = subprocess.run([JUPYTER, "server", "extension", "list"], capture_output=True, text=True)
    assert any("jupyter_distrain" in line and "enabled" in line for line in server.stderr.splitlines()), server.stderr
    assert "jupyter_distrain" in server.stderr and "OK" in server.stderr.split("jupyter_distrain", 1)[1]
    lab = subprocess.run([JUPYTER, "labextension", "list"], capture_output=True, text=True)
    line = next(line for line in (lab.stdout + lab.stderr).splitlines() if "jupyter-distrain" in line)
    assert "enabled" in line and "OK" in line, line
    installed = Path(sys.prefix) / "share/jupyter/labextensions/jupyter-distrain"
    assert json.loads((installed / "package.json").read_text())["name"] == "jupyter-distrain"
    assert list((installed / "static").glob("remoteEntry.*.js"))


@pytest.fixture
def jupyter_server(tmp_path):
    port = free_ports(1)[0]
    process = subprocess.Popen(
        [JUPYTER, "server", "--no-browser", f"--port={port}", "--ServerApp.token=secret-token",
         "--ServerApp.allow_root=True", f"--ServerApp.root_dir={tmp_path}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/api/status?token=secret-token", timeout=2)
            break
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(30)


def test_server_extension_answers_only_with_a_token(jupyter_server):
    with urllib.request.urlopen(f"{jupyter_server}/distrain/api/version?token=secret-token") as response:
        from jupyter_distrain import __version__

        assert json.load(response) == {"version": __version__}
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{jupyter_server}/distrain/api/version")
    assert refused.value.code == 403
