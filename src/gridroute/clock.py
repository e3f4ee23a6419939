"""The wall clock the signals path stamps and reads with, which a step of the host's
clock does not move.

Samples, the operator's `Date` and `X-Grid-Time`, the poller's offsets and the
gateway's snapshot times are all points on one wall clock. Read from `time.time`, a
host clock set back (by hand, or by a hard NTP step) froze every reading: a window
keeps only samples newer than the one it holds, so each new sample read as older
and was dropped until the clock caught up (an hour, for an hour's step), and the
held one, stamped in the reader's future, never went silent. `wall` is the wall time
when the process started, advanced by `time.monotonic`, which NTP slews but never
steps; so it keeps wall-clock meaning (another host's `Date` still re-bases onto it)
and moves forward at a steady rate whatever the host's clock does. Forked workers
share the start point, and `CLOCK_MONOTONIC` is one clock for the whole host, so every
worker of a gateway reads the same time.

A process started after a step reads the stepped time, as it should: another host
compares through `Date` offsets (`relay/poller.py`, `steady_offset`), never by
assuming two clocks agree. Prometheus stamps its own samples, with its host's clock,
so the Prometheus transport stays on `time.time` (`gateway/runtime.py`).
"""

from __future__ import annotations

import time

_BASE = time.time() - time.monotonic()


def wall() -> float:
    """Seconds since the epoch, as `time.time` read at start, advanced monotonically."""
    return _BASE + time.monotonic()
