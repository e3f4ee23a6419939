"""The drain record is parsed strictly (reference 4.6)."""

import pytest

from gridroute.core.trafficmap import Drain
from gridroute.wire.drains import DrainError, encode_drains, parse_drains, request_problem


def test_reference_example_and_round_trip() -> None:
    text = '{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}'
    drains = parse_drains(text)
    assert drains == (Drain("maintenance-a", "worker-a", "planned maintenance"),)
    assert parse_drains(encode_drains(drains)) == drains
    assert parse_drains("{}") == ()  # no drains; no record at all means none too (the store)


def test_several_ids_may_hold_one_cluster() -> None:
    text = '{"b":{"cluster":"x","reason":"two"},"a":{"cluster":"x","reason":"one"}}'
    assert [d.id for d in parse_drains(text)] == ["a", "b"]


@pytest.mark.parametrize(
    "text",
    [
        "",  # present but empty: refused, not read as no drains
        '{"a":{"cluster":"x","reason":"r"},"a":{"cluster":"y","reason":"r"}}',  # duplicate
        '{"a":{"cluster":"x","reason":"r","until":"tomorrow"}}',  # unknown field
        '{"a":{"reason":"no cluster"}}',
        '{"a":{"cluster":"x","reason":"tab\\there"}}',
        '{"a":{"cluster":"x","reason":"line\\u2028separator"}}',
        '{"a":{"cluster":"Not_A_Label","reason":"r"}}',
        '{"a":{"cluster":"worker-a.example","reason":"r"}}',  # a DNS label, as control.yaml
        '{"A B":{"cluster":"x","reason":"r"}}',
        '["a"]',
        "{not json",
        '{"a":{"cluster":"x","reason":' + '"' + "r" * 257 + '"}}',
        '{"a":{"cluster":"x","reason":"' + "\u00e9" * 129 + '"}}',  # 258 bytes
        "{" + ",".join(f'"d{i}":{{"cluster":"x","reason":"r"}}' for i in range(65)) + "}",
    ],
)
def test_malformed_records_are_refused(text) -> None:
    with pytest.raises(DrainError, match=r"^parse ome.io/traffic-drain:"):
        parse_drains(text)


def test_a_reason_is_bounded_in_bytes_and_may_be_unicode() -> None:
    reason = "planned maintenance — rack 2 " + "é" * 112 + "x"  # 256 bytes
    assert len(reason.encode()) == 256
    text = encode_drains((Drain("a", "x", reason),))
    assert parse_drains(text) == (Drain("a", "x", reason),)


@pytest.mark.parametrize(
    ("drain", "field"),
    [
        (Drain("ok", "cluster-a", "Replace node pool #2 after 02:00 UTC"), None),
        (Drain("", "cluster-a", "safe"), "id"),
        (Drain("ok", "worker-a.example", "safe"), "cluster"),
        (Drain("ok", "cluster-a", "key sk-123456789012345678901234"), "reason"),
        (Drain("ok", "cluster-a", "a" * 16 + "." + "b" * 16 + "." + "c" * 16), "reason"),
        (Drain("sk-abcdefghijklmnopqrstuvwxyz", "cluster-a", "safe"), None),  # a DNS label
        (Drain("ok", "cluster-a", "task-1234567890123456789012345"), None),  # not sk-
    ],
)
def test_request_problem_names_the_field(drain: Drain, field: str | None) -> None:
    problem = request_problem(drain)
    assert (problem and problem[0]) == field, problem


def test_a_record_of_an_earlier_version_is_read_and_can_be_undrained() -> None:
    """Earlier versions' CLI wrote `"reason": ""` by default (and older records left it
    out): read as written, not refused, or an upgrade would hold the service's map at
    its last table with no way to undrain but editing the file."""
    text = (
        '{"old-drain": {"cluster": "cluster-a", "reason": ""}, "older": {"cluster": "b"},'
        ' "padded": {"cluster": "c", "reason": " padded"}}'
    )
    assert parse_drains(text) == (
        Drain("old-drain", "cluster-a", ""),
        Drain("older", "b", ""),
        Drain("padded", "c", " padded"),
    )
    assert request_problem(Drain("old-drain", "cluster-a", ""), stored=True) is None
    assert request_problem(Drain("new-drain", "cluster-a", ""))[0] == "reason"  # type: ignore[index]


def test_a_name_starting_sk_is_a_name_not_a_secret() -> None:
    """The secret shape guards the free-text reason only: `sk-` opens real DNS labels."""
    name = "sk-bratislava-production-1"
    assert request_problem(Drain(f"{name}-drain", name, "maintenance")) is None
    assert request_problem(Drain("d", "a", "key sk-123456789012345678901234"))[0] == "reason"  # type: ignore[index]
