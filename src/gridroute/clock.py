"""The wall clock the signals path stamps and reads with: the host's wall clock, except
that it never steps back.

Samples, the operator's `Date` and `X-Grid-Time`, the poller's offsets and the
gateway's snapshot times are all points on one wall clock. Read from `time.time`, a
host clock set back (by hand, or by a hard NTP step) froze every reading: a window
keeps only samples newer than the one it holds, so each new sample read as older and
was dropped until the clock caught up (an hour, for an hour's step), and the held one,
stamped in the reader's future, never went silent.

`wall` is `time.time` while that moves forward; when it steps back, `wall` goes on from
where it was at the rate of `time.monotonic` (which NTP slews but never steps) until
the host's clock catches up, then follows it again. A forward step (a slow clock set
right, a VM resumed) is followed at once, so stamps that other hosts or Prometheus
(`honor_timestamps`) read as absolute times stay true; only a backward step leaves this
process ahead of its host, by at most the step and for as long as the step was.
Another host compares through `Date` offsets (`relay/poller.py`, `steady_offset`),
never by assuming two clocks agree.
"""

from __future__ import annotations

import time

_last = (time.time(), time.monotonic())
"""(the last reading, the monotonic time it was read at): one tuple, swapped whole, so a
reader on another thread never sees half of it."""


def wall() -> float:
    """Seconds since the epoch, as `time.time`, never less than the last reading plus
    the monotonic time since it."""
    global _last
    now, mono = time.time(), time.monotonic()
    last, at = _last
    steady = last + (mono - at)
    t = now if now >= steady else steady
    _last = (t, mono)
    return t
