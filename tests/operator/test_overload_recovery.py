"""Overload degrades freshness and the ring recovers on its own once it passes.

Three operators over mutual TLS share one event loop; the test starves that loop
(synchronous sleeps, as a CPU hog would) so every poll misses its round deadline.
Once the hog stops, every peer poll succeeds again and every operator holds fresh
rows of the others within a few rounds, with no restart and no help.
"""

from __future__ import annotations

import asyncio
import time

from operator_fixtures import Certs
from test_operator_ring import until, with_ring

from gridroute.operator.service import Operator
from gridroute.relay.poller import PollResult


def test_the_ring_recovers_by_itself_after_the_loop_was_starved(certs: Certs) -> None:
    async def body(ops: dict[str, Operator]) -> None:
        def converged() -> bool:
            now = time.time()
            return all(
                all(c.latest is not None and c.latest.result is PollResult.OK for c in op.peers)
                and all(
                    f"{s}/pool" in op.store.latest()
                    and now - op.store.latest()[f"{s}/pool"].at < 1.0
                    for s in ops
                )
                for op in ops.values()
            )

        await until(converged, "the ring converged before the overload")
        for _ in range(3):  # starve the loop: every round overruns its deadline
            time.sleep(1.2)
            await asyncio.sleep(0)
        rounds_then = {s: op.rounds for s, op in ops.items()}
        await until(converged, "the ring recovered after the overload", rounds=400)
        # It took a handful of rounds, not a restart.
        assert all(op.rounds - rounds_then[s] < 40 for s, op in ops.items())

    asyncio.run(with_ring(certs, body))
