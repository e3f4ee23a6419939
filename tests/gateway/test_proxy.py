"""The request path against real sockets: routing headers, streaming, errors, retries.

Every test ends by checking that the gateway's own in-flight counters are back to
zero: each attempt's start has exactly one end, whatever happened to it.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import openai
import pytest

from gridroute.core import Health, Sample
from tests.gateway.backends import breaking_app, closed_port, echo_app, serve, stalling_app
from tests.gateway.harness import MODEL, eventually, fake, run, running_grid

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

CHAT = [{"role": "user", "content": "hello"}]


def samples(reg: Any, name: str, **labels: str) -> float:
    value = reg.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_routes_with_site_headers_streaming_and_not() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            client = g.client()
            raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=CHAT)
            assert raw.status_code == 200
            assert raw.headers["x-grid-site"] == "a"
            assert raw.headers["x-grid-backend"] == "a"
            assert raw.parse().choices[0].message.content
            stream = await client.chat.completions.create(model=MODEL, messages=CHAT, stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            assert text.strip()
            emb = await client.embeddings.create(model=MODEL, input="x")
            assert emb.data[0].embedding
            comp = await client.completions.create(model=MODEL, prompt="x")
            assert comp.choices[0].text
            resp = await client.responses.create(model=MODEL, input="x")
            assert resp.output_text
            models = await client.models.list()
            assert [m.id for m in models.data] == [MODEL]
            assert g.in_flight() == 0

    run(scenario)


def test_client_errors_are_openai_shaped() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}, limits={"max_body_bytes": 2000}) as g:
            client = g.client()
            with pytest.raises(openai.NotFoundError) as nf:
                await client.chat.completions.create(model="nope", messages=CHAT)
            assert nf.value.code == "model_not_found"
            assert nf.value.type == "invalid_request_error"
            big = [{"role": "user", "content": "x" * 5000}]
            with pytest.raises(openai.APIStatusError) as tl:
                await client.chat.completions.create(model=MODEL, messages=big)
            assert tl.value.status_code == 413
            assert tl.value.code == "request_too_large"
            async with aiohttp.ClientSession() as http:
                url = g.url + "/v1/chat/completions"
                for data in (b"", b"{not json", b"[1,2]", b'{"model": 3}', b'{"messages": []}'):
                    async with http.post(url, data=data) as r:
                        assert r.status == 400, data
                        body = await r.json()
                        assert body["error"]["type"] == "invalid_request_error"
                        assert body["error"]["code"] in {"invalid_json", "missing_model"}

                # A chunked body past the limit is cut off too.
                async def chunks() -> Any:
                    for _ in range(10):
                        yield b"x" * 1000

                async with http.post(url, data=chunks()) as r:
                    assert r.status == 413
            assert g.in_flight() == 0

    run(scenario)


def test_shed_answers_429_with_retry_after() -> None:
    async def scenario() -> None:
        overrides = {
            "availability": {"shedding": True, "full_after_ms": 0},
            "models": [{"name": MODEL, "policy": "saturation"}],
        }
        async with running_grid({"a": fake("a")}, **overrides) as g:
            for _ in range(20):
                g.feed({"a": (40.0, 10.0, 10.0)})
                await asyncio.sleep(0.002)
            assert MODEL in g.gw.current.snapshot.shedding
            async with aiohttp.ClientSession() as http:
                body = json.dumps({"model": MODEL, "messages": CHAT})
                async with http.post(g.url + "/v1/chat/completions", data=body) as r:
                    assert r.status == 429
                    assert int(r.headers["Retry-After"]) in range(3, 8)
                    assert await r.json() == {
                        "error": {
                            "message": "every site serving this model is at capacity",
                            "type": "rate_limit_exceeded",
                            "code": "capacity_exhausted",
                        }
                    }
            reg = g.gw.metrics.registry
            assert samples(reg, "grid_route_selections_total", path="shed") == 1
            assert samples(reg, "grid_route_decisions_total", site="", reason="shed") == 1
            assert g.in_flight() == 0

    run(scenario)


def test_no_ready_site_answers_503_no_healthy_site() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            t = time.time()
            g.gw.current.refresh([Sample("a", "a", t, running=0, ready=0.0)], {"a": t}, t)
            client = g.client()
            with pytest.raises(openai.APIStatusError) as err:
                await client.chat.completions.create(model=MODEL, messages=CHAT)
            assert err.value.status_code == 503
            assert err.value.code == "no_healthy_site"
            assert err.value.type == "server_error"
            assert int(err.value.response.headers["Retry-After"]) in range(3, 8)  # the core's
            assert g.in_flight() == 0

    run(scenario)


def test_inbound_grid_headers_are_stripped_and_bytes_pass_through() -> None:
    async def scenario() -> None:
        seen: list[dict[str, Any]] = []
        async with serve(echo_app(seen)) as url, running_grid({"a": url}) as g:
            body = b'{"model":"m",  "messages":[],"extra":"\\u00e9"}'
            async with (
                aiohttp.ClientSession() as http,
                http.post(
                    g.url + "/v1/chat/completions?x=1",
                    data=body,
                    headers={
                        "X-Grid-Site": "evil",
                        "x-grid-anything": "1",
                        "Authorization": "Bearer k",
                        "Content-Type": "application/json",
                    },
                ) as r,
            ):
                assert r.status == 200
                assert r.headers["x-grid-site"] == "a"  # ours, not the backend's
                assert r.headers["x-upstream"] == "kept"
            got = seen[0]
            assert got["body"] == body
            assert got["path"] == "/v1/chat/completions?x=1"
            lowered = {k.lower(): v for k, v in got["headers"].items()}
            assert not any(k.startswith("x-grid-") for k in lowered)
            assert lowered["authorization"] == "Bearer k"
            assert lowered["content-type"] == "application/json"
            assert g.in_flight() == 0

    run(scenario)


def test_the_gateway_adds_no_request_headers_of_its_own() -> None:
    """A bare request arrives bare: no Accept, Accept-Encoding, User-Agent or
    Content-Type that the client did not send (aiohttp would add them by default)."""

    async def scenario() -> None:
        seen: list[dict[str, Any]] = []
        async with serve(echo_app(seen)) as url, running_grid({"a": url}) as g:
            body = b'{"model":"m"}'
            host, port = g.url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Mine: 1\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            writer.close()
            names = {k.lower() for k in seen[0]["headers"]}
            assert names == {"host", "content-length", "x-mine"}, names
            assert seen[0]["body"] == body
            await eventually(lambda: g.in_flight() == 0)

    run(scenario)


def test_connect_failure_is_retried_once_on_another_site() -> None:
    async def scenario() -> None:
        sites: dict[str, Any] = {"dead": closed_port(), "b": fake("b")}
        overrides = {"local_site": "dead", "models": [{"name": MODEL, "policy": "first"}]}
        async with running_grid(sites, **overrides) as g:
            g.feed({"dead": (0.0, 0.0, 10.0), "b": (0.0, 0.0, 10.0)})  # both measured: front first
            client = g.client()
            for _ in range(3):
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=CHAT
                )
                assert raw.headers["x-grid-site"] == "b"
            reg = g.gw.metrics.registry
            assert (
                samples(reg, "grid_route_retries_total", site="dead", reason="connect_failed") == 3
            )
            assert g.in_flight() == 0

    run(scenario)


def test_connect_failure_with_nowhere_else_answers_502() -> None:
    async def scenario() -> None:
        async with running_grid({"dead": closed_port()}) as g:
            with pytest.raises(openai.APIStatusError) as err:
                await g.client().chat.completions.create(model=MODEL, messages=CHAT)
            assert err.value.status_code == 502
            assert err.value.code == "upstream_unreachable"
            assert g.in_flight() == 0

    run(scenario)


def test_every_site_down_answers_503_no_healthy_site_with_retry_after() -> None:
    """Seed error table: with every site judged down the front candidate is tried as a
    last resort (and the retry elsewhere); when neither answers, 503 + Retry-After."""

    async def scenario() -> None:
        health = {"enabled": True, "interval_s": 0.02, "rise": 2, "fall": 2}
        async with running_grid({"a": closed_port(), "b": closed_port()}, health=health) as g:
            current = g.gw.current
            for key in ("a/a", "b/b"):
                await eventually(lambda key=key: current.health.get(key) is Health.DOWN)
            async with aiohttp.ClientSession() as http:
                body = {"model": MODEL, "messages": CHAT}
                async with http.post(g.url + "/v1/chat/completions", json=body) as r:
                    assert r.status == 503
                    assert r.headers["Retry-After"] in {"3", "4", "5", "6", "7"}
                    err = (await r.json())["error"]
            assert (err["type"], err["code"]) == ("server_error", "no_healthy_site")
            reg = g.gw.metrics.registry
            tried = samples(reg, "grid_route_retries_total", site="a", reason="connect_failed")
            tried += samples(reg, "grid_route_retries_total", site="b", reason="connect_failed")
            assert tried == 1  # the last resort was tried, then the retry, then refused
            assert g.in_flight() == 0

    run(scenario)


@pytest.mark.parametrize("status", [429, 503])
def test_busy_answer_is_retried_before_any_byte_and_relayed_when_alone(status: int) -> None:
    async def scenario() -> None:
        overrides = {"local_site": "a", "models": [{"name": MODEL, "policy": "first"}]}
        async with running_grid({"a": fake("a"), "b": fake("b")}, **overrides) as g:
            g.feed({"a": (0.0, 0.0, 10.0), "b": (0.0, 0.0, 10.0)})
            g.servers["a"].state.fail(status, 1)
            raw = await g.client().chat.completions.with_raw_response.create(
                model=MODEL, messages=CHAT
            )
            assert raw.headers["x-grid-site"] == "b"
            reg = g.gw.metrics.registry
            assert samples(reg, "grid_route_retries_total", site="a", reason=f"status_{status}")
            # Both busy: the second answer is relayed as the backend gave it.
            g.servers["b"].state.fail(status, 1)
            with pytest.raises(openai.APIStatusError) as err:
                await g.client().chat.completions.create(model=MODEL, messages=CHAT)
            assert err.value.status_code == status
            assert err.value.response.headers["x-grid-site"] == "b"
            assert g.in_flight() == 0

    run(scenario)


def test_no_retry_after_a_byte_reached_the_client() -> None:
    async def scenario() -> None:
        sent: list[int] = []
        overrides = {"local_site": "a", "models": [{"name": MODEL, "policy": "first"}]}
        async with (
            serve(breaking_app(sent)) as url,
            running_grid({"a": url, "b": fake("b")}, **overrides) as g,
        ):
            g.feed({"a": (0.0, 0.0, 10.0), "b": (0.0, 0.0, 10.0)})
            async with aiohttp.ClientSession() as http:
                body = json.dumps({"model": MODEL, "stream": True})
                async with http.post(g.url + "/v1/chat/completions", data=body) as r:
                    assert r.status == 200
                    with pytest.raises(aiohttp.ClientPayloadError):
                        await r.read()
            assert sent == [1]
            assert g.servers["b"].state.stats()["served"] == 0
            await eventually(lambda: g.in_flight() == 0)

    run(scenario)


def test_read_timeout_answers_504_and_frees_the_count() -> None:
    async def scenario() -> None:
        overrides = {"timeouts": {"read_timeout_s": 0.2}}
        async with running_grid({"a": fake("a", service_s=5.0)}, **overrides) as g:
            with pytest.raises(openai.APIStatusError) as err:
                await g.client().chat.completions.create(model=MODEL, messages=CHAT)
            assert err.value.status_code == 504
            assert g.in_flight() == 0

    run(scenario)


def test_read_timeout_bounds_each_gap_between_chunks_not_the_whole_body() -> None:
    async def scenario() -> None:
        overrides = {"timeouts": {"read_timeout_s": 0.3}}
        steady = fake("a", service_s=0.0, per_token_s=0.1, tokens=8)  # 0.8 s in 0.1 s gaps
        async with running_grid({"a": steady}, **overrides) as g, aiohttp.ClientSession() as http:
            body = json.dumps({"model": MODEL, "messages": CHAT, "stream": True})
            async with http.post(g.url + "/v1/chat/completions", data=body) as r:
                assert (await r.text()).rstrip().endswith("data: [DONE]")
            assert g.in_flight() == 0

    run(scenario)


def test_silence_mid_stream_cuts_the_client_and_cancels_upstream() -> None:
    async def scenario() -> None:
        cancelled: list[int] = []
        overrides = {"timeouts": {"read_timeout_s": 0.3}}
        async with (
            serve(stalling_app(cancelled)) as url,
            running_grid({"a": url}, **overrides) as g,
            aiohttp.ClientSession() as http,
        ):
            body = json.dumps({"model": MODEL, "messages": CHAT, "stream": True})
            got = b""
            async with http.post(g.url + "/v1/chat/completions", data=body) as r:
                assert r.status == 200
                with pytest.raises(aiohttp.ClientPayloadError):
                    while chunk := await r.content.readany():
                        got += chunk
            # Cut after the silence, not before: every chunk sent 50 ms apart (each gap
            # under read_timeout_s) arrived; the backend's 30 s silence outlasts the run.
            assert got.count(b"data: ") == 3, got
            assert got.rstrip().endswith(b'data: {"i": 2}'), got
            await eventually(lambda: cancelled == [1])
            await eventually(lambda: g.in_flight() == 0)

    run(scenario)


@pytest.mark.parametrize("stream", [False, True])
def test_client_disconnect_cancels_upstream(stream: bool) -> None:
    async def scenario() -> None:
        cfg = fake("a", service_s=0.05, per_token_s=0.2, tokens=50)
        async with running_grid({"a": cfg}) as g:
            server = g.servers["a"]

            async def call() -> None:
                async with aiohttp.ClientSession() as http:
                    body = json.dumps({"model": MODEL, "messages": CHAT, "stream": stream})
                    async with http.post(g.url + "/v1/chat/completions", data=body) as r:
                        await r.read()

            task = asyncio.create_task(call())
            await eventually(lambda: server.state.stats()["running"] == 1)
            assert g.in_flight() == 1
            task.cancel()
            await eventually(lambda: server.state.stats()["cancelled"] == 1)
            await eventually(lambda: g.in_flight() == 0)

    run(scenario)


def test_a_gzip_request_body_is_decoded_and_forwarded_plain() -> None:
    """From review: the data plane read a compressed body raw and answered 400
    `invalid_json`; the aiohttp listener decoded it but forwarded the client's
    `Content-Encoding: gzip` beside the plain body, which the backend could not read."""
    import gzip

    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            body = gzip.compress(json.dumps({"model": MODEL, "messages": CHAT}).encode())
            headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
            async with aiohttp.ClientSession() as http:
                url = f"{g.url}/v1/chat/completions"
                async with http.post(url, data=body, headers=headers) as resp:
                    assert resp.status == 200, await resp.text()
                    assert (await resp.json())["choices"][0]["message"]["content"]
            assert g.in_flight() == 0

    run(scenario)
