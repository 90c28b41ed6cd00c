"""Backends run jobs: `local` (processes on this machine) and, later, `kubernetes`."""
