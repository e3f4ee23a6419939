"""End to end with real processes on loopback: fake model servers, one operator per site,
and a gateway at the hub, driven by the official `openai` client.

    fake-server x3 --/metrics--> operator x3 (peer ring) --/signals--> gateway <-- openai
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
from pathlib import Path

import openai
import pytest
import yaml

from tests.gateway.processes import START_S, Proc, http, wait_for

pytestmark = pytest.mark.e2e

SLOTS = {"hub": 8, "west": 8, "east": 4}
CHAT = [{"role": "user", "content": "hello"}]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Grid:
    def __init__(self, tmp: Path) -> None:
        self.procs: list[Proc] = []
        self.fakes: dict[str, Proc] = {}
        ports = {site: _free_port() for site in SLOTS}
        for i, (site, slots) in enumerate(SLOTS.items()):
            self.fakes[site] = self._start(
                ["fake-server", "--model", "m", "--name", site, "--slots", str(slots),
                 "--service-ms", "30", "--tokens", "4", "--seed", str(i)]
            )  # fmt: skip
        for site in SLOTS:
            op = {
                "site": site,
                "listen": f"127.0.0.1:{ports[site]}",
                "peers": [
                    {"site": s, "url": f"http://127.0.0.1:{p}"}
                    for s, p in ports.items()
                    if s != site
                ],
                "providers": [
                    {
                        "name": site,
                        "models": ["m"],
                        "backendUrl": self.fakes[site].url,
                        "maxRunning": SLOTS[site],
                        "metricsConfig": {"endpoint": self.fakes[site].url + "/metrics"},
                    }
                ],
                "scrapeIntervalSeconds": 0.25,
                "peerPollIntervalSeconds": 0.25,
            }
            path = tmp / f"op-{site}.yaml"
            path.write_text(yaml.safe_dump(op))
            proc = Proc(["operator", "--config", str(path)], wait=False)
            self.procs.append(proc)
            url = f"http://127.0.0.1:{ports[site]}"
            wait_for(lambda url=url: http("GET", url + "/healthz")[0] == 200, START_S)
        gw = {
            "listen": "127.0.0.1:0",
            "local_site": "hub",
            "operator": {"url": f"http://127.0.0.1:{ports['hub']}", "poll_interval_s": 0.25},
            "sites": [{"name": s, "backend_url": self.fakes[s].url} for s in SLOTS],
            "models": [{"name": "m"}],
            "health": {"interval_s": 0.25},
        }
        path = tmp / "gateway.yaml"
        path.write_text(yaml.safe_dump(gw))
        self.gateway = self._start(["gateway", "--config", str(path)])
        wait_for(lambda: http("GET", self.gateway.url + "/readyz")[0] == 200)
        wait_for(self._all_live, timeout=15)

    def _start(self, args: list[str]) -> Proc:
        proc = Proc(args)
        self.procs.append(proc)
        return proc

    def _all_live(self) -> bool:
        status = http("GET", self.gateway.url + "/grid/status")[1]
        return all(s["live"] == "live" and s["health"] == "up" for s in status["sites"])

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


@pytest.fixture
def grid(tmp_path: Path) -> Grid:
    g = Grid(tmp_path)
    try:
        yield g  # type: ignore[misc]
    finally:
        g.close()


async def _load(
    url: str, workers: int, per_worker: int, stream: bool, on_done: object = None
) -> tuple[collections.Counter[str], list[BaseException], list[str]]:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    seen: collections.Counter[str] = collections.Counter()
    errors: list[BaseException] = []
    order: list[str] = []

    async def worker() -> None:
        for _ in range(per_worker):
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model="m", messages=CHAT, stream=stream
                )
                if stream:
                    async for _chunk in raw.parse():
                        pass
                site = raw.headers["x-grid-site"]
                seen[site] += 1
                order.append(site)
            except openai.APIError as exc:
                errors.append(exc)
            if callable(on_done):
                await on_done(len(order) + len(errors))

    try:
        await asyncio.gather(*(worker() for _ in range(workers)))
    finally:
        await client.close()
    return seen, errors, order


def test_distribution_follows_capacity(grid: Grid) -> None:
    seen, errors, _ = asyncio.run(_load(grid.gateway.url, 24, 40, stream=False))
    assert errors == []
    total = sum(seen.values())
    for site, share in (("hub", 0.4), ("west", 0.4), ("east", 0.2)):
        assert abs(seen[site] / total - share) < 0.12, seen
    status = http("GET", grid.gateway.url + "/grid/status")[1]
    assert all(s["in_flight"] == 0 for s in status["sites"])


def test_a_site_killed_mid_run_costs_no_client_error(grid: Grid) -> None:
    killed = {"done": False}
    west = grid.fakes["west"]

    async def maybe_kill(done: int) -> None:
        if done >= 150 and not killed["done"]:
            killed["done"] = True
            os.kill(west.popen.pid, signal.SIGKILL)

    _seen, errors, order = asyncio.run(
        _load(grid.gateway.url, 12, 40, stream=True, on_done=maybe_kill)
    )
    assert killed["done"]
    # Requests streaming from west when it died may fail; nothing else does.
    assert len(errors) <= 12, errors
    tail = order[-100:]
    assert "west" not in tail, collections.Counter(tail)
    status = http("GET", grid.gateway.url + "/grid/status")[1]
    assert all(s["in_flight"] == 0 for s in status["sites"])
