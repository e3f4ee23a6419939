"""Worlds gridroute did not build, on real processes (issue 11): sites whose load comes
from clients that bypass the gateway, and a site whose /metrics fails while it serves.

    fake-server x2 --/metrics--> operator x2 (peers) --/signals--> gateway <-- openai
             ^ /admin/external, /admin/metrics
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import yaml

from tests.gateway.processes import START_S, Proc, free_port, http, wait_for

pytestmark = pytest.mark.e2e

SLOTS = {"a": 8, "b": 8}
CHAT = [{"role": "user", "content": "hello"}]


class Grid:
    def __init__(
        self,
        tmp: Path,
        availability: dict[str, object],
        sites: dict[str, int] | None = None,
        workers: int = 1,
        gateway: dict[str, object] | None = None,
    ) -> None:
        self.procs: list[Proc] = []
        self.fakes: dict[str, Proc] = {}
        self.sites = SLOTS if sites is None else sites
        try:
            self._launch(tmp, availability, workers, gateway)
        except BaseException:
            self.close()  # what started before the failure does not outlive the test
            raise

    def _launch(
        self,
        tmp: Path,
        availability: dict[str, object],
        workers: int,
        gateway: dict[str, object] | None,
    ) -> None:
        ports = {site: free_port() for site in self.sites}
        for i, (site, slots) in enumerate(self.sites.items()):
            self.fakes[site] = self._start(
                ["fake-server", "--model", "m", "--name", site, "--slots", str(slots),
                 "--service-ms", "40", "--tokens", "4", "--seed", str(i)]
            )  # fmt: skip
        for site in self.sites:
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
                        "maxRunning": self.sites[site],
                        "metricsConfig": {
                            "endpoint": self.fakes[site].url + "/metrics",
                            "staleMetricsSeconds": 30,
                        },
                    }
                ],
                "scrapeIntervalSeconds": 0.25,
                "peerPollIntervalSeconds": 0.25,
            }
            path = tmp / f"op-{site}.yaml"
            path.write_text(yaml.safe_dump(op))
            self.procs.append(Proc(["operator", "--config", str(path)], wait=False))
            url = f"http://127.0.0.1:{ports[site]}"
            wait_for(lambda url=url: http("GET", url + "/healthz")[0] == 200, START_S)
        gw = {
            "listen": "127.0.0.1:0",
            "local_site": "a",
            "operator": {"url": f"http://127.0.0.1:{ports['a']}", "poll_interval_s": 0.25},
            "sites": [{"name": s, "backend_url": self.fakes[s].url} for s in self.sites],
            "models": [{"name": "m"}],
            "workers": workers,
            "health": {"interval_s": 0.25},
            "availability": {"freshness_window_ms": 1500, "lookback_ms": 1500, **availability},
            **(gateway or {}),  # more gateway config (e.g. `prefix_affinity`)
        }
        path = tmp / "gateway.yaml"
        path.write_text(yaml.safe_dump(gw))
        self.gateway = self._start(["gateway", "--config", str(path)])
        wait_for(lambda: http("GET", self.gateway.url + "/readyz")[0] == 200)
        wait_for(lambda: self.live() == dict.fromkeys(self.sites, "live"), timeout=15)

    def _start(self, args: list[str]) -> Proc:
        proc = Proc(args)
        self.procs.append(proc)
        return proc

    def status(self) -> dict[str, dict[str, object]]:
        body = http("GET", self.gateway.url + "/grid/status")[1]
        return {s["site"]: s for s in body["sites"]}

    def external(self) -> float:
        """In-flight the gateway reads as outside load (no gateway reported sending it)."""
        return float(http("GET", self.gateway.url + "/grid/status")[1]["external_in_flight"])

    def live(self) -> dict[str, object]:
        return {site: s["live"] for site, s in self.status().items()}

    def admin(self, site: str, verb: str, body: dict[str, object]) -> None:
        status, answer, _ = http("POST", f"{self.fakes[site].url}/admin/{verb}", body)
        assert status == 200, answer

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def __enter__(self) -> Grid:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _load(
    url: str, workers: int, per_worker: int, distinct: bool = False
) -> tuple[collections.Counter[str], int]:
    """`workers` clients of the official openai client, `per_worker` requests each, and
    where each answer was served. `distinct`: every request its own prompt (many users'
    conversations); otherwise all send the same one. Both are shorter than one prefix
    block, so prefix affinity never keeps them on a site (docs/prefix-affinity.md)."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    seen: collections.Counter[str] = collections.Counter()
    errors = 0

    async def worker(w: int) -> None:
        nonlocal errors
        for i in range(per_worker):
            messages = [{"role": "user", "content": f"hello {w}-{i}"}] if distinct else CHAT
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model="m", messages=messages
                )
                seen[raw.headers["x-grid-site"]] += 1
            except openai.APIError:
                errors += 1

    try:
        await asyncio.gather(*(worker(w) for w in range(workers)))
    finally:
        await client.close()
    return seen, errors


def _holds(url: str) -> int:
    """Requests the gateway held in its admission queue (selections with path `hold`)."""
    total = http("GET", url + "/grid/status")[1]["selections"]["total"]
    return sum(n for key, n in _flat(total) if "hold" in key)


def _flat(value: object, prefix: str = "") -> list[tuple[str, int]]:
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _flat(v, f"{prefix}/{k}")]
    return [(prefix, int(value))] if isinstance(value, int | float) else []


@pytest.fixture
def queued_grid(tmp_path: Path) -> Iterator[Grid]:
    # The admission queue on: a gateway that reads its fair share as the 0.05 floor holds
    # every request while both sites have free slots (issue 11).
    with Grid(tmp_path, {"max_queue_ms": 400}) as g:
        yield g


def test_external_load_does_not_starve_a_lone_gateway(queued_grid: Grid) -> None:
    g = queued_grid
    for site in SLOTS:
        g.admin(site, "external", {"in_flight": 5})  # 3 free slots left at each site
    wait_for(lambda: all((s["rho_reported"] or 0) > 0.5 for s in g.status().values()), timeout=10)
    seen, errors = asyncio.run(_load(g.gateway.url, 4, 30))
    assert errors == 0
    total = sum(seen.values())
    assert total == 120
    # The seed's two-site rule keeps each share within 10-90 %.
    assert min(seen["a"], seen["b"]) >= 0.1 * total, seen
    # Four clients, six free slots: nothing had to wait at the gateway.
    assert _holds(g.gateway.url) <= 4, _holds(g.gateway.url)
    # The gateway knows the load was not its own: its share of the room is all of it.
    body = http("GET", g.gateway.url + "/grid/status")[1]
    assert body["external_in_flight"] >= 8, body["external_in_flight"]
    assert all(s["share"] == 1.0 for s in body["sites"]), body["sites"]


@pytest.fixture
def grid(tmp_path: Path) -> Iterator[Grid]:
    with Grid(tmp_path, {}) as g:
        yield g


def test_a_site_whose_metrics_fail_while_it_serves_goes_silent_then_returns(grid: Grid) -> None:
    g = grid
    g.admin("b", "metrics", {"status": 500})
    # Its operator keeps publishing readiness (staleMetricsSeconds 30) but no load: the
    # gateway judges it silent one window after its last load, not 30 s later.
    wait_for(lambda: g.live()["b"] == "silent", timeout=8)
    seen, errors = asyncio.run(_load(g.gateway.url, 2, 20))
    assert errors == 0 and seen == {"a": 40}, seen
    # The backend kept serving all along.
    status, _, _ = http(
        "POST",
        g.fakes["b"].url + "/v1/chat/completions",
        {"model": "m", "messages": CHAT},
    )
    assert status == 200
    g.admin("b", "metrics", {"status": None})
    wait_for(lambda: g.live()["b"] == "live", timeout=10)
    seen, errors = asyncio.run(_load(g.gateway.url, 8, 20))
    assert errors == 0 and seen["b"] > 0, seen


@pytest.fixture
def four_sites(tmp_path: Path) -> Iterator[Grid]:
    # Issue 23's first world: four equal sites, a nearly full and b full from outside, and
    # a gateway of four workers (four gateway identities that report to each other).
    with Grid(tmp_path, {}, sites=dict.fromkeys("abcd", 24), workers=4) as g:
        yield g


def test_a_site_nearly_full_from_outside_draws_nothing_while_two_sites_are_free(
    four_sites: Grid,
) -> None:
    g = four_sites
    g.admin("a", "external", {"in_flight": 20})
    g.admin("b", "external", {"in_flight": 24})
    # Only until the operators have read it: how fast the gateways learn that the load is
    # not theirs is part of what is tested.
    wait_for(lambda: (g.status()["b"]["rho_reported"] or 0) >= 1.0, timeout=10)
    # Held still for a freshness window (1.5 s here), the difference is outside load: the
    # workers learn it in seconds (smoothed alone, tau 10 s, they read 7 of 44 two
    # seconds in and sent a 4 % of the requests). Read several times: each read is
    # answered by whichever worker accepts it, and every worker must have learned it
    # (once, in a full suite run with one read, the site drew 24 of 384; not reproduced
    # in 16 runs alone or beside busy processes, so the cause is not shown).
    wait_for(lambda: min(g.external() for _ in range(8)) >= 40, timeout=6)
    seen, errors = asyncio.run(_load(g.gateway.url, 32, 12))
    assert errors == 0
    assert sum(seen.values()) == 384
    # The seed rule's pressure tiers send the nearly full site none while c and d (48 free
    # slots for 32 clients) have room; b is full. A request or two may land there while
    # the workers' first polls are still on their way.
    assert seen["b"] == 0, seen
    assert seen["a"] <= 4, seen


@pytest.fixture
def large_and_small(tmp_path: Path) -> Iterator[Grid]:
    # Issue 23's second world: a large idle site beside a small one nearly full from
    # outside.
    with Grid(tmp_path, {}, sites={"a": 48, "b": 8}) as g:
        yield g


@pytest.mark.parametrize(
    "distinct", [False, True], ids=["one-short-prompt", "distinct-short-prompts"]
)
def test_a_small_nearly_full_site_beside_a_large_idle_one_keeps_the_two_site_share(
    large_and_small: Grid, distinct: bool
) -> None:
    g = large_and_small
    g.admin("b", "external", {"in_flight": 6})  # 2 of b's 8 slots left
    wait_for(lambda: (g.status()["b"]["rho_reported"] or 0) >= 0.7, timeout=10)
    wait_for(lambda: g.external() >= 5, timeout=6)
    # As a new user tries it (every client resends one short prompt), and with a short
    # prompt of its own per request: both are shorter than one prefix block, so prefix
    # affinity (on, the default) has nothing to keep them on and the pressure pick sets
    # the shares (one prompt for all took 3 of 640 when a partial block was matched).
    seen, errors = asyncio.run(_load(g.gateway.url, 8, 80, distinct=distinct))
    print(f"two-site share, {'distinct prompts' if distinct else 'one prompt'}: {dict(seen)}")
    assert errors == 0
    total = sum(seen.values())
    assert total == 640
    # The seed's two-site rule: capacity over 1 + rho, each share within 10-90 %, the
    # capacity raised to the explore floor (a quarter of the largest: b weighs 12). At
    # b's rho of 0.75-0.9 and a's near 0 that is 12 / 1.8 against 48 / 1.05, about
    # 12.7 %; 8 clients at that share hold about 1 request at b, under its 2 free slots.
    # Measured: 81-85 of 640. Bounds: three standard errors of 640 independent draws
    # either side (the gateway keeps the shares over the stream, closer than that).
    assert 0.09 * total <= seen["b"] <= 0.165 * total, seen
    # And never past b's room: no request of ours found its slots all busy.
    stats = http("GET", g.fakes["b"].url + "/admin/stats")[1]
    assert stats["overshoot"] == 0, stats


@pytest.fixture
def two_equal(tmp_path: Path) -> Iterator[Grid]:
    # Issue 23's third world: two equal sites, lightly loaded.
    with Grid(tmp_path, {}, sites={"a": 16, "b": 16}) as g:
        yield g


def test_two_equal_lightly_loaded_sites_split_evenly(two_equal: Grid) -> None:
    g = two_equal
    seen, errors = asyncio.run(_load(g.gateway.url, 4, 100, distinct=True))
    assert errors == 0
    total = sum(seen.values())
    assert total == 400
    # Equal capacity and load: the two-site rule's shares are 50/50, and the gateway keeps
    # them over the stream rather than drawing each request independently (independent
    # draws wander 2.5 points a run at 400 requests). The bound, 2 points;
    # measured: 200, 200 and 201 of 400.
    assert abs(seen["a"] - 200) <= 8, seen
