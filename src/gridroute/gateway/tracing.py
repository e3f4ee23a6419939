"""Optional OpenTelemetry: one span per routed request with the decision's attributes.

Off unless `tracing.otlp_endpoint` is set (or a tracer is injected, as tests do with
the SDK's in-memory exporter). The `opentelemetry` packages come with the `tracing`
extra and are imported only when tracing is on, so the request path costs one
`is None` check without it.
"""

from __future__ import annotations

from typing import Any

from gridroute.core import Decision, Policy
from gridroute.gateway.config import TracingConfig


class RequestTracer:
    """Starts and ends the per-request span on an OpenTelemetry `Tracer`."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry.trace import SpanKind

        self._tracer = tracer
        self._kind = SpanKind.SERVER

    def start(self, path: str, model: str, policy: Policy) -> Any:
        return self._tracer.start_span(
            "gridroute.route",
            kind=self._kind,
            attributes={
                "http.route": path,
                "gen_ai.request.model": model,
                "grid.policy": policy.value,
            },
        )

    def end(self, span: Any, d: Decision | None, site: str, attempts: int, status: int) -> None:
        """Close the span; `d` is None when the client left while the request was held."""
        if d is not None:
            span.set_attribute("grid.outcome", d.outcome.value)
            span.set_attribute("grid.path", d.path.value)
            if d.view is not None:
                span.set_attribute("grid.backend", d.view.provider)
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
    except ImportError as exc:  # pragma: no cover - depends on the installed extra
        raise RuntimeError(
            "tracing.otlp_endpoint is set but the tracing extra is not installed: "
            "pip install 'gridroute[tracing]'"
        ) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": cfg.service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=cfg.otlp_endpoint)))
    return RequestTracer(provider.get_tracer("gridroute.gateway"))
