"""Which requests a fake server began answering, one line each, in a file.

The fault suite asks of every scenario: was a request whose bytes reached the client
ever started at a second site? The client knows which site answered it
(`x-grid-site`); only the backends know where else it was started. Each fake server
with `answer_log` set appends `<x-request-id> <monotonic seconds>` the moment it
commits to a 200 answer (before its first byte), and flushes the line, so the record
survives a SIGKILL a moment later. Every process on the host reads the same
monotonic clock, so the lines of two sites can be ordered.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

REQUEST_ID_HEADER = "x-request-id"
"""The header whose value is logged; requests without it are not logged."""


class AnswerLog:
    """An append-only file of answers begun; `None`-safe to call when unset."""

    def __init__(self, path: str) -> None:
        self._file: TextIO = Path(path).open("a", encoding="utf-8")  # noqa: SIM115 - lives with the app

    def began(self, request_id: str | None) -> None:
        """Record that an answer for `request_id` is about to start."""
        if not request_id:
            return
        self._file.write(f"{request_id.replace(' ', '_')} {time.monotonic():.6f}\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_answer_log(path: Path) -> dict[str, float]:
    """{request id: the monotonic time its answer began} from one server's log (the
    earliest line where an id repeats; an unfinished last line is skipped)."""
    out: dict[str, float] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        rid, _, at = line.partition(" ")
        try:
            t = float(at)
        except ValueError:
            continue
        out.setdefault(rid, t)
    return out
