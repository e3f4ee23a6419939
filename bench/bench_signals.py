"""Relay size, poll (decode) time and rows ingested per second for 10, 100, 1,000 sites.

Each site has 4 providers with 8 samples of history (the operator's defaults). The
relay is encoded under the 768 KiB budget (so at 1,000 sites it is cut, and the cut
is shown); the baseline is the same kept rows as a JSON list of sample objects,
decoded with `json.loads` in the same run. Ratios > 1 mean the relay is larger or
slower than the JSON baseline. Also: the scrape parser against prometheus_client's.

    .venv/bin/python bench/bench_signals.py
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gridroute.core.sample import Sample
from gridroute.wire.prometheus import parse_series
from gridroute.wire.signals import Decoded, decode_relay, encode_relay

NOW = 1_700_000_000.0
PROVIDERS = 4
HISTORY = 8
FIXTURE = Path(__file__).parents[1] / "tests/wire/fixtures/sglang-metrics-docs-example.txt"


def best_of(fn: Callable[[], object], repeat: int = 7) -> float:
    """Fastest of `repeat` runs (seconds): the least disturbed by other processes."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def histories(sites: int) -> list[list[Sample]]:
    return [
        [
            Sample(
                site=f"site-{i:04d}",
                provider=f"pool-{j}",
                at=NOW - k - i / 1000,
                running=3.5 + k,
                waiting=0.25,
                ready=4.0,
                held=0.0,
                deepest_queue=2.0,
                kv_usage=0.4375,
                max_running=64.0,
                generation=281474976710655 - i,
            )
            for k in reversed(range(HISTORY))
        ]
        for i in range(sites)
        for j in range(PROVIDERS)
    ]


def as_json(samples: tuple[Sample, ...]) -> bytes:
    return json.dumps(
        [
            {
                "site": s.site,
                "provider": s.provider,
                "stamp_ms": round(s.at * 1000),
                "running": s.running,
                "waiting": s.waiting,
                "ready": s.ready,
                "held": s.held,
                "deepest_queue": s.deepest_queue,
                "kv_usage": s.kv_usage,
                "max_running": s.max_running,
                "generation": s.generation,
            }
            for s in samples
        ]
    ).encode()


def main() -> None:
    print(
        f"{'sites':>6} {'samples':>8} {'rows':>7} {'cut rows':>9} {'relay KiB':>10} "
        f"{'size/json':>10} {'decode ms':>10} {'json ms':>8} {'time/json':>10} "
        f"{'rows/s':>10} {'samples/s':>10}"
    )
    for sites in (10, 100, 1000):
        encoded = encode_relay(histories(sites), {"west": NOW}, local_site="site-0000")
        body = encoded.body

        def decode(body: bytes = body) -> Decoded:
            return decode_relay(body, date=NOW, offset=0.0, max_lines=10**6, max_providers=64)

        decoded = decode()
        assert not decoded.dropped, decoded.dropped
        baseline = as_json(decoded.samples)
        t_ours = best_of(decode)
        t_json = best_of(lambda baseline=baseline: json.loads(baseline))
        cut = sum(encoded.cut.values())
        kinds = ",".join(sorted({k.value for _, k in encoded.cut})) or "-"
        print(
            f"{sites:>6} {len(decoded.samples):>8} {encoded.rows:>7} {cut:>9} "
            f"{len(encoded.body) / 1024:>10.1f} {len(encoded.body) / len(baseline):>10.2f} "
            f"{t_ours * 1000:>10.2f} {t_json * 1000:>8.2f} {t_ours / t_json:>10.2f} "
            f"{encoded.rows / t_ours:>10.0f} {len(decoded.samples) / t_ours:>10.0f}"
            + (f"   (cut: {kinds})" if cut else "")
        )

    page = FIXTURE.read_text() * 10
    t_ours = best_of(lambda: parse_series(page))
    t_theirs = best_of(lambda: list(text_string_to_metric_families(page)), repeat=3)
    print(
        f"\nscrape parse, SGLang page x10 ({len(page) // 1024} KiB): line grammar "
        f"{t_ours * 1000:.2f} ms, prometheus_client {t_theirs * 1000:.2f} ms, "
        f"ratio {t_theirs / t_ours:.1f}x faster"
    )


if __name__ == "__main__":
    main()
