"""Optional API keys: Bearer keys from `auth.api_keys_file`, never logged."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web

from gridroute.gateway.api_keys import ApiKeys, KeysFileError
from gridroute.gateway.app import create_metrics_app
from tests.gateway.harness import MODEL, fake, run, running_grid

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

GOOD = "sk-good-0123456789abcdef"
WRONG = "sk-wrong-0123456789abcdef"
CHAT = [{"role": "user", "content": "hi"}]


def _keys(tmp_path: Path) -> str:
    path = tmp_path / "keys"
    path.write_text(f"# the team's keys\n\n{GOOD}\nsk-other-0123456789abcdef\n")
    return str(path)


def test_only_a_listed_bearer_key_passes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        auth = {"api_keys_file": _keys(tmp_path)}
        async with running_grid({"a": fake("a")}, auth=auth) as g:
            good = g.client(api_key=GOOD)
            got = await good.chat.completions.create(model=MODEL, messages=CHAT)
            assert got.choices
            assert (await good.models.retrieve(MODEL)).id == MODEL
            wrong = g.client(api_key=WRONG)
            with pytest.raises(openai.AuthenticationError) as info:
                await wrong.chat.completions.create(model=MODEL, messages=CHAT)
            assert info.value.code == "invalid_api_key"
            with pytest.raises(openai.AuthenticationError):
                await wrong.models.list()
            async with aiohttp.ClientSession() as http:
                for path in ("/v1/models", "/grid/status", "/dashboard"):
                    async with http.get(g.url + path) as r:
                        assert r.status == 401
                        assert r.headers["WWW-Authenticate"] == "Bearer"
                        assert (await r.json())["error"]["code"] == "invalid_api_key"
                for path in ("/healthz", "/readyz"):
                    async with http.get(g.url + path) as r:
                        assert r.status in (200, 503)
                headers = {"Authorization": f"Basic {GOOD}"}
                async with http.get(g.url + "/v1/models", headers=headers) as r:
                    assert r.status == 401  # a key counts only as a Bearer token
                # the operator listener's status pages need no key
                runner = web.AppRunner(create_metrics_app(g.gw))
                await runner.setup()
                await web.TCPSite(runner, "127.0.0.1", 0).start()
                try:
                    port = runner.addresses[0][1]
                    async with http.get(f"http://127.0.0.1:{port}/grid/status") as r:
                        assert r.status == 200
                finally:
                    await runner.cleanup()

    with caplog.at_level(logging.DEBUG):
        run(scenario)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert WRONG not in text and GOOD not in text


def test_a_keys_file_error_names_the_line_not_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "keys"
    bad.write_text(f"{GOOD}\nshort\n")
    with pytest.raises(KeysFileError) as info:
        ApiKeys.load(bad)
    assert f"{bad}:2" in str(info.value) and "short" not in str(info.value)
    with pytest.raises(KeysFileError):
        ApiKeys.load(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(KeysFileError):
        ApiKeys.load(empty)
    keys = ApiKeys.load(_keys(tmp_path))
    assert len(keys) == 2 and keys.allows_key(GOOD) and not keys.allows_key(GOOD[:-1])
