"""Per model: is it routed, shedding or without a site? One log line per change, never
one per request.

Under `gridroute` a model past capacity sheds request by request (the excess gets 429
while every slot stays busy), so consecutive requests alternate between routed and shed.
The class of a model is therefore judged over a short hold: it is `shed` while a request
was shed within the last `hold_s`, else `no_site` while one found no site within it, else
`routed`. A change of class logs once ("m: routed -> shed"), and the same class feeds
`grid_route_shedding{model}` and `/grid/status`, so the gauge reads 1 while 429s flow
whether they come from the per-snapshot latch or from per-request admission.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gridroute.core import Outcome

log = logging.getLogger("gridroute.gateway")

HOLD_S = 5.0
"""How long one refusal keeps a model in its refusal class (about one Retry-After)."""


class SheddingState:
    """Per configured model: the last shed and no-site times, the class, a count."""

    __slots__ = ("_class", "_count", "_last_none", "_last_shed", "clock", "hold_s")

    def __init__(self, hold_s: float = HOLD_S, clock: Callable[[], float] = time.monotonic):
        self.hold_s = hold_s
        self.clock = clock
        self._class: dict[str, str] = {}
        self._count: dict[str, int] = {}
        self._last_shed: dict[str, float] = {}
        self._last_none: dict[str, float] = {}

    def _judge(self, model: str, now: float) -> str:
        if now - self._last_shed.get(model, -1e18) < self.hold_s:
            return "shed"
        if now - self._last_none.get(model, -1e18) < self.hold_s:
            return "no_site"
        return "routed"

    def note(self, model: str, outcome: Outcome) -> None:
        """Record one decision's outcome; log if the model's class changed."""
        if outcome is Outcome.SHED:
            now = self._last_shed[model] = self.clock()
        elif outcome is Outcome.NO_SITE:
            now = self._last_none[model] = self.clock()
        elif outcome is Outcome.ROUTE:
            now = self.clock()
        else:
            return
        cls = self._judge(model, now)
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
        """Each model's class now (a model with no recent refusal reads `routed`)."""
        now = self.clock()
        return {m: self._judge(m, now) for m in self._class}

    def shedding(self, model: str) -> bool:
        return self._judge(model, self.clock()) == "shed"
