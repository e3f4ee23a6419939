"""Fuzzing what crosses a trust boundary: request bodies, config files, signals bodies
and metrics pages. Each parser takes any bytes and either answers or refuses in its
documented way; nothing else escapes. Seeds live in tests/fuzz/corpus/ and in
examples/ (every shipped config), and hypothesis mutates from there."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridroute.config import ConfigError
from gridroute.gateway.config import parse_config as parse_gateway
from gridroute.gateway.request_body import parse_model
from gridroute.inbound.client_errors import Kind
from gridroute.operator.config import parse_config as parse_operator
from gridroute.wire.prometheus import ExpositionError, parse_exposition
from gridroute.wire.signals import RelayTooLarge, RelayUndecodable, decode_relay

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "corpus"
REQUESTS = sorted((CORPUS / "requests").iterdir())
EXAMPLES = [
    ROOT / "examples" / "gateway.yaml",
    *sorted((ROOT / "examples").glob("operator*.yaml"))[:1],
]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _mutate(seed: bytes, data: st.DataObject) -> bytes:
    """Cut, splice and flip a seed: the near-valid inputs a parser meets."""
    if not seed:
        return data.draw(st.binary(max_size=200))
    i = data.draw(st.integers(0, len(seed)))
    j = data.draw(st.integers(i, len(seed)))
    junk = data.draw(st.binary(max_size=16))
    return seed[:i] + junk + seed[j:]


def _model_or_refusal(body: bytes) -> None:
    got = parse_model(body)
    if isinstance(got, tuple):
        kind, error = got
        assert kind in (Kind.INVALID_JSON, Kind.MISSING_MODEL)
        assert error.startswith(b'{"error":')
    else:
        assert isinstance(got, str) and got


@pytest.mark.parametrize("seed", REQUESTS, ids=[p.name for p in REQUESTS])
def test_request_corpus_parses_or_is_refused(seed: Path) -> None:
    _model_or_refusal(seed.read_bytes())


@FUZZ
@given(st.data())
def test_mutated_request_bodies_parse_or_are_refused(data: st.DataObject) -> None:
    seed = REQUESTS[data.draw(st.integers(0, len(REQUESTS) - 1))].read_bytes()
    _model_or_refusal(_mutate(seed, data))


JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=4),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(JSON_VALUES)
def test_arbitrary_json_documents_parse_or_are_refused(doc: object) -> None:
    import json

    _model_or_refusal(json.dumps({"model": doc}).encode())


def test_json_nested_far_too_deep_is_a_refusal_not_a_crash() -> None:
    got = parse_model(b"[" * 200_000 + b"]" * 200_000)
    assert isinstance(got, tuple) and got[0] is Kind.INVALID_JSON


def _gateway_or_config_error(text: str) -> None:
    try:
        parse_gateway(text, "fuzz.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.yaml")


@pytest.mark.parametrize("seed", EXAMPLES, ids=[p.name for p in EXAMPLES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_config_files_load_or_fail_with_a_config_error(
    seed: Path, data: st.DataObject
) -> None:
    text = _mutate(seed.read_bytes(), data).decode("utf-8", "replace")
    _gateway_or_config_error(text)
    try:
        import yaml

        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    with contextlib.suppress(ConfigError):
        parse_operator(loaded, "fuzz.yaml")


@FUZZ
@given(st.binary(max_size=2000))
def test_signals_bodies_decode_or_are_refused(body: bytes) -> None:
    with contextlib.suppress(RelayUndecodable, RelayTooLarge):
        decode_relay(body, date=time.time(), offset=0.0)


@FUZZ
@given(st.text(max_size=2000))
def test_metrics_pages_parse_or_are_refused(text: str) -> None:
    with contextlib.suppress(ExpositionError):  # the documented refusal of a page
        parse_exposition(text)
