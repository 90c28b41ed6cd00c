"""jupyter-distrain: launch and manage model training, single-machine or distributed, from JupyterLab."""

try:
    from ._version import __version__
except ImportError:  # a source tree that was never built
    __version__ = "0.0.0"

from .errors import DistrainError, SpecError  # every refusal is a DistrainError; a spec's, a SpecError


def __getattr__(name: str):
    if name == "Client":  # imported on first use: the CLI and the server never need it
        from .client import Client

        return Client
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:
    """`%load_ext jupyter_distrain`: the %distrain and %%distrain magics."""
    from .magics import DistrainMagics

    ipython.register_magics(DistrainMagics)


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyter-distrain"}]


def _jupyter_server_extension_points():
    from .server import DistrainExtension

    return [{"module": "jupyter_distrain", "app": DistrainExtension}]
