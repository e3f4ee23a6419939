"""The admission queue: where a request the flow told to `Hold` waits.

The flow (`core/flow.py`) decides; this only waits. A held request waits for one of
this worker's requests to end or a new snapshot (`CurrentGrid.changes`), then is
decided again, until the hold's length (`max_queue_ms`) has passed, when the flow
forwards it to the overflow tiers or sheds it (429 is decided in `core/select.py`).
In fair order (`core/fairness.py`) the flow also holds a request that would take a slot
ahead of a waiter ranked first; so a waiter that leaves wakes the others once more.

The flow states its deadline on the grid's wall clock, the one its decisions read;
the wait runs `Hold.hold_s` on the monotonic clock instead, so a wall-clock step (NTP,
a resumed VM) neither ends a hold at once nor stretches it.
"""

from __future__ import annotations

from collections.abc import Generator

from gridroute.core.flow import Feed, Hold, Step, Wake
from gridroute.gateway.current import CurrentGrid


async def wait_in_queue(
    flow: Generator[Step, Feed, None], step: Step, current: CurrentGrid
) -> Step:
    """Wait while `step` is a `Hold`; returns the first step that is not."""
    if not isinstance(step, Hold):
        return step
    clock = current.monotonic
    hold_until = clock() + step.hold_s
    while isinstance(step, Hold):
        await current.changes.wait(hold_until - clock())
        step = flow.send(Wake.EXPIRED if clock() >= hold_until else Wake.WOKE)
    # In fair order only the first-ranked waiter takes a slot; when it leaves, the next
    # one may have room too (two slots freed by one wake-up): let the others decide again.
    current.changes.wake()
    return step
