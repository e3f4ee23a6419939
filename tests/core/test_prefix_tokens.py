"""The tokenizer-exact prefix fingerprint (`prefix_affinity.tokenizer`,
docs/prefix-affinity.md): the rendering of a chat request's messages, token blocks that
two turns of one conversation share, the config errors naming the field. The tests that
need the real vocabularies (`splintr-rs`, the `gridroute[tokenizer]` extra) skip
cleanly without it; the rest use a tiny encoder of their own."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from gridroute.config import ConfigError
from gridroute.core.prefix import (
    PrefixAffinitySettings,
    PrefixMap,
    PrefixRequest,
    fingerprint_messages,
    load_tokenizer,
    render_messages,
)
from gridroute.gateway.config import parse_config

SYSTEM = "You are a careful assistant who answers briefly and cites sources. " * 120


def _words(text: str) -> list[int]:
    """A tiny encoder: one id per whitespace-separated word (stable across processes)."""
    return [sum(map(ord, w)) for w in text.split()]


def _conversation(turns: int) -> list[dict[str, object]]:
    msgs: list[dict[str, object]] = [{"role": "system", "content": SYSTEM}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"question {i}: " + "why so? " * 40})
        msgs.append({"role": "assistant", "content": f"answer {i} " * 60})
    return msgs


@pytest.fixture
def fresh_loader() -> Iterator[None]:
    load_tokenizer.cache_clear()
    yield
    load_tokenizer.cache_clear()


def test_messages_render_as_a_chat_template_lays_them_out() -> None:
    msgs = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look at "},
                {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
            ],
        },
        {"role": "assistant", "content": None},
    ]
    assert render_messages(msgs, 10_000) == (
        "<|im_start|>system\nbe brief<|im_end|>\n"
        '<|im_start|>user\nlook at {"image_url": {"url": "http://x/y.png"}, '
        '"type": "image_url"}<|im_end|>\n'
        "<|im_start|>assistant\n<|im_end|>\n"
    )
    assert render_messages(msgs, 20) == "<|im_start|>system\nb"  # bounded
    assert render_messages("not a list", 100) == ""
    assert render_messages([1, "x"], 100) == ""


def test_two_turns_share_their_leading_token_blocks() -> None:
    one = fingerprint_messages(_conversation(1), _words, block_tokens=64)
    two = fingerprint_messages(_conversation(2), _words, block_tokens=64)
    assert len(two) > len(one) > 2
    # Every block of the first turn is a leading block of the second: only whole blocks
    # are hashed, so the partial one cut where the first turn's text ended is not.
    assert two[: len(one)] == one
    table = PrefixMap()
    s = PrefixAffinitySettings.model_construct(tokenizer="words", block_tokens=64)
    PrefixRequest.start(one, s, table, 0.0).served("a", 0.0)
    assert PrefixRequest.start(two, s, table, 1.0).matches == {"a": len(one)}


def test_the_fingerprint_is_bounded_in_blocks_and_in_text() -> None:
    seen: list[int] = []

    def encode(text: str) -> list[int]:
        seen.append(len(text))
        return _words(text)

    blocks = fingerprint_messages(_conversation(200), encode, block_tokens=16, max_blocks=8)
    assert len(blocks) == 8
    assert seen == [16 * 8 * 2 * 4]  # the rendered text is cut before encoding
    assert fingerprint_messages([], encode) == ()


def test_the_saving_counts_block_tokens_in_token_mode() -> None:
    tok = PrefixAffinitySettings.model_construct(
        **{**PrefixAffinitySettings().model_dump(), "tokenizer": "x", "block_tokens": 512}
    )
    assert tok.tokens_per_block == 512.0
    assert PrefixAffinitySettings().tokens_per_block == 256.0  # 1 KiB / 4 bytes per token


def test_a_missing_package_is_a_config_error_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: None
) -> None:
    monkeypatch.setitem(sys.modules, "splintr", None)  # import splintr -> ImportError
    text = (
        "sites: [{name: b, backend_url: 'http://127.0.0.1:1'}]\nmodels: [{name: m}]\n"
        "prefix_affinity: {tokenizer: llama3}\n"
    )
    with pytest.raises(ConfigError, match=r"prefix_affinity\.tokenizer.*splintr-rs"):
        parse_config(text)


def test_tokenizer_null_is_the_byte_mode() -> None:
    text = (
        "sites: [{name: b, backend_url: 'http://127.0.0.1:1'}]\nmodels: [{name: m}]\n"
        "prefix_affinity: {tokenizer: null}\n"
    )
    pa = parse_config(text).prefix_affinity
    assert pa.tokenizer is None and pa.block_tokens == 256


def test_an_unknown_tokenizer_is_a_config_error_naming_the_field(fresh_loader: None) -> None:
    pytest.importorskip("splintr", reason="the tokenizer extra (splintr-rs) is not installed")
    text = (
        "sites: [{name: b, backend_url: 'http://127.0.0.1:1'}]\nmodels: [{name: m}]\n"
        "prefix_affinity: {tokenizer: no-such-vocabulary}\n"
    )
    with pytest.raises(ConfigError, match=r"prefix_affinity\.tokenizer.*unknown tokenizer"):
        parse_config(text)


@pytest.mark.parametrize("name", ["llama3", "qwen3", "cl100k_base"])
def test_two_turns_share_their_leading_blocks_with_a_real_vocabulary(
    name: str, fresh_loader: None
) -> None:
    pytest.importorskip("splintr", reason="the tokenizer extra (splintr-rs) is not installed")
    text = (
        "sites: [{name: b, backend_url: 'http://127.0.0.1:1'}]\nmodels: [{name: m}]\n"
        f"prefix_affinity: {{tokenizer: {name}, block_tokens: 128}}\n"
    )
    pa = parse_config(text).prefix_affinity
    encode = load_tokenizer(name)
    one = fingerprint_messages(_conversation(1), encode, pa.block_tokens, pa.max_blocks)
    two = fingerprint_messages(_conversation(2), encode, pa.block_tokens, pa.max_blocks)
    assert len(two) > len(one) > 4
    # BPE may merge across the point where the first turn's text ended, so only the
    # blocks wholly before that point are guaranteed: all but the last one (the first
    # turn's last whole block may end inside a token BPE merges differently later).
    pairs = enumerate(zip(one, two, strict=False))
    shared = next((i for i, (a, b) in pairs if a != b), len(one))
    assert shared >= len(one) - 1
    # A different conversation shares nothing.
    other = [{"role": "system", "content": "Something else entirely. " * 200}]
    assert fingerprint_messages(other, encode, pa.block_tokens)[0] != one[0]
