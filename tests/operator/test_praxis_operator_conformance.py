"""praxis-proxy/grid's operator and signal-store tests, replayed against gridroute.

Upstream keeps the operator's relay in `operator/src/signals.rs` (parse, attribute,
`SignalStore`, `PollPeers`, the hub's `bound_peer`, `reexpress_peer_ages`), the
gateway's windowed store in `signals/src/signals.rs` (`LoadStore`: owner binding,
skew, caps, retention, worst-in-window) and the skew condition in
`operator/src/peer_ages.rs`. In gridroute the same jobs are done by the scraper
(`wire/prometheus.py`, `operator/scrape.py`), the relay codec (`wire/signals.py`),
the operator's `RelayStore`, the poll client (`relay/poller.py`), the peer rounds
(`operator/peer_rounds.py`) and the reader's windows (`core/window.py`,
`core/liveness.py`). Each test names the upstream file and test it replays; unit tests
run in process, the poll tests against raw mutual-TLS peers on loopback with
certificates made at test time. The llm-d series-mapping tests
(`gateway/ai-grid-filters/src/signals/llm_d.rs`) are replayed in
`test_praxis_signals_conformance.py` and not repeated here. The EPP pool a provider
names (`metricsConfig.poolName`: upstream `in_pool` in `operator/src/signals.rs`,
`ready_endpoints`/`in_flight` in `operator/src/readiness.rs`, the `pool_name_*` tests of
`operator/src/metrics_parser.rs`) is replayed in the last section.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Callable

import aiohttp
import pytest
from operator_fixtures import (
    Certs,
    MetricsServer,
    RawPeer,
    client_ssl,
    free_port,
    operator_config,
    poll_as,
)
from prometheus_client import CollectorRegistry

from gridroute.clock import wall
from gridroute.core.liveness import Live, first_seen, step
from gridroute.core.sample import Sample
from gridroute.core.window import SampleWindow
from gridroute.operator.certs import init_certs, make_site_cert, write_leaf
from gridroute.operator.config import ProviderConfig
from gridroute.operator.metrics import OperatorMetrics
from gridroute.operator.peer_rounds import PeerRounds, SkipMetrics, backoff_rounds
from gridroute.operator.scrape import ProviderScraper
from gridroute.operator.service import Operator
from gridroute.operator.store import RelayStore
from gridroute.relay.poller import PollLimits, PollMetrics, PollResult, SignalsClient
from gridroute.wire.identity import spiffe_id
from gridroute.wire.prometheus import (
    POOL_LABEL,
    POOL_NAME_LABEL,
    ExpositionError,
    MetricsFormat,
    in_pool,
    parse_exposition,
)
from gridroute.wire.signals import (
    FIELDS,
    PEER_MAX_PROVIDERS,
    RELAY_BUDGET_BYTES,
    Decoded,
    DropReason,
    Received,
    decode_relay,
    encode_relay,
)

RUNNING = "llm_d_epp_average_running_requests"
QUEUE = "llm_d_epp_average_queue_size"
READY = "llm_d_epp_ready_endpoints"
HEADER = "# gridroute signals v1"
STRICT = (
    "deliberate: docs/signals.md: 'Site and provider names match "
    "`[A-Za-z0-9][A-Za-z0-9._-]{0,62}`, so labels never need escaping and readers parse "
    "strictly'; a row carrying any label beyond grid_site/grid_provider (or lacking "
    "grid_site) is dropped as `parse`, where upstream reads it quote-aware"
)


# --- helpers ------------------------------------------------------------------------


def row(metric: str, site: str, provider: str, value: object, stamp_ms: int) -> str:
    return f'{metric}{{grid_site="{site}",grid_provider="{provider}"}} {value} {stamp_ms}'


def decode(lines: list[str], *, date: float, offset: float = 0.0, **options: object) -> Decoded:
    body = "\n".join([HEADER, *lines]) + "\n"
    return decode_relay(body.encode(), date=date, offset=offset, **options)  # type: ignore[arg-type]


def keys(decoded: Decoded) -> set[str]:
    return {r.sample.key for r in decoded.received}


def received(site: str, provider: str, at: float, **fields: float) -> Received:
    return Received(round(at * 1000), Sample(site, provider, at, **fields))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """hub, west and east under one CA; `other/west`: west's certificates from the same
    CA but of another trust domain (spiffe://evil.example/site/west)."""
    root = tmp_path_factory.mktemp("pki")
    ca = init_certs(root, ["hub", "west", "east"])
    other = root / "other"
    (other / "west").mkdir(parents=True)
    for client in (False, True):
        key, cert = make_site_cert(ca, "west", "evil.example", client=client)
        write_leaf(other / "west" / ("client" if client else "server"), key, cert)
    return Certs(root, other)


Respond = Callable[[float], tuple[list[str], bytes, int | None]]


def serve_rows(make: Callable[[float], list[str]], *, stall_after: int | None = None) -> Respond:
    def respond(now: float) -> tuple[list[str], bytes, int | None]:
        data = ("\n".join([HEADER, *make(now)]) + "\n").encode()
        headers = [
            "Content-Type: text/plain",
            "Date: " + email.utils.formatdate(now, usegmt=True),
            f"Content-Length: {len(data)}",
        ]
        return headers, data, stall_after

    return respond


def good_rows(site: str, value: float = 3.0) -> Callable[[float], list[str]]:
    def make(now: float) -> list[str]:
        ms = round(now * 1000)
        return [row(RUNNING, site, "p", value, ms), row(READY, site, "p", 1, ms)]

    return make


def peer_client(pki: Certs, site: str, port: int, *, timeout_s: float = 2.0) -> SignalsClient:
    return SignalsClient(
        site,
        f"https://127.0.0.1:{port}/signals?scope=own",
        metrics=PollMetrics(CollectorRegistry()),
        ssl_context=client_ssl(pki.tls("hub")),
        expected_identity=spiffe_id("gridroute.local", site),
        expected_site=site,
        limits=PollLimits(timeout_s=timeout_s),
    )


def rounds_over(clients: list[SignalsClient], deadline_s: float) -> PeerRounds:
    return PeerRounds(
        clients,
        RelayStore("hub"),
        deadline_s=deadline_s,
        clock=time.time,
        metrics=SkipMetrics(CollectorRegistry()),
    )


def epp_provider(port: int) -> ProviderConfig:
    return ProviderConfig.model_validate(
        {
            "name": "pool-a",
            "models": ["m"],
            "backendUrl": "http://127.0.0.1:1",
            "metricsConfig": {
                "endpoint": f"http://127.0.0.1:{port}/metrics",
                "staleMetricsSeconds": 10,
            },
        }
    )


def scrape_each(pages: list[tuple[int, str]], times: list[float]) -> list[Sample | None]:
    """Scrape (status, page) in turn at each of `times`, one `ProviderScraper` at east."""
    clock = [times[0]]
    out: list[Sample | None] = []

    async def main() -> None:
        async with MetricsServer(pages[0][1]) as server, aiohttp.ClientSession() as http:
            scraper = ProviderScraper(
                "east",
                epp_provider(server.port),
                metrics=OperatorMetrics(CollectorRegistry()),
                clock=lambda: clock[0],
            )
            for (status, text), at in zip(pages, times, strict=True):
                server.status, server.text, clock[0] = status, text, at
                out.append(await scraper.scrape(http, 2.0))

    asyncio.run(main())
    return out


# --- operator/src/signals.rs: parsing what a site scrapes -----------------------------


def test_a_colon_in_a_metric_name_is_a_name_not_a_delimiter() -> None:
    """operator/src/signals.rs::a_colon_in_a_metric_name_is_a_name_not_a_delimiter: every
    vLLM metric has a colon in its name; the line is read, not dropped."""
    load = parse_exposition('vllm:num_requests_waiting{model="a"} 7\n')
    assert load.waiting == 7.0 and load.ready == 1.0


def test_a_brace_inside_a_label_value_does_not_end_the_label_set() -> None:
    """operator/src/signals.rs::a_brace_inside_a_label_value_does_not_end_the_label_set."""
    load = parse_exposition('vllm:num_requests_running{note="has } brace",k="v"} 3\n')
    assert load.running == 3.0


def test_an_escaped_quote_stays_inside_the_value() -> None:
    """operator/src/signals.rs::an_escaped_quote_stays_inside_the_value."""
    load = parse_exposition('vllm:num_requests_running{a="say \\"hi\\"",b="c"} 1\n')
    assert load.running == 1.0


def test_a_trailing_timestamp_is_not_read_as_the_value() -> None:
    """operator/src/signals.rs::a_trailing_timestamp_is_kept_and_not_read_as_the_value: the
    value is 2, not the millisecond stamp after it (gridroute stamps a scrape with its own
    clock, so the provider's stamp is not kept)."""
    load = parse_exposition('vllm:num_requests_running{a="b"} 2 1700000000000\n')
    assert load.running == 2.0


def test_comments_and_types_are_not_samples() -> None:
    """operator/src/signals.rs::comments_and_types_are_not_samples: HELP and TYPE lines
    are not series; one sample line is one engine."""
    page = (
        f"# HELP {QUEUE} depth\n# TYPE {QUEUE} gauge\n"
        'vllm:num_requests_running{name="pool-a"} 3\n'
    )
    load = parse_exposition(page)
    assert (load.running, load.ready) == (3.0, 1.0)


def test_a_label_value_containing_a_space_survives_a_round_trip() -> None:
    """operator/src/signals.rs::a_label_value_containing_a_space_survives_a_round_trip: a
    space inside a quoted label shifts neither the value nor the stamp; on the relay the
    stamp is the last token and the value the one before it."""
    load = parse_exposition('vllm:num_requests_running{path="/a b"} 3\n')
    assert load.running == 3.0
    body = encode_relay(
        [[Sample("east", "p", 1_700_000_000.0, running=load.running, ready=1.0)]],
        {},
        local_site="east",
    ).body.decode()
    line = next(x for x in body.splitlines() if x.startswith(RUNNING))
    head, stamp = line.rsplit(" ", 1)
    assert (head.rsplit(" ", 1)[1], stamp) == ("3", "1700000000000")


def test_non_finite_values_never_reach_the_store() -> None:
    """operator/src/signals.rs::non_finite_values_never_reach_the_store: of NaN, +Inf,
    -Inf and 0.35 only the finite sample is read."""
    page = "".join(
        f'{QUEUE}{{pool="{p}"}} {v}\n'
        for p, v in zip("abcd", ["NaN", "+Inf", "-Inf", "0.35"], strict=True)
    )
    assert parse_exposition(page).waiting == 0.35


def test_counters_and_aggregates_are_not_republished() -> None:
    """operator/src/signals.rs::aggregates_are_not_republished and
    ::a_type_declared_after_its_samples_still_applies: a counter (even typed after its
    samples) and histogram parts are never relayed; only the contract gauges are."""
    page = (
        "c_total 5\n# TYPE c_total counter\n"
        'h_bucket{le="1"} 1\nh_sum 2\nh_count 1\n'
        'vllm:num_requests_running{engine="0"} 4\nvllm:num_requests_waiting{engine="0"} 0\n'
    )
    load = parse_exposition(page)
    sample = Sample("east", "p", 1.0, running=load.running, waiting=load.waiting, ready=1.0)
    body = encode_relay([[sample]], {}, local_site="east").body.decode()
    names = {x.split("{", 1)[0] for x in body.splitlines() if x and not x.startswith("#")}
    assert names <= {name for _, name in FIELDS}
    assert not names & {"c_total", "h_bucket", "h_sum", "h_count"}


def test_a_provider_cannot_set_the_labels_this_site_attributes() -> None:
    """operator/src/signals.rs::a_provider_cannot_set_the_labels_this_site_attributes: a
    page claiming grid_site="evil" is still east's; the relay labels it east."""
    page = 'llm_d_epp_average_running_requests{grid_site="evil",name="pool-a"} 3\n'
    (sample,) = scrape_each([(200, page)], [100.0])
    assert sample is not None and (sample.site, sample.running) == ("east", 3.0)
    body = encode_relay([[sample]], {}, local_site="east").body.decode()
    assert 'grid_site="evil"' not in body and 'grid_site="east"' in body


def test_a_target_absent_from_a_refresh_is_kept_until_it_expires() -> None:
    """operator/src/signals.rs::a_target_absent_from_a_refresh_is_kept_until_it_expires:
    one failed scrape does not erase what is known. While the backend's /metrics fails,
    the provider keeps publishing its last readiness within staleMetricsSeconds, its
    earlier full sample stays in the relay, and only past that does it fall silent."""
    good = f"{RUNNING} 5\n{READY} 2\n"
    samples = scrape_each([(200, good), (500, "down"), (500, "down")], [100.0, 101.0, 200.0])
    first, failed, late = samples
    assert first is not None and first.in_flight == 10.0
    assert failed is not None and (failed.ready, failed.running) == (2.0, None)
    assert late is None
    store = RelayStore("east")
    for s in (first, failed):
        store.add_local(s)
    store.add_local(Sample("east", "pool-b", 101.0, running=1.0, ready=1.0))
    assert set(store.latest()) == {"east/pool-a", "east/pool-b"}
    assert [len(h) for h in store.histories()] == [2, 1]


# --- operator/src/signals.rs: the relay store -----------------------------------------


def test_a_relayed_sample_renders_its_own_age_not_the_relay_time() -> None:
    """operator/src/signals.rs::a_relayed_sample_renders_its_own_age_not_the_relay_time: a
    peer's sample measured half an hour ago is served half an hour old, not stamped with
    the time the operator stored it."""
    now = time.time()
    store = RelayStore("hub")
    store.add_peer("west", [received("west", "p", now - 1800, running=1.0, ready=1.0)])
    body = store.encode(now).body
    decoded = decode_relay(body, date=now, offset=0.0)
    (got,) = decoded.samples
    assert abs((now - got.at) - 1800) < 0.01


def test_age_reports_a_value_just_collected_as_new(pki: Certs) -> None:
    """operator/src/signals.rs::age_reports_the_oldest_value_in_the_response: a value just
    scraped reads as new to whoever polls it (gridroute has no `Age` header: the age is
    the response Date, refined by X-Grid-Time, minus the row's stamp)."""

    async def main() -> float:
        async with MetricsServer(f"{RUNNING} 1\n{READY} 1\n") as metrics:
            provider = {
                "name": "p",
                "models": ["m"],
                "backendUrl": "http://127.0.0.1:1",
                "metricsConfig": {"endpoint": f"http://127.0.0.1:{metrics.port}/metrics"},
            }
            op = Operator(operator_config("west", 0, certs=pki, providers=[provider]))
            await op.start()
            try:
                await op.scrape_round()
                outcome = await poll_as(
                    "west",
                    f"https://127.0.0.1:{op.port}/signals?scope=own",
                    client_ssl(pki.tls("hub")),
                    expected_identity=spiffe_id("gridroute.local", "west"),
                    expected_site="west",
                )
            finally:
                await op.stop()
        assert outcome.result is PollResult.OK and outcome.decoded is not None
        return outcome.ended_at - max(s.at for s in outcome.decoded.samples)

    assert 0.0 <= asyncio.run(main()) < 1.0


def test_a_target_nothing_refreshes_stops_being_served() -> None:
    """operator/src/signals.rs::a_target_nothing_refreshes_stops_being_served: absence is
    what says a target is stale; past retention it is not served at all."""
    store = RelayStore("east", retain_latest_s=5.0)
    store.add_local(Sample("east", "pool-a", 100.0, running=1.0, ready=1.0))
    assert store.encode(104.0).rows > 0
    assert store.encode(106.0).rows == 0 and store.latest() == {}


def test_a_peer_is_asked_for_its_own_rows_not_a_target(pki: Certs) -> None:
    """operator/src/signals.rs::a_peer_is_not_asked_for_a_target: the whole site is asked
    for, with no provider target; what the peer offers is scoped to itself."""
    op = Operator(operator_config("hub", free_port(), certs=pki, peers={"west": 9}))
    (client,) = op.peers
    assert client.url.endswith("/signals?scope=own")
    assert client.expected_site == "west"


# --- operator/src/signals.rs: the hub's bounds on a peer ------------------------------

_REFUSAL_CASES = [
    pytest.param(RUNNING, "pool", "0.5", True, id="contract name"),
    pytest.param(
        "inference_pool_average_queue_size",
        "pool",
        "3",
        True,
        id="legacy gateway load name",
        marks=pytest.mark.xfail(
            strict=True,
            reason="deliberate: docs/signals.md: 'The load fields use the llm-d EPP names "
            "because they carry exactly what the EPP convention means, whatever the "
            "provider's engine'; the relay carries gridroute's Sample fields under the "
            "current names, and a reader ignores series it does not know",
        ),
    ),
    pytest.param("my_custom_queue", "pool", "3", False, id="custom name"),
    pytest.param(
        RUNNING,
        "Pool_1",
        "1",
        False,
        id="provider not a label",
        marks=pytest.mark.xfail(
            strict=True,
            reason="difference of naming: docs/signals.md: 'Site and provider names match "
            "`[A-Za-z0-9][A-Za-z0-9._-]{0,62}`' (upper case, '_' and '.' allowed), where "
            "upstream's hub requires a DNS-1123 label (certs::validate_site_name)",
        ),
    ),
    pytest.param(
        RUNNING,
        "pool.1",
        "1",
        False,
        id="provider with a dot",
        marks=pytest.mark.xfail(
            strict=True, reason="difference of naming: as 'provider not a label'"
        ),
    ),
    pytest.param(RUNNING, "a/b", "1", False, id="provider with a slash"),
    pytest.param(RUNNING, "pool", "NaN", False, id="not finite"),
    pytest.param(RUNNING, "pool", "+Inf", False, id="infinite"),
    pytest.param(
        RUNNING,
        "pool",
        "-1",
        False,
        id="negative",
    ),
    pytest.param(RUNNING, "pool", "1.5", True, id="saturation above one"),
]


@pytest.mark.parametrize(("metric", "provider", "value", "kept"), _REFUSAL_CASES)
def test_a_hub_refuses_peer_names_providers_and_values_outside_the_contract(
    metric: str, provider: str, value: str, kept: bool
) -> None:
    """operator/src/signals.rs::a_hub_refuses_peer_names_providers_and_values_outside_the_
    contract: one table of accepted and refused peer rows (a second, valid provider rides
    along so the body is a relay)."""
    decoded = decode(
        [row(metric, "retail", provider, value, 1000), row(READY, "retail", "other", 1, 1000)],
        date=1.0,
        expected_site="retail",
    )
    got = [r.sample for r in decoded.received if r.sample.provider == provider]
    has_value = bool(got) and any(
        getattr(got[0], attr) is not None for attr, _ in FIELDS if attr != "generation"
    )
    assert has_value is kept


@pytest.mark.parametrize(
    "order",
    [
        "name order",
        pytest.param(
            "reverse order",
            marks=pytest.mark.xfail(
                strict=True,
                reason="difference of ordering: gridroute keeps the first 64 providers "
                "of a site in body order (wire/signals.py PEER_MAX_PROVIDERS, 'the first "
                "ones in the body'; docs/signals.md 'providers per site | first 64'), "
                "upstream the first 64 by name; gridroute operators write providers in "
                "name order, so only a foreign publisher sees the difference",
            ),
        ),
    ],
)
def test_a_hub_keeps_at_most_the_first_providers_of_a_peer_in_name_order(order: str) -> None:
    """operator/src/signals.rs::a_hub_keeps_at_most_the_first_providers_of_a_peer_in_name_
    order: of 69 providers, 64 are kept, the first 64 by name."""
    names = [f"p{i:03}" for i in range(PEER_MAX_PROVIDERS + 5)]
    if order == "reverse order":
        names.reverse()
    decoded = decode([row(READY, "retail", p, 1, 1000) for p in names], date=1.0)
    kept = {r.sample.provider for r in decoded.received}
    assert len(kept) == PEER_MAX_PROVIDERS
    assert all(p < "p064" for p in kept)
    assert decoded.dropped.get(DropReason.CAP) == 5


# --- operator/src/signals.rs: polling peers -------------------------------------------


def test_a_slow_or_stalled_peer_does_not_hold_back_a_fast_one(pki: Certs) -> None:
    """operator/src/signals.rs::a_slow_peer_does_not_hold_back_a_fast_one and
    ::a_peer_stalled_mid_body_does_not_hold_the_round: west sends headers promising a
    body and stalls; east's rows are stored as its poll completes, the round ends on its
    deadline with both peers judged, and west's poll ends unreachable at its timeout."""

    async def main() -> tuple[set[str], dict[str, float], PollResult | None, float]:
        stalled = RawPeer(pki.tls("west"), serve_rows(good_rows("west"), stall_after=10))
        fast = RawPeer(pki.tls("east"), serve_rows(good_rows("east")))
        async with stalled, fast:
            west = peer_client(pki, "west", stalled.port, timeout_s=0.6)
            east = peer_client(pki, "east", fast.port)
            rounds = rounds_over([west, east], deadline_s=0.4)
            started = time.monotonic()
            await rounds.round()
            took = time.monotonic() - started
            stored = set(rounds.store.latest())
            ends = rounds.store.round_ends
            for _ in range(40):
                if west.latest is not None:
                    break
                await asyncio.sleep(0.05)
            result = None if west.latest is None else west.latest.result
            await rounds.close()
            for c in (west, east):
                await c.close()
        return stored, ends, result, took

    stored, ends, result, took = asyncio.run(main())
    assert stored == {"east/p"}
    assert set(ends) == {"west", "east"}
    assert took < 1.5
    assert result is PollResult.UNREACHABLE


def test_a_trust_failure_and_a_refusal_are_told_apart_from_an_unreachable_peer(
    pki: Certs,
) -> None:
    """operator/src/signals.rs::a_refused_connection_is_told_apart_from_a_trust_failure and
    ::a_status_is_split_at_five_hundred: a refused connection, a peer whose certificate
    does not verify, and a 403 end in different results (gridroute's labels:
    `unreachable`, `bad_identity`, `unauthorized`; a 5xx is `unreachable`)."""

    async def main() -> dict[str, PollResult]:
        out: dict[str, PollResult] = {}
        url = f"https://127.0.0.1:{free_port()}/signals"
        out["refused"] = (await poll_as("west", url, client_ssl(pki.tls("hub")))).result
        async with RawPeer(pki.tls("east"), serve_rows(good_rows("east"))) as liar:
            out["tls"] = (await peer_client_poll(pki, "west", liar.port)).result
        for status in (403, 503):
            out[str(status)] = (await status_poll(pki, status)).result
        return out

    got = asyncio.run(main())
    assert got == {
        "refused": PollResult.UNREACHABLE,
        "tls": PollResult.BAD_IDENTITY,
        "403": PollResult.UNAUTHORIZED,
        "503": PollResult.UNREACHABLE,
    }


async def peer_client_poll(pki: Certs, site: str, port: int):  # type: ignore[no-untyped-def]
    client = peer_client(pki, site, port)
    try:
        return await client.poll()
    finally:
        await client.close()


async def status_poll(pki: Certs, status: int):  # type: ignore[no-untyped-def]
    from aiohttp import web

    from gridroute.operator.tls import server_context

    async def answer(_: web.Request) -> web.Response:
        return web.Response(status=status)

    app = web.Application()
    app.router.add_get("/signals", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(
        runner, "127.0.0.1", port, ssl_context=server_context(pki.tls("west"))
    ).start()
    try:
        return await peer_client_poll(pki, "west", port)
    finally:
        await runner.cleanup()


def test_poll_outcome_labels_are_stable() -> None:
    """operator/src/signals.rs::outcome_labels_are_stable: dashboards are written against
    the result labels. gridroute's set is its own (docs/signals.md, "Polling: results"):
    upstream's timeout/refused/transport/server_error are all `unreachable` here, tls is
    `bad_identity`, client_error is `unauthorized` for 401/403."""
    assert {r.value for r in PollResult} == {
        "ok",
        "unreachable",
        "unauthorized",
        "too_large",
        "no_date",
        "bad_identity",
        "undecodable",
    }


def test_a_peer_declining_to_answer_is_not_retried_within_a_round(pki: Certs) -> None:
    """operator/src/signals.rs::a_peer_declining_to_answer_is_not_retried and
    ::a_trust_failure_is_not_retried: a peer presenting another site's certificate is
    dialed once in a round, not again."""

    async def main() -> int:
        async with RawPeer(pki.tls("east"), serve_rows(good_rows("east"))) as liar:
            client = peer_client(pki, "west", liar.port)
            rounds = rounds_over([client], deadline_s=1.0)
            await rounds.round()
            await rounds.close()
            await client.close()
            assert client.latest is not None
            assert client.latest.result is PollResult.BAD_IDENTITY
            return liar.requests

    assert asyncio.run(main()) == 0  # refused at the handshake: nothing was even sent


def test_a_dropped_connection_is_retried_within_the_poll(pki: Certs) -> None:
    """operator/src/signals.rs::transient_failures_are_retried (a dropped connection): a
    peer that drops the first connection before answering is tried again in the same
    round and its rows land (in gridroute by aiohttp, which resends an idempotent GET
    once when the connection closes before any answer: two requests, one poll)."""
    served: list[int] = []
    ok = serve_rows(good_rows("west"))

    def flaky(now: float) -> tuple[list[str], bytes, int | None]:
        served.append(1)
        if len(served) == 1:
            raise ConnectionResetError("dropped")
        return ok(now)

    async def main() -> set[str]:
        async with RawPeer(pki.tls("west"), flaky) as peer:
            client = peer_client(pki, "west", peer.port)
            rounds = rounds_over([client], deadline_s=1.5)
            await rounds.round()
            await rounds.close()
            await client.close()
            return set(rounds.store.latest())

    assert asyncio.run(main()) == {"west/p"}
    assert len(served) == 2


@pytest.mark.xfail(
    strict=True,
    reason="deliberate: docs/signals.md, 'Peer rounds under overload': 'An operator polls "
    "all its peers once per `peerPollIntervalSeconds` (one round)'; a 5xx (or a timeout) "
    "is retried in a later round (fast failures backed off), never within the round as "
    "upstream's PollPeers does (3 attempts, 50 ms exponential backoff)",
)
def test_a_server_error_is_retried_within_the_round(pki: Certs) -> None:
    """operator/src/signals.rs::transient_failures_are_retried and
    ::a_status_is_split_at_five_hundred (a 5xx is retryable): a peer answering 503 once,
    then its rows, has its rows stored by the end of the first round."""
    from aiohttp import web

    from gridroute.operator.tls import server_context

    answers: list[int] = []

    async def signals(_: web.Request) -> web.Response:
        answers.append(1)
        if len(answers) == 1:
            return web.Response(status=503)
        ms = round(time.time() * 1000)
        text = "\n".join([HEADER, row(RUNNING, "west", "p", 3, ms), row(READY, "west", "p", 1, ms)])
        return web.Response(text=text + "\n")

    async def main() -> set[str]:
        app = web.Application()
        app.router.add_get("/signals", signals)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=server_context(pki.tls("west")))
        await site.start()
        try:
            client = peer_client(pki, "west", port)
            rounds = rounds_over([client], deadline_s=1.5)
            await rounds.round()
            await rounds.close()
            await client.close()
            return set(rounds.store.latest())
        finally:
            await runner.cleanup()

    assert asyncio.run(main()) == {"west/p"}


def test_backoff_grows_and_then_stops_growing() -> None:
    """operator/src/signals.rs::backoff_grows_and_then_stops_growing and
    ::the_same_peer_backs_off_the_same_way_every_run: the pause after consecutive
    failures grows and is capped, and is the same every run (gridroute backs off in
    skipped rounds, min(2^(n-1) - 1, 3), not in milliseconds)."""
    skips = [backoff_rounds(n) for n in range(1, 9)]
    assert skips == [0, 1, 3, 3, 3, 3, 3, 3]
    assert [backoff_rounds(n) for n in range(1, 9)] == skips


@pytest.mark.xfail(
    strict=True,
    reason="deliberate: docs/signals.md: 'A peer that keeps failing is backed off: after n "
    "failures in a row it skips min(2^(n-1) - 1, 3) rounds' - the same for every peer, "
    "with no spread by peer name as upstream's backoff() has",
)
def test_two_peers_failing_together_do_not_retry_together() -> None:
    """operator/src/signals.rs::two_peers_failing_together_do_not_retry_together: peers
    cut off together back off by different amounts, so they do not herd on heal."""
    assert backoff_rounds(3) != backoff_rounds(3)  # no per-peer input exists to differ on


# --- identity: polling-metrics.md "Verify" and the owner binding ----------------------


@pytest.mark.parametrize("presented", ["east", "west of another trust domain"])
def test_a_valid_grid_peer_answering_for_another_site_is_refused(
    pki: Certs, presented: str
) -> None:
    """docs/architecture/polling-metrics.md (The Poll Path, Verify: 'A valid Grid peer
    answering for another site is refused') with operator/src/signals.rs::
    a_peer_is_named_by_the_key_it_presents: the poller dialing west is answered by a
    certificate of our CA for east, or for west in another trust domain; the poll is
    refused and nothing is stored."""
    tls = pki.tls("east") if presented == "east" else pki.tls("west", pki.foreign)

    async def main() -> tuple[PollResult, set[str]]:
        async with RawPeer(tls, serve_rows(good_rows("west"))) as peer:
            client = peer_client(pki, "west", peer.port)
            rounds = rounds_over([client], deadline_s=1.0)
            await rounds.round()
            await rounds.close()
            await client.close()
        assert client.latest is not None
        return client.latest.result, set(rounds.store.latest())

    assert asyncio.run(main()) == (PollResult.BAD_IDENTITY, set())


def test_the_listener_serves_only_callers_it_can_name(pki: Certs) -> None:
    """operator/src/signals.rs::a_peer_is_named_by_the_key_it_presents,
    ::site_b_is_refused_while_site_c_is_served and ::a_refusal_stops_traffic_in_both_
    directions, in gridroute's terms (SPIFFE IDs, `allowedIdentities`; no pins): an
    allowed site is served, another site of our CA and a west of another trust domain
    are refused 403."""

    async def main() -> dict[str, PollResult]:
        cfg = operator_config("hub", 0, certs=pki).model_copy(
            update={"allowed_identities": [spiffe_id("gridroute.local", "west")]}
        )
        op = Operator(cfg)
        await op.start()
        out: dict[str, PollResult] = {}
        try:
            for who, tls in [
                ("west", pki.tls("west")),
                ("east", pki.tls("east")),
                ("other-domain west", pki.tls("west", pki.foreign)),
            ]:
                outcome = await poll_as(
                    "hub",
                    f"https://127.0.0.1:{op.port}/signals?scope=own",
                    client_ssl(tls),
                    expected_identity=spiffe_id("gridroute.local", "hub"),
                )
                out[who] = outcome.result
        finally:
            await op.stop()
        return out

    assert asyncio.run(main()) == {
        "west": PollResult.OK,
        "east": PollResult.UNAUTHORIZED,
        "other-domain west": PollResult.UNAUTHORIZED,
    }


def test_a_matching_body_site_is_attributed_to_the_owner() -> None:
    """signals/src/signals.rs::a_matching_body_site_is_attributed_to_the_owner."""
    d = decode([row(QUEUE, "east", "pool-a", 3, 1000)], date=1.0, expected_site="east")
    assert [(r.sample.key, r.sample.waiting) for r in d.received] == [("east/pool-a", 3.0)]


def test_a_disagreeing_body_site_is_dropped() -> None:
    """signals/src/signals.rs::a_disagreeing_body_site_is_dropped and
    ::a_peer_other_than_the_local_operator_is_still_owner_bound: a verified east (or
    north) claiming west is dropped, neither stored as west nor rebound to itself."""
    for owner in ("east", "north"):
        d = decode([row(QUEUE, "west", "pool-a", 9, 1000)], date=1.0, expected_site=owner)
        assert d.received == () and d.dropped == {DropReason.SITE_MISMATCH: 1}


def test_each_line_is_bound_against_the_owner_independently() -> None:
    """signals/src/signals.rs::each_line_is_bound_against_the_owner_independently."""
    d = decode(
        [row(QUEUE, "east", "pool-a", 3, 1000), row(QUEUE, "west", "pool-b", 9, 1000)],
        date=1.0,
        expected_site="east",
    )
    assert keys(d) == {"east/pool-a"}


def test_a_row_from_the_local_operator_is_attributed_by_its_label() -> None:
    """signals/src/signals.rs::a_row_from_the_local_operator_is_attributed_by_its_label: a
    gateway reading its own operator keys relayed rows on their site label."""
    d = decode([row(QUEUE, "west", "pool-a", 9, 1000)], date=1.0)
    assert keys(d) == {"west/pool-a"}


@pytest.mark.xfail(strict=True, reason=STRICT)
def test_an_absent_body_site_is_stamped_with_the_owner() -> None:
    """signals/src/signals.rs::an_absent_body_site_is_stamped_with_the_owner: a row with
    grid_provider but no grid_site from a verified east is east's."""
    d = decode(
        [f'{QUEUE}{{grid_provider="pool-a"}} 7 1000', row(READY, "east", "q", 1, 1000)],
        date=1.0,
        expected_site="east",
    )
    assert "east/pool-a" in keys(d)


def test_a_peer_serving_implausible_ages_is_named(pki: Certs) -> None:
    """operator/src/peer_ages.rs::a_peer_serving_implausible_ages_is_named_in_a_true_
    condition (and ::a_clean_answer_clears_it_back_to_false): the peer whose stamps run
    past its own Date is the one named (gridroute: grid_signals_ingest_dropped_total
    {target,reason="skew"}, no Kubernetes condition), the clean peer is not."""

    def skewed(now: float) -> list[str]:
        return [row(RUNNING, "east", "p", 1, round(now * 1000) + 5000)]

    async def main() -> CollectorRegistry:
        registry = CollectorRegistry()
        metrics = PollMetrics(registry)
        async with (
            RawPeer(pki.tls("east"), serve_rows(skewed)) as east,
            RawPeer(pki.tls("west"), serve_rows(good_rows("west"))) as west,
        ):
            for site, port in (("east", east.port), ("west", west.port)):
                await poll_as(
                    site,
                    f"https://127.0.0.1:{port}/signals?scope=own",
                    client_ssl(pki.tls("hub")),
                    metrics=metrics,
                    expected_identity=spiffe_id("gridroute.local", site),
                    expected_site=site,
                )
        return registry

    registry = asyncio.run(main())

    def skew(target: str) -> float:
        labels = {"target": target, "reason": "skew"}
        return registry.get_sample_value("grid_signals_ingest_dropped_total", labels) or 0.0

    assert (skew("east"), skew("west")) == (1.0, 0.0)


# --- signals/src/signals.rs: the windowed store ---------------------------------------


def test_ingests_a_labelled_sample() -> None:
    """signals/src/signals.rs::ingests_a_labelled_sample: value and time as reported."""
    (r,) = decode([row(QUEUE, "east", "pool-a", 3, 1000)], date=1.0).received
    assert (r.sample.key, r.sample.waiting, r.sample.at, r.stamp_ms) == (
        "east/pool-a",
        3.0,
        1.0,
        1000,
    )


def test_a_republished_sample_does_not_advance_the_series() -> None:
    """signals/src/signals.rs::a_republished_sample_does_not_advance_the_series and
    ::a_sample_re_served_across_polls_is_one_observation: the same published stamp read
    three times, the local clock moving on between polls, is one observation; a new
    stamp is a second."""
    store = RelayStore("hub")
    for offset in (0.0, 1.5, 2.5):
        d = decode([row(QUEUE, "a", "p", 1, 1000)], date=1.0, offset=offset)
        store.add_peer("a", d.received)
    assert [len(h) for h in store.histories()] == [1]
    store.add_peer("a", decode([row(QUEUE, "a", "p", 2, 6000)], date=6.0).received)
    assert [len(h) for h in store.histories()] == [2]
    window = SampleWindow("a/p")
    s = Sample("a", "p", 1.0, waiting=1.0)
    assert window.add(s) and not window.add(s)


def test_a_newer_sample_advances_the_series() -> None:
    """signals/src/signals.rs::a_newer_sample_advances_the_series."""
    store = RelayStore("hub")
    store.add_peer("east", [received("east", "pool-a", 1.0, waiting=3.0)])
    store.add_peer("east", [received("east", "pool-a", 2.0, waiting=5.0)])
    assert store.latest()["east/pool-a"].waiting == 5.0


def test_samples_older_than_the_window_are_evicted() -> None:
    """signals/src/signals.rs::samples_older_than_the_window_are_evicted: of samples at 1,
    5 and 20 s under a 10 s window only the newest stays (relay store and reader)."""
    store = RelayStore("hub", window_s=10.0)
    window = SampleWindow("east/pool-a")
    for at in (1.0, 5.0, 20.0):
        store.add_peer("east", [received("east", "pool-a", at, waiting=1.0)])
        window.add(Sample("east", "pool-a", at, waiting=1.0))
    store.prune(20.0)
    window.prune(10.0)
    assert [[s.at for s in h] for h in store.histories()] == [[20.0]]
    assert window.newest is not None and window.reading(1.0) is not None
    assert window.reading(1.0).sampled_at == 20.0  # type: ignore[union-attr]


def test_sites_do_not_collide_on_a_shared_cluster_name() -> None:
    """signals/src/signals.rs::sites_do_not_collide_on_a_shared_cluster_name."""
    d = decode(
        [row(QUEUE, "east", "pool-a", 1, 1000), row(QUEUE, "west", "pool-a", 9, 1000)],
        date=1.0,
    )
    store = RelayStore("hub")
    for r in d.received:
        store.add_peer(r.sample.site, [r])
    assert {k: s.waiting for k, s in store.latest().items()} == {
        "east/pool-a": 1.0,
        "west/pool-a": 9.0,
    }


def test_a_line_without_a_timestamp_is_skipped() -> None:
    """signals/src/signals.rs::a_line_without_a_timestamp_is_skipped: without a stamp a
    republished sample cannot be told from a new one (a valid row rides along)."""
    d = decode(
        [f'{QUEUE}{{grid_site="east",grid_provider="pool-a"}} 3', row(READY, "east", "q", 1, 1000)],
        date=1.0,
    )
    assert keys(d) == {"east/q"} and d.dropped == {DropReason.PARSE: 1}


def test_unlabelled_and_malformed_lines_are_skipped_without_losing_the_rest() -> None:
    """signals/src/signals.rs::unlabelled_and_malformed_lines_are_skipped_without_losing_
    the_rest."""
    d = decode(
        [
            "# HELP something",
            f"{QUEUE} 3 1000",
            "not a metric",
            row(QUEUE, "east", "pool-a", 3, 1000),
        ],
        date=1.0,
    )
    assert keys(d) == {"east/pool-a"}


def test_a_provider_cannot_exceed_the_metric_name_cap() -> None:
    """signals/src/signals.rs::a_provider_cannot_exceed_the_metric_name_cap: a flood of
    unique metric names costs nothing; only the contract fields are held."""
    lines = [row(f"metric_{i}", "east", "pool-a", 1, 1000) for i in range(74)]
    d = decode([*lines, row(READY, "east", "pool-a", 1, 1000)], date=1.0)
    (r,) = d.received
    assert r.sample == Sample("east", "pool-a", 1.0, ready=1.0)


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param('note="x,grid_provider=evil"', id="quoted comma"),
        pytest.param('note="a\\",grid_site=evil"', id="escaped quote"),
    ],
)
@pytest.mark.xfail(strict=True, reason=STRICT)
def test_a_quoted_value_does_not_forge_a_target_label(extra: str) -> None:
    """signals/src/signals.rs::a_quoted_comma_does_not_forge_a_target_label and
    ::an_escaped_quote_does_not_forge_a_target_label: the forged label inside a quoted
    value never keys, and the row lands under its genuine site and provider."""
    line = f'{QUEUE}{{grid_site="east",grid_provider="pool-a",{extra}}} 3 1000'
    d = decode([line, row(READY, "east", "q", 1, 1000)], date=1.0)
    assert "east/evil" not in keys(d) and "evil/pool-a" not in keys(d)
    assert "east/pool-a" in keys(d)


def test_a_forged_target_label_never_keys() -> None:
    """The security half of signals/src/signals.rs::a_quoted_comma_does_not_forge_a_
    target_label and ::an_escaped_quote_does_not_forge_a_target_label, which gridroute
    meets by refusing the row."""
    for extra in ('note="x,grid_provider=evil"', 'note="a\\",grid_site=evil"'):
        line = f'{QUEUE}{{grid_site="east",grid_provider="pool-a",{extra}}} 3 1000'
        d = decode([line, row(READY, "east", "q", 1, 1000)], date=1.0)
        assert keys(d) == {"east/q"}


@pytest.mark.xfail(strict=True, reason=STRICT)
def test_an_escaped_label_value_is_parsed() -> None:
    """signals/src/signals.rs::an_escaped_label_value_is_parsed: an escaped non-target
    label value does not cost the row."""
    line = f'{QUEUE}{{extra="line\\none",grid_site="east",grid_provider="pool-a"}} 3 1000'
    d = decode([line, row(READY, "east", "q", 1, 1000)], date=1.0)
    assert "east/pool-a" in keys(d)


def test_a_slash_or_control_char_or_duplicate_target_label_is_rejected() -> None:
    """signals/src/signals.rs::a_slash_or_control_char_in_a_target_value_is_rejected and
    ::a_duplicate_target_label_is_rejected."""
    bad = [
        f'{QUEUE}{{grid_site="a/b",grid_provider="pool-a"}} 3 1000',
        f'{QUEUE}{{grid_site="ea\\nst",grid_provider="pool-a"}} 3 1000',
        f'{QUEUE}{{grid_site="east",grid_site="west",grid_provider="pool-a"}} 3 1000',
    ]
    d = decode([*bad, row(READY, "east", "q", 1, 1000)], date=1.0)
    assert keys(d) == {"east/q"} and d.dropped == {DropReason.PARSE: 3}


def test_a_non_finite_value_is_rejected() -> None:
    """signals/src/signals.rs::a_non_finite_value_is_rejected."""
    d = decode(
        [row(QUEUE, "east", "pool-a", "NaN", 1000), row(QUEUE, "east", "pool-a", "+Inf", 2000)],
        date=2.0,
    )
    assert d.received == () and d.dropped == {DropReason.PARSE: 2}


def test_a_future_sample_is_dropped_and_does_not_wedge_the_series() -> None:
    """signals/src/signals.rs::a_future_sample_is_dropped_and_does_not_wedge_the_series: a
    stamp past the Date's one-second resolution ahead of it is dropped as skew, and the
    corrected sample lands after it."""
    store = RelayStore("hub")
    d = decode([row(QUEUE, "east", "pool-a", 9, 3001)], date=2.0, expected_site="east")
    assert d.dropped == {DropReason.SKEW: 1}
    store.add_peer("east", d.received)
    store.add_peer("east", decode([row(QUEUE, "east", "pool-a", 3, 2000)], date=2.0).received)
    assert store.latest()["east/pool-a"].at == 2.0


def test_a_sample_from_a_clock_ahead_of_ours_is_withheld() -> None:
    """signals/src/signals.rs::a_sample_from_a_clock_ahead_of_ours_is_withheld: a row far
    ahead of its responder's own Date never reaches a window as fresh."""
    d = decode([row(QUEUE, "east", "pool-a", 3, 60_000)], date=10.0)
    assert d.received == () and d.dropped == {DropReason.SKEW: 1}


def test_a_stale_sample_is_withheld_from_routing() -> None:
    """signals/src/signals.rs::a_stale_sample_is_withheld_from_routing: a sample at 1 s is
    fresh at 10 s and, past a 30 s bound, stale at 60 s (gridroute: the site is silent)."""
    live = first_seen(1.0, 10.0, 30.0)
    assert live.state is Live.LIVE
    assert step(live, 1.0, 60.0, 30.0).state is Live.SILENT


def test_windowed_worst_persists_a_drained_burst() -> None:
    """signals/src/signals.rs::windowed_worst_persists_a_drained_burst: a burst of 30 then
    idle 1: the window reads 30, the latest sample 1."""
    window = SampleWindow("east/pool-a")
    window.add(Sample("east", "pool-a", 1.0, waiting=30.0))
    window.add(Sample("east", "pool-a", 5.0, waiting=1.0))
    reading = window.reading(1.0)
    assert reading is not None and reading.queued == 30.0
    assert window.newest is not None and window.newest.waiting == 1.0


def test_a_joined_worst_reads_each_instant_together() -> None:
    """signals/src/signals.rs::a_joined_worst_reads_each_instant_together: 2 units at 10,
    then 1 unit at 20: 20 in flight, never the 40 of each series' own worst."""
    window = SampleWindow("a/p")
    window.add(Sample("a", "p", 1.0, running=10.0, ready=2.0))
    window.add(Sample("a", "p", 2.0, running=20.0, ready=1.0))
    assert window.reading(1.0).in_flight == 20.0  # type: ignore[union-attr]


@pytest.mark.xfail(
    strict=True,
    reason="deliberate: docs/signals.md: 'A sample with `ready=NaN` is gone, not read with "
    "`ready` unknown (which counts as one ready endpoint)', and reference-behaviour 1.7 "
    "'A newer sample *without* the ready series means ready': an instant without a ready "
    "count is read as one endpoint, where upstream's join yields nothing for it",
)
def test_a_joined_worst_has_the_instants_of_its_first_series() -> None:
    """signals/src/signals.rs::a_joined_worst_has_the_instants_of_its_first_series: an
    instant with running 50 but no unit count yields no in-flight, so the worst is the
    earlier instant's 10 x 2 = 20."""
    d = decode(
        [
            row(RUNNING, "a", "p", 10, 1000),
            row(READY, "a", "p", 2, 1000),
            row(RUNNING, "a", "p", 50, 3000),
        ],
        date=3.0,
    )
    window = SampleWindow("a/p")
    for r in d.received:
        window.add(r.sample)
    assert window.reading(1.0).in_flight == 20.0  # type: ignore[union-attr]


def test_an_ingest_counts_what_it_kept_and_why_it_dropped_the_rest() -> None:
    """signals/src/signals.rs::an_ingest_counts_what_it_kept_and_why_it_dropped_the_rest:
    one kept, one skewed, one of another site, one unparsed; a comment is no drop."""
    d = decode(
        [
            'm{grid_site="east",grid_provider="p"} 1 1000',
            row(QUEUE, "east", "p", 1, 1000),
            row(QUEUE, "west", "p", 1, 1000),
            row(QUEUE, "east", "q", 1, 9_000_000),
            "not a sample",
            "# HELP m a comment, not a drop",
        ],
        date=1.0,
        expected_site="east",
    )
    assert keys(d) == {"east/p"}
    assert d.dropped == {DropReason.SKEW: 1, DropReason.SITE_MISMATCH: 1, DropReason.PARSE: 1}


def test_a_skewed_peer_sample_still_reads_fresh_on_the_local_clock() -> None:
    """signals/src/signals.rs::a_skewed_peer_sample_still_reads_fresh_on_the_local_clock: a
    peer 9000 s ahead whose sample is 1 s old on its clock is 1 s old on ours."""
    local_now = 5.0
    d = decode([row(QUEUE, "east", "pool-a", 4, 8_999_000)], date=9000.0, offset=local_now - 9000.0)
    (r,) = d.received
    assert abs(r.sample.at - (local_now - 1.0)) < 1e-9


_DATE_MS = 100_000_000
_LOCAL_S = 5_000.0
_DAY_MS = 86_400_000
_AGE_CASES = [
    pytest.param(_DATE_MS - 3_000, _LOCAL_S - 3.0, id="3 s old, restamped onto local now"),
    pytest.param(
        _DATE_MS + 1_000,
        _LOCAL_S,
        id="a second ahead of the Date reads as now",
        marks=pytest.mark.xfail(
            strict=True,
            reason="deliberate: docs/signals.md, Time: 'Date alone has one-second "
            "resolution, which could put a row up to a second in the reader's future' "
            "(gridroute refines the responder time with X-Grid-Time instead of clamping "
            "the age at 0; a responder without X-Grid-Time leaves the row up to 1 s ahead)",
        ),
    ),
    pytest.param(_DATE_MS + 1_001, None, id="past a second ahead is dropped"),
    pytest.param(_DATE_MS - _DAY_MS, _LOCAL_S - 86_400.0, id="a day old keeps its age"),
    pytest.param(_DATE_MS - _DAY_MS - 1, None, id="past a day old is dropped"),
]


@pytest.mark.parametrize(("stamp", "want"), _AGE_CASES)
def test_a_relayed_age_past_either_bound_is_dropped_as_skew(stamp: int, want: float | None) -> None:
    """signals/src/signals.rs::rebase_age_restamps_a_sample_onto_the_local_clock,
    ::a_relayed_age_past_either_bound_is_dropped_as_skew and operator/src/signals.rs::
    reexpress_peer_ages_preserves_age_and_rejects_implausible: the responder's Date is
    100,000 s, the reader's clock 5,000 s; the age survives, implausible ages are skew."""
    date = _DATE_MS / 1000
    d = decode([row(QUEUE, "east", "pool-a", 1, stamp)], date=date, offset=_LOCAL_S - date)
    got = d.received[0].sample.at if d.received else None
    if want is None:
        assert got is None and d.dropped == {DropReason.SKEW: 1}
    else:
        assert got is not None and abs(got - want) < 1e-6


def test_a_wall_step_between_polls_costs_nothing_on_the_timeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """signals/src/signals.rs::a_wall_step_between_polls_costs_nothing_on_the_timeline
    (and ::a_timeline_advances_with_the_monotonic_clock_from_its_start): the hub's host
    clock steps back an hour between two polls of west (9 in flight, then 2, one second
    apart on west's clock). The hub reads its clock as its Operator and SignalsClient do
    by default (`gridroute.clock.wall`); its gateway reads 2 as the newest sample, and
    the 9 still counts in the window. On `time.time` the reading froze at 9 for the
    hour (each new sample read as older than the held one)."""
    hour = 3600.0
    west_date = [1_000_000.0]
    store = RelayStore("hub")
    gateway = SampleWindow("west/p")

    def poll(value: float) -> None:
        hub_now = wall()
        offset = hub_now - west_date[0]  # what SignalsClient computes for west
        stamp = round(west_date[0] * 1000)
        lines = [row(RUNNING, "west", "p", value, stamp), row(READY, "west", "p", 1, stamp)]
        store.add_peer("west", decode(lines, date=west_date[0], offset=offset).received)
        relay = store.encode(hub_now).body  # the gateway reads its operator
        for r in decode_relay(relay, date=hub_now, offset=0.0).received:
            gateway.add(r.sample)

    poll(9.0)
    west_date[0] += 1.0
    stepped = time.time() - hour
    monkeypatch.setattr(time, "time", lambda: stepped)  # the host's clock, set back
    time.sleep(0.005)  # a few ms pass on the hub (stamps are whole milliseconds)
    poll(2.0)
    assert gateway.newest is not None and gateway.newest.running == 2.0
    assert gateway.reading(1.0).in_flight == 9.0  # type: ignore[union-attr]


# --- signals/src/signals.rs: caps -----------------------------------------------------


def test_a_single_owner_is_bounded_by_its_provider_subcap() -> None:
    """signals/src/signals.rs::a_single_owner_is_bounded_by_its_provider_subcap and
    ::concurrent_admission_holds_the_per_owner_cap_exactly: one site's flood of
    providers is bounded per site, exactly (gridroute's cap is 64, upstream's gateway
    256; upstream's operator also keeps 64 per peer)."""
    store = RelayStore("hub")
    for batch in range(8):
        rows = [received("east", f"pool-{batch}-{i}", 1.0, ready=1.0) for i in range(10)]
        store.add_peer("east", rows)
    assert len(store.latest()) == PEER_MAX_PROVIDERS


def test_one_owner_cannot_lock_out_another() -> None:
    """signals/src/signals.rs::one_owner_cannot_lock_out_another."""
    store = RelayStore("hub")
    store.add_peer("east", [received("east", f"pool-{i}", 1.0, ready=1.0) for i in range(74)])
    store.add_peer("west", [received("west", "pool-a", 1.0, waiting=9.0)])
    assert store.latest()["west/pool-a"].waiting == 9.0


def test_the_same_provider_on_many_lines_counts_once() -> None:
    """signals/src/signals.rs::the_same_provider_on_many_lines_counts_once."""
    lines = [row(QUEUE, "east", "pool-a", v, v * 1000) for v in (1, 2, 3)]
    d = decode(lines, date=3.0, max_providers=1)
    assert len(d.received) == 3 and DropReason.CAP not in d.dropped


def test_the_per_site_cap_follows_the_attributed_site_for_local_rows() -> None:
    """signals/src/signals.rs::the_per_site_cap_follows_the_attributed_site_for_local_
    rows: a gateway reading its operator's relay of three sites gives each site its own
    cap, not one shared under the operator."""
    lines = [
        row(READY, f"site-{s}", f"pool-{p:02}", 1, 1000)
        for s in range(3)
        for p in range(PEER_MAX_PROVIDERS + 6)
    ]
    d = decode(lines, date=1.0, max_lines=32_768)
    assert len(d.received) == 3 * PEER_MAX_PROVIDERS


def test_the_global_cap_backstops_across_many_owners() -> None:
    """signals/src/signals.rs::the_global_cap_backstops_across_many_owners: however many
    sites there are, what one operator relays is bounded (gridroute bounds the body,
    768 KiB, cutting the stalest peers' newest samples last, not a provider count)."""
    histories = [
        [Sample(f"site-{i}", "pool-a", 1000.0 + i, running=1.0, waiting=0.0, ready=1.0)]
        for i in range(12_000)
    ]
    encoded = encode_relay(histories, {}, local_site="hub")
    assert len(encoded.body) <= RELAY_BUDGET_BYTES
    assert encoded.cut and all(kind.value == "latest" for _, kind in encoded.cut)


def test_a_series_is_bounded_by_the_sample_cap() -> None:
    """signals/src/signals.rs::a_series_is_bounded_by_the_sample_cap: a flood of in-window
    stamps is bounded per series and the newest survives (gridroute keeps 8 per provider,
    `relaySamplesPerProvider`; upstream's gateway 128)."""
    store = RelayStore("hub")
    for ms in range(2, 2 * 628 + 1, 2):
        store.add_peer("east", [Received(ms, Sample("east", "pool-a", ms / 1000, ready=1.0))])
    (history,) = store.histories()
    assert len(history) == 8 and history[-1].at == 1.256


def test_same_instant_partitions_combine_and_a_republished_scrape_does_not() -> None:
    """signals/src/signals.rs::same_instant_lines_under_other_labels_combine_and_a_
    republished_line_does_not: flow-control partitions 0, 5 and 2 at one instant hold 7
    (summed), per-endpoint queues keep the larger; scraping the same page twice
    changes nothing."""
    page = (
        f"{RUNNING} 1\n{READY} 1\n"
        + "".join(
            f'llm_d_epp_flow_control_queue_size{{priority="{i}"}} {v}\n'
            for i, v in enumerate([0, 5, 2])
        )
        + "".join(
            f'llm_d_epp_per_endpoint_queue_size{{pod="{i}"}} {v}\n' for i, v in enumerate([0, 5, 2])
        )
    )
    first, again = scrape_each([(200, page), (200, page)], [10.0, 11.0])
    assert first is not None and again is not None
    assert (first.held, first.deepest_queue) == (7.0, 5.0)
    assert (again.held, again.deepest_queue) == (7.0, 5.0)


def test_store_window_defaults() -> None:
    """docs (reference-behaviour 1.7, 'Store retention: window_secs = 60') and
    operator/src/signals.rs PollPeers::default (peer timeout 2 s): the relay holds a
    60 s window by default; a peer poll's timeout defaults to 2 s."""
    assert RelayStore("hub").window_s == 60.0
    assert PollLimits().timeout_s == 2.0


# --- operator/src/signals.rs, readiness.rs, metrics_parser.rs: the EPP pool named ------
# One llm-d EPP can serve several InferencePools; `metricsConfig.poolName` (upstream
# `InferenceProvider.spec.metricsConfig.poolName`) names the one a provider reads. The
# pool gauges carry it on `name`, the flow-control queue on `inference_pool`.

HELD = "llm_d_epp_flow_control_queue_size"


def pool_line(metric: str, pool: str | None, value: float, label: str = POOL_NAME_LABEL) -> str:
    return f"{metric} {value}\n" if pool is None else f'{metric}{{{label}="{pool}"}} {value}\n'


def test_an_unlabeled_series_belongs_to_no_named_pool() -> None:
    """operator/src/signals.rs::an_unlabeled_series_belongs_to_no_named_pool: on a
    multi-pool EPP a series without the pool label is the total across pools, not the
    named pool's; another pool's is not either; with no pool named, it is all there is."""
    assert not in_pool(HELD, {}, "qwen3"), "unlabeled is the total across pools"
    assert not in_pool(HELD, {POOL_LABEL: "other"}, "qwen3"), "another pool"
    assert in_pool(HELD, {POOL_LABEL: "qwen3"}, "qwen3"), "this pool"
    assert in_pool(HELD, {}, None), "with no pool named, an unlabeled series is all there is"
    # the label is the series' own: the flow-control queue's `name` is not its pool
    assert not in_pool(HELD, {POOL_NAME_LABEL: "qwen3"}, "qwen3")
    assert in_pool(QUEUE, {POOL_NAME_LABEL: "qwen3"}, "qwen3")
    assert not in_pool("vllm:num_requests_running", {POOL_NAME_LABEL: "qwen3"}, "qwen3")


def test_ready_endpoints_prefer_the_current_name_and_read_the_configured_pool() -> None:
    """operator/src/readiness.rs::ready_endpoints_prefers_the_current_name_and_reads_the_
    configured_pool: qwen3's 2 of the current name, not other's 9 nor the legacy 4; the
    legacy name alone is read; an absent pool has no reading (here: no running series
    for it, so the scrape is `empty`)."""
    running = pool_line(RUNNING, "qwen3", 1)
    legacy = pool_line("inference_pool_ready_pods", "qwen3", 4)
    page = legacy + pool_line(READY, "other", 9) + pool_line(READY, "qwen3", 2) + running
    assert parse_exposition(page, pool="qwen3").ready == 2.0
    assert parse_exposition(legacy + running, pool="qwen3").ready == 4.0, "the legacy name"
    with pytest.raises(ExpositionError) as caught:
        parse_exposition(page, pool="absent")
    assert caught.value.reason == "empty" and "'absent'" in str(caught.value)


def test_flow_control_holds_count_only_for_the_named_pool() -> None:
    """operator/src/readiness.rs::in_flight_adds_requests_flow_control_holds_for_the_pool:
    4 held for qwen3, not other's 9, nor an unlabeled partition's 13."""
    page = (
        f"{pool_line(RUNNING, 'qwen3', 3)}{pool_line(READY, 'qwen3', 1)}"
        f"{pool_line(HELD, 'qwen3', 4, POOL_LABEL)}{pool_line(HELD, 'other', 9, POOL_LABEL)}"
        f"{pool_line(HELD, None, 13)}"
    )
    load = parse_exposition(page, MetricsFormat.EPP, "qwen3")
    assert load.held == 4.0
    assert parse_exposition(page).held == 26.0, "no pool named: every partition, as before"


def test_pool_averages_are_read_for_the_named_pool_when_the_epp_serves_several() -> None:
    """operator/src/readiness.rs::in_flight_uses_pool_averages_when_the_epp_serves_several_
    pools: ready qwen3 2 (llama 1), running 3 and queued 1 for qwen3 read as (3 + 1) x 2."""
    page = (
        pool_line(READY, "qwen3", 2)
        + pool_line(READY, "llama", 1)
        + pool_line(RUNNING, "qwen3", 3)
        + pool_line(RUNNING, "llama", 30)
        + pool_line(QUEUE, "qwen3", 1)
        + pool_line(QUEUE, "llama", 10)
    )
    load = parse_exposition(page, pool="qwen3")
    sample = Sample("east", "p", 1.0, running=load.running, waiting=load.waiting, ready=load.ready)
    assert sample.in_flight == 8.0


@pytest.mark.parametrize(
    ("page", "pool", "want"),
    [
        pytest.param(
            pool_line(QUEUE, "pool-a", 3.5) + pool_line(READY, "pool-a", 2),
            "pool-a",
            (None, 3.5, 2.0),
            id="pool_name_selects_matching_labeled_series",
        ),
        pytest.param(
            pool_line(QUEUE, "pool-x", 0.1) + pool_line(QUEUE, "pool-y", 0.9),
            "pool-y",
            (None, 0.9, None),
            id="pool_name_selects_correct_pool_from_multiple",
        ),
        pytest.param(
            pool_line(QUEUE, "pool-b", 0.4),
            None,
            (None, 0.4, None),
            id="pool_name_absent_allows_any_label",
        ),
    ],
)
def test_a_named_pool_selects_its_own_series(
    page: str, pool: str | None, want: tuple[float | None, ...]
) -> None:
    """operator/src/metrics_parser.rs::pool_name_selects_matching_labeled_series,
    ::pool_name_selects_correct_pool_from_multiple (pool-y's 0.9, not the first line's
    0.1) and ::pool_name_absent_allows_any_label (no pool named: a labelled series is
    read, as before)."""
    load = parse_exposition(page, pool=pool)
    assert (load.running, load.waiting, load.ready) == want


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(pool_line(QUEUE, "pool-b", 0.8), id="pool_name_rejects_wrong_pool_label"),
        pytest.param(pool_line(QUEUE, None, 0.5), id="pool_name_rejects_unlabeled_metric"),
        pytest.param(
            'unrelated_metric{name="pool-a"} 42\nother_metric{name="pool-a"} 1\n',
            id="pool_name_miss_returns_error_even_with_unrelated_metric",
        ),
        pytest.param(
            pool_line("llm_d_epp_average_kv_cache_utilization", "pool-a", 0.3)
            + pool_line(READY, "pool-a", 2),
            id="a_pool_without_running_or_queue_series",
        ),
        pytest.param("", id="pool_name_miss_no_series_at_all"),
    ],
)
def test_a_named_pool_without_its_series_is_a_failed_scrape(page: str) -> None:
    """operator/src/metrics_parser.rs::pool_name_rejects_wrong_pool_label,
    ::pool_name_rejects_unlabeled_metric, ::pool_name_miss_returns_error_even_with_
    unrelated_metric and ::pool_name_miss_no_series_at_all: upstream's parse is an Err
    when no configured signal matched the pool; here the scrape fails as `empty` (no
    running or queue series for the pool), as a standby EPP's does."""
    with pytest.raises(ExpositionError) as caught:
        parse_exposition(page, pool="pool-a")
    assert caught.value.reason == "empty" and "pool 'pool-a'" in str(caught.value)
