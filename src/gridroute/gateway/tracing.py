"""Optional OpenTelemetry: a span tree per request with the decision's attributes.

    gridroute.route    (SERVER)  grid.policy, grid.path, grid.outcome, grid.site,
    |                            grid.backend, grid.attempts, grid.refused, status
    +- gridroute.attempt (CLIENT)  one per site tried: grid.attempt, grid.site,
                                   grid.backend, grid.path, and how it ended
                                   (grid.attempt.outcome answered | retried | failed,
                                   grid.retry.reason, http.response.status_code)

A request refused by the gateway itself (429 shed, 503 no site) has the root span only.
With `tracing.sample_ratio` below 1 each request is drawn at its start, before the SDK is
called: one not drawn gets the invalid (non-recording) span and the SDK does nothing for
it. The SDK's own ratio sampler would decide the same share by trace id, but only after
making ids, a sampling result and a span object: 6-12 us per request not traced in a
tight loop, 15-34 us in a live gateway, most of what tracing at 1 % cost (BENCHMARKS.md,
"Where the 1 % row's time went"). The
gateway is always the trace's root (it reads no `traceparent`), so no other process
needs the decision to follow from the trace id.
Off unless `tracing.otlp_endpoint` is set (or a tracer is injected, as tests do with
the SDK's in-memory exporter). The `opentelemetry` packages come with the `tracing`
extra and are imported only when tracing is on, so the request path costs one
`is None` check without it.
"""

from __future__ import annotations

import random
from typing import Any

from gridroute.core import Decision, Policy
from gridroute.core.prefix import PrefixRequest
from gridroute.gateway.config import TracingConfig


class RequestTracer:
    """Starts and ends the per-request spans on an OpenTelemetry `Tracer`; `provider`
    (when this module made it) is flushed and shut down with the gateway. A request is
    traced with probability `sample_ratio`, drawn from `rng`; the tracer's own sampler
    should then sample every span it is asked for (`make_tracer`'s does)."""

    def __init__(
        self,
        tracer: Any,
        provider: Any = None,
        sample_ratio: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        from opentelemetry.trace import INVALID_SPAN, SpanKind, set_span_in_context

        self._unsampled = INVALID_SPAN
        self._ratio = sample_ratio
        self._draw = (rng or random.Random()).random
        self._tracer = tracer
        self._kind = SpanKind.SERVER
        self._client = SpanKind.CLIENT
        self._in_context = set_span_in_context
        self.provider = provider

    def attempt(self, parent: Any, d: Decision, n: int) -> Any:
        """A child span for attempt `n` (1-based) on the decision's site."""
        if not parent.is_recording():  # not sampled: the child would not be either
            return self._unsampled
        view = d.view
        return self._tracer.start_span(
            "gridroute.attempt",
            context=self._in_context(parent),
            kind=self._client,
            attributes={
                "grid.attempt": n,
                "grid.path": d.path.value,
                "grid.site": "" if view is None else view.site,
                "grid.backend": "" if view is None else view.provider,
            },
        )

    def attempt_end(self, span: Any, status: int | None, retry_reason: str | None) -> None:
        """Close an attempt: answered with `status`, retried for `retry_reason`, or
        failed (neither: the client left or the gateway answered 502/504 itself)."""
        if not span.is_recording():
            return
        if retry_reason is not None:
            span.set_attribute("grid.attempt.outcome", "retried")
            span.set_attribute("grid.retry.reason", retry_reason)
        elif status is not None:
            span.set_attribute("grid.attempt.outcome", "answered")
            span.set_attribute("http.response.status_code", status)
        else:
            span.set_attribute("grid.attempt.outcome", "failed")
        span.end()

    def shutdown(self) -> None:
        """Export what is buffered and stop (the gateway is stopping)."""
        if self.provider is not None:
            self.provider.shutdown()

    def start(self, path: str, model: str, policy: Policy) -> Any:
        """The request's root span, or the invalid span when it is not drawn."""
        if self._ratio < 1.0 and self._draw() >= self._ratio:
            return self._unsampled
        return self._tracer.start_span(
            "gridroute.route",
            kind=self._kind,
            attributes={
                "http.route": path,
                "gen_ai.request.model": model,
                "grid.policy": policy.value,
            },
        )

    def end(
        self,
        span: Any,
        d: Decision | None,
        site: str,
        attempts: int,
        status: int,
        prefix: PrefixRequest | None = None,
    ) -> None:
        """Close the span; `d` is None when the client left while the request was held.
        With `prefix`, the prefix-affinity decision: outcome, blocks, blocks matched."""
        if not span.is_recording():
            span.end()
            return
        if prefix is not None and prefix.outcome is not None:
            span.set_attribute("grid.prefix.outcome", prefix.outcome.value)
            span.set_attribute("grid.prefix.blocks", len(prefix.blocks))
            span.set_attribute("grid.prefix.matched_blocks", prefix.matched)
        if d is not None:
            span.set_attribute("grid.outcome", d.outcome.value)
            span.set_attribute("grid.path", d.path.value)
            if d.view is not None:
                span.set_attribute("grid.backend", d.view.provider)
            if d.refused:
                span.set_attribute("grid.refused", [f"{s}:{r}" for s, r in d.refused])
        span.set_attribute("grid.site", site)
        span.set_attribute("grid.attempts", attempts)
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR))
        span.end()


def make_tracer(cfg: TracingConfig) -> RequestTracer | None:
    """A tracer exporting over OTLP/HTTP, or None when tracing is off."""
    if cfg.otlp_endpoint is None:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
    except ImportError as exc:  # pragma: no cover - depends on the installed extra
        raise RuntimeError(
            "tracing.otlp_endpoint is set but the tracing extra is not installed: "
            "pip install 'gridroute[tracing]'"
        ) from exc
    # Every span the tracer is asked for (not OTEL_TRACES_SAMPLER's choice):
    # RequestTracer.start has drawn the share already.
    provider = TracerProvider(
        resource=Resource.create({"service.name": cfg.service_name}),
        sampler=ParentBased(ALWAYS_ON),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=cfg.otlp_endpoint)))
    return RequestTracer(provider.get_tracer("gridroute.gateway"), provider, cfg.sample_ratio)
