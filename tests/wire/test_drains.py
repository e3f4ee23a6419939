"""The drain record is parsed strictly (reference 4.6)."""

import pytest

from gridroute.core.trafficmap import Drain
from gridroute.wire.drains import DrainError, encode_drains, parse_drains


def test_reference_example_and_round_trip() -> None:
    text = '{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}'
    drains = parse_drains(text)
    assert drains == (Drain("maintenance-a", "worker-a", "planned maintenance"),)
    assert parse_drains(encode_drains(drains)) == drains
    assert parse_drains("") == ()


def test_several_ids_may_hold_one_cluster() -> None:
    text = '{"b":{"cluster":"x"},"a":{"cluster":"x","reason":""}}'
    assert [d.id for d in parse_drains(text)] == ["a", "b"]


@pytest.mark.parametrize(
    "text",
    [
        '{"a":{"cluster":"x"},"a":{"cluster":"y"}}',  # duplicate
        '{"a":{"cluster":"x","until":"tomorrow"}}',  # unknown field
        '{"a":{"reason":"no cluster"}}',
        '{"a":{"cluster":"Not_A_Label"}}',
        '{"A B":{"cluster":"x"}}',
        '["a"]',
        "{not json",
        '{"a":{"cluster":"x","reason":' + '"' + "r" * 300 + '"}}',
        "{" + ",".join(f'"d{i}":{{"cluster":"x"}}' for i in range(65)) + "}",  # overflow
    ],
)
def test_malformed_records_are_refused(text) -> None:
    with pytest.raises(DrainError, match=r"^parse ome.io/traffic-drain:"):
        parse_drains(text)
