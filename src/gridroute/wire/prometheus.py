"""Prometheus text exposition -> one provider's load, in the `Sample` convention.

The operator scrapes a model server (vLLM, SGLang) or an llm-d EPP and needs a
handful of gauges out of a page that is mostly histograms. This module reads the
page line by line with one compiled pattern (every line is checked, so a page of
HTML or a truncated body is a failed scrape, not a silent zero) and keeps only
the series it knows. It is about six times faster than prometheus_client's
parser on real pages (see bench/bench_signals.py) and is fuzzed against it.

Conventions (`gridroute.core.sample`): `running` and `waiting` are per-endpoint
averages and `ready` counts endpoints, so `(running + waiting) * ready` is the
in-flight count of one instant.

* vLLM / SGLang pages carry one series per engine (an `engine="0"` label, a
  data-parallel rank, or one pod per series behind a federating proxy). The series
  are *summed* and *counted*: `ready` = number of running series, `running` =
  sum / ready. `deepest_queue` is the longest single queue, `kv_usage` the fullest.
* EPP pages already carry pool averages. Current `llm_d_epp_*` names are preferred,
  the legacy `inference_pool_*` twins are read when the current one is absent.
  Same-instant lines of one metric combine by max, flow-control partitions by sum.

Errors: `ExpositionError` (malformed text, too large, or no load series at all)
is the only exception `parse_exposition` raises; the scraper counts it as a
failed scrape.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

MAX_EXPOSITION_BYTES = 16 * 1024 * 1024
"""Largest page parsed; the scraper stops reading at this many bytes too."""
MAX_EXPOSITION_LINES = 250_000
"""Most lines parsed; a page with more is refused rather than walked."""


class ExpositionError(ValueError):
    """A scrape body that cannot be read as load: malformed, oversized or empty.

    `reason` is a bounded label value for `grid_provider_scrape_total{result}`.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class MetricsFormat(StrEnum):
    """Which exporter a page comes from; `auto` picks by the names present."""

    VLLM = "vllm"
    SGLANG = "sglang"
    EPP = "epp"
    AUTO = "auto"


@dataclass(frozen=True, slots=True)
class Load:
    """The load fields of a `Sample`, before the operator stamps site, time and config."""

    format: MetricsFormat
    running: float | None = None
    waiting: float | None = None
    ready: float | None = None
    held: float | None = None
    deepest_queue: float | None = None
    kv_usage: float | None = None


# --- names --------------------------------------------------------------------------

_VLLM_RUNNING = "vllm:num_requests_running"
_VLLM_WAITING = "vllm:num_requests_waiting"
_VLLM_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_SGLANG_RUNNING = "sglang:num_running_reqs"
_SGLANG_WAITING = "sglang:num_queue_reqs"
_SGLANG_KV = ("sglang:token_usage",)

# EPP: current name first, then the legacy twin (reference-behaviour 1.2).
_EPP_RUNNING = ("llm_d_epp_average_running_requests", "inference_pool_average_running_requests")
_EPP_WAITING = ("llm_d_epp_average_queue_size", "inference_pool_average_queue_size")
_EPP_READY = ("llm_d_epp_ready_endpoints", "inference_pool_ready_pods")
_EPP_HELD = ("llm_d_epp_flow_control_queue_size", "inference_extension_flow_control_queue_size")
_EPP_DEEPEST = ("llm_d_epp_per_endpoint_queue_size", "inference_pool_per_pod_queue_size")
_EPP_KV = ("llm_d_epp_average_kv_cache_utilization", "inference_pool_average_kv_cache_utilization")

_WANTED: frozenset[str] = frozenset(
    [
        _VLLM_RUNNING,
        _VLLM_WAITING,
        *_VLLM_KV,
        _SGLANG_RUNNING,
        _SGLANG_WAITING,
        *_SGLANG_KV,
        *_EPP_RUNNING,
        *_EPP_WAITING,
        *_EPP_READY,
        *_EPP_HELD,
        *_EPP_DEEPEST,
        *_EPP_KV,
    ]
)

# --- the line grammar -----------------------------------------------------------------
# name [ "{" label "=" "value" { "," label "=" "value" } [ "," ] "}" ] value [ timestamp ]
# [ exemplar ]. Written so that no two parts can match the same characters, which keeps
# a failing match linear in the line length (no catastrophic backtracking).
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"'
_LINE = re.compile(
    r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:[ \t]*\{[ \t]*(?:" + _LABEL + r"(?:[ \t]*,[ \t]*" + _LABEL + r")*(?:[ \t]*,)?[ \t]*)?\})?"
    r"[ \t]+(?P<value>[^ \t]+)"
    r"(?:[ \t]+-?[0-9]+(?:\.[0-9]*)?)?"
    r"(?:[ \t]+#[^\n]*)?[ \t]*"
)


def parse_series(text: str) -> dict[str, list[float]]:
    """Values of the known load series in `text`, by metric name.

    Every non-comment line must be a valid sample line; the first that is not raises
    `ExpositionError("parse")` naming the line number. Unknown metrics are checked
    and skipped.
    """
    if len(text) > MAX_EXPOSITION_BYTES:
        raise ExpositionError("too_large", f"exposition over {MAX_EXPOSITION_BYTES} bytes")
    found: dict[str, list[float]] = {}
    fullmatch = _LINE.fullmatch
    for number, line in enumerate(text.split("\n"), start=1):
        if number > MAX_EXPOSITION_LINES:
            raise ExpositionError("too_large", f"exposition over {MAX_EXPOSITION_LINES} lines")
        if not line or line[0] == "#":
            continue
        if line[-1] == "\r":
            line = line[:-1]
        if not line.strip():
            continue
        match = fullmatch(line)
        if match is None:
            raise ExpositionError("parse", f"line {number}: not a sample line: {line[:80]!r}")
        try:
            value = float(match["value"])
        except ValueError:
            raise ExpositionError(
                "parse", f"line {number}: bad value {match['value'][:40]!r}"
            ) from None
        name = match["name"]
        if name in _WANTED:
            found.setdefault(name, []).append(value)
    return found


def detect_format(series: dict[str, list[float]]) -> MetricsFormat | None:
    """The exporter whose running/queue series are present (EPP, then vLLM, then SGLang)."""
    if any(name in series for name in (*_EPP_RUNNING, *_EPP_WAITING, *_EPP_READY)):
        return MetricsFormat.EPP
    if _VLLM_RUNNING in series or _VLLM_WAITING in series:
        return MetricsFormat.VLLM
    if _SGLANG_RUNNING in series or _SGLANG_WAITING in series:
        return MetricsFormat.SGLANG
    return None


def parse_exposition(text: str, fmt: MetricsFormat = MetricsFormat.AUTO) -> Load:
    """One provider's `Load` from a scraped page.

    Raises `ExpositionError` when the text is malformed or oversized, and with reason
    `empty` when the page has none of the running/queue series of `fmt` (a standby
    EPP replica reports nothing; reading that as idle would send it traffic).
    """
    series = parse_series(text)
    chosen = detect_format(series) if fmt is MetricsFormat.AUTO else fmt
    load: Load | None
    if chosen is MetricsFormat.EPP:
        load = _epp(series)
    elif chosen is MetricsFormat.VLLM:
        load = _engine(series, MetricsFormat.VLLM, _VLLM_RUNNING, _VLLM_WAITING, _VLLM_KV)
    elif chosen is MetricsFormat.SGLANG:
        load = _engine(series, MetricsFormat.SGLANG, _SGLANG_RUNNING, _SGLANG_WAITING, _SGLANG_KV)
    else:
        load = None
    if load is None or (load.running is None and load.waiting is None):
        raise ExpositionError("empty", f"no {fmt.value} running or queue series on the page")
    return load


def _finite(values: Iterable[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _first(series: dict[str, list[float]], names: tuple[str, ...]) -> list[float] | None:
    """Values of the first name the page publishes (current name before legacy)."""
    for name in names:
        if name in series:
            return _finite(series[name])
    return None


def _max(values: list[float] | None) -> float | None:
    return max(values) if values else None


def _engine(
    series: dict[str, list[float]],
    fmt: MetricsFormat,
    running_name: str,
    waiting_name: str,
    kv_names: tuple[str, ...],
) -> Load | None:
    """vLLM / SGLang: one series per engine; sum the series, count them as endpoints."""
    running = _finite(series.get(running_name, ()))
    waiting = _finite(series.get(waiting_name, ()))
    endpoints = len(running) or len(waiting)
    if endpoints == 0:
        return None
    return Load(
        format=fmt,
        running=sum(running) / endpoints if running else None,
        waiting=sum(waiting) / endpoints if waiting else None,
        ready=float(endpoints),
        deepest_queue=max(waiting) if waiting else None,
        kv_usage=_max(_first(series, kv_names)),
    )


def _epp(series: dict[str, list[float]]) -> Load:
    """EPP: pool averages already per endpoint; max across lines, flow control summed."""
    held = _first(series, _EPP_HELD)
    return Load(
        format=MetricsFormat.EPP,
        running=_max(_first(series, _EPP_RUNNING)),
        waiting=_max(_first(series, _EPP_WAITING)),
        ready=_max(_first(series, _EPP_READY)),
        held=sum(held) if held else None,
        deepest_queue=_max(_first(series, _EPP_DEEPEST)),
        kv_usage=_max(_first(series, _EPP_KV)),
    )
