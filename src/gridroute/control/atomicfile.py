"""Whole-file replacement: a reader sees the old file or the new one, never half of one.

The text goes to a temporary file in the same directory, is flushed to disk, then
renamed over the target (`os.replace` is atomic on POSIX within one filesystem). A
GitOps tool or a gateway watching the directory never reads a torn route.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text`; on any error the old file is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove(path: Path) -> bool:
    """Delete `path` if it exists; True when something was removed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
