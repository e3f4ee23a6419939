"""Prometheus metrics of one gateway worker, with the seed's names and bounded labels.

Per-site gauges are computed at scrape time from the current snapshot and the own
in-flight counts (`GridCollector`), so the request path pays nothing for them and a
scrape always shows the counted rho of this instant. The per-request counters and
histograms (selections, decisions, request duration, added latency) are plain numbers
in dicts (`CounterTable`, `HistogramTable`) that a scrape turns into the same samples
`prometheus_client` would write (`_total`, `_bucket`, `_count`, `_sum`, `_created`): a
request does a dict lookup and an integer add per count, never a `labels()` call, a lock
or a loop over bucket bounds (profiled: those were ~5 % of a request). Everything runs
on the one event loop, scrapes included, so no lock is needed. Label values are
site/provider names from the config, the core's `Path`/`Reason` enums, models from the
config and status classes: all bounded.
"""

from __future__ import annotations

import asyncio
import math
import time
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Callable, Iterator

import prometheus_client.metrics
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gridroute.core import Decision, Health, Path
from gridroute.core.demand import DemandReport, report
from gridroute.core.prefix import PrefixOutcome
from gridroute.gateway.backends import Backends
from gridroute.gateway.current import CurrentGrid

NAN = math.nan
ADDED_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
"""Added latency is the gateway's own cost (decide, hold, retries): milliseconds, not minutes."""
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_ROUTED_REASON = {Path.FALLBACK: "fallback", Path.LAST_RESORT: "last_resort"}
_STATUS_CLASS = {n: f"{n}xx" for n in range(1, 6)}
_UP = {Health.UP: 1.0, Health.DOWN: 0.0}


def _num(value: float | None) -> float:
    return NAN if value is None else float(value)


def _with_created() -> bool:
    """Whether `prometheus_client` writes `_created` series (its env switch)."""
    return bool(getattr(prometheus_client.metrics, "_use_created", True))


class CounterTable:
    """A labelled counter as a dict of label values -> count, exposed at scrape as
    `prometheus_client.Counter` exposes one (`NAME_total`, `NAME_created` per series)."""

    __slots__ = ("counts", "created", "doc", "labels", "name")

    def __init__(self, name: str, doc: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.doc = doc
        self.labels = labels
        self.counts: dict[tuple[str, ...], float] = {}
        self.created: dict[tuple[str, ...], float] = {}

    def inc(self, key: tuple[str, ...], n: float = 1.0) -> None:
        counts = self.counts
        if key in counts:
            counts[key] += n
        else:
            self.created[key] = time.time()
            counts[key] = n

    def metric(self) -> Metric:
        m = Metric(self.name, self.doc, "counter")
        created = _with_created()
        for key, value in self.counts.items():
            labels = dict(zip(self.labels, key, strict=True))
            m.add_sample(self.name + "_total", labels, value)
            if created:
                m.add_sample(self.name + "_created", labels, self.created[key])
        return m


class HistogramTable:
    """A histogram as a dict of label values -> [count per bucket..., sum], exposed at
    scrape as `prometheus_client.Histogram` exposes one (cumulative `_bucket{le}`,
    `_count`, `_sum`, `_created`). With no labels the one series exists from the start,
    as prometheus_client's does; with labels a series appears at its first observation."""

    __slots__ = ("bounds", "created", "doc", "labels", "les", "name", "rows")

    def __init__(
        self, name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]
    ) -> None:
        self.name = name
        self.doc = doc
        self.labels = labels
        self.bounds = (*map(float, buckets), math.inf)
        self.les = [floatToGoString(b) for b in self.bounds]  # type: ignore[no-untyped-call]
        self.rows: dict[tuple[str, ...], list[float]] = {}
        self.created: dict[tuple[str, ...], float] = {}
        if not labels:
            self._row(())

    def _row(self, key: tuple[str, ...]) -> list[float]:
        row = self.rows[key] = [0.0] * (len(self.bounds) + 1)
        self.created[key] = time.time()
        return row

    def observe(self, key: tuple[str, ...], seconds: float) -> None:
        row = self.rows.get(key)
        if row is None:
            row = self._row(key)
        row[bisect_left(self.bounds, seconds)] += 1  # the first bound >= seconds
        row[-1] += seconds

    def cumulative(self, row: list[float]) -> list[float]:
        out, acc = [], 0.0
        for n in row[:-1]:
            acc += n
            out.append(acc)
        return out

    def metric(self) -> Metric:
        m = Metric(self.name, self.doc, "histogram")
        created = _with_created()
        les = self.les
        for key, row in self.rows.items():
            labels = dict(zip(self.labels, key, strict=True))
            counts = self.cumulative(row)
            for le, acc in zip(les, counts, strict=True):
                m.add_sample(self.name + "_bucket", {**labels, "le": le}, acc)
            m.add_sample(self.name + "_count", labels, counts[-1])
            m.add_sample(self.name + "_sum", labels, row[-1])
            if created:
                m.add_sample(self.name + "_created", labels, self.created[key])
        return m


class TableCollector(Collector):
    """Exposes the request path's `CounterTable`s and `HistogramTable`s."""

    def __init__(self, tables: list[CounterTable | HistogramTable]) -> None:
        self._tables = tables

    def collect(self) -> Iterator[Metric]:
        for table in self._tables:
            yield table.metric()


class GridCollector(Collector):
    """Per-site gauges `{site,cluster}` and `grid_route_shedding{model}`, read at scrape."""

    def __init__(
        self, current: Callable[[], CurrentGrid], shedding: Callable[[str], bool] | None = None
    ) -> None:
        self._current = current
        self._shedding = shedding
        self._seen: set[tuple[str, str]] = set()
        self._models: set[str] = set()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        current = self._current()
        snap = current.snapshot
        labels = ["site", "cluster"]
        fams = {
            name: GaugeMetricFamily(f"grid_route_site_{name}", doc, labels=labels)
            for name, doc in (
                ("ceiling_soft", "Learned soft bound: most held with nothing waiting."),
                ("ceiling_hard", "Learned hard bound: least held at a demonstrated limit."),
                ("ceiling", "Effective ceiling the rho is measured against."),
                ("rho_reported", "Smoothed rho from the site's own samples."),
                (
                    "rho_counted",
                    "The site's estimated rho: others' polled in-flight plus this gateway's "
                    "own now, over the ceiling.",
                ),
                (
                    "rho",
                    "What this gateway ranks the site by: its own in-flight plus its share "
                    "of others', over the ceiling, under gridroute; reported otherwise.",
                ),
                ("weight", "Capacity the draws use (NaN: no reading)."),
                ("in_flight", "This gateway's own requests in flight to the site."),
                (
                    "demand",
                    "This gateway's demand for what the site serves beyond what it holds "
                    "there (with follow_demand, where it has any): what budgets follow.",
                ),
                (
                    "unmet",
                    "This gateway's waiting and refused requests for what the site serves "
                    "(with follow_demand, where it has any).",
                ),
                (
                    "want",
                    "What of the site's free room this gateway would fill: its shortfall "
                    "against its demand target there, at most its unmet demand.",
                ),
                ("up", "Backend health probe verdict: 1 up, 0 down, NaN not yet probed."),
                (
                    "silent_seconds",
                    "Age of the site's last sample in this gateway's snapshot (NaN: none yet).",
                ),
            )
        }
        now_seen: set[tuple[str, str]] = set()
        demand = DemandReport()
        if snap.settings.follow_demand:
            own = current.own
            demand = report(
                current.state.candidates, own.counts, own.models, current.fairness.demand,
                current.clock(), snap.targets(),
            )  # fmt: skip
        for r in current.readings():
            v = r.view
            lv = [v.site, v.provider]
            now_seen.add((v.site, v.provider))
            fams["ceiling_soft"].add_metric(lv, _num(v.soft))
            fams["ceiling_hard"].add_metric(lv, _num(v.hard))
            fams["ceiling"].add_metric(lv, v.ceiling if v.measured else NAN)
            fams["rho_reported"].add_metric(lv, _num(r.rho_reported))
            fams["rho_counted"].add_metric(lv, _num(r.rho_counted))
            fams["rho"].add_metric(lv, _num(r.rho))
            fams["weight"].add_metric(lv, _num(r.weight))
            fams["in_flight"].add_metric(lv, float(r.own))
            # Only rows with demand: three series per gateway and candidate would triple
            # what a Prometheus reader's gateway query returns (its `max_series`). A
            # row that drops out of the scrape goes stale, which reads as none.
            if demand.beyond.get(v.key):
                fams["demand"].add_metric(lv, float(demand.beyond[v.key]))
            if demand.unmet.get(v.key):
                fams["unmet"].add_metric(lv, float(demand.unmet[v.key]))
            if demand.want.get(v.key):
                fams["want"].add_metric(lv, float(demand.want[v.key]))
            fams["up"].add_metric(lv, _UP.get(v.health, NAN))
            silent = None if v.sampled_at is None else snap.at - v.sampled_at
            fams["silent_seconds"].add_metric(lv, _num(silent))
        for site, cluster in self._seen - now_seen:
            for name, fam in fams.items():
                if name not in ("demand", "unmet", "want"):
                    fam.add_metric([site, cluster], NAN)
        self._seen |= now_seen
        yield from fams.values()
        shed = GaugeMetricFamily(
            "grid_route_shedding", "1 while a model is shed (answered 429).", labels=["model"]
        )
        self._models |= set(current.routing.policies)
        for model in sorted(self._models):
            now_shed = model in snap.shedding or (
                self._shedding is not None and self._shedding(model)
            )
            shed.add_metric([model], 1.0 if now_shed else 0.0)
        yield shed


class EjectionCollector(Collector):
    """Passive outlier ejection at scrape time: ejections so far per site, and which
    candidates are set aside now (`core/ejection.py`; the request path only counts)."""

    def __init__(self, current: Callable[[], CurrentGrid]) -> None:
        self._current = current

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        current = self._current()
        ej = current.ejections
        total = CounterMetricFamily(
            "grid_route_ejections",
            "Times this gateway set a site aside after consecutive gateway errors "
            "(availability.eject_after_failures).",
            labels=["site", "cluster"],
        )
        now = GaugeMetricFamily(
            "grid_route_site_ejected",
            "1 while this gateway has the site set aside after consecutive gateway errors.",
            labels=["site", "cluster"],
        )
        out = ej.out(current.clock())
        for v in current.snapshot.views:
            labels = [v.site, v.provider]
            total.add_metric(labels, float(ej.total.get(v.key, 0)))
            now.add_metric(labels, 1.0 if v.key in out else 0.0)
        yield total
        yield now


class PoolCollector(Collector):
    """The backend pools at scrape time: connections open and idle per backend, and
    requests resent after a kept-alive connection closed before answering."""

    def __init__(self, backends: Backends) -> None:
        self._backends = backends

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        conns = GaugeMetricFamily(
            "grid_route_backend_connections",
            "Connections to the backend: open (all) and idle (pooled, ready for a request).",
            labels=["site", "cluster", "state"],
        )
        resent = CounterMetricFamily(
            "grid_route_backend_resends",
            "Requests sent again on a new connection because a kept-alive one closed "
            "before answering (the server's idle close raced the request).",
            labels=["site", "cluster"],
        )
        for backend in list(self._backends.by_key.values()):
            spec, pool = backend.spec, backend.pool
            conns.add_metric([spec.site, spec.provider, "open"], pool.open_connections)
            conns.add_metric([spec.site, spec.provider, "idle"], pool.idle_connections)
            resent.add_metric([spec.site, spec.provider], pool.stale)
        yield conns
        yield resent


class LoopCollector(Collector):
    """asyncio tasks alive on the gateway's event loop at scrape time. A request path
    that never ends, or a loop that spawns without reaping, shows as growth under steady
    load (`bench/soak.py` reads it)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            n = len(asyncio.all_tasks())
        except RuntimeError:  # scraped off the event loop (no running loop here)
            n = 0
        yield GaugeMetricFamily(
            "grid_gateway_event_loop_tasks", "asyncio tasks alive on the event loop.", value=n
        )


class GatewayMetrics:
    """Counters and histograms the request path updates, in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._selections = CounterTable(
            "grid_route_selections", "Picks by the arm that chose.", ("path",)
        )
        self._decisions = CounterTable(
            "grid_route_decisions",
            "Candidates routed (reason routed, fallback, last_resort) or refused and why.",
            ("site", "reason"),
        )
        self._retries = Counter(
            "grid_route_retries_total",
            "Attempts retried on another site, by the site that failed and why.",
            ["site", "reason"],
            registry=r,
        )
        self._duration = HistogramTable(
            "grid_route_request_duration_seconds",
            "Time from the request's arrival to its last byte, by site and status class.",
            ("site", "status"),
            DURATION_BUCKETS,
        )
        self._added = HistogramTable(
            "grid_route_added_latency_seconds",
            "Time from a request's arrival until its answering attempt was handed to the "
            "backend: the gateway's decision, any admission hold and failed attempts.",
            (),
            ADDED_BUCKETS,
        )
        r.register(TableCollector([self._selections, self._decisions]))
        self._reloads = Counter(
            "grid_gateway_config_reload_total",
            "Config reloads (SIGHUP) by result: ok, or error (the running config stays).",
            ["result"],
            registry=r,
        )
        self._affinity = Counter(
            "grid_route_session_affinity_total",
            "Requests naming a session: hit (went back to the site that served it), moved "
            "(that site was not in the chosen tier) or new (no site remembered).",
            ["outcome"],
            registry=r,
        )
        self._aff = {o: self._affinity.labels(o) for o in ("hit", "moved", "new")}
        self._prefix_affinity = Counter(
            "grid_route_prefix_affinity_total",
            "First decisions of requests with a prompt prefix: hit (sent to the site holding "
            "its longest prefix), miss (no match worth it), overridden_by_load (the best "
            "match was at its budget or outside the selected tier) or explored.",
            ["outcome"],
            registry=r,
        )
        self._pfx = {o: self._prefix_affinity.labels(o.value) for o in PrefixOutcome}
        self._ret: dict[tuple[str, str], Counter] = {}
        self._dur_key: dict[tuple[str, int], tuple[str, str]] = {}
        r.register(TableCollector([self._duration, self._added]))
        self.answered: Tally[int] = Tally()
        """Answers so far by exact status (499: the client left), for /grid/history."""
        r.register(LoopCollector())

    def watch(
        self, current: Callable[[], CurrentGrid], shedding: Callable[[str], bool] | None = None
    ) -> None:
        """Register the scrape-time per-site gauges of the (current) live grid;
        `shedding(model)` says whether the model refused requests recently."""
        self.registry.register(GridCollector(current, shedding))
        self.registry.register(EjectionCollector(current))

    def watch_pools(self, backends: Backends) -> None:
        """Register the scrape-time gauges of the backend pools."""
        self.registry.register(PoolCollector(backends))

    def decision(self, d: Decision) -> None:
        """Count one decision: its path, the routed site, and every refused candidate."""
        self._selections.inc((d.path.value,))
        dec = self._decisions.inc
        if d.view is not None:
            dec((d.view.site, _ROUTED_REASON.get(d.path, "routed")))
        for refused in d.refused:
            dec(refused)

    def affinity(self, preferred: str | None, d: Decision) -> None:
        """Count one request that named a session, by whether its preference held."""
        if preferred is None:
            self._aff["new"].inc()
        elif d.view is not None and d.view.key == preferred:
            self._aff["hit"].inc()
        else:
            self._aff["moved"].inc()

    def prefix(self, outcome: PrefixOutcome | None) -> None:
        """Count one request's prefix-affinity outcome (none: affinity never ran)."""
        if outcome is not None:
            self._pfx[outcome].inc()

    def retry(self, site: str, reason: str) -> None:
        key = (site, reason)
        c = self._ret.get(key)
        if c is None:
            c = self._ret[key] = self._retries.labels(site, reason)
        c.inc()

    def reload(self, result: str) -> None:
        self._reloads.labels(result).inc()

    def selections(self) -> dict[str, float]:
        """Picks so far by path (for /grid/status)."""
        return {key[0]: value for key, value in self._selections.counts.items()}

    def decisions(self) -> dict[str, dict[str, float]]:
        """Decisions so far by site, then reason (for /grid/status)."""
        out: dict[str, dict[str, float]] = {}
        for (site, reason), value in self._decisions.counts.items():
            out.setdefault(site, {})[reason] = value
        return out

    def added(self, seconds: float) -> None:
        """Observe one routed request's added latency (arrival to hand-off)."""
        self._added.observe((), seconds)

    def duration_buckets(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Upper bounds (last +Inf) and cumulative counts of the request duration
        histogram summed over sites and statuses (for /grid/history's quantiles)."""
        table = self._duration
        counts = [0.0] * len(table.bounds)
        for row in table.rows.values():
            for i, acc in enumerate(table.cumulative(row)):
                counts[i] += acc
        return table.bounds, tuple(counts)

    def duration(self, site: str, status: int, seconds: float) -> None:
        self.answered[status] += 1
        key = (site, status // 100)
        labels = self._dur_key.get(key)
        if labels is None:
            labels = self._dur_key[key] = (site, _STATUS_CLASS.get(key[1], "other"))
        self._duration.observe(labels, seconds)
