"""Traces exported over OTLP/HTTP to a receiver this test runs on loopback (the protobuf
decoded with opentelemetry-proto, as a collector would): the span tree and the decision
attributes of a routed, a retried and a refused request."""

from __future__ import annotations

import asyncio
import gzip
import time
from typing import Any

import openai
import pytest
from aiohttp import web

from gridroute.core import Sample
from gridroute.fakeserver.settings import FakeServerConfig
from tests.gateway.backends import closed_port, serve
from tests.gateway.harness import MODEL, eventually, run, running_grid

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

trace_service = pytest.importorskip(
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    reason="opentelemetry-proto is not installed (the tracing extra)",
)
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

CHAT = [{"role": "user", "content": "hello"}]
SOLO = "solo-model"
"""Served by site b only: routed there without a retry."""


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


class Receiver:
    """POST /v1/traces: decode each ExportTraceServiceRequest, keep its spans."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []
        self.content_types: set[str] = set()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.content_types.add(request.content_type)
        req = trace_service.ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            self.resources.append({a.key: _value(a.value) for a in rs.resource.attributes})
            for ss in rs.scope_spans:
                for span in ss.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "kind": span.kind,
                            "trace": span.trace_id.hex(),
                            "id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "attrs": {a.key: _value(a.value) for a in span.attributes},
                        }
                    )
        reply = trace_service.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/traces", self.handle)
        return app

    def trees(self) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """(root, children sorted by attempt) per trace."""
        out = []
        for trace in {s["trace"] for s in self.spans}:
            spans = [s for s in self.spans if s["trace"] == trace]
            (root,) = [s for s in spans if not s["parent"]]
            kids = sorted(
                (s for s in spans if s["parent"]), key=lambda s: s["attrs"]["grid.attempt"]
            )
            assert all(k["parent"] == root["id"] for k in kids)
            out.append((root, kids))
        return out


def test_routed_retried_and_refused_requests_export_their_span_trees() -> None:
    async def scenario() -> None:
        receiver = Receiver()
        async with serve(receiver.app()) as otlp:
            b = FakeServerConfig(models=[MODEL, SOLO], name="b", service_s=0.0, tokens=4)
            overrides = {
                "local_site": "dead",
                "models": [
                    {"name": MODEL, "policy": "first"},
                    {"name": SOLO, "sites": ["b"], "policy": "first"},
                ],
                "tracing": {"otlp_endpoint": otlp + "/v1/traces", "service_name": "gw-test"},
            }
            async with running_grid({"dead": closed_port(), "b": b}, **overrides) as g:
                g.feed({"dead": (0.0, 0.0, 10.0), "b": (0.0, 0.0, 10.0)})
                client = g.client()
                await client.chat.completions.create(model=SOLO, messages=CHAT)  # routed
                await client.chat.completions.create(model=MODEL, messages=CHAT)  # retried
                t = time.time()
                g.gw.current.refresh([Sample("b", "b", t, running=0, ready=0.0)], {"b": t}, t)
                with pytest.raises(openai.APIStatusError) as err:  # refused: b is unready
                    await client.chat.completions.create(model=SOLO, messages=CHAT)
                assert err.value.status_code == 503
                assert g.gw.tracer is not None
                await asyncio.to_thread(g.gw.tracer.provider.force_flush)
                await eventually(lambda: len(receiver.spans) >= 6, timeout=10.0)
        assert receiver.content_types == {"application/x-protobuf"}
        assert {r.get("service.name") for r in receiver.resources} == {"gw-test"}
        trees = {root["attrs"]["http.response.status_code"] * 10 + len(kids): (root, kids)
                 for root, kids in receiver.trees()}  # fmt: skip
        assert sorted(trees) == [2001, 2002, 5030]
        server, client_kind = 2, 3  # SPAN_KIND_SERVER, SPAN_KIND_CLIENT

        root, (only,) = trees[2001]
        assert root["name"] == "gridroute.route" and root["kind"] == server
        assert root["attrs"] | {
            "gen_ai.request.model": SOLO, "grid.outcome": "route", "grid.site": "b",
            "grid.backend": "b", "grid.attempts": 1, "grid.path": "first",
        } == root["attrs"]  # fmt: skip
        assert only["name"] == "gridroute.attempt" and only["kind"] == client_kind
        assert only["attrs"] == {
            "grid.attempt": 1, "grid.path": "first", "grid.site": "b", "grid.backend": "b",
            "grid.attempt.outcome": "answered", "http.response.status_code": 200,
        }  # fmt: skip

        root, (first, second) = trees[2002]
        assert root["attrs"]["grid.attempts"] == 2 and root["attrs"]["grid.site"] == "b"
        assert first["attrs"] | {
            "grid.site": "dead", "grid.attempt.outcome": "retried",
            "grid.retry.reason": "connect_failed",
        } == first["attrs"]  # fmt: skip
        assert second["attrs"]["grid.site"] == "b"
        assert second["attrs"]["grid.attempt.outcome"] == "answered"

        root, kids = trees[5030]
        assert kids == []
        assert root["attrs"]["grid.outcome"] == "no_site"
        assert root["attrs"]["grid.attempts"] == 0
        assert "b:unready" in root["attrs"]["grid.refused"]

    run(scenario)


def _traced(sample_ratio: float, requests: int) -> Receiver:
    """`requests` routed requests through a gateway tracing with `sample_ratio`; what
    its OTLP receiver got (after a flush)."""
    receiver = Receiver()

    async def scenario() -> None:
        async with serve(receiver.app()) as otlp:
            b = FakeServerConfig(models=[MODEL], name="b", service_s=0.0, tokens=2)
            tracing = {"otlp_endpoint": otlp + "/v1/traces", "sample_ratio": sample_ratio}
            async with running_grid({"b": b}, tracing=tracing) as g:
                g.feed({"b": (0.0, 0.0, 10.0)})
                client = g.client()
                for _ in range(requests):
                    await client.chat.completions.create(model=MODEL, messages=CHAT)
                assert g.gw.tracer is not None
                await asyncio.to_thread(g.gw.tracer.provider.force_flush)

    run(scenario)
    return receiver


def test_a_sample_ratio_traces_that_share_of_requests_each_with_its_whole_tree() -> None:
    receiver = _traced(0.5, 100)
    trees = receiver.trees()  # asserts every child hangs off its own root
    # Binomial(100, 0.5): 50 +- 5 (sd); 20..80 is 6 sd either side.
    assert 20 <= len(trees) <= 80, len(trees)
    assert all(len(kids) == 1 for _, kids in trees)  # no root without its attempt
    assert len(receiver.spans) == 2 * len(trees)


def test_sample_ratio_zero_serves_every_request_and_exports_nothing() -> None:
    receiver = _traced(0.0, 20)
    assert receiver.spans == []


@pytest.mark.parametrize("ratio", [-0.1, 1.5])
def test_a_sample_ratio_outside_0_to_1_is_refused_naming_the_field(ratio: float) -> None:
    from gridroute.config import ConfigError
    from gridroute.gateway.config import parse_config

    yaml_text = (
        "sites: [{name: b, backend_url: 'http://127.0.0.1:1'}]\nmodels: [{name: m}]\n"
        f"tracing: {{otlp_endpoint: 'http://127.0.0.1:4318/v1/traces', sample_ratio: {ratio}}}\n"
    )
    with pytest.raises(ConfigError, match=r"tracing\.sample_ratio"):
        parse_config(yaml_text)
