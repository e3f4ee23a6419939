"""What a load run measured, and the summaries the demo and benchmarks print.

Pure: a `LoadResult` is built from per-request records and never touches a socket, so
the statistics (shares, percentiles, per-second series, the peak 10 s window share that
shows whether one site was ever overloaded while others idled) are tested on exact,
hand-made records.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any

UNKNOWN_SITE = "unknown"
"""Site label of an answer that carried neither `x-grid-site` nor `x-fake-server`."""


class RequestOutcome(enum.StrEnum):
    """How one request ended, as a client sees it."""

    OK = "ok"
    """2xx, body read in full (a stream ended with `[DONE]`)."""
    SHED = "shed"
    """429: the system said "not now"; the client backs off for `Retry-After`."""
    FAILED = "failed"
    """No usable answer: connection error, timeout, 5xx, or a stream cut short."""
    CLIENT_ERROR = "client_error"
    """Any other 4xx (unknown model, bad request): a setup problem, not load."""


def classify(status: int) -> RequestOutcome:
    """The outcome of a complete HTTP answer with `status` (0: no answer at all)."""
    if 200 <= status < 300:
        return RequestOutcome.OK
    if status == 429:
        return RequestOutcome.SHED
    if status == 0 or status >= 500:
        return RequestOutcome.FAILED
    return RequestOutcome.CLIENT_ERROR


@dataclass(frozen=True, slots=True)
class Phase:
    """One step of a load shape: `clients` closed-loop workers for `duration_s` seconds."""

    duration_s: float
    clients: int


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the load generator saw it. Times are seconds since the run began."""

    start_s: float
    latency_s: float
    status: int
    """HTTP status; 0 when no answer came (connection refused, reset, timeout)."""
    site: str
    """`x-grid-site` of the answer, else `x-fake-server`, else `UNKNOWN_SITE`."""
    outcome: RequestOutcome
    phase: int = 0
    """Index of the phase during which the request was sent."""
    ttft_s: float | None = None
    """Seconds to the first body bytes of a stream; None when not streaming."""
    client: int = -1
    """Index of the closed-loop worker that sent it (-1: not recorded)."""

    @property
    def end_s(self) -> float:
        return self.start_s + self.latency_s


@dataclass(frozen=True, slots=True)
class SiteShare:
    """The largest share of completions one site carried within one window."""

    site: str
    share: float
    window_start_s: float
    completions: int
    """Completions (all sites) in that window, to judge how much the share means."""


def quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of an ascending list (NaN when empty)."""
    if not sorted_values:
        return math.nan
    rank = min(max(math.ceil(q * len(sorted_values)), 1), len(sorted_values))
    return sorted_values[rank - 1]


@dataclass(frozen=True)
class LoadResult:
    """Every request of one run plus the derived statistics (computed once, on demand)."""

    records: tuple[RequestRecord, ...]
    duration_s: float
    """Wall time from the first request until the last worker stopped."""
    phases: tuple[Phase, ...] = ()

    def count(self, outcome: RequestOutcome) -> int:
        return self._outcomes[outcome]

    @cached_property
    def _outcomes(self) -> Counter[RequestOutcome]:
        return Counter(r.outcome for r in self.records)

    @property
    def ok(self) -> int:
        return self.count(RequestOutcome.OK)

    @property
    def shed(self) -> int:
        return self.count(RequestOutcome.SHED)

    @property
    def failed(self) -> int:
        return self.count(RequestOutcome.FAILED)

    @cached_property
    def per_site(self) -> dict[str, int]:
        """Successful completions per site, largest first."""
        counts = Counter(r.site for r in self.records if r.outcome is RequestOutcome.OK)
        return dict(counts.most_common())

    @cached_property
    def shares(self) -> dict[str, float]:
        """Each site's share of successful completions (sums to 1 when any succeeded)."""
        total = sum(self.per_site.values())
        return {s: n / total for s, n in self.per_site.items()} if total else {}

    @cached_property
    def _ok_latencies(self) -> list[float]:
        return sorted(r.latency_s for r in self.records if r.outcome is RequestOutcome.OK)

    def latency_s(self, q: float) -> float:
        """Latency quantile `q` (0..1) over successful requests; NaN when none."""
        return quantile(self._ok_latencies, q)

    def phase_ok(self, phase: int) -> int:
        """Successful requests sent during phase `phase`."""
        return sum(1 for r in self.records if r.phase == phase and r.outcome is RequestOutcome.OK)

    def timeseries(self, bucket_s: float = 1.0) -> list[dict[str, int]]:
        """Per bucket (by completion time): successful completions per site. Index i
        covers [i * bucket_s, (i + 1) * bucket_s); empty buckets are empty dicts."""
        ok = [r for r in self.records if r.outcome is RequestOutcome.OK]
        if not ok:
            return []
        series: list[Counter[str]] = [
            Counter() for _ in range(int(max(r.end_s for r in ok) // bucket_s) + 1)
        ]
        for r in ok:
            series[int(r.end_s // bucket_s)][r.site] += 1
        return [dict(c) for c in series]

    def peak_window_share(self, window_s: float = 10.0, bucket_s: float = 1.0) -> SiteShare | None:
        """The largest share any one site carried in any `window_s` window (sliding by one
        bucket); a run shorter than the window is one window. None if nothing succeeded."""
        series = self.timeseries(bucket_s)
        width = max(1, min(round(window_s / bucket_s), len(series)))
        best: SiteShare | None = None
        for start in range(len(series) - width + 1):
            window: Counter[str] = Counter()
            for bucket in series[start : start + width]:
                window.update(bucket)
            total = sum(window.values())
            if not total:
                continue
            site, n = window.most_common(1)[0]
            if best is None or n / total > best.share:
                best = SiteShare(site, n / total, start * bucket_s, total)
        return best

    def summary(self) -> dict[str, Any]:
        """A JSON-ready digest for reports and logs."""
        peak = self.peak_window_share()
        p50, p99 = self.latency_s(0.5), self.latency_s(0.99)
        peak_digest = None
        if peak is not None:
            peak_digest = {"site": peak.site, "share": round(peak.share, 4),
                           "window_start_s": peak.window_start_s}  # fmt: skip
        return {
            "requests": len(self.records),
            "ok": self.ok,
            "shed": self.shed,
            "failed": self.failed,
            "client_error": self.count(RequestOutcome.CLIENT_ERROR),
            "duration_s": round(self.duration_s, 3),
            "throughput_rps": round(self.ok / self.duration_s, 2) if self.duration_s else 0.0,
            "per_site": self.per_site,
            "shares": {s: round(v, 4) for s, v in self.shares.items()},
            "latency_p50_s": None if math.isnan(p50) else round(p50, 6),
            "latency_p99_s": None if math.isnan(p99) else round(p99, 6),
            "peak_10s_share": peak_digest,
        }
