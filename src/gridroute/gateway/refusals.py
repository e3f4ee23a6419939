"""One log line per refusal-class transition of a model, never one per request.

A model moves between classes `routed`, `shed` and `no_site`; the first request of a
new class logs the change (and how many requests the old class answered), so an
operator sees "m: routed -> shed" once, not thousands of 429 lines.
"""

from __future__ import annotations

import logging

from gridroute.core import Outcome

log = logging.getLogger("gridroute.gateway")

_CLASS = {
    Outcome.ROUTE: "routed",
    Outcome.SHED: "shed",
    Outcome.NO_SITE: "no_site",
}


class RefusalLog:
    """Per configured model: the current class and how many requests it has answered."""

    __slots__ = ("_class", "_count")

    def __init__(self) -> None:
        self._class: dict[str, str] = {}
        self._count: dict[str, int] = {}

    def note(self, model: str, outcome: Outcome) -> None:
        cls = _CLASS.get(outcome)
        if cls is None:
            return
        prev = self._class.get(model)
        if prev == cls:
            self._count[model] += 1
            return
        if prev is not None or cls != "routed":
            log.warning(
                "model %s: %s -> %s",
                model,
                prev or "start",
                cls,
                extra={
                    "event": "refusal_transition",
                    "model": model,
                    "from": prev,
                    "to": cls,
                    "answered": self._count.get(model, 0),
                },
            )
        self._class[model] = cls
        self._count[model] = 1

    def current(self) -> dict[str, str]:
        return dict(self._class)
