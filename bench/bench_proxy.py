"""Proxy throughput and CPU per request, side by side in one run on this machine.

Each proxy is pinned to core 0 (taskset); the fast fake backend (proxy_backend.py) and
this load generator share core 1. Measured for each target:

* requests/s with C keep-alive connections for D seconds (closed loop),
* CPU per request: the proxy's process-tree CPU time (utime + stime from /proc) over
  the run divided by requests served: the steadiest figure on a shared machine,
* latency at concurrency 1 (p50, p99) and what the proxy adds over going direct.

Targets: direct (no proxy), the plain aiohttp+uvloop baseline (baseline_proxy.py),
gridroute (routing on live signals from three sites, own-load accounting, metrics
listener on, health probes on, listener bounds on) on aiohttp's listener and on the
data-plane listener (`listener.dataplane`), nginx as a plain keep-alive reverse proxy (installed
with apt-get when missing) and LiteLLM's proxy (installed into its own venv under /tmp
when missing; skipped, with the reason printed, when that fails). Ratios are printed
against the baseline and against nginx, for each gridroute listener. bench_sse.py and
bench_workers.py reuse these pieces.

    .venv/bin/python bench/bench_proxy.py [--seconds 5] [--connections 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PY = sys.executable
BODY = b'{"model":"m","messages":[{"role":"user","content":"hello"}]}'
TICKS = os.sysconf("SC_CLK_TCK")


STREAM_BODY = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}'
LITELLM_VENV = Path("/tmp/litellm-venv")
LITELLM_INSTALL_S = 300


def request_bytes(port: int, body: bytes = BODY) -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Conn(asyncio.Protocol):
    """One keep-alive client connection sending the same request in a closed loop."""

    def __init__(self, req: bytes, stats: Stats) -> None:
        self.req = req
        self.stats = stats
        self.buf = b""
        self.need = -1
        self.sent_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.send()

    def send(self) -> None:
        if self.stats.stop:
            self.t.close()
            return
        self.sent_at = time.perf_counter()
        self.t.write(self.req)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            if self.need < 0:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = self.buf[:end].lower()
                if b" 200 " not in head[:16]:
                    self.stats.errors += 1
                i = head.find(b"content-length:")
                if i >= 0:
                    j = head.find(b"\r\n", i)
                    self.need = end + 4 + int(head[i + 15 : j if j > 0 else None])
                else:  # chunked
                    k = self.buf.find(b"0\r\n\r\n", end)
                    if k < 0:
                        return
                    self.need = k + 5
            if len(self.buf) < self.need:
                return
            self.buf = self.buf[self.need :]
            self.need = -1
            self.stats.done += 1
            if self.stats.latencies is not None:
                self.stats.latencies.append(time.perf_counter() - self.sent_at)
            self.send()


@dataclass
class Stats:
    done: int = 0
    errors: int = 0
    stop: bool = False
    latencies: list[float] | None = None


async def run_for(
    port: int, protocols: list[Callable[[], asyncio.Protocol]], stats: Stats, seconds: float
) -> Stats:
    """One connection to `port` per protocol factory, sending for `seconds`; then the
    senders stop, in-flight answers get 0.2 s to land, and every connection closes."""
    loop = asyncio.get_running_loop()
    conns = [await loop.create_connection(make, "127.0.0.1", port) for make in protocols]
    await asyncio.sleep(seconds)
    stats.stop = True
    await asyncio.sleep(0.2)
    for transport, _ in conns:
        transport.close()
    return stats


async def drive(
    port: int, connections: int, seconds: float, latency: bool = False, body: bytes = BODY
) -> Stats:
    stats = Stats(latencies=[] if latency else None)
    req = request_bytes(port, body)
    return await run_for(port, [lambda: Conn(req, stats)] * connections, stats, seconds)


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of `pid` and its children."""
    user, system = tree_cpu_split(pid)
    return user + system


def tree_cpu_split(pid: int) -> tuple[float, float]:
    """CPU seconds of `pid` and its children, (user, system): system time is mostly the
    socket syscalls, which cost what the kernel makes them cost (nginx pays them too);
    user time is the proxy's own work."""
    user = system = 0
    for p in [pid, *children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11])
        system += int(fields[12])
    return user / TICKS, system / TICKS


def wait_port(port: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def start(
    args: list[str], core: int | str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["taskset", "-c", str(core), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def rss_kib(pid: int) -> int:
    """Resident memory (KiB) of `pid` and its children."""
    total = 0
    for p in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def ensure_nginx() -> str | None:
    exe = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if exe:
        return exe
    print("installing nginx (apt-get) ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-q", "nginx-light"], env=env, capture_output=True)
    if not Path("/usr/sbin/nginx").exists():
        subprocess.run(["apt-get", "install", "-y", "-q", "nginx"], env=env, capture_output=True)
    return "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None


def nginx_args(exe: str, tmp: Path, port: int, backend: int) -> list[str]:
    conf = tmp / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log error;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  upstream backend {{ server 127.0.0.1:{backend}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port} reuseport;
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
""")
    return [exe, "-c", str(conf), "-p", str(tmp)]


def gridroute_args(
    tmp: Path,
    port: int,
    backend: int,
    metrics: int,
    workers: int = 1,
    *,
    dataplane: bool | None = None,
) -> list[str]:
    """gridroute's command line and config; `dataplane` sets `listener.dataplane` (the
    raw-protocol listener for the routed paths; None: the default, which is on)."""
    url = f"http://127.0.0.1:{backend}"
    cfg = tmp / f"gateway-{port}.yaml"
    sites = "\n".join(f"  - {{name: {s}, backend_url: '{url}'}}" for s in ("hub", "west", "east"))
    cfg.write_text(
        f"listen: 127.0.0.1:{port}\nlocal_site: hub\nworkers: {workers}\n"
        f"operator: {{url: '{url}', poll_interval_s: 1.0}}\n"
        f"sites:\n{sites}\nmodels: [{{name: m}}]\n"
        f"metrics: {{listen: '127.0.0.1:{metrics}'}}\n"
        + ("" if dataplane is None else f"listener: {{dataplane: {str(dataplane).lower()}}}\n")
    )
    return [str(Path(PY).with_name("gridroute")), "gateway", "--config", str(cfg)]


def ensure_litellm() -> tuple[str | None, str]:
    """LiteLLM's proxy in its own venv under /tmp: (executable, "") or (None, why not)."""
    exe = LITELLM_VENV / "bin" / "litellm"
    if exe.exists():
        return str(exe), ""
    print(f"installing litellm[proxy] into {LITELLM_VENV} ...", flush=True)
    try:
        subprocess.run(
            ["python3", "-m", "venv", str(LITELLM_VENV)], check=True, capture_output=True
        )
        subprocess.run(
            [str(LITELLM_VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"],
            check=True,
            capture_output=True,
            timeout=LITELLM_INSTALL_S,
        )
    except subprocess.TimeoutExpired:
        return None, f"pip install 'litellm[proxy]' took over {LITELLM_INSTALL_S} s"
    except (subprocess.CalledProcessError, OSError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
        return None, f"pip install 'litellm[proxy]' failed: {tail[0]}"
    return (str(exe), "") if exe.exists() else (None, "no litellm executable after install")


def litellm_args(exe: str, tmp: Path, port: int, backend: int) -> tuple[list[str], dict[str, str]]:
    """LiteLLM's proxy with one OpenAI-compatible deployment (our backend), one worker."""
    cfg = tmp / "litellm.yaml"
    cfg.write_text(
        "model_list:\n  - model_name: m\n    litellm_params:\n"
        f"      model: openai/m\n      api_base: http://127.0.0.1:{backend}/v1\n"
        "      api_key: unused\n"
    )
    env = {
        **os.environ,
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",  # loopback only
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network fetch at start
        "LITELLM_LOG": "ERROR",
    }
    args = [exe, "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port)]
    return [*args, "--num_workers", "1"], env


@dataclass
class Target:
    name: str
    args: list[str]
    port: int
    env: dict[str, str] | None = None
    settle_s: float = 0.3
    """Idle time after the port opens (gridroute: first poll and probe round)."""
    metrics_port: int | None = None


def proxy_targets(
    tmp: Path, backend: int, *, nginx: bool = True, litellm: bool = True
) -> list[Target]:
    """The proxies every bench compares, in report order, each in front of `backend`."""
    out: list[Target] = []
    p = free_port()
    base = [PY, str(HERE / "baseline_proxy.py"), str(p), f"http://127.0.0.1:{backend}"]
    out.append(Target("aiohttp baseline", base, p))
    p, m = free_port(), free_port()
    args = gridroute_args(tmp, p, backend, m, dataplane=False)
    out.append(Target("gridroute", args, p, None, 1.5, m))  # aiohttp's listener
    p, m = free_port(), free_port()
    args = gridroute_args(tmp, p, backend, m, dataplane=True)
    out.append(Target("gridroute dataplane", args, p, None, 1.5, m))
    exe = ensure_nginx() if nginx else None
    if exe:
        p = free_port()
        out.append(Target("nginx", nginx_args(exe, tmp, p, backend), p))
    if litellm:
        ll, why = ensure_litellm()
        if ll is None:
            print(f"LiteLLM skipped: {why}", flush=True)
        else:
            p = free_port()
            args, env = litellm_args(ll, tmp, p, backend)
            out.append(Target("litellm", args, p, env, 2.0))
    return out


@dataclass
class Row:
    name: str
    rps: float
    cpu_us: float | None
    p50_ms: float
    p99_ms: float
    errors: int


def measure(name: str, port: int, pid: int | None, seconds: float, conns: int) -> Row:
    asyncio.run(drive(port, conns, 1.0))  # warm-up: pools, caches, first polls
    cpu0 = tree_cpu(pid) if pid else 0.0
    t0 = time.perf_counter()
    stats = asyncio.run(drive(port, conns, seconds))
    elapsed = time.perf_counter() - t0 - 0.2
    cpu = (tree_cpu(pid) - cpu0) if pid else None
    lat = asyncio.run(drive(port, 1, min(seconds, 3.0), latency=True))
    ls = sorted(lat.latencies or [0.0])
    return Row(
        name,
        stats.done / elapsed,
        None if cpu is None else cpu / max(stats.done, 1) * 1e6,
        ls[len(ls) // 2] * 1e3,
        ls[int(len(ls) * 0.99)] * 1e3,
        stats.errors + lat.errors,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--skip-nginx", action="store_true")
    ap.add_argument("--skip-litellm", action="store_true")
    a = ap.parse_args()
    if (os.cpu_count() or 1) < 2:
        sys.exit("needs two cores: the proxy on one, backend and load on the other")
    os.sched_setaffinity(0, {1})
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    rows: list[Row] = []
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        backend = free_port()
        procs.append(start([PY, str(HERE / "proxy_backend.py"), str(backend)], 1))
        wait_port(backend)
        try:
            rows.append(measure("direct", backend, None, a.seconds, a.connections))
            targets = proxy_targets(
                tmp, backend, nginx=not a.skip_nginx, litellm=not a.skip_litellm
            )
            for t in targets:
                proc = start(t.args, 0, t.env)
                procs.append(proc)
                wait_port(t.port)
                time.sleep(t.settle_s)
                rows.append(measure(t.name, t.port, proc.pid, a.seconds, a.connections))
                if t.metrics_port is not None:
                    print_paths(t.metrics_port)
                stop(proc)
        finally:
            for proc in procs:
                stop(proc)
    report(rows, a)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def print_paths(metrics_port: int) -> None:
    """Show that gridroute routed on live signals (selection arms), not a fallback."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    paths = [
        line.split("{", 1)[1].replace('"}', "").replace('path="', "")
        for line in text.splitlines()
        if line.startswith("grid_route_selections_total{")
    ]
    print("gridroute selections by path: " + ", ".join(paths), flush=True)


def print_ratios(rows: list[Any], rate: str, cpu: str) -> None:
    """Each gridroute listener against the baseline and against nginx (same run)."""
    by = {r.name: r for r in rows}
    print()
    for name in ("gridroute", "gridroute dataplane"):
        g = by.get(name)
        if g is None or not g.cpu_us:
            continue
        for other in ("aiohttp baseline", "nginx"):
            o = by.get(other)
            if o is None or not o.cpu_us:
                continue
            g_rate, o_rate = rates(g), rates(o)
            print(
                f"{name + ' / ' + ('baseline' if other != 'nginx' else 'nginx') + ':':<34}"
                f"{g_rate / o_rate:5.2f}x {rate}, {g.cpu_us / o.cpu_us:5.2f}x {cpu}"
            )


def rates(row: Any) -> float:
    return float(getattr(row, "rps", None) or getattr(row, "streams_s", 0.0))


def report(rows: list[Row], a: argparse.Namespace) -> None:
    by = {r.name: r for r in rows}
    base = by.get("aiohttp baseline")
    direct = by["direct"]
    print(
        f"\nproxy on core 0, backend + load generator on core 1; {a.connections} connections, "
        f"{a.seconds:.0f} s per target\n"
    )
    head = (
        f"{'target':<21}{'req/s':>9}{'CPU us/req':>12}{'vs baseline':>13}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'+p50 ms':>9}{'+p99 ms':>9}{'errors':>8}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        ratio = f"{r.rps / base.rps:.2f}x" if base else "-"
        cpu = f"{r.cpu_us:.0f}" if r.cpu_us is not None else "-"
        print(
            f"{r.name:<21}{r.rps:>9.0f}{cpu:>12}{ratio:>13}{r.p50_ms:>9.3f}{r.p99_ms:>9.3f}"
            f"{r.p50_ms - direct.p50_ms:>9.3f}{r.p99_ms - direct.p99_ms:>9.3f}{r.errors:>8}"
        )
    g, ll = by.get("gridroute"), by.get("litellm")
    print_ratios(rows, "req/s", "CPU per request")
    if g and ll and g.cpu_us and ll.cpu_us:
        print(
            f"gridroute / LiteLLM:  {g.rps / ll.rps:.1f}x req/s, "
            f"{g.cpu_us / ll.cpu_us:.3f}x CPU per request"
        )


if __name__ == "__main__":
    main()
