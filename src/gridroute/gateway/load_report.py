"""This gateway worker's own in-flight, reported with every poll of its operator.

The report rides on the poll the gateway already makes (request headers, see
`wire.gateway_report`), so it costs no call and touches no request. On NATS the
source publishes it once per read instead (`relay.nats_source.OwnReport`) and sums
every gateway's reports itself; `load` reads both the same way. The answer relays
every site's gateway sums; `load` turns them and what was just reported into the core's
`GatewayLoad`, from which the fair share leaves out load that no gateway sent.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from dataclasses import replace

from gridroute.core.demand import DemandReport, report
from gridroute.core.gateway_load import GatewayLoad, Sums, add_into, combine
from gridroute.gateway.current import CurrentGrid
from gridroute.wire.gateway_report import (
    GATEWAY_HEADER,
    IN_FLIGHT_HEADER,
    render_demand,
    render_in_flight,
)
from gridroute.wire.signals import Decoded

POD_NAME_ENV = "GRIDROUTE_POD_NAME"
"""The pod's name, where the chart sets it (downward API): each replica of a site's
gateway Deployment is then one gateway identity named after its pod."""


def gateway_id(worker: int) -> str:
    """A steady id for this worker's life: the pod's name (`GRIDROUTE_POD_NAME`) or the
    pid, the worker index and a random tag; at most 63 characters (`valid_gateway_id`).
    In a container every replica's pid is alike, the tag still tells them apart."""
    pod = re.sub(r"[^A-Za-z0-9._-]", "-", os.environ.get(POD_NAME_ENV, ""))[-48:].strip("-.")
    return f"gw-{pod or os.getpid()}-{worker}-{secrets.token_hex(3)}"


class LoadReport:
    """Renders the report headers and remembers what was sent, for the share's numerator."""

    def __init__(
        self,
        current: Callable[[], CurrentGrid],
        ident: str,
        local_site: str | None,
        window_s: float = 5.0,
    ) -> None:
        self._current = current
        self.ident = ident
        self.local_site = local_site
        self.window_s = window_s
        self.sent: dict[str, int] = {}
        self.demand: DemandReport | None = None
        """This worker's demand as last reported (None: it does not follow demand)."""
        self.speaks = True
        """Its own report reaches the sums by a call of `take` (the mesh's poll headers,
        the NATS publish); False on Prometheus, where `load` takes it itself, so that
        what this gateway counts as its own is as fresh as on the other transports."""
        self.unscraped = False
        """A Prometheus reader with no metrics listener: no scrape carries its own
        count, so `load` adds it to the sums itself (else a lone other gateway would
        read as this one)."""

    def take(self) -> dict[str, int]:
        """This worker's own in-flight now, remembered as what was sent (the NATS
        transport publishes it itself; the mesh sends it as `headers`)."""
        current = self._current()
        own = current.own
        self.sent = {k: v for k, v in own.counts.items() if v > 0}
        self.demand = None
        if current.state.settings.follow_demand:
            meter = current.fairness.demand
            self.demand = report(
                current.state.candidates,
                self.sent,
                own.models,
                meter,
                current.clock(),
                current.state.targets(),
            )
        return self.sent

    def headers(self) -> dict[str, str]:
        """The headers of the next poll: this worker's id, own in-flight and demand now."""
        out = {GATEWAY_HEADER: self.ident, IN_FLIGHT_HEADER: render_in_flight(self.take())}
        if self.demand is not None:
            out.update(render_demand(self.demand))
        return out

    def load(self, decoded: Decoded, now: float) -> GatewayLoad | None:
        """The gateways' load as this poll relayed it; None when the operator relays no
        sums for this site (it does not take reports: the share keeps its fallback)."""
        sums = decoded.gateways
        local = sums.get(self.local_site) if self.local_site is not None else None
        if local is None or local.gateways < 1:
            return None
        if not self.speaks or self.unscraped:
            self.take()
        if self.unscraped and self.local_site is not None:
            mine = dict(local.in_flight)
            add_into(mine, self.sent)
            beyond, unmet, want = dict(local.demand), dict(local.unmet), dict(local.want)
            if self.demand is not None:
                add_into(beyond, self.demand.beyond)
                add_into(unmet, self.demand.unmet)
                add_into(want, self.demand.want)
            sums = {
                **sums,
                self.local_site: replace(
                    local,
                    gateways=local.gateways + 1,
                    in_flight=mine,
                    demand=beyond,
                    unmet=unmet,
                    want=want,
                ),
            }
        # A scraped Prometheus reader's own want in the sums is a scrape old, its own
        # report fresh: split by the two, the claims could add past the room. It splits
        # nothing by want (`GatewayLoad.site_demand`).
        stale_own = not self.speaks and not self.unscraped
        sites: dict[str, Sums] = {
            site: (s.gateways, s.in_flight, s.demand, s.unmet, {} if stale_own else s.want)
            for site, s in sums.items()
            if now - s.at <= self.window_s
        }
        demand = self.demand
        if demand is not None and (demand.beyond or demand.unmet):
            relayed = sums.get(self.local_site) if self.local_site is not None else None
            if relayed is not None and not relayed.demand and not relayed.unmet:
                # This gateway reported demand, and what came back of its own site has
                # none: the operator (an older one) does not relay demand, so neither
                # does anyone's reach this gateway. Its own alone would read as the
                # site's whole demand; follow nobody's.
                demand = None
        return combine(sites, self.sent, demand)
