"""The gateway's own in-flight count per candidate, with a short history.

The seed admits "the gateway keeps no count of its own requests". gridroute does:
every request start has exactly one end, and the count at any recent instant can be
read back, so a polled reading taken at `sampled_at` can be corrected by what this
gateway sent and saw finish since: estimate = polled - own(sampled_at) + own(now).
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import islice


class AccountingError(RuntimeError):
    """An end without a start: a bug in the caller, never silently absorbed."""


class OwnLoad:
    """Per-candidate own in-flight counts; `history_s` of change points are kept."""

    __slots__ = ("_times", "_values", "counts", "history_s", "models", "peaks", "resolution_s")

    def __init__(self, history_s: float = 30.0, resolution_s: float = 0.005) -> None:
        self.counts: dict[str, int] = {}
        self.models: dict[str, int] = {}
        """In flight per model, for the demand a gateway reports (`core/demand.py`)."""
        self.peaks: dict[str, int] = {}
        """The most in flight per key since `mark` (the last snapshot): with `most_since`
        at that snapshot, what this gateway held at a site since the sample it reads
        (`select.decide`'s refill with an admission queue)."""
        self.history_s = history_s
        self.resolution_s = resolution_s
        self._times: dict[str, list[float]] = {}
        self._values: dict[str, list[int]] = {}

    def _record(self, key: str, now: float, value: int) -> None:
        times = self._times.get(key)
        if times is None:
            self._times[key] = [now]
            self._values[key] = [value]
            return
        values = self._values[key]
        if now - times[-1] < self.resolution_s:
            values[-1] = value
            return
        times.append(now)
        values.append(value)
        if len(times) > 4096 and now - times[0] > self.history_s:
            cut = bisect_right(times, now - self.history_s) - 1
            if cut > 0:
                del times[:cut]
                del values[:cut]

    def start(self, key: str, now: float, model: str = "") -> None:
        """A request (of `model`) to `key` is now in flight."""
        value = self.counts.get(key, 0) + 1
        self.counts[key] = value
        self._record(key, now, value)
        if value > self.peaks.get(key, 0):
            self.peaks[key] = value
        if model:
            self.models[model] = self.models.get(model, 0) + 1

    def end(self, key: str, now: float, model: str = "") -> None:
        """A request to `key` ended (answered, failed, cancelled or retried elsewhere);
        `model` as its start named it."""
        value = self.counts.get(key, 0) - 1
        if value < 0:
            raise AccountingError(f"end without start for {key}")
        self.counts[key] = value
        self._record(key, now, value)
        if model:
            left = self.models.get(model, 0) - 1
            if left > 0:
                self.models[model] = left
            else:
                self.models.pop(model, None)

    def now(self, key: str) -> int:
        return self.counts.get(key, 0)

    def at(self, key: str, t: float) -> int:
        """The count at time `t` (0 before the first change; exact within `history_s`)."""
        times = self._times.get(key)
        if not times:
            return 0
        i = bisect_right(times, t) - 1
        if i < 0:
            return 0
        return self._values[key][i]

    def most_since(self, key: str, t: float) -> int:
        """The most in flight at `key` from `t` until now, within `history_s`; changes
        closer than `resolution_s` are kept as their last (so it may read low, never
        high)."""
        times = self._times.get(key)
        if not times:
            return 0
        i = bisect_right(times, t) - 1  # before the first change the count was 0
        return max(islice(self._values[key], max(i, 0), None))

    def mark(self) -> None:
        """Start `peaks` again from what is in flight now (a snapshot was built)."""
        self.peaks = dict(self.counts)

    def total(self) -> int:
        return sum(self.counts.values())
