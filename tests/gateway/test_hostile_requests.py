"""Hostile and odd requests at the API: every one gets a bounded JSON 4xx, none a
traceback; routes that OpenAI clients call work as the OpenAI API defines them."""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import openai
import pytest

from gridroute.inbound.client_errors import Kind
from tests.gateway.backends import echo_app, serve
from tests.gateway.harness import MODEL, fake, run, running_grid
from tests.inbound.rawhttp import exchange, post

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners


def _error(answer: Any, status: int) -> dict[str, Any]:
    assert answer is not None and answer.status == status, answer
    assert answer.headers["content-type"].startswith("application/json")
    err = answer.json()["error"]
    assert set(err) >= {"message", "type", "code"}
    return dict(err)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "invalid_json"),
        (b'{"model":' * 50_000, "invalid_json"),
        (b'{"model": "m", "messages": [' + b"{" * 100_000, "invalid_json"),
        (b'{"model": "\xff\xfe", "messages": []}', "invalid_json"),
        (b'{"model": "m", "messages": [', "invalid_json"),
        (b'{"model": 7, "messages": []}', "missing_model"),
        (b"[1, 2, 3]", "missing_model"),
        (b"", "invalid_json"),
    ],
    ids=["deep-array", "deep-object", "deep-tail", "bad-utf8", "truncated", "int", "list", "empty"],
)
def test_bad_bodies_get_400_json(body: bytes, code: str) -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            answer = await exchange(g.url, post("/v1/chat/completions", body))
            assert _error(answer, 400)["code"] == code
            assert g.in_flight() == 0

    run(scenario)


def test_a_one_mib_model_name_is_a_404_not_a_crash() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            body = json.dumps({"model": "x" * (1 << 20), "messages": []}).encode()
            answer = await exchange(g.url, post("/v1/chat/completions", body))
            err = _error(answer, 404)
            assert err["code"] == "model_not_found"
            assert len(answer.body) < 1000  # nothing echoes the megabyte back

    run(scenario)


def test_a_body_over_the_limit_is_413_without_reading_it() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}, limits={"max_body_bytes": 1000}) as g:
            body = json.dumps({"model": MODEL, "pad": "x" * 5000}).encode()
            answer = await exchange(g.url, post("/v1/chat/completions", body))
            assert _error(answer, 413)["code"] == "request_too_large"
            assert g.gw.client_errors.counts[Kind.BODY_TOO_LARGE] == 1

    run(scenario)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/chat/completions", "POST"),
        ("PUT", "/v1/embeddings", "POST"),
        ("DELETE", "/v1/responses", "POST"),
        ("POST", "/v1/models", "GET, HEAD"),
        ("POST", "/readyz", "GET, HEAD"),
    ],
)
def test_a_wrong_method_is_405_json_with_allow(method: str, path: str, allow: str) -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            raw = f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n".encode()
            answer = await exchange(g.url, raw)
            err = _error(answer, 405)
            assert err["type"] == "invalid_request_error"
            assert answer.headers["allow"] == allow

    run(scenario)


@pytest.mark.parametrize("path", ["/", "/v1/chat", "/v2/chat/completions", "/../etc/passwd"])
def test_an_unknown_path_is_404_json(path: str) -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            for method in ("GET", "POST"):
                raw = f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"
                answer = await exchange(g.url, raw.encode())
                assert _error(answer, 404)["code"] == "unknown_url"

    run(scenario)


def test_retrieve_model_works_as_openai_defines_it() -> None:
    async def scenario() -> None:
        async with running_grid(
            {"a": fake("a")}, models=[{"name": MODEL}, {"name": "org/with-slash"}]
        ) as g:
            g.gw.started_at = time.time()
            client = g.client()
            got = await client.models.retrieve(MODEL)
            assert got.id == MODEL and got.object == "model" and got.owned_by == "gridroute"
            slashed = await client.models.retrieve("org/with-slash")
            assert slashed.id == "org/with-slash"
            with pytest.raises(openai.NotFoundError) as info:
                await client.models.retrieve("nope")
            assert info.value.code == "model_not_found"
            listed = {m.id async for m in client.models.list()}
            assert listed == {MODEL, "org/with-slash"}

    run(scenario)


def test_client_grid_headers_never_steer_the_route() -> None:
    async def scenario() -> None:
        seen_a: list[dict[str, Any]] = []
        seen_b: list[dict[str, Any]] = []
        async with (
            serve(echo_app(seen_a)) as url_a,
            serve(echo_app(seen_b)) as url_b,
            running_grid(
                {"a": url_a, "b": url_b},
                local_site="a",
                models=[{"name": MODEL, "policy": "first"}],
            ) as g,
            aiohttp.ClientSession() as http,
        ):
            spoof = {"x-grid-site": "b", "x-grid-backend": "b", "x-grid-route": "b"}
            for _ in range(20):
                async with http.post(
                    g.url + "/v1/chat/completions",
                    json={"model": MODEL, "messages": []},
                    headers=spoof,
                ) as r:
                    assert r.status == 200 and r.headers["x-grid-site"] == "a"
            assert len(seen_a) == 20 and not seen_b
            for got in seen_a:
                assert not any(k.lower().startswith("x-grid-") for k in got["headers"])

    run(scenario)
