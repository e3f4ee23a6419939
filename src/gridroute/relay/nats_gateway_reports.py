"""Gateways' own in-flight over NATS: what each gateway publishes, and the sum it reads.

On the mesh a gateway's report rides on its poll of the local operator, and operators
relay per-site sums (`operator/gateway_reports.py`). A gateway on NATS polls no
operator, so it speaks for itself: once per read it publishes its own per-candidate
in-flight on `<gateway prefix>.<site>.<gateway id>` (the body is the `x-grid-in-flight`
header's text, `wire/gateway_report.py`), and it subscribes to `<gateway prefix>.>`
and sums the other gateways' newest reports itself. Identity is the server's to
enforce, as for the operators' rows: a site's gateway user may publish only under
`<gateway prefix>.<site>.*` (`grid/nats_server.py`), so no gateway speaks for another
site's gateways.

A report is kept for `window_s` after it arrived (the reader's clock, so a skewed
gateway clock changes nothing): a gateway that stops reporting ages out of the sum
as on the mesh, where the operator forgets a gateway that stopped polling.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from gridroute.core.demand import DemandReport, received
from gridroute.core.gateway_load import ReportSums
from gridroute.wire.gateway_report import (
    DEMAND_HEADER,
    MAX_HEADER_BYTES,
    UNMET_HEADER,
    WANT_HEADER,
    parse_demand,
    parse_in_flight,
    valid_gateway_id,
)
from gridroute.wire.signals import NAME_RE, GatewaySums

MAX_REPORTS = 4096
"""Gateways remembered at once; a report from a new gateway past this is dropped."""


@dataclass(frozen=True, slots=True)
class _Report:
    at: float
    counts: Mapping[str, int]
    demand: DemandReport = field(default_factory=DemandReport)


class GatewayReportBoard:
    """The newest report of every gateway heard on NATS, this one's included."""

    def __init__(self, prefix: str, window_s: float = 5.0) -> None:
        self.prefix = prefix
        self.window_s = window_s
        self._reports: dict[tuple[str, str], _Report] = {}
        self.dropped: Counter[str] = Counter()
        """Reports refused, by reason (`site_mismatch`, `too_large`, `undecodable`, `cap`)."""

    def subject(self, site: str, gateway: str) -> str:
        return f"{self.prefix}.{site}.{gateway}"

    def ingest(
        self, subject: str, data: bytes, now: float, headers: Mapping[str, str] | None = None
    ) -> bool:
        """Fold one message in; False (and counted) when it is refused whole. Its demand
        rides in message headers (the body stays what older gateways read)."""
        head, _, rest = subject.partition(f"{self.prefix}.")
        site, _, gateway = rest.partition(".")
        one_token = "." not in gateway  # a subject token each: what the permissions name
        if head or not NAME_RE.fullmatch(site) or not valid_gateway_id(gateway) or not one_token:
            self.dropped["site_mismatch"] += 1
            return False
        if len(data) > MAX_HEADER_BYTES:
            self.dropped["too_large"] += 1
            return False
        try:
            counts = parse_in_flight(data.decode("ascii"))
        except UnicodeDecodeError:
            counts = None
        if counts is None:
            self.dropped["undecodable"] += 1
            return False
        h = headers or {}
        demand = parse_demand(h.get(DEMAND_HEADER), h.get(UNMET_HEADER), h.get(WANT_HEADER))
        return self.record(site, gateway, counts, now, demand)

    def record(
        self,
        site: str,
        gateway: str,
        counts: Mapping[str, int],
        now: float,
        demand: DemandReport | None = None,
    ) -> bool:
        """The newest report of `gateway` at `site` (this gateway's own, or a message's)."""
        key = (site, gateway)
        if key not in self._reports and len(self._reports) >= MAX_REPORTS:
            self._age(now)
            if len(self._reports) >= MAX_REPORTS:
                self.dropped["cap"] += 1
                return False
        self._reports[key] = _Report(now, dict(counts), received(counts, demand))
        return True

    def _age(self, now: float) -> None:
        for key in [k for k, r in self._reports.items() if now - r.at > self.window_s]:
            del self._reports[key]

    def sums(self, now: float) -> dict[str, GatewaySums]:
        """Reporting site -> its fresh gateways' summed in-flight, as the mesh relays it
        (`at` is the site's newest report)."""
        self._age(now)
        at: dict[str, float] = {}
        sums: dict[str, ReportSums] = {}
        for (site, _), report in self._reports.items():
            at[site] = max(at.get(site, report.at), report.at)
            sums.setdefault(site, ReportSums()).add(report.counts, report.demand)
        return {site: GatewaySums.of(at[site], s) for site, s in sums.items()}

    def take_dropped(self) -> dict[str, int]:
        dropped = dict(self.dropped)
        self.dropped.clear()
        return dropped
