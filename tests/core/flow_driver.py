"""A FlowGrid for core tests: a snapshot, a seeded rng, own counts, ejections, a clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random

from gridroute.core import OwnLoad, Policy, Snapshot
from gridroute.core.ejection import Ejections
from gridroute.core.fairness import FairAdmission
from gridroute.core.flow import Feed, Step, request_flow

from .grid_builder import MODEL


@dataclass
class FakeGrid:
    snapshot: Snapshot
    own: OwnLoad
    rng: Random = field(default_factory=lambda: Random(1))
    ejections: Ejections = field(default_factory=Ejections)
    fairness: FairAdmission = field(default_factory=FairAdmission)
    now: float = 10.0

    @property
    def clock(self) -> Callable[[], float]:
        return lambda: self.now


def run_flow(
    grid: FakeGrid,
    feeds: list[Feed],
    policy: Policy = Policy.FIRST,
    model: str = MODEL,
) -> list[Step]:
    """Every step of one flow, feeding `feeds` in order; asserts it ends terminal."""
    flow = request_flow(grid, model, policy)
    steps = [next(flow)]
    for fed in feeds:
        assert not steps[-1].terminal, f"fed {fed!r} after a terminal step"
        steps.append(flow.send(fed))
    assert steps[-1].terminal, f"the flow wanted more than {feeds!r}: {steps[-1]!r}"
    return steps
