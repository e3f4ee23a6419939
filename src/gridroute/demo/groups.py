"""The selection-group demos of examples/groups/, on real processes.

    gridroute overlay demo round-robin   one gateway, three providers in one group,
                                         roundRobin: 60 new sessions split 20/20/20
                                         in repeating A, B, C order
    gridroute overlay demo drain         draining (existing_only), retry within the
                                         group, fall-through to group 1 when group 0
                                         dies, recovery to group 0

Each starts fake model servers (`gridroute fake-server`), the control plane's
renderer (`gridroute control`, serving `/overlay`) and one gateway (`gridroute
gateway`, polling that URL), sends its requests, prints what each one got and
returns the rows so the e2e tests assert on exactly what a person sees.
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gridroute.control.atomicfile import write_atomic
from gridroute.control.overlay import with_drain
from gridroute.core.groups import Admission
from gridroute.grid.ports import free_ports
from gridroute.grid.supervisor import Child, Supervisor

MODEL = "demo-model"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "groups"
START_TIMEOUT_S = 90.0
"""How long a process may take to say it listens (generous: shared CI machines)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One request as the client saw it."""

    phase: str
    session: str
    status: int
    provider: str
    group: str
    step: str
    affinity: str
    revision: str


@dataclass
class DemoResult:
    rows: list[Row] = field(default_factory=list)
    digest_before: str | None = None
    digest_after: str | None = None
    control_calls_before: int = 0
    control_calls_after: int = 0
    gateway_fetches_before: int = 0
    gateway_fetches_after: int = 0

    def split(self, phase: str | None = None) -> Counter[str]:
        return Counter(r.provider for r in self.rows if phase is None or r.phase == phase)


def _get(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _post(url: str, session: str) -> tuple[int, dict[str, str]]:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json", "x-session-id": session},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}


def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"demo: {what} did not happen within {timeout_s:g} s")
        time.sleep(0.05)


class _Demo:
    """The processes of one demo and the calls it makes to them."""

    def __init__(self, workdir: Path, sites: list[str], quiet: bool) -> None:
        self.dir = workdir
        self.sup = Supervisor(workdir / "logs")
        self.sites = sites
        self.ports = dict(zip(sites, free_ports(len(sites)), strict=True))
        self.fakes: dict[str, Child] = {}
        self.quiet = quiet
        self.gateway_url = ""
        self.control_url = ""
        self.input = workdir / "render-input.yaml"

    def say(self, line: str) -> None:
        if not self.quiet:
            print(line, flush=True)

    def start_fakes(self, sites: list[str]) -> None:
        children = [self._spawn_fake(s) for s in sites]
        self.sup.wait_announced(children, START_TIMEOUT_S)

    def _spawn_fake(self, site: str) -> Child:
        child = self.sup.start(
            f"fake-{site}",
            [
                "fake-server",
                "--port",
                str(self.ports[site]),
                "--model",
                MODEL,
                "--name",
                site,
                "--service-ms",
                "1",
                "--tokens",
                "2",
            ],
        )
        self.fakes[site] = child
        return child

    def kill_fake(self, site: str) -> None:
        """SIGKILL: the provider is gone at once (connections refused from now on)."""
        child = self.fakes.pop(site)
        child.popen.kill()
        child.popen.wait()
        self.sup.children.remove(child)

    def start(self, example: str, gateway: dict[str, Any], control_interval_s: float) -> None:
        self.start_fakes(self.sites)
        self.input.write_text((EXAMPLES / example).read_text())
        control = self.sup.start(
            "control",
            [
                "control",
                "--input",
                str(self.input),
                "--listen",
                "127.0.0.1:0",
                "--interval-s",
                str(control_interval_s),
            ],
        )
        self.sup.wait_announced([control], START_TIMEOUT_S)
        assert control.url is not None
        self.control_url = control.url
        cfg = {
            "listen": "127.0.0.1:0",
            "sites": [
                {"name": s, "backend_url": f"http://127.0.0.1:{self.ports[s]}"} for s in self.sites
            ],
            "models": [{"name": MODEL, "policy": "first"}],
            **gateway,
        }
        cfg["overlay"] = {"url": self.control_url + "/overlay", **gateway.get("overlay", {})}
        path = self.dir / "gateway.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        gw = self.sup.start("gateway", ["gateway", "--config", str(path)])
        self.sup.wait_announced([gw], START_TIMEOUT_S)
        assert gw.url is not None
        self.gateway_url = gw.url
        _until(lambda: self.overlay()["revision"] is not None, 30, "the gateway's first overlay")
        _until(lambda: self.status()["ready"], 30, "gateway readiness")

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = _get(self.gateway_url + "/grid/status")
        return result

    def overlay(self) -> dict[str, Any]:
        result: dict[str, Any] = self.status()["overlay"]
        return result

    def control_calls(self) -> int:
        return int(_get(self.control_url + "/stats")["overlay_requests"])

    def request(self, phase: str, session: str) -> Row:
        status, h = _post(self.gateway_url, session)
        row = Row(
            phase,
            session,
            status,
            h.get("x-grid-provider", "-"),
            h.get("x-grid-group", "-"),
            h.get("x-grid-step", "-"),
            h.get("x-grid-affinity", "-"),
            h.get("x-grid-overlay-revision", "-"),
        )
        self.say(
            f"  {phase:<10} {session:<10} {status} {row.provider:<6} group {row.group:<2} "
            f"{row.step:<13} affinity {row.affinity:<12} revision {row.revision}"
        )
        return row


@contextmanager
def _demo(workdir: Path | None, sites: list[str], quiet: bool) -> Iterator[_Demo]:
    with tempfile.TemporaryDirectory(prefix="gridroute-groups-") as tmp:
        demo = _Demo(workdir or Path(tmp), sites, quiet)
        try:
            yield demo
        finally:
            demo.sup.stop_all()


def round_robin(n: int = 60, workdir: Path | None = None, quiet: bool = False) -> DemoResult:
    """Three equally eligible providers, one group, roundRobin, `n` new sessions."""
    out = DemoResult()
    with _demo(workdir, ["a", "b", "c"], quiet) as d:
        # The gateway polls the overlay every 60 s: the measured window sees no poll,
        # so any control-plane call during it would be the request path's.
        d.start(
            "round-robin.input.yaml",
            {"health": {"enabled": False}, "overlay": {"poll_interval_s": 60}},
            control_interval_s=1.0,
        )
        ov = d.overlay()
        out.digest_before = ov["digest"]
        out.gateway_fetches_before = ov["fetches"]
        out.control_calls_before = d.control_calls()
        d.say(f"overlay revision {ov['revision']} digest {ov['digest'][:16]}; {n} new sessions:")
        for i in range(n):
            out.rows.append(d.request("measured", f"s-{i:03d}"))
        ov = d.overlay()
        out.digest_after = ov["digest"]
        out.gateway_fetches_after = ov["fetches"]
        out.control_calls_after = d.control_calls()
    if not quiet:
        split = out.split()
        print("\nprovider  requests")
        for p in sorted(split):
            print(f"{p:<9} {split[p]:>8}")
        seq = [r.provider.split("/")[0].upper() for r in out.rows]
        print("sequence:", " ".join(seq))
        print(
            f"overlay digest unchanged: {out.digest_before == out.digest_after}; "
            f"control-plane calls during the window: "
            f"{out.control_calls_after - out.control_calls_before} (gateway overlay reads: "
            f"{out.gateway_fetches_after - out.gateway_fetches_before})"
        )
    return out


def drain_and_fall_through(workdir: Path | None = None, quiet: bool = False) -> DemoResult:
    """Group 0 = a, b, c (same site), group 1 = d (cross-region), roundRobin.

    Phases: steady; c drained (existing_only: its bound session stays, new ones go to
    a and b); a killed (requests that pick it retry in group 0 on b); b killed too
    (group 0 dead: fall through to d); a and b restarted (back to group 0).
    """
    out = DemoResult()
    with _demo(workdir, ["a", "b", "c", "d"], quiet) as d:
        d.start(
            "drain.input.yaml",
            {
                # Probes take about 1.5 s to mark a dead provider down, so the requests
                # right after a kill meet it alive in the overlay and retry in the group.
                "health": {"interval_s": 0.5, "timeout_s": 0.5, "rise": 2, "fall": 3},
                "timeouts": {"local_connect_timeout_s": 0.5, "connect_timeout_s": 0.5},
                "overlay": {"poll_interval_s": 0.2, "max_attempts": 3},
            },
            control_interval_s=0.2,
        )

        def run(phase: str, sessions: list[str]) -> None:
            for s in sessions:
                out.rows.append(d.request(phase, s))

        def revision() -> int:
            return int(d.overlay()["revision"])

        def health(site: str) -> str:
            return next(str(s["health"]) for s in d.status()["sites"] if s["site"] == site)

        d.say("steady: group 0 = a, b, c")
        run("steady", ["s-1", "s-2", "pin-c", "s-3", "s-4", "s-5"])
        pinned = next(r.provider for r in out.rows if r.session == "pin-c")

        d.say(f"drain c (existing_only); session pin-c is bound to {pinned}")
        before = revision()
        data = with_drain(d.input, "c/c", Admission.EXISTING_ONLY)
        write_atomic(d.input, yaml.safe_dump(data, sort_keys=False))
        _until(lambda: revision() > before, 20, "the drained overlay")
        run("drain", ["pin-c", "n-1", "n-2", "n-3", "n-4", "pin-c"])

        d.say("a dies: requests that pick a retry within group 0")
        d.kill_fake("a")
        run("a-dead", [f"r-{i}" for i in range(4)])

        d.say("b dies too: group 0 has nothing new-admitting left, fall through to group 1")
        d.kill_fake("b")
        run("b-dead", [f"f-{i}" for i in range(3)])
        _until(lambda: health("a") == "down" and health("b") == "down", 20, "a and b down")
        run("b-dead", [f"g-{i}" for i in range(3)])

        d.say("a and b come back: group 0 again once probes pass")
        d.start_fakes(["a", "b"])
        _until(lambda: health("a") == "up" and health("b") == "up", 20, "a and b up")
        run("recovered", [f"k-{i}" for i in range(4)])
    if not quiet:
        print("\nphase      where the requests went (provider@group x count)")
        for phase in dict.fromkeys(r.phase for r in out.rows):
            got = Counter(f"{r.provider}@{r.group}" for r in out.rows if r.phase == phase)
            print(f"{phase:<10} " + ", ".join(f"{k} x{n}" for k, n in sorted(got.items())))
    return out


def main(which: str) -> int:
    if which == "round-robin":
        round_robin()
    elif which == "drain":
        drain_and_fall_through()
    else:
        print(f"unknown demo {which!r}: round-robin or drain")
        return 2
    return 0
