"""Whose a job is: who a process acts for, and whom each owner's jobs are shown to."""

from __future__ import annotations

import getpass
import os


def current_owner() -> str:
    """Who submits and sees jobs: JupyterHub's user (its single-user servers, and their terminals and kernels,
    have $JUPYTERHUB_USER), else the operating-system user."""
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


def sees(viewer: str, owner: str, see_all: bool) -> bool:
    """Whether `viewer` sees a job (or a stored secret) of `owner`: their own, one made before there were
    owners (""), or with `see_all` (an admin's server) every one."""
    return see_all or owner in ("", viewer)
