"""Log set-up shared by the long-running processes (gateway, operator).

Every event the processes log is one line, never one per request. With
`GRIDROUTE_LOG_FORMAT=json` each line is a JSON object with `ts`, `level`, `logger`,
`msg` and the event's structured fields (the `extra={...}` a call passes, e.g. `event`,
`model`, `from`, `to` of a refusal-class change), so a log pipeline can index them
without parsing prose. The default is human-readable text.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: the standard fields plus whatever `extra` carried."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def setup_logging(level: str | int = logging.INFO, fmt: str | None = None) -> None:
    """Configure the root logger once: text, or JSON when `fmt` (default: the
    `GRIDROUTE_LOG_FORMAT` environment variable) is `json`."""
    fmt = (fmt or os.environ.get("GRIDROUTE_LOG_FORMAT", "text")).lower()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
