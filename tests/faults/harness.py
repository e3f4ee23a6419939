"""Real gridroute processes for fault scenarios, a load driver with a deadline per
request, and the tally every scenario reports (sent, served, refused, failed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from gridroute.fakeserver.answer_log import REQUEST_ID_HEADER, read_answer_log
from tests.faults.links import NetnsLink, ProxyLink

_LISTENING = re.compile(r"listening on (?:https?://)?([0-9A-Za-z.\[\]:-]+:[0-9]+)")
EXE = str(Path(sys.executable).with_name("gridroute"))
MODEL = "m"


class Process:
    """A `gridroute` verb (maybe inside a namespace) and the URL it said it listens on."""

    def __init__(
        self, argv: list[str], timeout: float = 90.0, env: dict[str, str] | None = None
    ) -> None:
        self.popen = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        self.lines: list[str] = []
        self.url = ""
        found = threading.Event()

        def pump() -> None:
            assert self.popen.stdout is not None
            for line in self.popen.stdout:
                self.lines.append(line)
                m = _LISTENING.search(line)
                if m and not self.url:
                    self.url = "http://" + m.group(1)
                    found.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if not found.wait(timeout):
            self.kill()
            raise AssertionError("no 'listening on' line:\n" + "".join(self.lines))

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        self._close_pipe()

    def _close_pipe(self) -> None:
        self._pump.join(5)
        if self.popen.stdout is not None:
            self.popen.stdout.close()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self._close_pipe()


class Loopback:
    """A site on plain loopback, never cut."""

    kind = "loopback"
    bind_host = "127.0.0.1"

    def wrap(self, argv: list[str]) -> list[str]:
        return argv

    def target(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"


ANSWER_LOGS: list[tuple[str, Path]] = []
"""(site, file) of every fake server the running scenario started: where each logs the
request ids it began answering (`--answer-log`). Reset per test by conftest."""
ANSWER_DIR: list[Path] = []
"""The running test's directory for those files (one entry, set by conftest)."""


def fake_site(
    link: NetnsLink | ProxyLink | Loopback, name: str, *extra: str
) -> tuple[Process, str]:
    """A fake model server for `name` behind `link`; returns it and the gateway's URL.
    It logs every answer it begins (`ANSWER_LOGS`), for `check_no_duplicates`."""
    argv = [EXE, "fake-server", "--host", link.bind_host, "--port", "0"]
    argv += ["--model", MODEL, "--name", name, "--service-ms", "20", "--tokens", "4", *extra]
    if ANSWER_DIR:
        log = ANSWER_DIR[0] / f"answers-{name}.log"
        ANSWER_LOGS.append((name, log))
        argv += ["--answer-log", str(log)]
    proc = Process(link.wrap(argv))
    return proc, link.target(proc.port)


def gateway(
    tmp: Path, sites: dict[str, str], env: dict[str, str] | None = None, **extra: Any
) -> Process:
    cfg = {
        "listen": "127.0.0.1:0",
        "local_site": next(iter(sites)),
        "sites": [{"name": n, "backend_url": u} for n, u in sites.items()],
        "models": [{"name": MODEL}],
        "health": {"interval_s": 0.2, "timeout_s": 0.3, "rise": 2, "fall": 2},
        "timeouts": {"connect_timeout_s": 0.3, "local_connect_timeout_s": 0.3, "read_timeout_s": 3},
        "shutdown_drain_s": 0,
        "shutdown_grace_s": 2,
        **extra,
    }
    path = tmp / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return Process([EXE, "gateway", "--config", str(path)], env=env)


def operator(
    tmp: Path,
    site: str,
    fake_url: str,
    peers: dict[str, str],
    port: int = 0,
    env: dict[str, str] | None = None,
) -> Process:
    """A site operator scraping `fake_url` and polling `peers`, on loopback (plain HTTP)."""
    cfg = {
        "site": site,
        "listen": f"127.0.0.1:{port}",
        "scrapeIntervalSeconds": 0.25,
        "peerPollIntervalSeconds": 0.25,
        "providers": [
            {
                "name": site,
                "models": [MODEL],
                "backendUrl": fake_url,
                "maxRunning": 8,
                "metricsConfig": {"endpoint": fake_url + "/metrics", "format": "vllm"},
            }
        ],
        "peers": [{"site": s, "url": u} for s, u in peers.items()],
    }
    path = tmp / f"operator-{site}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return Process([EXE, "operator", "--config", str(path)], env=env)


@contextlib.contextmanager
def running(*procs: Process) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            p.stop()


@dataclass
class Tally:
    """How every request of a scenario ended."""

    name: str
    sent: int = 0
    served: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    max_latency_s: float = 0.0
    by_site: Counter[str] = field(default_factory=Counter)
    served_at: list[tuple[float, str]] = field(default_factory=list)
    """(send time, site) of every served request, for the ordering invariants."""
    reached: dict[str, str] = field(default_factory=dict)
    """{request id: site} of every 200 whose bytes reached the client (served, or a
    stream cut short), by its `x-grid-site`: for `check_no_duplicates`."""
    duplicated: int | None = None
    """Requests started at a second site after their bytes reached the client (None:
    not checked yet)."""
    notes: str = ""

    def row(self, mechanism: str) -> dict[str, Any]:
        return {
            "scenario": self.name,
            "mechanism": mechanism,
            "sent": self.sent,
            "served": self.served,
            "refused": dict(self.refused),
            "failed": dict(self.failed),
            "max_latency_s": round(self.max_latency_s, 3),
            "by_site": dict(self.by_site),
            "duplicated": self.duplicated,
            "ids_checked": len(self.reached),
            "notes": self.notes,
        }


_CODES = {429: "capacity_exhausted", 503: "no_healthy_site", 502: "upstream_unreachable"}
_RETRY_LATER = frozenset({"capacity_exhausted", "no_healthy_site"})
"""Refusals that must carry a Retry-After (the seed's error table)."""


async def one(
    http: aiohttp.ClientSession, url: str, tally: Tally, *, stream: bool, deadline_s: float
) -> None:
    """One request; its ending goes into `tally`. Never raises."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": stream}
    t0 = time.monotonic()
    tally.sent += 1
    rid = f"r{tally.sent}"
    try:
        async with (
            asyncio.timeout(deadline_s),
            http.post(
                url + "/v1/chat/completions", json=body, headers={REQUEST_ID_HEADER: rid}
            ) as r,
        ):
            if r.status == 200 and "x-grid-site" in r.headers:
                tally.reached[rid] = r.headers["x-grid-site"]  # bytes of a site's answer
            raw = await r.read()
            if r.status == 200:
                if stream and not raw.rstrip().endswith(b"data: [DONE]"):
                    tally.failed["stream_truncated"] += 1
                else:
                    tally.served += 1
                    site = r.headers.get("x-grid-site", "?")
                    tally.by_site[site] += 1
                    tally.served_at.append((t0, site))
            else:
                err = json.loads(raw)["error"]  # every refusal is an OpenAI body
                assert set(err) >= {"message", "type", "code"}, err
                expected = _CODES.get(r.status)
                assert expected is None or err["code"] == expected, (r.status, err)
                if err["code"] in _RETRY_LATER:
                    assert r.headers.get("Retry-After", "").isdigit(), dict(r.headers)
                tally.refused[f"{r.status} {err['code']}"] += 1
    except TimeoutError:
        tally.failed["hung_past_deadline"] += 1
    except aiohttp.ClientPayloadError:
        tally.failed["stream_cut_cleanly"] += 1
    except (aiohttp.ClientError, OSError) as exc:
        tally.failed[type(exc).__name__] += 1
    finally:
        tally.max_latency_s = max(tally.max_latency_s, time.monotonic() - t0)


def duplicates(reached: dict[str, str], begun: dict[str, dict[str, float]]) -> list[str]:
    """Every breach of "retries never duplicate a request whose bytes reached the client".

    `reached`: {request id: the site whose answer reached the client}; `begun`: {site:
    {request id: the monotonic time that site began a 200 answer to it}}, from the fake
    servers' answer logs. A breach is an id started at another site *after* the
    answering site began it: the gateway retried once bytes were on their way to the
    client. An id started elsewhere *before* (a site that began, then was lost before
    its headers reached the gateway, and the flow retried) is allowed. A reached id its
    site never logged is reported too: the check must not pass by seeing nothing."""
    out: list[str] = []
    for rid, site in sorted(reached.items()):
        at = begun.get(site, {}).get(rid)
        if at is None:
            out.append(f"{rid}: answered by {site}, which never logged beginning it")
            continue
        for other, ids in sorted(begun.items()):
            later = ids.get(rid)
            if other != site and later is not None and later > at:
                out.append(
                    f"{rid}: its bytes came from {site} (begun at {at:.3f}), yet {other} "
                    f"began it too, {later - at:.3f} s later"
                )
    return out


def answers_begun() -> dict[str, dict[str, float]]:
    """{site: {request id: time begun}} from every answer log of the running scenario."""
    out: dict[str, dict[str, float]] = {}
    for site, path in ANSWER_LOGS:
        for rid, at in read_answer_log(path).items():
            mine = out.setdefault(site, {})
            mine[rid] = min(at, mine.get(rid, at))
    return out


def check_no_duplicates(tally: Tally) -> list[str]:
    """The invariant on a finished scenario (every scenario's report runs it): the
    breaches found, also kept in the tally for its row."""
    assert len(tally.reached) >= tally.served, "served answers missing from `reached`"
    found = duplicates(tally.reached, answers_begun())
    tally.duplicated = len(found)
    return found


def assert_no_duplicates(found: list[str]) -> None:
    assert not found, "retried after bytes reached the client:\n" + "\n".join(found[:20])


async def load(
    url: str,
    tally: Tally,
    until: asyncio.Event,
    *,
    concurrency: int = 4,
    stream: bool = False,
    deadline_s: float = 10.0,
) -> None:
    """Requests at `concurrency` until `until` is set."""
    async with aiohttp.ClientSession() as http:

        async def worker() -> None:
            while not until.is_set():
                await one(http, url, tally, stream=stream, deadline_s=deadline_s)

        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def site_field(url: str, site: str, name: str) -> str | None:
    async with aiohttp.ClientSession() as http, http.get(url + "/grid/status") as r:
        doc = await r.json()
    for s in doc["sites"]:
        if s["site"] == site:
            return None if s[name] is None else str(s[name])
    return None


async def wait_field(url: str, site: str, name: str, want: str, timeout: float = 10.0) -> float:
    """Poll /grid/status until `site`'s `name` shows `want`; returns the monotonic time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await site_field(url, site, name) == want:
            return time.monotonic()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{site} never showed {name} {want}")


async def wait_health(url: str, site: str, want: str, timeout: float = 10.0) -> float:
    return await wait_field(url, site, "health", want, timeout)
