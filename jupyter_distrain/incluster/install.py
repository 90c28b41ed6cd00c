"""The first step of a Kubernetes replica's command (`python /opt/distrain/install`, in its workspace): install the
workspace's requirements.txt with pip if it asks for anything (exit 1 if that fails), then print one line
saying what the replica's Python is: `distrain-provenance {"python", "requirements", "packages"}`, where
requirements are the packages pip installed or changed for requirements.txt (null without one) and packages
every package the Python can import, each as `name==version`. The server takes that line out of the log
into the job's provenance. Standard library only: it runs in the job's image."""

import json
import os
import platform
import subprocess
import sys

MARK = "distrain-provenance "
MAX_LINE = 64 * 1024  # the log tee's: the line stays whole
LISTING = """
import importlib.metadata, json, re
found = {}
for dist in importlib.metadata.distributions():
    name = dist.metadata["Name"]
    if name:
        found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), f"{name}=={dist.version}")
print(json.dumps(sorted(found.values(), key=str.lower)))
"""


def installed():
    """Every importable package, as a new interpreter finds them (one that sees a user site pip just made)."""
    listed = subprocess.run([sys.executable, "-c", LISTING], stdout=subprocess.PIPE, check=True)
    return json.loads(listed.stdout)


def main():
    wanted = os.path.exists("requirements.txt") and os.path.getsize("requirements.txt") > 0
    before = installed() if wanted else []
    if wanted:
        pip = [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "-r",
               "requirements.txt"]
        if subprocess.run(pip).returncode:
            sys.exit(1)
    packages = installed()
    report = {"python": platform.python_version(),
              "requirements": sorted(set(packages) - set(before), key=str.lower) if wanted else None,
              "packages": packages}
    if len(MARK + json.dumps(report)) > MAX_LINE:
        report["packages"] = None  # more than one log line holds: not known
    print(MARK + json.dumps(report), flush=True)


main()
