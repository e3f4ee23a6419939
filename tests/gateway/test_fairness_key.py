"""Which fairness key a request gets (gateway/fairness_key.py), and its fallbacks."""

from __future__ import annotations

import json

import pytest

from gridroute.gateway.fairness_key import MAX_KEY_CHARS, fairness_key, valid_source

ADDR = "203.0.113.7"


def body(**fields: object) -> bytes:
    return json.dumps({"model": "m", **fields}).encode()


def test_the_api_key_is_the_default_and_is_kept_only_as_a_digest() -> None:
    key = fairness_key("api_key", {"Authorization": "Bearer sk-secret"}, ADDR, body())
    assert key.startswith("key:") and "sk-secret" not in key
    other = fairness_key("api_key", {"Authorization": "Bearer sk-other"}, ADDR, body())
    assert other != key


def test_user_and_header_sources() -> None:
    assert fairness_key("user", {}, ADDR, body(user="alice")) == "user:alice"
    assert fairness_key("header:x-tenant", {"x-tenant": "t1"}, ADDR, body()) == "hdr:t1"
    assert fairness_key("address", {"Authorization": "Bearer k"}, ADDR, body()) == f"addr:{ADDR}"


@pytest.mark.parametrize(
    ("source", "headers", "payload"),
    [
        ("api_key", {}, body()),  # absent
        ("api_key", {"Authorization": "Bearer "}, body()),  # empty
        ("api_key", {"Authorization": "Basic abc"}, body()),  # not a bearer token
        ("api_key", {"Authorization": "Bearer " + "k" * (MAX_KEY_CHARS + 1)}, body()),
        ("user", {}, body()),
        ("user", {}, body(user="")),
        ("user", {}, body(user=7)),
        ("user", {}, body(user="u" * (MAX_KEY_CHARS + 1))),
        ("user", {}, b'{"user": broken'),
        ("header:x-tenant", {}, body()),
        ("header:x-tenant", {"x-tenant": ""}, body()),
        ("header:x-tenant", {"x-tenant": "t" * (MAX_KEY_CHARS + 1)}, body()),
    ],
)
def test_a_bad_absent_or_long_key_falls_back_to_the_address(
    source: str, headers: dict[str, str], payload: bytes
) -> None:
    assert fairness_key(source, headers, ADDR, payload) == f"addr:{ADDR}"


def test_sources_are_validated() -> None:
    assert all(valid_source(s) for s in ("api_key", "user", "address", "header:x-a_b"))
    assert not any(valid_source(s) for s in ("", "cookie", "header:", "header:a b"))
