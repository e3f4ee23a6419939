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
* One EPP can serve several InferencePools. With a pool named (`metricsConfig.poolName`)
  only that pool's EPP series are read: the pool gauges by their `name` label, the
  flow-control series by `inference_pool` (`pool_label`). A series without the label
  belongs to no named pool (on a multi-pool EPP it is the total across pools), so it is
  left out (`in_pool`). With no pool named every series counts, as before.

Errors: `ExpositionError` (malformed text, too large, or no load series at all)
is the only exception `parse_exposition` raises; the scraper counts it as a
failed scrape.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
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

POOL_NAME_LABEL = "name"
"""The label the EPP's pool gauges (averages, ready endpoints, per-endpoint queues) name
their InferencePool with (`llm_d_epp_average_queue_size{name="p1"}`)."""
POOL_LABEL = "inference_pool"
"""The label the EPP's flow-control series name their InferencePool with
(`llm_d_epp_flow_control_queue_size{inference_pool="p1",...}`)."""

_POOL_LABEL_OF: dict[str, str] = {
    **{name: POOL_NAME_LABEL for name in (*_EPP_RUNNING, *_EPP_WAITING, *_EPP_READY)},
    **{name: POOL_NAME_LABEL for name in (*_EPP_DEEPEST, *_EPP_KV)},
    **{name: POOL_LABEL for name in _EPP_HELD},
}


def pool_label(metric: str) -> str | None:
    """The label that carries the pool on EPP series `metric`; None for a series that
    names no pool (every vLLM and SGLang series)."""
    return _POOL_LABEL_OF.get(metric)


def in_pool(metric: str, labels: Mapping[str, str], pool: str | None) -> bool:
    """Whether the series `metric{labels}` belongs to `pool`. An unlabeled series never
    belongs to a named pool.

    Strict on purpose: on an EPP serving several pools, a series without the pool label
    is the total across pools, and counting it would flatter the named pool. With no
    pool named (`None`) every series belongs, which is the single-pool reading.
    """
    if pool is None:
        return True
    label = pool_label(metric)
    return label is not None and labels.get(label) == pool


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
_LABELS = r"\{[ \t]*(?:" + _LABEL + r"(?:[ \t]*,[ \t]*" + _LABEL + r")*(?:[ \t]*,)?[ \t]*)?\}"
_LINE = re.compile(
    r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:[ \t]*(?P<labels>" + _LABELS + r"))?"
    r"[ \t]+(?P<value>[^ \t]+)"
    r"(?:[ \t]+-?[0-9]+(?:\.[0-9]*)?)?"
    r"(?:[ \t]+#[^\n]*)?[ \t]*"
)
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: "\n" if m[1] == "n" else m[1], value)


def parse_labels(block: str) -> dict[str, str]:
    """The labels of a sample line's `{...}` block (already matched by the line grammar),
    values unescaped; a repeated label keeps its last value."""
    return {m[1]: _unescape(m[2]) for m in _LABEL_PAIR.finditer(block)}


def parse_series(text: str, pool: str | None = None) -> dict[str, list[float]]:
    """Values of the known load series in `text`, by metric name.

    Every non-comment line must be a valid sample line; the first that is not raises
    `ExpositionError("parse")` naming the line number. Unknown metrics are checked
    and skipped. With `pool`, only series that belong to that pool are kept
    (`in_pool`): no vLLM or SGLang series, and no EPP series without the pool's label.
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
            if pool is not None:
                block = match["labels"]
                if not in_pool(name, parse_labels(block) if block else {}, pool):
                    continue
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


def parse_exposition(
    text: str, fmt: MetricsFormat = MetricsFormat.AUTO, pool: str | None = None
) -> Load:
    """One provider's `Load` from a scraped page; with `pool`, from that EPP pool's
    series only (the page is then read as EPP: only EPP series name a pool).

    Raises `ExpositionError` when the text is malformed or oversized, and with reason
    `empty` when the page has none of the running/queue series of `fmt` (a standby
    EPP replica reports nothing; reading that as idle would send it traffic), or none
    of `pool`'s.
    """
    series = parse_series(text, pool)
    if fmt is MetricsFormat.AUTO:
        chosen = MetricsFormat.EPP if pool is not None else detect_format(series)
    else:
        chosen = fmt
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
        where = "" if pool is None else f" for pool {pool!r}"
        raise ExpositionError("empty", f"no {fmt.value} running or queue series{where} on the page")
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
