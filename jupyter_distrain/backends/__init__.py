"""Backends run jobs: `local` (processes on this machine) and `kubernetes` (pods in a namespace), each
keeping the contract of base.Backend; c.Distrain.backend_classes names them."""

from __future__ import annotations

import os
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy checks that each backend keeps the contract
    from ..config import Distrain
    from ..contract import Backend
    from .kubernetes import KubeBackend
    from .local import LocalBackend

    KEEP_THE_CONTRACT: tuple[type[Backend], ...] = (LocalBackend, KubeBackend)


def open_backend(settings: Distrain, name: str) -> Backend:
    """The backend `name`, made from `settings`; the storage root first made private to this user (0700: its job
    records, logs, outputs and volumes are no one else's to read)."""
    root = Path(settings.root).expanduser()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if root.stat().st_uid == os.getuid():
        root.chmod(0o700)
    module, _, cls = settings.backend_classes[name].rpartition(".")
    return getattr(import_module(module), cls).from_config(settings)
