"""Pick this replica's share of the training data (importable from training code).

    from jupyter_distrain.shard import my_files
    files = my_files(sorted(glob.glob("/input/part-*")))

The shard comes from DISTRAIN_SHARD_INDEX / DISTRAIN_NUM_SHARDS, which every replica gets:
the chief or master and the workers are the shards, in rank order; other roles read everything.
"""

from __future__ import annotations

import os
import re
from typing import Sequence, TypeVar

T = TypeVar("T")
_SUFFIX = re.compile(r"(\d+)(?:\.[^./]*)?$")


def shard() -> tuple[int, int]:
    """(this replica's shard index, number of shards); (0, 1) outside a job."""
    return int(os.environ.get("DISTRAIN_SHARD_INDEX", 0)), int(os.environ.get("DISTRAIN_NUM_SHARDS", 1))


def my_items(items: Sequence[T]) -> list[T]:
    """Every item whose position modulo the shard count is this replica's shard."""
    index, count = shard()
    return [item for i, item in enumerate(items) if i % count == index]


def my_files(paths: Sequence[str]) -> list[str]:
    """Files whose numeric suffix (part-00007, data-3.csv) modulo the shard count is this shard.

    Files without a numeric suffix are shared out by position instead.
    """
    index, count = shard()
    mine: list[str] = []
    unnumbered: list[str] = []
    for path in paths:
        match = _SUFFIX.search(os.path.basename(path))
        if not match:
            unnumbered.append(path)
        elif int(match.group(1)) % count == index:
            mine.append(path)
    return mine + [p for i, p in enumerate(unnumbered) if i % count == index]
