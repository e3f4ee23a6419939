"""Multi-turn sessions and a per-site KV cache: what prefix affinity is measured on.

A client works through conversations one turn at a time: each conversation starts from
one of a few shared system prompts and grows by `turn_tokens` per turn (the user's
question and the answer). A prompt is a sequence of fixed-size token blocks, each named
by a chained id (the system prompt's blocks are shared by every conversation that uses
it), so the gateway's prefix fingerprint and the site's cache read the same blocks.

A site's KV cache holds `kv_cache_tokens` worth of blocks, least recently used evicted
first: a request's cached prefix is its leading blocks still held there, and its
prefill is the rest, at `prefill_tokens_per_second`. So a hit is only a hit while the
cache still holds it, and a site given too many conversations evicts them.
"""

from __future__ import annotations

from collections import OrderedDict
from random import Random

from pydantic import BaseModel, ConfigDict, Field

BLOCK_TOKENS = 256
"""Tokens per block (the gateway's 1 KiB block at about 4 bytes a token)."""


class SessionsSpec(BaseModel):
    """The multi-turn workload (scenario `sessions:`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    system_prompts: int = Field(4, ge=1)
    """Distinct system prompts the conversations share (drawn uniformly)."""
    system_tokens: int = Field(2048, ge=0)
    """Tokens of each system prompt."""
    turn_tokens: int = Field(512, ge=1)
    """Tokens each turn adds to the history (question and answer)."""
    turns_min: int = Field(2, ge=1)
    """Fewest turns of a conversation (uniform between min and max)."""
    turns_max: int = Field(12, ge=1)
    """Most turns of a conversation."""
    prefill_tokens_per_second: float = Field(10000.0, gt=0)
    """Prefill speed of every site: uncached tokens / this = the prefill time."""
    kv_cache_tokens: int = Field(200_000, ge=0)
    """KV-cache capacity of each site, in tokens (LRU over blocks)."""


class Conversation:
    """One client's current conversation: its id, system prompt and turns left."""

    __slots__ = ("ident", "system", "turn", "turns")

    def __init__(self, ident: int, system: int, turns: int) -> None:
        self.ident = ident
        self.system = system
        self.turns = turns
        self.turn = 0


class Workload:
    """Conversations for every client, drawn from one seeded source."""

    __slots__ = ("_next", "current", "rng", "spec", "started")

    def __init__(self, spec: SessionsSpec, rng: Random) -> None:
        self.spec = spec
        self.rng = rng
        self.current: dict[int, Conversation] = {}
        self._next = 0
        self.started = 0
        """Conversations begun so far (the report's `sessions`)."""

    def prompt(self, client: int) -> tuple[tuple[int, ...], int]:
        """The next turn of `client`'s conversation: its block ids and prompt tokens."""
        s = self.spec
        conv = self.current.get(client)
        if conv is None or conv.turn >= conv.turns:
            lo, hi = s.turns_min, max(s.turns_min, s.turns_max)
            conv = Conversation(self._next, self.rng.randrange(s.system_prompts), 0)
            conv.turns = self.rng.randint(lo, hi)
            self._next += 1
            self.started += 1
            self.current[client] = conv
        conv.turn += 1
        tokens = s.system_tokens + conv.turn * s.turn_tokens
        n = tokens // BLOCK_TOKENS  # whole blocks: a server caches whole pages only
        shared = s.system_tokens // BLOCK_TOKENS
        blocks = tuple(
            hash((0, conv.system, i)) if i < shared else hash((1, conv.ident, i)) for i in range(n)
        )
        return blocks, tokens


class KvCache:
    """One site's KV cache: blocks, least recently used evicted past the capacity."""

    __slots__ = ("_blocks", "capacity")

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity = capacity_tokens // BLOCK_TOKENS
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def serve(self, blocks: tuple[int, ...]) -> int:
        """Blocks of `blocks` already cached (its leading run), then cache them all."""
        cached = 0
        held = self._blocks
        for b in blocks:
            if b not in held:
                break
            cached += 1
        for b in blocks:
            held[b] = None
            held.move_to_end(b)
        while len(held) > self.capacity:
            held.popitem(last=False)
        return cached

    def __len__(self) -> int:
        return len(self._blocks)
