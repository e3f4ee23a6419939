"""Site load read from a Prometheus-compatible query API: the queries and their decoding.

For fleets that already collect every site's metrics in Prometheus (often federated
through Thanos or Mimir), a gateway can read the relay rows there instead of polling
its operator (`signals.transport: prometheus`). Prometheus scrapes each operator's
`/signals?scope=own&latest=1` (a strictly valid exposition of that site's own rows,
labelled `grid_site`/`grid_provider`, stamped with the operator's measurement time;
`honor_labels` and `honor_timestamps` keep both). Two instant queries per poll:

    {__name__=~"llm_d_epp_...|grid_provider_...", grid_site=~"hub|west", <selector>}[30s]
    max by (grid_site) (timestamp(up{grid_site=~"hub|west", <selector>}))

The first is a range selector evaluated as an instant query, so it returns each
series' raw samples with their own timestamps (an instant vector would carry the
evaluation time instead, and a stale reading would look fresh). The newest stamp of a
provider is its sample; every field with a sample at that stamp fills it. The second
gives each site's judgement time, the analogue of a peer poll round's end: when
Prometheus last tried to scrape that site. A site Prometheus no longer tries is not
judged (as a peer whose operator reports no rounds), so a stalled Prometheus pauses
the silence judgement instead of silencing every site.

With `gateway_selector` set, a third query reads every gateway's own in-flight per
candidate, the `grid_route_site_in_flight{site,cluster}` gauge each gateway already
exports on its metrics listener (one series per gateway and candidate, told apart by
the scrape's `job`/`instance`), and its demand there (`grid_route_site_demand`,
`grid_route_site_unmet`, `core/demand.py`):

    {__name__=~"grid_route_site_in_flight|grid_route_site_demand|grid_route_site_unmet",
     job="gridroute-gateway"}

`decode_gateway_load` sums it per candidate and counts the gateways, the same sums an
operator relays on the mesh (docs/selection.md, "Fair share among gateways"), so the
fair share leaves out load no gateway sent. A gateway that stops being scraped drops
out with Prometheus's staleness marker at its next failed scrape.

Bounds are the relay's: at most `max_series` series per answer (else `too_large`), at
most `max_providers` providers per site (the rest dropped as `cap`), values and names
checked as strictly as `decode_relay` does (`parse`: a negative count drops its
instant, as there), implausible counts made plausible (`Sample.sanitized`, as on the
`/signals` path: a huge one is absent), rows stamped ahead of the
reader's clock by more than `SKEW_AHEAD_S` dropped (`skew`). Clocks: the stamps are the
operators' clocks, as Prometheus stores them; like Prometheus itself with honoured
timestamps, this path assumes the fleet's clocks are synchronised.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gridroute.core.demand import DemandReport, received
from gridroute.core.gateway_load import ReportSums
from gridroute.core.sample import MAX_COUNT
from gridroute.wire.signals import (
    FIELDS,
    NAME_RE,
    PEER_MAX_PROVIDERS,
    SKEW_AHEAD_S,
    Decoded,
    DropReason,
    GatewaySums,
    Received,
    sample_of,
)

SITE_LABEL = "grid_site"
PROVIDER_LABEL = "grid_provider"
_ATTR_BY_NAME = {name: attr for attr, name in FIELDS}


class PromAnswerError(ValueError):
    """The API answered, but not with a usable result (an error status, a wrong type)."""


class PromTooLarge(ValueError):
    """More series than `max_series`: the poll result is `too_large`."""


@dataclass(frozen=True, slots=True)
class PromQueries:
    """The two query strings of one poll."""

    samples: str
    rounds: str
    gateways: str | None = None
    """Every gateway's own in-flight per candidate (None: reports not read)."""


def _alternation(names: Sequence[str]) -> str:
    # Site names match NAME_PATTERN; only `.` is special in RE2 among its characters.
    return "|".join(n.replace(".", "\\\\.") for n in names)


def build_queries(
    sites: Sequence[str], selector: str, lookback_s: float, gateway_selector: str | None = None
) -> PromQueries:
    """The queries for `sites` (configured names), with `selector` (extra label matchers,
    e.g. `job="gridroute-signals"`) ANDed in and samples no older than `lookback_s`;
    with `gateway_selector` (the gateways' scrape), the gateways' own in-flight too."""
    site_match = f'{SITE_LABEL}=~"{_alternation(sorted(set(sites)))}"'
    extra = f", {selector}" if selector.strip() else ""
    names = "|".join(name for _, name in FIELDS)
    window = f"{max(1, math.ceil(lookback_s))}s"
    return PromQueries(
        samples=f'{{__name__=~"{names}", {site_match}{extra}}}[{window}]',
        rounds=f"max by ({SITE_LABEL}) (timestamp(up{{{site_match}{extra}}}))",
        gateways=None
        if gateway_selector is None
        else f'{{__name__=~"{GATEWAY_IN_FLIGHT}|{GATEWAY_DEMAND}|{GATEWAY_UNMET}|{GATEWAY_WANT}"'
        + (f", {gateway_selector}}}" if gateway_selector.strip() else "}"),
    )


GATEWAY_IN_FLIGHT = "grid_route_site_in_flight"
"""The gauge of a gateway's own requests in flight per candidate (`gateway/metrics.py`)."""
GATEWAY_DEMAND = "grid_route_site_demand"
"""... its demand for what the candidate serves beyond what it holds there."""
GATEWAY_UNMET = "grid_route_site_unmet"
"""... and its unmet demand for it (`core/demand.py`; 0 where it does not follow demand)."""
GATEWAY_WANT = "grid_route_site_want"
"""... and what it wants of the free room there (`core/demand.py`)."""
GATEWAY_KEY_LABELS = ("job", "instance")
"""What tells one scraped gateway from another."""


def decode_gateway_load(
    answer: Any, local_site: str, now: float, *, max_series: int
) -> dict[str, GatewaySums]:
    """{`local_site`: every scraped gateway's own in-flight summed per candidate key
    (`site/cluster`), with the number of gateways}; {} when no gateway is scraped.

    Every reporting gateway is filed under the reader's site: the fair share needs only
    the total and the count, and the reader's own site is where the mesh files itself.
    """
    result = _data(answer, "vector")
    if len(result) > max_series:
        raise PromTooLarge(f"{len(result)} series over the limit of {max_series}")
    # Per scraped gateway (`job`/`instance`): its in-flight, demand beyond it and unmet
    # demand per candidate; summed once each is whole (`core.demand.received`).
    series: dict[tuple[str, ...], tuple[dict[str, int], ...]] = {}
    names = (GATEWAY_IN_FLIGHT, GATEWAY_DEMAND, GATEWAY_UNMET, GATEWAY_WANT)
    for row in result:
        metric = row.get("metric") if isinstance(row, dict) else None
        value = row.get("value") if isinstance(row, dict) else None
        if not isinstance(metric, dict) or not isinstance(value, list) or len(value) != 2:
            continue
        site, cluster = metric.get("site"), metric.get("cluster")
        count = _number(value[1])
        if not isinstance(site, str) or not isinstance(cluster, str) or count is None:
            continue  # NaN: a row the gateway no longer has
        if not NAME_RE.fullmatch(site) or not NAME_RE.fullmatch(cluster) or count < 0:
            continue
        name = str(metric.get("__name__", GATEWAY_IN_FLIGHT))
        if name not in names:
            continue
        ident = tuple(str(metric.get(k, "")) for k in GATEWAY_KEY_LABELS)
        parts = series.setdefault(ident, ({}, {}, {}, {}))
        parts[names.index(name)][f"{site}/{cluster}"] = int(min(count, float(MAX_COUNT)))
    sums = ReportSums()
    for counts, extra, short, want in series.values():
        if counts or extra or short:  # a gateway counts by any of its series
            demand = DemandReport(extra, short, want) if extra or short else None
            sums.add(counts, received(counts, demand))
    if not sums.gateways:
        return {}
    return {local_site: GatewaySums.of(now, sums)}


def _data(answer: Any, kind: str) -> list[Any]:
    if not isinstance(answer, dict) or answer.get("status") != "success":
        error = answer.get("error") if isinstance(answer, dict) else None
        raise PromAnswerError(f"query failed: {error or 'no success status'}")
    data = answer.get("data")
    if not isinstance(data, dict) or data.get("resultType") != kind:
        got = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise PromAnswerError(f"expected a {kind}, got {got}")
    result = data.get("result")
    if not isinstance(result, list):
        raise PromAnswerError("result is not a list")
    return result


def _number(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def decode_rounds(answer: Any, sites: Sequence[str]) -> dict[str, float | None]:
    """Site -> when Prometheus last tried to scrape it (configured sites only)."""
    wanted = set(sites)
    out: dict[str, float | None] = {}
    for row in _data(answer, "vector"):
        site = row.get("metric", {}).get(SITE_LABEL) if isinstance(row, dict) else None
        value = row.get("value") if isinstance(row, dict) else None
        if site in wanted and isinstance(value, list) and len(value) == 2:
            at = _number(value[1])
            if at is not None:
                out[site] = at
    return out


def decode_samples(
    answer: Any,
    sites: Sequence[str],
    now: float,
    *,
    max_series: int,
    max_providers: int = PEER_MAX_PROVIDERS,
) -> Decoded:
    """The newest sample of every provider of the configured `sites` in a range answer.

    `now` is the reader's clock (seconds), used only to refuse rows from the future.
    """
    result = _data(answer, "matrix")
    if len(result) > max_series:
        raise PromTooLarge(f"{len(result)} series over the limit of {max_series}")
    wanted = set(sites)
    dropped: Counter[DropReason] = Counter()
    # (site, provider) -> stamp_ms -> attr -> value
    rows: dict[tuple[str, str], dict[int, dict[str, float]]] = {}
    poisoned: set[tuple[str, str, int]] = set()
    for series in result:
        metric = series.get("metric") if isinstance(series, dict) else None
        values = series.get("values") if isinstance(series, dict) else None
        if not isinstance(metric, dict) or not isinstance(values, list):
            dropped[DropReason.PARSE] += 1
            continue
        attr = _ATTR_BY_NAME.get(str(metric.get("__name__")))
        site, provider = metric.get(SITE_LABEL), metric.get(PROVIDER_LABEL)
        if (
            attr is None
            or not isinstance(site, str)
            or not isinstance(provider, str)
            or not NAME_RE.fullmatch(site)
            or not NAME_RE.fullmatch(provider)
        ):
            dropped[DropReason.PARSE] += 1
            continue
        if site not in wanted:
            dropped[DropReason.SITE_MISMATCH] += 1
            continue
        stamps = rows.setdefault((site, provider), {})
        for point in values:
            if not isinstance(point, list) or len(point) != 2:
                dropped[DropReason.PARSE] += 1
                continue
            at, value = _number(point[0]), _number(point[1])
            if at is None or value is None:
                dropped[DropReason.PARSE] += 1
                continue
            if value < 0.0:
                # Outside the contract: the whole instant goes, as on /signals (clamped
                # to 0, a lying peer's negative count read its site as idle).
                dropped[DropReason.PARSE] += 1
                poisoned.add((site, provider, round(at * 1000)))
                continue
            if at > now + SKEW_AHEAD_S:
                dropped[DropReason.SKEW] += 1
                continue
            stamps.setdefault(round(at * 1000), {})[attr] = value
    received: list[Received] = []
    per_site: Counter[str] = Counter()
    for (site, provider), stamps in sorted(rows.items()):
        for stamp_ms in [t for t in stamps if (site, provider, t) in poisoned]:
            del stamps[stamp_ms]
        if not stamps:
            continue
        per_site[site] += 1
        if per_site[site] > max_providers:
            dropped[DropReason.CAP] += 1
            continue
        stamp_ms = max(stamps)
        fields = stamps[stamp_ms]
        # Clamped as the /signals decoder clamps: a lying peer's value that reached
        # Prometheus must not teach a huge ceiling on this path either.
        sample = sample_of(site, provider, stamp_ms / 1000.0, fields).sanitized()
        received.append(Received(stamp_ms=stamp_ms, sample=sample))
    return Decoded(
        received=tuple(received),
        round_ends={},
        dropped=dict(dropped),
        lines=sum(len(s.get("values", [])) for s in result if isinstance(s, dict)),
    )


def with_rounds(
    decoded: Decoded,
    rounds: Mapping[str, float | None],
    gateways: Mapping[str, GatewaySums] | None = None,
) -> Decoded:
    """`decoded` carrying the sites' judgement times (and the gateways' sums)."""
    return Decoded(
        received=decoded.received,
        round_ends={k: v for k, v in rounds.items() if v is not None},
        dropped=decoded.dropped,
        lines=decoded.lines,
        gateways=dict(gateways or {}),
    )
