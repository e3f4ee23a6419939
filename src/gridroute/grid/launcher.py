"""`LocalGrid`: a whole multi-site grid as real processes on 127.0.0.1.

    with LocalGrid(GridSpec()) as grid:      # certs, fake sites, operators, gateway(s)
        grid.gateway_url                      # send OpenAI traffic here
        grid.partition("east"); grid.restore("east")

Start order follows the data flow, and each step waits for the one before to answer:
certificates -> one fake model server per site (port 0, announced) -> one operator
per site on pre-chosen ports, polling every other site over mutual TLS (`/healthz`
through mTLS) -> gateways (port 0, `/readyz`) -> every site ready, live and measured
in the gateway's `/grid/status`, so traffic sent after `start` spreads at once.
Everything lives in one temporary directory (certs, configs, one log per process),
removed on stop unless `keep` is set; any failure stops what was started and raises
`GridError` naming the process and the tail of its log.

A **partition** of a site, as the demo shows it: its backend refuses new requests at
once (503, which the gateway retries on another site, standing in for the connect
timeout a real partition costs), its operator is frozen with SIGSTOP (so its peers'
polls time out), and once the requests in service there have finished its metrics
stall too. The gateway sees the site go silent within the freshness window and routes
around it; `restore` undoes all three.
"""

from __future__ import annotations

import functools
import json
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from gridroute.grid.layout import (
    Addresses,
    GridSpec,
    fake_server_args,
    gateway_config,
    operator_config,
    operator_url,
)
from gridroute.grid.nats_server import READER, NatsCluster, gateway_user
from gridroute.grid.ports import free_ports
from gridroute.grid.supervisor import Child, ProcessError, Supervisor
from gridroute.operator.certs import init_certs

GRID_ENV = "GRIDROUTE_GRID"
"""Set to the grid's directory in every child's environment, so a leftover process of a
grid can always be found (tests check that none survive)."""
START_TIMEOUT_S = 60.0
"""Whole start-up budget: 7 Python processes importing on a busy 2-core machine."""


class GridError(RuntimeError):
    """The local grid could not start or lost a process; the message says which and why."""


def http_json(
    url: str, body: Any = None, timeout_s: float = 2.0, context: ssl.SSLContext | None = None
) -> Any:
    """GET (or POST `body` as JSON) and decode the JSON answer; raises on HTTP errors."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s, context=context) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as err:
        err.close()  # it holds the answer's socket; callers that catch it never read it
        raise
    return json.loads(raw) if raw.strip() else None


class LocalGrid:
    """Starts, partitions and stops one local grid; a context manager."""

    def __init__(
        self,
        spec: GridSpec | None = None,
        workdir: Path | None = None,
        keep: bool = False,
        keep_failed: bool = False,
    ) -> None:
        """`keep`: never delete a temporary work dir; `keep_failed`: keep it (certificates,
        `logs/`) once the grid failed to start or a process of it died."""
        self.spec = spec or GridSpec()
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gridroute-grid-"))
        self.keep = keep
        self.keep_failed = keep_failed
        self.procs = Supervisor(self.workdir / "logs", env={GRID_ENV: str(self.workdir)})
        self.fakes: dict[str, Child] = {}
        self.operators: dict[str, Child] = {}
        self.gateways: list[Child] = []
        self.operator_ports: dict[str, int] = {}
        self.gateway_metrics_ports: list[int] = []
        self.partitioned: set[str] = set()
        self.nats: NatsCluster | None = None

    # --- addresses ------------------------------------------------------------------

    @property
    def certs(self) -> Path:
        return self.workdir / "certs"

    @property
    def gateway_url(self) -> str:
        """The first gateway's base URL (append `/v1/...`)."""
        return self.gateway_urls[0]

    @property
    def gateway_urls(self) -> list[str]:
        return [str(g.url) for g in self.gateways]

    @property
    def gateway_metrics_urls(self) -> list[str]:
        """Each gateway's `/metrics` base URL (empty unless `spec.gateway_metrics`)."""
        return [f"http://127.0.0.1:{p}" for p in self.gateway_metrics_ports]

    @property
    def operator_urls(self) -> dict[str, str]:
        """Site -> its operator's https base URL (mutual TLS)."""
        return {site: operator_url(port) for site, port in self.operator_ports.items()}

    @property
    def dashboard_url(self) -> str:
        return self.gateway_url + "/dashboard"

    @property
    def backend_urls(self) -> dict[str, str]:
        return {site: str(c.url) for site, c in self.fakes.items()}

    def operator_context(self, site: str) -> ssl.SSLContext:
        """A client TLS context that `site`'s operator accepts (its own client cert)."""
        ctx = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        ctx.load_cert_chain(
            str(self.certs / site / "client.crt"), str(self.certs / site / "client.key")
        )
        return ctx

    # --- life -----------------------------------------------------------------------

    def __enter__(self) -> LocalGrid:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Bring the whole grid up, or stop what started and raise `GridError`."""
        deadline = time.monotonic() + timeout_s
        try:
            self._start(deadline)
        except ProcessError as exc:
            self.keep = self.keep or self.keep_failed
            self.stop()
            raise GridError(str(exc)) from None
        except BaseException:
            self.stop()
            raise

    def _left(self, deadline: float) -> float:
        return max(1.0, deadline - time.monotonic())

    def _start(self, deadline: float) -> None:
        spec = self.spec
        names = [s.name for s in spec.sites]
        init_certs(self.certs, names)
        for i, site in enumerate(spec.sites):
            self.fakes[site.name] = self.procs.start(
                f"fake-{site.name}", fake_server_args(spec, site, i)
            )
        self.procs.wait_announced(list(self.fakes.values()), self._left(deadline))
        self.operator_ports = dict(zip(names, free_ports(len(names)), strict=True))
        addrs = Addresses(self.backend_urls, self.operator_ports)
        if spec.signals == "nats":
            addrs = self._start_nats(names, addrs)
        configs = self.workdir / "configs"
        configs.mkdir(exist_ok=True)
        for site in spec.sites:
            path = configs / f"operator-{site.name}.yaml"
            path.write_text(yaml.safe_dump(operator_config(spec, site, addrs, self.certs)))
            self.operators[site.name] = self.procs.start(
                f"operator-{site.name}", ["operator", "--config", str(path)]
            )
        for site in spec.sites:
            self._wait_operator(site.name, deadline)
        if spec.gateway_metrics:
            self.gateway_metrics_ports = free_ports(len(spec.gateway_sites))
        for i, gw_site in enumerate(spec.gateway_sites):
            path = configs / f"gateway-{i}.yaml"
            mport = self.gateway_metrics_ports[i] if self.gateway_metrics_ports else None
            cfg = gateway_config(spec, gw_site, addrs, self.certs, mport)
            path.write_text(yaml.safe_dump(cfg))
            gw = self.procs.start(f"gateway-{i}", ["gateway", "--config", str(path)])
            self.gateways.append(gw)
        self.procs.wait_announced(self.gateways, self._left(deadline))
        for i, gw in enumerate(self.gateways):
            ready = functools.partial(self._ready, f"{gw.url}/readyz")
            self._wait(gw, ready, deadline, "ready")
            routable = functools.partial(self.all_routable, i)
            self._wait(gw, routable, deadline, "seeing every site live")
        if len(self.gateways) > 1:
            # Gateways that start together each read the idle grid as theirs until the
            # others' reports have travelled round (two polls): traffic let in before
            # that overshoots the sites by up to a gateway's worth each (measured: 192
            # of 512 requests queued at 4 gateways for a whole service time).
            for i, gw in enumerate(self.gateways):
                known = functools.partial(self.knows_every_gateway, i)
                self._wait(gw, known, deadline, "hearing every gateway's report")

    def _start_nats(self, names: list[str], addrs: Addresses) -> Addresses:
        """One nats-server with a user per site and one for the gateways, each known by
        its client certificate (a site's is the one it uses on the mesh)."""
        self.nats = NatsCluster(self.workdir / "nats", names, certs=self.certs)
        self.nats.start()
        users = [*names, READER, *map(gateway_user, names)]
        tls = {user: self.nats.client_tls(user) for user in users}
        return Addresses(addrs.backends, addrs.operators, tuple(self.nats.urls), tls)

    def _wait_operator(self, site: str, deadline: float) -> None:
        url = operator_url(self.operator_ports[site]) + "/healthz"
        ctx = self.operator_context(site)
        self._wait(self.operators[site], lambda: self._ready(url, ctx), deadline, "healthy")

    def _wait(self, child: Child, ok: Callable[[], bool], deadline: float, what: str) -> None:
        while not ok():
            self.procs.check()
            if time.monotonic() > deadline:
                raise child.failure(f"was not {what} in time")
            time.sleep(0.1)

    @staticmethod
    def _ready(url: str, context: ssl.SSLContext | None = None) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1.0, context=context) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        """Stop every process this grid started (also after a failed start); idempotent."""
        self.procs.stop_all()
        if self.nats is not None:
            self.nats.stop()
            self.nats = None
        self.fakes.clear()
        self.operators.clear()
        self.gateways.clear()
        if self._own_dir and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def check(self) -> None:
        """Raise `GridError` if a process of the grid has died."""
        try:
            self.procs.check()
        except ProcessError as exc:
            self.keep = self.keep or self.keep_failed
            raise GridError(str(exc)) from None

    # --- what the gateway sees ------------------------------------------------------

    def status(self, gateway: int = 0, timeout_s: float = 2.0) -> dict[str, Any]:
        """The gateway's `/grid/status`."""
        data = http_json(f"{self.gateway_urls[gateway]}/grid/status", timeout_s=timeout_s)
        if not isinstance(data, dict):
            raise GridError(f"/grid/status answered {type(data).__name__}, not an object")
        return data

    def site_states(self, gateway: int = 0) -> dict[str, dict[str, Any]]:
        """Site name -> its row in `/grid/status`."""
        return {row["site"]: row for row in self.status(gateway)["sites"]}

    def all_routable(self, gateway: int = 0) -> bool:
        """Every site ready, live and measured in this gateway's view."""
        try:
            rows = self.site_states(gateway)
        except (OSError, ValueError, GridError):
            return False
        return set(rows) == {s.name for s in self.spec.sites} and all(
            r["ready"] and r["measured"] and r["live"] == "live" for r in rows.values()
        )

    def knows_every_gateway(self, gateway: int = 0) -> bool:
        """This gateway has the reports of every gateway of the grid (its fair share of
        the sites' room is then taken among all of them)."""
        try:
            heard = self.status(gateway).get("gateways_reporting")
        except (OSError, ValueError, GridError):
            return False
        return isinstance(heard, int) and heard >= len(self.gateways)

    def wait_for(
        self, pred: Callable[[], bool], timeout_s: float, what: str, step_s: float = 0.2
    ) -> float:
        """Poll `pred` until true; returns seconds waited; `GridError` on timeout."""
        start = time.monotonic()
        while not pred():
            self.check()
            if time.monotonic() - start > timeout_s:
                raise GridError(f"{what}: not within {timeout_s:g} s")
            time.sleep(step_s)
        return time.monotonic() - start

    # --- faults ---------------------------------------------------------------------

    def partition(self, site: str, drain_s: float | None = None) -> None:
        """Cut `site` off (see the module docstring). The backend refuses and the operator
        freezes at once; its metrics stall only after `drain_s` (default three mean
        service times), so requests already in service there can finish instead of
        hanging until `restore`. Returns after the drain."""
        spec = self.spec
        site_spec = next(s for s in spec.sites if s.name == site)
        fake = self.backend_urls[site]
        http_json(f"{fake}/admin/fail", {"status": 503})
        self.procs.freeze(self.operators[site])
        self.partitioned.add(site)
        time.sleep(spec.service_of(site_spec) * 3 if drain_s is None else drain_s)
        http_json(f"{fake}/admin/pause", {"metrics": True})

    def restore(self, site: str) -> None:
        """Undo `partition(site)`: the operator resumes, the backend answers again."""
        self.procs.thaw(self.operators[site])
        http_json(f"{self.backend_urls[site]}/admin/recover", {})
        self.partitioned.discard(site)

    def fail(self, site: str, drain_s: float | None = None) -> None:
        """`site`'s backend fails: new requests get 503 at once, and after `drain_s` its
        metrics stall too, so its operator's scrapes produce nothing. Peers still poll
        its operator (unlike a partition)."""
        site_spec = next(s for s in self.spec.sites if s.name == site)
        fake = self.backend_urls[site]
        http_json(f"{fake}/admin/fail", {"status": 503})
        time.sleep(self.spec.service_of(site_spec) * 3 if drain_s is None else drain_s)
        http_json(f"{fake}/admin/pause", {"metrics": True})

    def recover(self, site: str) -> None:
        """Undo `fail(site)`."""
        http_json(f"{self.backend_urls[site]}/admin/recover", {})

    def restart_operator(self, site: str, timeout_s: float = 30.0) -> None:
        """Stop `site`'s operator and start it again on the same port and config: what
        it learned from its peers is gone until it polls them again."""
        old = self.operators[site]
        self.procs.stop(old)
        self.operators[site] = self.procs.start(old.name, old.argv[3:])
        self._wait_operator(site, time.monotonic() + timeout_s)

    def served(self) -> dict[str, int]:
        """Requests each fake site completed so far (its `/admin/stats`)."""
        out = {}
        for site, url in self.backend_urls.items():
            stats = http_json(f"{url}/admin/stats", timeout_s=1.0)
            out[site] = int(stats["served"])
        return out


def leftover_pids(workdir: Path | str, *, prefix: bool = False) -> list[int]:
    """Processes whose environment marks them as children of the grid in `workdir`
    (Linux `/proc`; empty elsewhere). After `stop` this must be empty. With `prefix`,
    of any grid whose work dir starts with `workdir` (a grid in a temporary directory
    that is gone by now)."""
    marker = f"{GRID_ENV}={workdir}".encode() + (b"" if prefix else b"\0")
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes() + b"\0"
        except OSError:
            continue
        if marker in environ:
            found.append(int(entry.name))
    return found
