"""jupyter-distrain: launch and manage model training, single-machine or distributed, from JupyterLab."""

try:
    from ._version import __version__
except ImportError:  # a source tree that was never built
    __version__ = "0.0.0"


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyter-distrain"}]


def _jupyter_server_extension_points():
    from .server import Distrain

    return [{"module": "jupyter_distrain", "app": Distrain}]
