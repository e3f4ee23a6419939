"""RequestTracer's sampling: each request is drawn at its start, and one not drawn
never reaches the OpenTelemetry SDK (tests/gateway/test_otlp_traces.py checks the
exported trees and their attributes end to end)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gridroute.core import Decision, Outcome, Path, Policy
from gridroute.gateway.config import TracingConfig
from gridroute.gateway.tracing import RequestTracer, make_tracer


def _decision() -> Decision:
    return Decision(Outcome.ROUTE, Path.FALLBACK)


def _request(tracer: RequestTracer) -> None:
    span = tracer.start("/v1/chat/completions", "m", Policy.GRIDROUTE)
    child = tracer.attempt(span, _decision(), 1)
    tracer.attempt_end(child, 200, None)
    tracer.end(span, _decision(), "a", 1, 200)


def test_a_request_is_traced_when_its_draw_falls_under_the_ratio() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RequestTracer(provider.get_tracer("test"), sample_ratio=0.3, rng=random.Random(7))
    for _ in range(200):
        _request(tracer)
    draws = random.Random(7)
    traced = sum(draws.random() < 0.3 for _ in range(200))
    spans = exporter.get_finished_spans()
    assert 40 <= traced <= 80  # the seeded sequence: 0.3 of 200, give or take
    assert [s.name for s in spans] == ["gridroute.attempt", "gridroute.route"] * traced
    roots = [s for s in spans if s.name == "gridroute.route"]
    assert all(dict(s.attributes or {})["grid.site"] == "a" for s in roots)


class _NoSDK:
    """A tracer that fails the test when asked for a span."""

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a request that was not drawn reached the SDK")


def test_a_request_not_drawn_never_reaches_the_sdk() -> None:
    for ratio, rng in ((0.0, random.Random(1)), (0.5, _AlwaysAbove())):
        tracer = RequestTracer(_NoSDK(), sample_ratio=ratio, rng=rng)
        _request(tracer)  # the invalid span, ended as any other


class _AlwaysAbove(random.Random):
    def random(self) -> float:
        return 0.75


def test_ratio_one_traces_every_request_whatever_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The provider samples every span it is asked for: the ratio is drawn once, by the
    # gateway, not again by an OTEL_TRACES_SAMPLER the environment happens to set.
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    tracer = make_tracer(TracingConfig(otlp_endpoint="http://127.0.0.1:1/v1/traces"))
    assert tracer is not None
    try:
        span = tracer.start("/v1/chat/completions", "m", Policy.GRIDROUTE)
        assert span.is_recording()
        span.end()
    finally:
        tracer.provider.shutdown()
