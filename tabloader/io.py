"""Deprecated alias of :mod:`tabloader.atomic_files` and :mod:`tabloader.filesystems`.

``tabloader.io`` held both atomic writes and file-system helpers under a name that said
neither; import ``atomic_directory``, ``write_text_atomic``, ``temporary_sibling`` and
``write_error`` from :mod:`tabloader.atomic_files`, ``filesystem`` and ``join`` from
:mod:`tabloader.filesystems`. This module will be removed.
"""

from __future__ import annotations

import warnings

from tabloader.atomic_files import atomic_directory, temporary_sibling, write_error, write_text_atomic
from tabloader.filesystems import filesystem, join

__all__ = ["atomic_directory", "filesystem", "join", "temporary_sibling", "write_error", "write_text_atomic"]

warnings.warn("tabloader.io is deprecated and will be removed: import atomic writes from tabloader.atomic_files "
              "and filesystem/join from tabloader.filesystems", DeprecationWarning, stacklevel=2)
