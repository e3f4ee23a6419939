"""A simulated gateway: the gateway's decision state, fed by simulated polls.

It owns exactly what a real gateway owns: a `GridState` refreshed once per poll of its
local operator, an `OwnLoad` of its requests in flight, its ejected candidates, a seeded
random source and, for the admission queue, the requests it holds. It is the `FlowGrid`
the core's request flow reads (`core/flow.py`), the same flow the gateway's handler
drives, so the simulator measures the shipped behaviour. Under a scenario's routing
overlay it also owns what a gateway's overlay watch owns: the route table and its own
picker positions (process-local, as in a gateway), handed to the flow as one
`OverlayRequest` (a simulated request has no session, so every request's is the same).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import replace
from random import Random

from gridroute.core import (
    AvailabilitySettings,
    Candidate,
    GridState,
    OwnLoad,
    Policy,
    Snapshot,
)
from gridroute.core.demand import report as demand_report
from gridroute.core.ejection import Ejections
from gridroute.core.fairness import FairAdmission
from gridroute.core.gateway_load import combine
from gridroute.core.group_route import RouteTable
from gridroute.core.overlay_request import OverlayRequest
from gridroute.core.pickers import PickerStates
from gridroute.core.prefix import PrefixMap
from gridroute.sim.model import SimOperator, SimRequest
from gridroute.sim.scenario import MODEL, PROVIDER


def candidates_for(site: str, sites: list[str]) -> list[Candidate]:
    """The candidate list in local-first config order: the own site, then the rest."""
    order = [site] + [s for s in sites if s != site]
    return [Candidate(s, PROVIDER, local=s == site) for s in order]


class SimGateway:
    """One gateway at `site`, deciding with `policy`."""

    __slots__ = (
        "_snapshot",
        "clock",
        "drain_pending",
        "ejections",
        "fairness",
        "held",
        "index",
        "overlay",
        "own",
        "policy",
        "prefixes",
        "rng",
        "site",
        "state",
    )

    def __init__(
        self,
        index: int,
        site: str,
        sites: list[str],
        settings: AvailabilitySettings,
        policy: Policy,
        rng: Random,
        clock: Callable[[], float],
        table: RouteTable | None = None,
        max_attempts: int = 1,
        rounding: Random | None = None,
    ) -> None:
        self.index = index
        self.site = site
        self.policy = policy
        self.rng = rng
        self.state = GridState(candidates_for(site, sites), settings, [MODEL], rounding)
        """`rounding` rounds fair-share budgets per snapshot (its own seeded stream, so
        the picks draw the same sequence as without it)."""
        self.own = OwnLoad()
        self.ejections = Ejections()
        self.fairness = FairAdmission()
        self.clock = clock
        """The simulation's clock (the time of the event being handled)."""
        self.held: deque[SimRequest] = deque()
        self.drain_pending = False
        self.prefixes = PrefixMap()
        """Prefix block -> the site that served it (used with scenario `sessions`)."""
        self._snapshot: Snapshot | None = None
        self.overlay: OverlayRequest | None = None
        """Under the scenario's overlay: every request's overlay inputs (no sessions)."""
        if table is not None:
            self.overlay = OverlayRequest(table, PickerStates(), max_attempts=max_attempts)

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot of the last poll (a gateway decides only after its first)."""
        snap = self._snapshot
        assert snap is not None, "a gateway decides only after its first poll"
        return snap

    def refresh(self, operator: SimOperator, now: float, report: bool = True) -> Snapshot:
        """One poll of the local operator: its rows, its poll rounds, and now for itself.

        With `report`, the poll carries this gateway's own in-flight per candidate (what
        the operator sums and relays), and the gateways' sums come back with the rows.
        """
        gateways = None
        if report:
            mine = {k: v for k, v in self.own.counts.items() if v}
            demand = None
            if self.state.settings.follow_demand:
                demand = demand_report(
                    self.state.candidates,
                    mine,
                    self.own.models,
                    self.fairness.demand,
                    now,
                    self.state.targets(),
                )
            operator.report(self.index, mine, now, demand)
            gateways = combine(operator.gateway_sums(now), mine, demand)
        rows = operator.rows()
        rounds = dict(operator.rounds)
        skew = operator.skew_s
        if skew:  # re-based by the operator's Date, as the real poller does
            rows = [replace(r, at=r.at - skew) for r in rows]
            rounds = {k: None if v is None else v - skew for k, v in rounds.items()}
        rounds[self.site] = now
        self._snapshot = self.state.refresh(rows, rounds, now, {}, self.own, gateways)
        return self._snapshot
