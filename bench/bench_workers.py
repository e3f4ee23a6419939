"""`workers: N` scaling of the gateway (SO_REUSEPORT), measured side by side in one run.

The same closed-loop load as bench_proxy.py (small chat completions; C keep-alive
connections) against gridroute with 1 worker pinned to core 0, then with N workers
allowed on cores 0..N-1. The fast backend and this load generator are pinned to the
last core. Reported: requests/s, CPU per request (the gateway's whole process tree),
the ratio to 1 worker, and how the kernel spread the requests over the workers (each
worker's `grid_route_selections_total`, read from its metrics port, listen + i).

On a machine with C cores the N-worker run can use at most C - 1 cores for itself plus
what the backend and load generator leave of the last one; with 2 cores (this project's
CI machines) the 2-worker run shares core 1 with them, so it shows spreading and flat
CPU per request, not a 2x.

`--quota Q` measures scaling on a machine with too few cores for it: every worker gets
its own CPU budget of Q cores (a cgroup v1 `cpu` group per worker, CFS quota; needs
root), all on core 0, and the runs go 1, 2, .. N workers. With N x Q <= 1 the workers
never compete for core 0, so the N-worker rate over N x the 1-worker rate says how
linearly workers add capacity when each has a core's worth of its own: no shared lock,
no shared socket queue, the kernel's SO_REUSEPORT spread. It is a budget per worker,
not a core per worker (caches and the scheduler are shared), so it is the lower bound
of what separate cores give.

    .venv/bin/python bench/bench_workers.py [--workers 2] [--seconds 5] [--connections 64]
    sudo .venv/bin/python bench/bench_workers.py --quota 0.2 --workers 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_proxy import (
    HERE,
    PY,
    Row,
    children,
    free_port,
    gridroute_args,
    measure,
    start,
    stop,
    wait_port,
)


def served_by_worker(metrics_port: int, workers: int) -> list[float]:
    """Requests each worker decided (sum of its `grid_route_selections_total`)."""
    out = []
    for i in range(workers):
        url = f"http://127.0.0.1:{metrics_port + i}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        out.append(
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("grid_route_selections_total{")
            )
        )
    return out


def cells(row: Row, served: list[float]) -> tuple[str, str]:
    """A table row's share of requests per worker and its CPU per request."""
    total = sum(served) or 1.0
    split = " / ".join(f"{x / total:.0%}" for x in served)
    return split, f"{row.cpu_us:.0f}" if row.cpu_us is not None else "-"


CGROUP_CPU = Path("/sys/fs/cgroup/cpu")


def free_block(n: int, avoid: int) -> int:
    """A base port with `n` free consecutive ports, none of them `avoid` (worker i
    serves metrics on base + i)."""
    for _ in range(100):
        base = free_port()
        ok = avoid not in range(base, base + n)
        for p in range(base + 1, base + n):
            if not ok:
                break
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return base
    raise RuntimeError(f"no {n} consecutive free ports")


def cap_workers(parent: int, quota: float) -> list[Path]:
    """Put each worker of `parent` (or `parent` itself) in its own cgroup v1 `cpu`
    group with a CFS quota of `quota` cores; returns the groups to remove later."""
    pids = children(parent) or [parent]
    groups = []
    for pid in pids:
        group = CGROUP_CPU / f"gridroute-bench-{pid}"
        group.mkdir(exist_ok=True)
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(int(quota * 100000)))
        (group / "cgroup.procs").write_text(str(pid))
        groups.append(group)
    return groups


def remove_groups(groups: list[Path]) -> None:
    for group in groups:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:  # its processes are still exiting
                time.sleep(0.1)


def quota_runs(a: argparse.Namespace, last: int) -> None:
    """1..N workers on core 0, each capped at `a.quota` cores (see the module doc)."""
    if a.workers * a.quota > 1.0:
        sys.exit(f"--workers x --quota must be <= 1 core (core 0), got {a.workers * a.quota}")
    probe = CGROUP_CPU / "gridroute-bench-probe"
    try:
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError as exc:
        sys.exit(f"--quota needs a writable cgroup v1 cpu controller at {CGROUP_CPU}: {exc}")
    print(
        f"each worker capped at {a.quota} cores (CFS quota, own cgroup), all on core 0; "
        f"backend + load generator on core {last}",
        flush=True,
    )
    rows: list[tuple[int, Row, list[float]]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        backend = free_port()
        bproc = start([PY, str(HERE / "proxy_backend.py"), str(backend)], last)
        wait_port(backend)
        try:
            for workers in range(1, a.workers + 1):
                port = free_port()
                metrics = free_block(workers, port)
                proc = start(gridroute_args(tmp, port, backend, metrics, workers), "0")
                groups: list[Path] = []
                try:
                    wait_port(port)
                    for i in range(workers):
                        wait_port(metrics + i)
                    time.sleep(1.5)
                    groups = cap_workers(proc.pid, a.quota)
                    row = measure(
                        f"{workers} x {a.quota}", port, proc.pid, a.seconds, a.connections
                    )
                    rows.append((workers, row, served_by_worker(metrics, workers)))
                    print(f"{row.name}: {row.rps:.0f} req/s, {row.cpu_us:.0f} us/req", flush=True)
                finally:
                    stop(proc)
                    remove_groups(groups)
        finally:
            stop(bproc)
    one = rows[0][1].rps
    print(f"\n{a.connections} connections, {a.seconds:.0f} s per run\n")
    head = (
        f"{'workers':>8}{'CPU cap':>9}{'req/s':>9}{'vs 1':>7}{'per worker':>12}"
        f"{'CPU us/req':>12}  served per worker"
    )
    print(head + "\n" + "-" * (len(head) + 10))
    for workers, r, served in rows:
        split, cpu = cells(r, served)
        print(
            f"{workers:>8}{workers * a.quota:>9.2f}{r.rps:>9.0f}{r.rps / one:>6.2f}x"
            f"{r.rps / one / workers:>11.0%}{cpu:>12}  {split}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--quota", type=float, default=None, help="cores per worker (cgroup)")
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    if cores < 2:
        sys.exit("needs two cores: the gateway on one, backend and load on the other")
    last = cores - 1
    gw_cores = ",".join(str(c) for c in range(min(a.workers, cores)))
    os.sched_setaffinity(0, {last})
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    if a.quota is not None:
        quota_runs(a, last)
        return
    print(
        f"{cores} cores: backend + load generator on core {last}; 1 worker on core 0, "
        f"{a.workers} workers on cores {gw_cores}",
        flush=True,
    )
    if a.workers > cores - 1:
        print(
            f"note: {a.workers} workers need more than the {cores - 1} core(s) left beside "
            f"the backend and load generator: the gateway shares core {last} with them",
            flush=True,
        )
    rows: list[tuple[int, Row, list[float]]] = []
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        backend = free_port()
        procs.append(start([PY, str(HERE / "proxy_backend.py"), str(backend)], last))
        wait_port(backend)
        try:
            for workers, where in ((1, "0"), (a.workers, gw_cores)):
                port = free_port()
                metrics = free_block(workers, port)
                args = gridroute_args(tmp, port, backend, metrics, workers)
                proc = start(args, where)
                procs.append(proc)
                wait_port(port)
                for i in range(workers):
                    wait_port(metrics + i)
                time.sleep(1.5)  # first poll and probe round in every worker
                row = measure(f"{workers} worker(s)", port, proc.pid, a.seconds, a.connections)
                rows.append((workers, row, served_by_worker(metrics, workers)))
                print(f"{row.name}: {row.rps:.0f} req/s, {row.cpu_us:.0f} us/req", flush=True)
                stop(proc)
        finally:
            for proc in procs:
                stop(proc)
    one = rows[0][1]
    print(f"\n{a.connections} connections, {a.seconds:.0f} s per run\n")
    head = (
        f"{'workers':>8}{'cores':>8}{'req/s':>9}{'vs 1':>7}{'CPU us/req':>12}"
        f"{'p50 ms':>9}{'p99 ms':>9}  served per worker"
    )
    print(head + "\n" + "-" * (len(head) + 10))
    for workers, r, served in rows:
        split, cpu = cells(r, served)
        where = "0" if workers == 1 else gw_cores
        print(
            f"{workers:>8}{where:>8}{r.rps:>9.0f}{r.rps / one.rps:>6.2f}x{cpu:>12}"
            f"{r.p50_ms:>9.3f}{r.p99_ms:>9.3f}  {split}"
        )


if __name__ == "__main__":
    main()
