"""gridroute at a git revision against the working tree, with the plain baseline, in one run.

Rounds interleave the three proxies (baseline, gridroute at `--rev`, gridroute from this
checkout), each pinned to core 0 in turn, against the same fake backend on core 1, so
slow phases of a shared machine hit all three alike. Prints each round and the medians:
requests (or SSE streams) per second, CPU per request, and the ratio to the baseline of
the same round. Used to measure one change at a time.

    .venv/bin/python bench/bench_ab.py plain --rev HEAD~1 [--rounds 4] [--seconds 4]
    .venv/bin/python bench/bench_ab.py sse --rev HEAD~1
    .venv/bin/python bench/bench_ab.py plain --rev HEAD~1 --nginx   # nginx in each round too
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_proxy import (
    BODY,
    HERE,
    PY,
    STREAM_BODY,
    drive,
    ensure_nginx,
    free_port,
    gridroute_args,
    nginx_args,
    start,
    stop,
    tree_cpu_split,
    wait_port,
)

NAMES = ("baseline", "rev", "tree")


def run_rounds(
    kind: str, src: Path, rounds: int, seconds: float, conns: int, nginx: str | None = None
) -> None:
    body = STREAM_BODY if kind == "sse" else BODY
    names = (*NAMES, "nginx") if nginx else NAMES
    res: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bport = free_port()
        script = "sse_backend.py" if kind == "sse" else "proxy_backend.py"
        backend = start([PY, str(HERE / script), str(bport)], 1)
        wait_port(bport)
        try:
            for r in range(rounds):
                for name in names:
                    port = free_port()
                    if name == "nginx":
                        assert nginx is not None
                        args, settle = nginx_args(nginx, tmp, port, bport), 0.3
                    elif name == "baseline":
                        url = f"http://127.0.0.1:{bport}"
                        args, settle = [PY, str(HERE / "baseline_proxy.py"), str(port), url], 0.3
                    else:
                        args, settle = gridroute_args(tmp, port, bport, free_port()), 1.5
                        if name == "rev":
                            boot = (
                                f"import sys; sys.path.insert(0, {str(src)!r}); "
                                "from gridroute.cli import main; sys.argv[0] = 'gridroute'; "
                                "sys.exit(main())"
                            )
                            args = [PY, "-c", boot, *args[1:]]
                    proc = start(args, 0)
                    try:
                        wait_port(port)
                        time.sleep(settle)
                        asyncio.run(drive(port, conns, 1.0, body=body))  # warm-up
                        u0, s0 = tree_cpu_split(proc.pid)
                        t0 = time.perf_counter()
                        stats = asyncio.run(drive(port, conns, seconds, body=body))
                        elapsed = time.perf_counter() - t0 - 0.2
                        u1, s1 = tree_cpu_split(proc.pid)
                        n = max(stats.done, 1)
                        user_us, sys_us = (u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6
                    finally:
                        stop(proc)
                    cpu_us = user_us + sys_us
                    res[name].append((stats.done / elapsed, cpu_us, user_us))
                    print(
                        f"round {r} {name:<9}{stats.done / elapsed:8.0f}/s {cpu_us:6.0f} us"
                        f" (user {user_us:.0f}, system {sys_us:.0f})  errors {stats.errors}",
                        flush=True,
                    )
        finally:
            stop(backend)

    def med(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    print(f"\n{kind}: medians over {rounds} rounds of {seconds:.0f} s, {conns} connections")
    for name in names:
        rows = res[name]
        ratio = med([x[0] / b[0] for x, b in zip(rows, res["baseline"], strict=True)])
        print(
            f"{name:<9}{med([x[0] for x in rows]):8.0f}/s {med([x[1] for x in rows]):6.0f} us"
            f" (user {med([x[2] for x in rows]):.0f})"
            f"  {ratio:.2f}x baseline  (us per round: {[round(x[1]) for x in rows]})"
        )
    if nginx:
        for name in ("rev", "tree"):
            per = [x[1] / n[1] for x, n in zip(res[name], res["nginx"], strict=True)]
            rps = [x[0] / n[0] for x, n in zip(res[name], res["nginx"], strict=True)]
            print(
                f"{name} / nginx: CPU per request {med(per):.2f}x, req/s {med(rps):.2f}x"
                f" (medians of the rounds' ratios; CPU per round: {[round(r, 2) for r in per]})"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("plain", "sse"))
    ap.add_argument("--rev", default="HEAD", help="git revision to compare the tree against")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--nginx", action="store_true", help="nginx in every round too")
    ap.add_argument("--src", type=Path, default=None, help="a source tree in place of --rev")
    a = ap.parse_args()
    if (os.cpu_count() or 1) < 2:
        sys.exit("needs two cores: the proxy on one, backend and load on the other")
    os.sched_setaffinity(0, {1})
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    with tempfile.TemporaryDirectory() as d:
        archive = subprocess.run(
            ["git", "archive", a.rev, "src"], cwd=HERE.parent, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", d], input=archive, check=True)
        exe = ensure_nginx() if a.nginx else None
        if a.nginx and exe is None:
            sys.exit("nginx is not installed and could not be")
        src = a.src.resolve() if a.src else Path(d) / "src"
        run_rounds(a.kind, src, a.rounds, a.seconds, a.connections, exe)


if __name__ == "__main__":
    main()
