"""What a job's replicas run as Python starts: this directory comes first on their PYTHONPATH (the local backend's
supervisor puts it there; on Kubernetes the pod mounts this file from the namespace's ConfigMap of programs,
render.programs). It imports nothing of jupyter-distrain, and then the sitecustomize it hides, if there is one, runs.

Stacks: the process lets the job's user read its memory (Linux's PR_SET_PTRACER_ANY), which py-spy needs to dump
its stacks (see jupyter_distrain/backends/local/processstacks.py) where the kernel's Yama module allows a user's processes to trace only
their own children (ptrace_scope 1, the default of most distributions); a kernel without Yama needs nothing.

A PyTorch job's (DISTRAIN_TENSORBOARD_WITHOUT_TENSORFLOW set): TensorBoard's writer (torch.utils.tensorboard,
tensorboard.summary) does its file I/O through TensorFlow whenever TensorFlow is installed, and imports it to find
out. In a PyTorch process that is the cause of a crash: TensorFlow 2.20 and 2.21 load their statically linked LLVM
into the process's global symbols (RTLD_GLOBAL), and Triton's LLVM, loaded later (torch imports Triton with the
first optimizer, or torch.compile), then registers its options into TensorFlow's copy and aborts ("LLVM ERROR:
inconsistency in registered CommandLine options", exit 134). Here TensorBoard is told to use its own
TensorFlow-free I/O, as it does wherever PyTorch is installed without TensorFlow: its switch for that is a module
named tensorboard.compat.notf being importable, which this finder makes it while the process has not imported
TensorFlow itself (a process that has keeps TensorFlow's I/O).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Sequence

SWITCH = "tensorboard.compat.notf"
PR_SET_PTRACER, PR_SET_PTRACER_ANY = 0x59616D61, -1  # <linux/prctl.h>


def let_the_user_trace() -> None:
    """Declare that any process of this user may trace this one (Yama's exception); nothing without Yama."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PTRACER, ctypes.c_ulong(PR_SET_PTRACER_ANY), 0, 0, 0)


class TensorBoardWithoutTensorFlow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds SWITCH, an empty module, while TensorFlow is not imported."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != SWITCH or "tensorflow" in sys.modules:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        pass


def run_the_hidden_one() -> None:
    """The sitecustomize module that the rest of the path holds, run as Python would have run it."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


let_the_user_trace()
if os.environ.get("DISTRAIN_TENSORBOARD_WITHOUT_TENSORFLOW"):
    sys.meta_path.insert(0, TensorBoardWithoutTensorFlow())
run_the_hidden_one()
