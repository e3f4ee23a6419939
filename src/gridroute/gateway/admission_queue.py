"""Admission: one decision per attempt, with the gridroute admission queue.

`decide` is the core's pure pick. Under the `gridroute` policy it may answer `HOLD`
(every site is at this gateway's share of its ceiling and `availability.max_queue_ms`
is set): the request then waits here, without a timer per request beyond its own
deadline, until one of this gateway's requests ends or a new snapshot arrives,
and decides again on the newest snapshot. Past `max_queue_ms` it decides with
`can_hold=False`, which forwards to the overflow tiers or sheds (`queue_overflow`).
"""

from __future__ import annotations

from gridroute.core import Decision, Outcome, Policy, Snapshot, decide
from gridroute.gateway.current import CurrentGrid


async def admit(
    current: CurrentGrid,
    model: str,
    policy: Policy,
    exclude: frozenset[str] = frozenset(),
    affinity: str | None = None,
) -> tuple[Decision, Snapshot]:
    """Decide for a new request; wait in the admission queue while the answer is HOLD.

    Returns the decision and the snapshot it was made on, which the request keeps
    (a retry decides on it again).
    """
    snap = current.snapshot
    d = decide(snap, model, current.rng, policy, current.own.counts, affinity, exclude=exclude)
    if d.outcome is not Outcome.HOLD:
        return d, snap
    clock = current.monotonic  # a deadline: immune to steps of the wall clock
    deadline = clock() + current.snapshot.settings.max_queue_ms / 1000.0
    while True:
        remaining = deadline - clock()
        if remaining <= 0.0:
            snap = current.snapshot
            d = decide(
                snap,
                model,
                current.rng,
                policy,
                current.own.counts,
                affinity,
                can_hold=False,
                exclude=exclude,
            )
            return d, snap
        await current.changes.wait(remaining)
        snap = current.snapshot
        d = decide(snap, model, current.rng, policy, current.own.counts, affinity, exclude=exclude)
        if d.outcome is not Outcome.HOLD:
            return d, snap
