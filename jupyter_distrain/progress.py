"""Whether a running job progresses: when its replicas last wrote a log line or a TensorBoard step (what
policy.hang_after measures)."""

from __future__ import annotations

import os
from pathlib import Path

from .incluster.tensorboard import is_event_file


def last_written(log_dir: Path, output: Path, since: float) -> float:
    """When a replica last wrote a line to its log in `log_dir` or to an event file anywhere under `output` (the
    files' modification times), or `since` if neither is newer."""
    paths = [*log_dir.glob("*.log"), *(Path(directory) / name for directory, _, names in os.walk(output)
                                       for name in names if is_event_file(name))]
    newest = since
    for path in paths:
        try:
            newest = max(newest, path.stat().st_mtime)
        except OSError:  # gone meanwhile
            pass
    return newest
