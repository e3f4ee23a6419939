"""The /signals payload: round trip, the byte budget, every drop reason, fuzzing."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridroute.core.sample import Sample
from gridroute.wire.signals import (
    PEER_MAX_LINES,
    READ_LIMIT_BYTES,
    ROUND_END,
    Cut,
    DropReason,
    RelayTooLarge,
    RelayUndecodable,
    Store,
    decode_relay,
    encode_relay,
)

NOW = 1_700_000_000.0


def sample(site: str = "west", provider: str = "pool-a", at: float = NOW, **kw: float) -> Sample:
    values = {"running": 3.5, "waiting": 0.0, "ready": 2.0, "held": 0.0} | kw
    return Sample(site=site, provider=provider, at=at, generation=7, **values)  # type: ignore[arg-type]


def test_round_trip_keeps_every_field_and_rebases_time() -> None:
    full = sample(deepest_queue=1.0, kv_usage=0.25, max_running=64.0)
    body = encode_relay([[full]], {"east": NOW - 0.5}, local_site="west").body
    decoded = decode_relay(body, date=NOW, offset=100.0)
    assert decoded.dropped == {}
    (got,) = decoded.received
    assert got.stamp_ms == round(NOW * 1000)
    assert got.sample == Sample(
        site="west",
        provider="pool-a",
        at=NOW + 100.0,
        running=3.5,
        waiting=0.0,
        ready=2.0,
        held=0.0,
        deepest_queue=1.0,
        kv_usage=0.25,
        max_running=64.0,
        generation=7,
    )
    assert decoded.round_ends == {"east": pytest.approx(NOW - 0.5 + 100.0)}


def test_absent_fields_stay_absent() -> None:
    bare = Sample(site="west", provider="p", at=NOW, ready=0.0)
    (got,) = decode_relay(
        encode_relay([[bare]], {}, local_site="west").body, date=NOW, offset=0
    ).received
    assert got.sample.running is None and got.sample.waiting is None
    assert got.sample.ready == 0.0 and got.sample.generation is None


def test_body_is_valid_prometheus_text() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    histories = [[sample(provider=f"p{i}", at=NOW - k) for k in (2, 1, 0)] for i in range(3)]
    body = encode_relay(histories, {"east": NOW}, local_site="west").body.decode()
    names = {f.name for f in text_string_to_metric_families(body)}
    assert "llm_d_epp_average_running_requests" in names and ROUND_END in names


def test_budget_cuts_history_first_then_detail_then_stalest_peers_and_counts_them() -> None:
    local = [sample(site="hub", provider="own", at=NOW - k, kv_usage=0.1) for k in (3, 2, 1, 0)]
    peers = [
        [sample(site=f"s{i}", at=NOW - i - k, kv_usage=0.1) for k in (3, 2, 1, 0)]
        for i in range(1, 40)
    ]
    histories = [local, *peers]
    everything = encode_relay(histories, {}, local_site="hub")
    assert everything.cut == {}
    full = len(everything.body)

    no_history = encode_relay(histories, {}, local_site="hub", budget=full // 3)
    assert {kind for _, kind in no_history.cut} == {Cut.HISTORY}
    assert len(no_history.body) <= full // 3

    tight = encode_relay(histories, {}, local_site="hub", budget=2500)
    assert len(tight.body) <= 2500
    assert tight.cut[(Store.PEER, Cut.LATEST)] > 0
    assert (Store.LOCAL, Cut.LATEST) not in tight.cut
    got = decode_relay(tight.body, date=NOW, offset=0, max_lines=10**6)
    sites = {r.sample.site for r in got.received}
    assert "hub" in sites
    # the freshest peers survive, the stalest are cut
    assert "s1" in sites and "s39" not in sites
    # a provider is never half present: every kept sample has its core fields
    assert all(r.sample.ready == 2.0 and r.sample.running == 3.5 for r in got.received)


def test_too_large_body_is_refused() -> None:
    with pytest.raises(RelayTooLarge):
        decode_relay(b"#" * (READ_LIMIT_BYTES + 1), date=NOW, offset=0)


def rows(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def line(site: str = "west", provider: str = "pool-a", value: str = "1", stamp: float = NOW) -> str:
    return (
        f'llm_d_epp_average_running_requests{{grid_site="{site}",grid_provider="{provider}"}}'
        f" {value} {round(stamp * 1000)}"
    )


def test_skew_drops_rows_from_the_future_and_the_distant_past() -> None:
    body = rows(
        line(stamp=NOW + 0.9),  # within the Date's one-second resolution: kept
        line(provider="b", stamp=NOW + 1.5),
        line(provider="c", stamp=NOW - 86_401),
        line(provider="d", stamp=NOW - 86_000),
    )
    got = decode_relay(body, date=NOW, offset=0)
    assert got.dropped == {DropReason.SKEW: 2}
    assert sorted(r.sample.provider for r in got.received) == ["d", "pool-a"]


def test_site_mismatch_when_a_peer_speaks_for_another_site() -> None:
    body = rows(
        line(site="west"),
        line(site="east"),
        f'{ROUND_END}{{grid_site="hub"}} 1 {round(NOW * 1000)}',
    )
    got = decode_relay(body, date=NOW, offset=0, expected_site="west")
    assert got.dropped == {DropReason.SITE_MISMATCH: 2}
    assert [r.sample.site for r in got.received] == ["west"]
    assert got.round_ends == {}


def test_cap_on_lines_and_on_providers_per_site() -> None:
    many = rows(*(line(provider=f"p{i % 50}", stamp=NOW - i) for i in range(PEER_MAX_LINES + 10)))
    got = decode_relay(many, date=NOW, offset=0)
    assert got.dropped == {DropReason.CAP: 10}
    wide = rows(*(line(provider=f"p{i}") for i in range(70)))
    got = decode_relay(wide, date=NOW, offset=0)
    assert got.dropped == {DropReason.CAP: 6}
    assert len({r.sample.provider for r in got.received}) == 64


@pytest.mark.parametrize(
    "bad",
    [
        line(value="abc"),
        line(value="NaN"),
        line(provider="has space"),
        'llm_d_epp_average_running_requests{grid_site="west"} 1 1700000000000',
        f'{ROUND_END}{{grid_site="west",grid_provider="x"}} 1 1700000000000',
        f'grid_provider_config_generation{{grid_site="w",grid_provider="p"}} 1.5 {int(NOW * 1000)}',
        "<html>",
    ],
)
def test_parse_drops(bad: str) -> None:
    got = decode_relay(rows(bad, line(provider="other")), date=NOW, offset=0)
    assert got.dropped == {DropReason.PARSE: 1}
    assert [r.sample.provider for r in got.received] == ["other"]


def _sample_rows(provider: str, ready: str, stamp: float = NOW) -> list[str]:
    ms = round(stamp * 1000)
    labels = f'{{grid_site="west",grid_provider="{provider}"}}'
    return [
        f"llm_d_epp_average_running_requests{labels} 0 {ms}",
        f"llm_d_epp_average_queue_size{labels} 0 {ms}",
        f"llm_d_epp_ready_endpoints{labels} {ready} {ms}",
        f"grid_provider_config_generation{labels} 1 {ms}",
        f"grid_provider_max_running{labels} 8 {ms}",
    ]


@pytest.mark.parametrize("ready", ["NaN", "abc", "+Inf", "1e999"])
def test_a_sample_with_an_unparseable_row_is_dropped_whole(ready: str) -> None:
    body = rows(*_sample_rows("bad", ready), *_sample_rows("good", "1"))
    got = decode_relay(body, date=NOW, offset=0)
    assert [r.sample.provider for r in got.received] == ["good"]  # never ready=None
    assert got.dropped == {DropReason.PARSE: 5}


def test_a_sample_cut_by_the_line_cap_is_dropped_whole() -> None:
    body = rows(*_sample_rows("a", "1"), *_sample_rows("b", "1"))
    got = decode_relay(body, date=NOW, offset=0, max_lines=7)
    assert [r.sample.provider for r in got.received] == ["a"]
    assert got.dropped == {DropReason.CAP: 5}


@pytest.mark.parametrize(
    "body",
    [
        b"<html><body>502 Bad Gateway</body></html>\n",
        b"\xff\xfe\x00garbage",
        b"",
        b"{}",
        b"llm_d_epp_ready_endpoints 1\nnot a row\n",
    ],
)
def test_a_body_that_is_not_a_relay_is_undecodable(body: bytes) -> None:
    with pytest.raises(RelayUndecodable):
        decode_relay(body, date=NOW, offset=0)


def test_an_empty_relay_with_its_header_decodes_to_nothing() -> None:
    got = decode_relay(b"# gridroute signals v1\n", date=NOW, offset=0)
    assert got.received == () and got.dropped == {}


def test_unknown_series_of_a_newer_operator_are_ignored_silently() -> None:
    got = decode_relay(rows('grid_new_thing{grid_site="w"} 1 1', line()), date=NOW, offset=0)
    assert got.dropped == {} and len(got.received) == 1


def test_implausible_values_are_sanitized_not_trusted() -> None:
    """A huge count reads as absent; a negative one is outside the contract and drops its
    row (as the reference's hub refuses it): clamped to 0 it read a site as idle."""
    got = decode_relay(rows(line(value="1e12"), line(provider="b", value="-3")), date=NOW, offset=0)
    by = {r.sample.provider: r.sample for r in got.received}
    assert by["pool-a"].running is None and "b" not in by
    assert got.dropped[DropReason.PARSE] == 1


# --- fuzzing ------------------------------------------------------------------------

_names = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
_counts = st.none() | st.floats(0, 1e6, allow_nan=False)


@st.composite
def samples(draw: st.DrawFn) -> Sample:
    return Sample(
        site=draw(_names),
        provider=draw(_names),
        at=NOW - draw(st.integers(0, 3600_000)) / 1000.0,
        running=draw(_counts),
        waiting=draw(_counts),
        ready=draw(_counts),
        held=draw(_counts),
        deepest_queue=draw(_counts),
        kv_usage=draw(st.none() | st.floats(0, 1)),
        max_running=draw(_counts),
        generation=draw(st.none() | st.integers(0, 2**48)),
    )


@given(st.lists(samples(), max_size=20))
@settings(max_examples=150)
def test_every_encoded_sample_decodes_to_itself(items: list[Sample]) -> None:
    latest: dict[tuple[str, str, int], Sample] = {}
    for s in items:
        if any(v is not None for v in (s.running, s.waiting, s.ready, s.held, s.generation)):
            latest[(s.site, s.provider, round(s.at * 1000))] = s
    histories = [[s] for s in latest.values()]
    body = encode_relay(histories, {}, local_site="x").body
    got = decode_relay(body, date=NOW, offset=0, max_lines=10**6, max_providers=10**6)
    assert got.dropped == {}
    by_key = {(r.sample.site, r.sample.provider, r.stamp_ms): r.sample for r in got.received}
    for key, s in latest.items():
        back = by_key[key]
        for attr in ("running", "waiting", "ready", "held", "kv_usage", "generation"):
            assert getattr(back, attr) == pytest.approx(getattr(s, attr)), attr


@given(st.binary(max_size=4000))
@settings(max_examples=300)
def test_arbitrary_bodies_decode_or_are_refused_as_undecodable(body: bytes) -> None:
    try:
        got = decode_relay(body, date=NOW, offset=0, expected_site="west")
    except RelayUndecodable:
        return  # the one refusal a reader makes of content: the poll fails
    assert sum(got.dropped.values()) + len(got.received) <= got.lines + 1


@given(st.lists(st.sampled_from([line(), line(site="x"), line(value="q"), "#c", ""]), max_size=50))
def test_near_valid_bodies_count_every_line_once(lines: list[str]) -> None:
    try:
        got = decode_relay(rows(*lines), date=NOW, offset=0, expected_site="west")
    except RelayUndecodable:
        assert all(x in ("", "#c") or x == line(value="q") for x in lines)
        return
    counted = sum(got.dropped.values()) + (1 if got.received else 0)
    assert counted <= got.lines
    assert got.lines == sum(1 for x in lines if x and not x.startswith("#"))


def test_decoding_a_full_body_allocates_in_proportion_to_it() -> None:
    body = rows(*(line(provider=f"p{i % 64}", stamp=NOW - i / 1000) for i in range(12_000)))
    body = body[:READ_LIMIT_BYTES]
    tracemalloc.start()
    try:
        decode_relay(body, date=NOW, offset=0, max_lines=10**6)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * len(body)
