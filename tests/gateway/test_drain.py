"""SIGTERM drains: /readyz 503 at once, new requests 503 `shutting_down` with
Retry-After and Connection: close (kept-alive clients are told, never reset), the
stream in flight runs to its end, then the process exits 0. Real processes."""

from __future__ import annotations

import http.client
import json
import signal
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.gateway.processes import http as call
from tests.gateway.processes import running, wait_for

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
KEPT_ALIVE = 16


def _post(conn: http.client.HTTPConnection, body: dict[str, object]) -> http.client.HTTPResponse:
    conn.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    return conn.getresponse()


@pytest.mark.parametrize("listener", ["aiohttp", "dataplane"])  # its later requests splice
def test_sigterm_drains_without_resetting_kept_alive_clients(tmp_path: Path, listener: str) -> None:
    cfg = tmp_path / "gateway.yaml"
    fake_args = ["fake-server", "--model", "m", "--service-ms", "1", "--per-token-ms", "150"]
    with running(fake_args) as fake:
        cfg.write_text(
            yaml.safe_dump(
                {
                    "listen": "127.0.0.1:0",
                    "sites": [{"name": "a", "backend_url": fake.url}],
                    "models": [{"name": "m"}],
                    "health": {"enabled": False},
                    "shutdown_drain_s": 3,
                    "shutdown_grace_s": 20,
                    "listener": {"dataplane": listener == "dataplane"},
                }
            )
        )
        with running(["gateway", "--config", str(cfg)]) as gw:
            parts = urlsplit(gw.url)
            conns = [
                http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
                for _ in range(KEPT_ALIVE)
            ]
            for conn in conns:
                r = _post(conn, {**CHAT, "max_tokens": 1})
                assert r.status == 200
                r.read()
                assert not r.will_close
            streamed: dict[str, object] = {}

            def stream() -> None:
                conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
                r = _post(conn, {**CHAT, "stream": True, "max_tokens": 30})
                streamed["status"] = r.status
                streamed["body"] = r.read().decode()
                conn.close()

            t = threading.Thread(target=stream)
            t.start()
            wait_for(lambda: call("GET", fake.url + "/admin/stats")[1]["running"] == 1)
            gw.signal(signal.SIGTERM)
            wait_for(lambda: call("GET", gw.url + "/readyz")[0] == 503, timeout=2)
            for conn in conns:  # every kept-alive connection gets an answer, not a reset
                r = _post(conn, CHAT)
                body = json.loads(r.read())
                assert r.status == 503
                assert body["error"]["code"] == "shutting_down"
                assert r.getheader("Retry-After") == "1"
                assert r.getheader("Connection") == "close"
                conn.close()
            t.join(20)
            assert streamed["status"] == 200
            text = str(streamed["body"])
            assert text.rstrip().endswith("data: [DONE]")
            assert text.count("data: ") >= 30  # it outlived the 3 s drain (30 x 150 ms)
            assert gw.popen.wait(20) == 0
