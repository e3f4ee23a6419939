"""The in-flight this site's gateways report, and what peers relay of theirs.

Each gateway's poll of `/signals` carries its own per-candidate in-flight
(`wire.gateway_report`); the operator keeps the newest report of each gateway for
`window_s`, serves their per-candidate sum beside its own rows, and keeps each peer's
sum as of the last poll that reached it. A gateway that stops polling drops out of the
sum after the window; a peer not heard from for the window drops out too.
"""

from __future__ import annotations

from collections.abc import Mapping

from gridroute.core.demand import DemandReport, received
from gridroute.core.gateway_load import ReportSums
from gridroute.wire.signals import GatewaySums

MAX_GATEWAYS = 256
"""Gateways remembered at once; the stalest report goes first past this."""


class GatewayReports:
    """Reports of local gateways and sums relayed by peers."""

    def __init__(self, site: str, window_s: float = 5.0) -> None:
        self.site = site
        self.window_s = window_s
        self._reports: dict[str, tuple[float, dict[str, int], DemandReport]] = {}
        self._peers: dict[str, GatewaySums] = {}

    def record(
        self,
        gateway: str,
        counts: Mapping[str, int],
        now: float,
        demand: DemandReport | None = None,
    ) -> None:
        """The newest report of `gateway` (a gateway worker's id): its in-flight per
        candidate and, when it follows demand, its demand (`core/demand.py`)."""
        self._reports[gateway] = (now, dict(counts), received(counts, demand))
        if len(self._reports) > MAX_GATEWAYS:
            stalest = min(self._reports, key=lambda g: self._reports[g][0])
            del self._reports[stalest]

    def peer(self, site: str, sums: GatewaySums | None) -> None:
        """What a poll of peer `site` relayed of its gateways (None: it relayed nothing)."""
        if sums is None:
            self._peers.pop(site, None)
        else:
            self._peers[site] = sums

    def own(self, now: float) -> GatewaySums:
        """This site's gateways' fresh reports, summed per candidate."""
        stale = [g for g, (at, _, _) in self._reports.items() if now - at > self.window_s]
        for gateway in stale:
            del self._reports[gateway]
        sums = ReportSums()
        for _, counts, demand in self._reports.values():
            sums.add(counts, demand)
        return GatewaySums.of(now, sums)

    def rows(self, now: float, *, own_only: bool = False) -> dict[str, GatewaySums]:
        """Reporting site -> sums to serve: this site's, and (unless `own_only`) each
        peer's heard within the window. A site without reporting gateways is left out
        (so an operator no gateway polls serves exactly what it did before)."""
        mine = self.own(now)
        out = {self.site: mine} if mine.gateways else {}
        if not own_only:
            for site, sums in self._peers.items():
                if sums.gateways and now - sums.at <= self.window_s:
                    out[site] = sums
        return out
