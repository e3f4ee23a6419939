"""What one run measured, and the definitions the report's columns use.

Only what happens inside the measured span `[warmup_s, duration_s]` counts:

* **requests**: requests that completed successfully in the span.
* **share** of a site: its part of those requests.
* **peak window share**: the largest share one site carried in any window of
  `window_s` seconds (sliding in steps of `BUCKET_S`) inside the span.
* **overshoot**: requests that arrived at a site with every slot busy.
* **picks** of a site: attempts sent there, by the arm of the pick that chose it (the
  `path` label of `grid_route_selections_total`: `pressure_p2c`, `single`, `borrow`...),
  so a share can be read back to the rule that made it.
* **shed**: 429 answers, the gateway's own or a full site's (`when_full: refuse`) that no
  retry placed elsewhere (each is one attempt; the client retries after Retry-After).
* **failed**: requests that ended in an error the client saw (a failed connect that
  also failed its one retry, or a request in service at a site that failed).
* **latency**: from a request's send to its answer, including any gateway hold,
  connect timeout and retry on another site; a 429 ends an attempt and is not a sample.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

BUCKET_S = 0.1
"""Resolution of the time series that the sliding windows and plots are built from."""


@dataclass(slots=True)
class Series:
    """Per-site time series of one run, for plots."""

    sites: list[str]
    bucket_s: float
    start_s: float
    completions: list[list[int]]
    """[site][bucket] completed requests."""
    rho: list[list[tuple[float, float]]]
    """[site] (time, (in service + queued) / slots) at every scrape."""


@dataclass(slots=True)
class Probe:
    """One gateway's view of one disturbed site (partition or failure) over time."""

    gateway: int
    site: str
    key: str
    kind: str
    at_s: float
    until_s: float
    silent_at: float | None = None
    """First poll at or after `at_s` at which this gateway judged the site not live."""
    sent_after_silent: int = 0
    """Requests this gateway sent there from `silent_at` until `until_s`."""
    sent_before_silent: int = 0
    """Requests this gateway sent there from `at_s` until it judged the site silent."""
    live_again_at: float | None = None
    """First poll at or after `until_s` at which the site was live again."""
    first_send_after: float | None = None
    """First request this gateway sent there at or after `until_s`."""

    def as_dict(self) -> dict[str, Any]:
        def rel(t: float | None, base: float) -> float | None:
            return None if t is None else round(t - base, 3)

        return {
            "kind": self.kind,
            "site": self.site,
            "gateway": self.gateway,
            "at_s": self.at_s,
            "until_s": self.until_s,
            "silent_after_s": rel(self.silent_at, self.at_s),
            "sent_before_silent": self.sent_before_silent,
            "sent_after_silent": self.sent_after_silent,
            "live_again_after_s": rel(self.live_again_at, self.until_s),
            "first_send_after_s": rel(self.first_send_after, self.until_s),
        }


@dataclass(slots=True)
class Tally:
    """Counters of one run; `row()` turns them into the report's numbers."""

    sites: list[str]
    start_s: float
    end_s: float
    completions: list[list[int]] = field(init=False)
    rho: list[list[tuple[float, float]]] = field(init=False)
    latencies: list[float] = field(default_factory=list)
    overshoot: int = 0
    overshot: dict[str, int] = field(default_factory=dict)
    """Overshoot per site (sites that had none are absent)."""
    overshot_warmup: dict[str, int] = field(default_factory=dict)
    """Per site, requests that found it full before the measured span: not counted as
    overshoot, but what a policy reads afterwards may still carry it (a rho smoothed
    over its own overshoot keeps the site out of its tier for seconds)."""
    read_full: dict[str, float] = field(default_factory=dict)
    """Per site, seconds of the measured span the first gateway read its reported rho at
    1 or more (the seed's tiers with room leave it out)."""
    picks: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per site, attempts sent there in the measured span by the pick's path."""
    tier_rule: Counter[str] = field(default_factory=Counter)
    """gridroute's first attempts in the span read against the seed's tiers, by verdict
    (`kept`, `own_part`, `skip`: `sim/tier_audit.py`); empty unless the run audits."""
    shed: int = 0
    failed: int = 0
    retried: int = 0
    probes: list[Probe] = field(default_factory=list)
    served_by: list[int] = field(default_factory=list)
    """[client] requests completed in the span (the engine adds a 0 per new client)."""
    queue_s: float = 0.0
    """Request-seconds spent queued at the sites (queue length at each scrape x interval),
    as an operator's once-a-second metrics would show it (a live grid is read so)."""
    queued_s: float = 0.0
    """The same integrated at every change of the queues (`queued`): exact, where a
    sample a second read the queued time of a run at 3x its clients 2-5 % high, a
    run's whole idle allowance (`sim/compare.idle_beyond_excess`)."""
    queued_now: int = field(default=0, init=False)
    """Requests queued at the sites now, all sites together."""
    queued_at: float = field(default=0.0, init=False)
    """When `queued_s` was last brought up to date."""
    prompt_tokens: int = 0
    """With scenario `sessions`: prompt tokens of the requests served (prefill to do)."""
    cached_tokens: int = 0
    """Of those, the tokens the serving site's KV cache still held (prefill saved)."""
    ttfts: list[float] = field(default_factory=list)
    """Time to first token of each request served: send to the end of its prefill."""

    def prefill(self, tokens: int, cached: int, ttft: float) -> None:
        """One request's prefill at the site that serves it (scenario `sessions`)."""
        self.prompt_tokens += tokens
        self.cached_tokens += cached
        self.ttfts.append(ttft)

    def __post_init__(self) -> None:
        buckets = max(1, math.ceil((self.end_s - self.start_s) / BUCKET_S - 1e-9))
        self.completions = [[0] * buckets for _ in self.sites]
        self.rho = [[] for _ in self.sites]

    def queued(self, t: float, delta: int) -> None:
        """The sites' queues together grew (or shrank) by `delta` at `t`."""
        self._queued_until(t)
        self.queued_now += delta

    def _queued_until(self, t: float) -> None:
        lo, hi = max(self.queued_at, self.start_s), min(t, self.end_s)
        if hi > lo:
            self.queued_s += self.queued_now * (hi - lo)
        self.queued_at = max(self.queued_at, t)

    def counts(self, t: float) -> bool:
        """Whether an event at `t` falls in the measured span."""
        return self.start_s <= t <= self.end_s + 1e-9

    def completed(self, t: float, site: int, latency: float, client: int | None = None) -> None:
        if self.start_s <= t <= self.end_s + 1e-9:
            row = self.completions[site]
            row[min(int((t - self.start_s) / BUCKET_S), len(row) - 1)] += 1
            self.latencies.append(latency)
            if client is not None:
                self.served_by[client] += 1

    def picked(self, t: float, site: str, path: str) -> None:
        """An attempt sent to `site` at `t`, chosen by the pick's `path`."""
        if self.counts(t):
            by_path = self.picks.setdefault(site, {})
            by_path[path] = by_path.get(path, 0) + 1

    def series(self) -> Series:
        return Series(list(self.sites), BUCKET_S, self.start_s, self.completions, self.rho)

    def peak_window(self, window_s: float) -> dict[str, float]:
        """Each site's largest share of the requests completed in any `window_s` window."""
        n = len(self.completions[0])
        width = max(1, min(n, round(window_s / BUCKET_S)))
        totals = [sum(col) for col in zip(*self.completions, strict=True)]
        peaks: dict[str, float] = {}
        for name, row in zip(self.sites, self.completions, strict=True):
            site_sum = sum(row[:width])
            all_sum = sum(totals[:width])
            best = site_sum / all_sum if all_sum else 0.0
            for i in range(width, n):
                site_sum += row[i] - row[i - width]
                all_sum += totals[i] - totals[i - width]
                if all_sum:
                    best = max(best, site_sum / all_sum)
            peaks[name] = best
        return peaks

    def row(self, window_s: float) -> dict[str, Any]:
        """The measured numbers (the engine adds policy, clients, gateways, ideal)."""
        self._queued_until(self.end_s)
        per_site = [sum(r) for r in self.completions]
        total = sum(per_site)
        peaks = self.peak_window(window_s)
        lat = sorted(self.latencies)
        return {
            "shares": {
                s: round(c / total, 4) if total else 0.0
                for s, c in zip(self.sites, per_site, strict=True)
            },
            "peak_window_share": round(max(peaks.values()), 4) if peaks else 0.0,
            "peak_window_shares": {s: round(v, 4) for s, v in peaks.items()},
            "requests": total,
            "overshoot": self.overshoot,
            "overshoot_by_site": {s: self.overshot.get(s, 0) for s in self.sites},
            "warmup_overshoot_by_site": {s: self.overshot_warmup.get(s, 0) for s in self.sites},
            "read_full_s_by_site": {s: round(self.read_full.get(s, 0.0), 3) for s in self.sites},
            "picks_by_site": {
                s: dict(sorted(self.picks.get(s, {}).items(), key=lambda kv: (-kv[1], kv[0])))
                for s in self.sites
            },
            "shed": self.shed,
            "failed": self.failed,
            "retried": self.retried,
            "latency_p50_s": _quantile(lat, 0.50),
            "latency_p99_s": _quantile(lat, 0.99),
            "queue_s": round(self.queue_s, 1),
            "queued_s": round(self.queued_s, 1),
            **client_figures(self.served_by),
            **self._prefill_figures(),
            **({"tier_rule": dict(sorted(self.tier_rule.items()))} if self.tier_rule else {}),
        }

    def _prefill_figures(self) -> dict[str, Any]:
        """`prefill_saved` (fraction of prompt tokens not recomputed) and time to first
        token, only for a run with `sessions`."""
        if not self.ttfts:
            return {}
        ttft = sorted(self.ttfts)
        return {
            "prefill_saved": round(self.cached_tokens / self.prompt_tokens, 4),
            "ttft_p50_s": _quantile(ttft, 0.50),
            "ttft_p99_s": _quantile(ttft, 0.99),
        }


def jain(counts: list[int]) -> float | None:
    """Jain's fairness index, (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one
    client has everything (None without clients or without any served)."""
    sq = sum(c * c for c in counts)
    if not counts or not sq:
        return None
    return sum(counts) ** 2 / (len(counts) * sq)


def client_figures(counts: list[int]) -> dict[str, Any]:
    """Per-client served min / median / max and Jain's index, as the report shows them."""
    if not counts:
        return dict.fromkeys(
            ("clients_served_min", "clients_served_median", "clients_served_max", "jain")
        )
    ordered = sorted(counts)
    index = jain(counts)
    return {
        "clients_served_min": ordered[0],
        "clients_served_median": ordered[len(ordered) // 2],
        "clients_served_max": ordered[-1],
        "jain": None if index is None else round(index, 4),
    }


def _quantile(ordered: list[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted values (None without samples)."""
    if not ordered:
        return None
    rank = max(1, math.ceil(q * len(ordered)))
    return round(ordered[rank - 1], 4)
