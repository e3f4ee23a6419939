"""The gateway under a routing overlay, on real sockets: pickers, evidence headers,
reloads that keep the last good overlay, drains, retry in the group, fall-through."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gridroute.core.demand import DemandMeter, report
from tests.gateway.harness import MODEL, Grid, eventually, fake, run, running_grid

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


def _overlay(
    groups: list[list[str]],
    picker: str = "roundRobin",
    revision: int = 1,
    draining: tuple[str, ...] = (),
    excluded: tuple[str, ...] = (),
    model: str = MODEL,
) -> str:
    cands: list[dict[str, Any]] = []
    for g, sites in enumerate(groups):
        for s in sites:
            c: dict[str, Any] = {"site": s, "provider": s, "selection_group": g}
            if s in draining:
                c["admission_state"] = "existing_only"
            cands.append(c)
    cap = {
        "model": model,
        "selection_policy": {"picker": picker},
        "candidates": cands,
        "excluded": [{"site": s, "provider": s} for s in excluded],
    }
    return json.dumps({"revision": revision, "models": [cap]})


def _dead_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def _overlay_cfg(path: Path) -> dict[str, Any]:
    return {"file": str(path), "poll_interval_s": 3600}


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status_code = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


async def _post(g: Grid, session: str | None = None, **body: Any) -> Answer:
    headers = {"x-session-id": session} if session else {}
    async with (
        aiohttp.ClientSession() as c,
        c.post(g.url + "/v1/chat/completions", json={**CHAT, **body}, headers=headers) as r,
    ):
        return Answer(r.status, dict(r.headers), await r.read())


def _reloads(g: Grid, result: str) -> float:
    reg = g.gw.metrics.registry
    return reg.get_sample_value("grid_route_overlay_reloads_total", {"result": result}) or 0.0


def test_round_robin_splits_exactly_with_evidence_and_no_overlay_reads(tmp_path: Path) -> None:
    f = tmp_path / "overlay.json"
    f.write_text(_overlay([["a", "b", "c"]], revision=7))

    async def scenario() -> None:
        sites = {n: fake(n) for n in "abc"}
        async with running_grid(sites, overlay=_overlay_cfg(f)) as g:
            watch = g.gw.overlay
            assert watch is not None and watch.index is not None
            digest, fetches = watch.index.digest, watch.fetches
            seq = []
            for _ in range(30):
                r = await _post(g)
                assert r.status_code == 200
                assert r.headers["x-grid-group"] == "0"
                assert r.headers["x-grid-picker"] == "roundRobin"
                assert r.headers["x-grid-overlay-revision"] == "7"
                assert r.headers["x-grid-affinity"] == "none"
                seq.append(r.headers["x-grid-provider"])
            assert seq == ["a/a", "b/b", "c/c"] * 10
            assert watch.index.digest == digest and watch.fetches == fetches

    run(scenario)


def test_an_invalid_overlay_keeps_the_last_good_one_and_is_counted(tmp_path: Path) -> None:
    f = tmp_path / "overlay.json"
    f.write_text(_overlay([["a", "b"]]))

    async def scenario() -> None:
        async with running_grid({n: fake(n) for n in "ab"}, overlay=_overlay_cfg(f)) as g:
            watch = g.gw.overlay
            assert watch is not None
            f.write_text(_overlay([["a", "b"]], picker="fancy"))
            assert await watch.read_once() == "invalid"
            assert "selection_policy.picker" in (watch.last_error or "")
            f.write_text(_overlay([["a", "nowhere"]]))
            assert await watch.read_once() == "invalid"
            assert "provider nowhere/nowhere has no backend" in (watch.last_error or "")
            f.write_text(_overlay([["a"]], model="unrouted"))
            assert await watch.read_once() == "invalid"
            f.write_text("{not json")
            assert await watch.read_once() == "invalid"
            f.unlink()
            assert await watch.read_once() == "unreachable"
            assert _reloads(g, "invalid") == 4 and _reloads(g, "ok") == 1
            got = {(await _post(g)).headers["x-grid-provider"] for _ in range(4)}
            assert got == {"a/a", "b/b"}  # still the first overlay

    run(scenario)


def test_republishing_does_not_reset_round_robin_and_a_change_is_adopted(tmp_path: Path) -> None:
    f = tmp_path / "overlay.json"
    f.write_text(_overlay([["a", "b", "c"]], revision=1))

    async def scenario() -> None:
        async with running_grid({n: fake(n) for n in "abc"}, overlay=_overlay_cfg(f)) as g:
            watch = g.gw.overlay
            assert watch is not None
            first = [(await _post(g)).headers["x-grid-provider"] for _ in range(2)]
            assert await watch.read_once() == "same"  # identical bytes
            f.write_text(_overlay([["a", "b", "c"]], revision=2))
            assert await watch.read_once() == "same"  # same digest, new revision
            then = [(await _post(g)).headers["x-grid-provider"] for _ in range(2)]
            assert first + then == ["a/a", "b/b", "c/c", "a/a"]
            f.write_text(_overlay([["c"], ["a", "b"]], revision=3))
            assert await watch.read_once() == "ok"
            r = await _post(g)
            assert (r.headers["x-grid-provider"], r.headers["x-grid-overlay-revision"]) == (
                "c/c",
                "3",
            )

    run(scenario)


def test_draining_keeps_bound_sessions_and_takes_no_new_ones(tmp_path: Path) -> None:
    f = tmp_path / "overlay.json"
    f.write_text(_overlay([["a", "b"]], revision=1))

    async def scenario() -> None:
        async with running_grid({n: fake(n) for n in "ab"}, overlay=_overlay_cfg(f)) as g:
            watch = g.gw.overlay
            assert watch is not None
            r = await _post(g, "s-1")
            assert (r.headers["x-grid-provider"], r.headers["x-grid-affinity"]) == (
                "a/a",
                "created",
            )
            r = await _post(g, "s-1")
            assert (r.headers["x-grid-provider"], r.headers["x-grid-affinity"]) == ("a/a", "reused")
            f.write_text(_overlay([["b"], ["a"]], revision=2, draining=("a",)))
            assert await watch.read_once() == "ok"
            r = await _post(g, "s-1")
            assert (r.headers["x-grid-provider"], r.headers["x-grid-affinity"]) == ("a/a", "reused")
            assert r.headers["x-grid-group"] == "1"
            news = {(await _post(g, f"new-{i}")).headers["x-grid-provider"] for i in range(4)}
            assert news == {"b/b"}
            # The user field keys a session when there is no header.
            r1 = await _post(g, None, user="u-9")
            r2 = await _post(g, None, user="u-9")
            assert r1.headers["x-grid-affinity"] == "created"
            assert r2.headers["x-grid-affinity"] == "reused"
            f.write_text(_overlay([["b"]], revision=3, excluded=("a",)))
            assert await watch.read_once() == "ok"
            r = await _post(g, "s-1")
            assert (r.headers["x-grid-provider"], r.headers["x-grid-affinity"]) == (
                "b/b",
                "failed_over",
            )

    run(scenario)


def test_retry_stays_in_the_group_then_falls_through(tmp_path: Path) -> None:
    f = tmp_path / "overlay.json"
    f.write_text(_overlay([["a", "b", "c"], ["z"]], picker="deterministic"))

    async def scenario() -> None:
        sites: dict[str, Any] = {"a": _dead_url(), "b": fake("b"), "c": fake("c"), "z": fake("z")}
        cfg = {**_overlay_cfg(f), "max_attempts": 4}
        async with running_grid(sites, overlay=cfg) as g:
            r = await _post(g)
            assert (r.status_code, r.headers["x-grid-provider"]) == (200, "b/b")
            assert r.headers["x-grid-group"] == "0"
            await g.servers["b"].close()
            await g.servers["c"].close()
            r = await _post(g)
            assert (r.status_code, r.headers["x-grid-provider"]) == (200, "z/z")
            assert r.headers["x-grid-group"] == "1"
            reg = g.gw.metrics.registry
            steps = {
                s: reg.get_sample_value(
                    "grid_route_overlay_picks_total",
                    {"picker": "deterministic", "group": grp, "step": s},
                )
                for s, grp in (("first", "0"), ("in_group", "0"), ("fell_through", "1"))
            }
            assert steps == {"first": 2.0, "in_group": 3.0, "fell_through": 1.0}

    run(scenario)


def test_only_excluded_answers_503_and_unnamed_models_keep_config_routing(tmp_path: Path) -> None:
    f = tmp_path / "overlay.json"
    f.write_text(_overlay([], excluded=("a",)))

    async def scenario() -> None:
        async with running_grid(
            {n: fake(n) for n in "ab"},
            overlay=_overlay_cfg(f),
            models=[{"name": MODEL}, {"name": "plain", "policy": "first"}],
        ) as g:
            r = await _post(g)
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "no_healthy_site"
            assert r.headers["Retry-After"]
            r = await _post(g, model="plain")
            assert r.status_code in (200, 404)  # routed by `models:` (the fake serves MODEL)
            assert "x-grid-picker" not in r.headers

    run(scenario)


def test_the_overlay_from_a_url_with_etags_and_requests_never_call_it(tmp_path: Path) -> None:
    from aiohttp import web

    from gridroute.control.overlay_service import OverlayService

    inp = tmp_path / "in.yaml"
    inp.write_text(
        f"providers: [{{site: a}}, {{site: b}}]\nmodels: [{{model: {MODEL}, picker: roundRobin}}]\n"
    )

    async def scenario() -> None:
        svc = OverlayService(inp)
        await svc.step()
        runner = web.AppRunner(svc.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/overlay"
        try:
            cfg = {"url": url, "poll_interval_s": 3600}
            async with running_grid({n: fake(n) for n in "ab"}, overlay=cfg) as g:
                watch = g.gw.overlay
                assert watch is not None and watch.index is not None
                served = svc.served
                got = [(await _post(g)).headers["x-grid-provider"] for _ in range(6)]
                assert got == ["a/a", "b/b"] * 3
                assert svc.served == served  # the requests made no control-plane call
                assert await watch.read_once() == "same"  # a 304 on the ETag
                assert svc.served == served + 1
        finally:
            await runner.cleanup()

    run(scenario)


def test_a_request_in_flight_keeps_the_overlay_it_started_with(tmp_path: Path) -> None:
    import asyncio

    f = tmp_path / "overlay.json"
    f.write_text(_overlay([["a"], ["b"]], revision=1))

    async def scenario() -> None:
        sites = {"a": fake("a", service_s=0.5), "b": fake("b")}
        async with running_grid(sites, overlay=_overlay_cfg(f)) as g:
            watch = g.gw.overlay
            assert watch is not None
            slow = asyncio.create_task(_post(g))
            await asyncio.sleep(0.2)  # the request is at a now
            f.write_text(_overlay([["b"]], revision=2, excluded=("a",)))
            assert await watch.read_once() == "ok"
            r = await slow
            assert r.status_code == 200
            assert (r.headers["x-grid-provider"], r.headers["x-grid-overlay-revision"]) == (
                "a/a",
                "1",
            )
            r = await _post(g)
            assert (r.headers["x-grid-provider"], r.headers["x-grid-overlay-revision"]) == (
                "b/b",
                "2",
            )

    run(scenario)


def test_spans_carry_the_bounded_decision_attributes(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from gridroute.gateway.tracing import RequestTracer

    f = tmp_path / "overlay.json"
    f.write_text(_overlay([["a", "b"]], revision=4))

    async def scenario() -> None:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        async with running_grid({n: fake(n) for n in "ab"}, overlay=_overlay_cfg(f)) as g:
            g.gw.tracer = RequestTracer(provider.get_tracer("test"))
            await _post(g, "sess")
            await _post(g)
        spans = exporter.get_finished_spans()
        first, second = (s for s in spans if s.name == "gridroute.route")
        # The one flow gives overlay requests a span per attempt too, on the chosen site.
        tried = [s for s in spans if s.name == "gridroute.attempt"]
        assert [dict(s.attributes or {})["grid.site"] for s in tried] == ["a", "b"]
        assert all(s.parent is not None for s in tried)
        a1, a2 = dict(first.attributes or {}), dict(second.attributes or {})
        assert (a1["grid.provider"], a1["grid.group"], a1["grid.picker"]) == (
            "a/a",
            0,
            "roundRobin",
        )
        assert (a1["grid.affinity"], a1["grid.overlay.revision"], a1["grid.site"]) == (
            "created",
            4,
            "a",
        )
        assert (a2["grid.provider"], a2["grid.step"], a2["grid.affinity"]) == (
            "b/b",
            "first",
            "none",
        )
        assert all("sess" not in str(v) for v in a1.values())  # no session ids in spans

    run(scenario)


def test_weighted_split_is_exact_and_weight_changes_keep_bindings(tmp_path: Path) -> None:
    def weighted(wa: int, wb: int, revision: int) -> str:
        doc = json.loads(_overlay([["a", "b"]], picker="weighted", revision=revision))
        for c, w in zip(doc["models"][0]["candidates"], (wa, wb), strict=True):
            c["traffic_weight"] = w
        return json.dumps(doc)

    f = tmp_path / "overlay.json"
    f.write_text(weighted(3, 1, 1))

    async def scenario() -> None:
        async with running_grid({n: fake(n) for n in "ab"}, overlay=_overlay_cfg(f)) as g:
            watch = g.gw.overlay
            assert watch is not None
            got = [(await _post(g, f"s{i}")).headers["x-grid-provider"] for i in range(8)]
            assert sorted(got) == ["a/a"] * 6 + ["b/b"] * 2
            bound_to_b = f"s{got.index('b/b')}"
            f.write_text(weighted(1, 0, 2))
            assert await watch.read_once() == "ok"
            r = await _post(g, bound_to_b)
            assert (r.headers["x-grid-provider"], r.headers["x-grid-affinity"]) == ("b/b", "reused")
            news = {(await _post(g, f"t{i}")).headers["x-grid-provider"] for i in range(4)}
            assert news == {"a/a"}  # weight 0: no new picks

    run(scenario)


def test_a_dead_group_member_is_ejected_by_the_one_flow_and_then_skipped(tmp_path: Path) -> None:
    f = tmp_path / "overlay.json"
    f.write_text(_overlay([["a", "b"]], picker="deterministic"))

    async def scenario() -> None:
        sites: dict[str, Any] = {"a": _dead_url(), "b": fake("b")}
        async with running_grid(sites, overlay=_overlay_cfg(f)) as g:
            reg = g.gw.metrics.registry
            for _ in range(5):  # a refuses the connection every time: retried on b
                r = await _post(g)
                assert (r.status_code, r.headers["x-grid-step"]) == (200, "in_group")
            labels = {"site": "a", "cluster": "a"}
            assert reg.get_sample_value("grid_route_ejections_total", labels) == 1
            retries = reg.get_sample_value(
                "grid_route_retries_total", {"site": "a", "reason": "connect_failed"}
            )
            assert retries == 5
            r = await _post(g)  # ejected: b is the group's first viable member now
            assert (r.headers["x-grid-provider"], r.headers["x-grid-step"]) == ("b/b", "first")

    run(scenario)


def test_an_overlay_routed_request_counts_as_its_models_demand(tmp_path: Path) -> None:
    """Issue 25's third fault: overlay-routed requests keep no fair order, and an earlier
    attempt read them as no demand. The gateway counts them per model while in flight
    (`OwnLoad.models`), which its demand report reads (`core/demand.py`)."""
    f = tmp_path / "overlay.json"
    f.write_text(_overlay([["a", "b"]], picker="deterministic"))

    async def scenario() -> None:
        sites = {n: fake(n, service_s=1.0) for n in "ab"}
        async with running_grid(sites, overlay=_overlay_cfg(f)) as g:
            own = g.gw.current.own
            task = asyncio.ensure_future(_post(g))
            await eventually(lambda: own.models.get(MODEL) == 1)
            key = next(k for k, n in own.counts.items() if n)
            cands = g.gw.current.state.candidates
            got = report(cands, dict(own.counts), own.models, DemandMeter(), 0.0)
            other = next(c.key for c in cands if c.key != key)
            assert got.beyond == {other: 1}  # wanted at the site it does not hold it at
            assert (await task).status_code == 200
            assert own.models == {}

    run(scenario)
