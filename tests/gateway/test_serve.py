"""The gateway as a process: SIGHUP reload (good and bad), graceful shutdown."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import yaml

from tests.gateway.processes import http, running, wait_for

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


def _config(path: Path, backend: str, models: list[str], **extra: object) -> None:
    cfg = {
        "listen": "127.0.0.1:0",
        "sites": [{"name": "a", "backend_url": backend}],
        "models": [{"name": m} for m in models],
        "health": {"enabled": False},
        **extra,
    }
    path.write_text(yaml.safe_dump(cfg))


def _models(url: str) -> list[str]:
    _, body, _ = http("GET", url + "/v1/models")
    return [m["id"] for m in body["data"]]


def test_sighup_reloads_a_good_config_and_keeps_the_last_good_one(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.yaml"
    with running(["fake-server", "--model", "m", "--model", "m2", "--service-ms", "1"]) as fake:
        _config(cfg, fake.url, ["m"])
        with running(["gateway", "--config", str(cfg)]) as gw:
            status, _body, headers = http("POST", gw.url + "/v1/chat/completions", CHAT)
            assert status == 200 and headers["x-grid-site"] == "a"
            assert _models(gw.url) == ["m"]

            _config(cfg, fake.url, ["m", "m2"])
            gw.signal(signal.SIGHUP)
            wait_for(lambda: _models(gw.url) == ["m", "m2"])
            status, _, _ = http("POST", gw.url + "/v1/chat/completions", {**CHAT, "model": "m2"})
            assert status == 200

            cfg.write_text("sites: [oops\n")
            gw.signal(signal.SIGHUP)
            wait_for(lambda: http("GET", gw.url + "/grid/status")[1]["reloads"]["error"] == 1)
            assert _models(gw.url) == ["m", "m2"]  # the last good config stays
            status, _, _ = http("POST", gw.url + "/v1/chat/completions", {**CHAT, "model": "m2"})
            assert status == 200
            assert "reload refused" in gw.output()


def test_sigterm_lets_in_flight_requests_finish(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.yaml"
    with running(["fake-server", "--model", "m", "--service-ms", "800"]) as fake:
        _config(cfg, fake.url, ["m"], shutdown_grace_s=10)
        with running(["gateway", "--config", str(cfg)]) as gw:
            result: dict[str, int] = {}

            def slow() -> None:
                result["status"] = http("POST", gw.url + "/v1/chat/completions", CHAT)[0]

            t = threading.Thread(target=slow)
            t.start()
            wait_for(lambda: http("GET", fake.url + "/admin/stats")[1]["running"] == 1)
            gw.signal(signal.SIGTERM)
            t.join(15)
            assert result == {"status": 200}
            assert gw.popen.wait(10) == 0
