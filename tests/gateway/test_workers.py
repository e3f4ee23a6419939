"""`workers: 2` as a real process: both workers answer on one port (SO_REUSEPORT), and
each is a whole gateway: its own accounting and its own share for the fair-share rule.

    fake-server --/metrics--> operator --/signals--> gateway (2 workers) <-- 16 clients
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.gateway.processes import START_S, Proc, free_port, http, running, wait_for

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
HELD = 16


def _status(url: str) -> dict[str, Any]:
    status, body, _ = http("GET", url + "/grid/status")  # a new connection each time
    assert status == 200
    return body  # type: ignore[no-any-return]


def test_two_workers_share_the_port_and_each_counts_as_one_gateway(tmp_path: Path) -> None:
    with running(
        ["fake-server", "--model", "m", "--name", "hub", "--slots", "64", "--service-ms", "4000"]
    ) as fake:
        op_port = free_port()
        op = {
            "site": "hub",
            "listen": f"127.0.0.1:{op_port}",
            "providers": [
                {
                    "name": "hub",
                    "models": ["m"],
                    "backendUrl": fake.url,
                    "maxRunning": 64,
                    "metricsConfig": {"endpoint": fake.url + "/metrics"},
                }
            ],
            "scrapeIntervalSeconds": 0.1,
        }
        (tmp_path / "op.yaml").write_text(yaml.safe_dump(op))
        operator = Proc(["operator", "--config", str(tmp_path / "op.yaml")], wait=False)
        try:
            op_url = f"http://127.0.0.1:{op_port}"
            wait_for(lambda: http("GET", op_url + "/healthz")[0] == 200, START_S)
            gw_cfg = {
                "listen": "127.0.0.1:0",  # the parent reserves one port for both workers
                "workers": 2,
                "local_site": "hub",
                "operator": {"url": op_url, "poll_interval_s": 0.1},
                "sites": [{"name": "hub", "backend_url": fake.url}],
                "models": [{"name": "m"}],
                # Both workers report their own load, so nothing is external; a short
                # time constant lets the estimate of external load settle at once.
                "availability": {"external_load_tau_ms": 1},
                "health": {"enabled": False},
            }
            (tmp_path / "gw.yaml").write_text(yaml.safe_dump(gw_cfg))
            with running(["gateway", "--config", str(tmp_path / "gw.yaml")]) as gw:
                wait_for(lambda: _status(gw.url)["sites"][0]["measured"])
                # Both workers answer on the one port: new connections reach both pids.
                pids: set[int] = set()
                for _ in range(200):
                    pids.add(_status(gw.url)["worker"]["pid"])
                    if len(pids) == 2:
                        break
                assert len(pids) == 2, pids
                assert gw.popen.pid not in pids  # the parent only forwards signals

                # HELD slow requests, each on its own connection: the kernel spreads them.
                results: list[int] = []
                threads = [
                    threading.Thread(
                        target=lambda: results.append(
                            http("POST", gw.url + "/v1/chat/completions", CHAT, timeout=30)[0]
                        )
                    )
                    for _ in range(HELD)
                ]
                for t in threads:
                    t.start()
                wait_for(lambda: http("GET", fake.url + "/admin/stats")[1]["running"] == HELD)

                # Each worker counts only its own requests and, once a poll shows all
                # HELD running, holds own / HELD of the site's polled in-flight.
                seen: dict[int, dict[str, Any]] = {}

                def settled() -> bool:
                    body = _status(gw.url)
                    (site,) = body["sites"]
                    seen[body["worker"]["pid"]] = site
                    if len(seen) < 2:
                        return False
                    return all(
                        s["share"] is not None
                        and s["in_flight"] > 0
                        and s["share"] == pytest.approx(s["in_flight"] / HELD, abs=1e-3)
                        for s in seen.values()
                    )

                wait_for(settled, timeout=3.5)
                assert sum(s["in_flight"] for s in seen.values()) == HELD
                assert all(s["share"] < 1.0 for s in seen.values())
                for t in threads:
                    t.join(30)
                assert results == [200] * HELD
        finally:
            operator.stop()
