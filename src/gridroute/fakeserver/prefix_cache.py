"""A fake prefix cache: which leading messages of a chat this server has seen.

Enough for tests to see a cached-prefix hit the way vLLM reports one
(`usage.prompt_tokens_details.cached_tokens`): the tokens of the longest run of leading
messages of a request that an earlier request to this server already had. Bounded
(least recently used forgotten first); no eviction by size, no blocks.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from gridroute.fakeserver.openai_shapes import estimate_tokens


class PrefixCache:
    """Leading-message prefixes seen, at most `max_entries`."""

    __slots__ = ("_seen", "max_entries")

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._seen: OrderedDict[str, None] = OrderedDict()

    def serve(self, messages: Any) -> int:
        """Tokens of the longest leading run of `messages` seen before; then remember
        every leading run of them."""
        if not isinstance(messages, list):
            return 0
        cached = 0
        tokens = 0
        keys = []
        for i, message in enumerate(messages):
            tokens += estimate_tokens(message)
            key = json.dumps(messages[: i + 1], sort_keys=True)
            keys.append(key)
            if key in self._seen:
                cached = tokens
        for key in keys:
            self._seen[key] = None
            self._seen.move_to_end(key)
        while len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)
        return cached
