"""Module-level helpers for tests/test_dask_scale.py, importable by Dask worker processes.

pytest puts ``tests/`` on ``sys.path`` and spawned worker processes inherit it, so workflows
built from these ops can be shipped to the workers of a ``LocalCluster(processes=True)``.
"""

from __future__ import annotations

import os
import time
import uuid

from tabloader.ops.base import Operator, flatten_columns


class Sleep(Operator):
    """Passes its columns through unchanged after sleeping ``seconds`` (stretches a fit in time).

    With ``marker_dir``, each call first leaves an empty file there, so a test can tell how many
    partitions have been processed so far, whichever process did them.
    """

    def __init__(self, seconds: float = 0.1, marker_dir: str | None = None) -> None:
        self.seconds = seconds
        self.marker_dir = marker_dir

    def transform(self, columns, frame):
        if self.marker_dir is not None and len(frame):
            open(os.path.join(self.marker_dir, f"{os.getpid()}-{uuid.uuid4().hex}"), "w").close()
        time.sleep(self.seconds)
        return frame[flatten_columns(columns)]
