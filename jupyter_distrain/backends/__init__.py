"""Backends run jobs: `local` (processes on this machine) and `kubernetes` (pods in a namespace), each
keeping the contract of base.Backend; c.Distrain.backend_classes names them."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy checks that each backend keeps the contract
    from .base import Backend
    from .kube import KubeBackend
    from .local import LocalBackend

    KEEP_THE_CONTRACT: tuple[type[Backend], ...] = (LocalBackend, KubeBackend)
