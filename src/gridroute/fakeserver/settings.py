"""Settings of one fake model server: the single source of truth for its defaults.

The fake server stands in for vLLM in demos, tests and benchmarks, so every knob here
is something that changes what a router sees: how many requests run at once, how long
they take, how the queue behaves when full, and which name the server answers under.
The CLI (`gridroute fake-server`) reads its defaults from this model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Distribution = Literal["constant", "exponential", "lognormal"]


class FakeServerConfig(BaseModel):
    """How one fake OpenAI-compatible model server behaves.

    Each model name is served by its own engine with `slots` slots, its own FIFO queue
    and its own metric series (`model_name` label), the way a site that serves two
    models runs two vLLM engines. Capacity can change live through `/admin/slots`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: list[str] = Field(default_factory=lambda: ["fake-model"], min_length=1)
    """Model names served; requests for any other name get a 404 `model_not_found`."""

    slots: int = Field(default=128, ge=0)
    """Requests one model's engine runs at once; later arrivals wait in a FIFO queue."""

    service_s: float = Field(default=0.2, ge=0.0)
    """Mean service time in seconds. Without `per_token_s` it is the whole request; with
    it, it is the time to the first token (prefill), and each token then adds
    `per_token_s`."""

    distribution: Distribution = "constant"
    """How service times scatter around `service_s`: `constant`, `exponential` (memoryless,
    the M/M/c textbook case) or `lognormal` (long tail, closer to real LLM traffic)."""

    sigma: float = Field(default=0.5, gt=0.0)
    """Shape of the lognormal distribution (std-dev of the underlying normal); the mean
    stays `service_s`."""

    per_token_s: float | None = Field(default=None, ge=0.0)
    """Seconds per output token; streaming then emits one chunk per token at that pace.
    None: all tokens are ready at once after the service time."""

    tokens: int = Field(default=16, ge=1)
    """Output tokens per request unless the request sets `max_tokens`
    (`max_completion_tokens`, `max_output_tokens`)."""

    seed: int = 0
    """Seed of the service-time random source, so a demo run can be replayed. Servers
    that run side by side should get different seeds to avoid moving in lockstep."""

    max_queue: int | None = Field(default=None, ge=0)
    """Most requests one engine holds waiting; past it arrivals get an OpenAI-shaped 429.
    None: unbounded, as vLLM. 0: no queue at all, a full engine sheds at once."""

    retry_after_s: int = Field(default=1, ge=0)
    """`Retry-After` seconds sent with a queue-full 429; 0 sends no header."""

    name: str = "fake"
    """Server (site) label, echoed in the `x-fake-server` response header and in
    `/admin/stats`, so a load generator can tell which backend answered."""

    embedding_dim: int = Field(default=16, ge=1)
    """Length of the vectors `/v1/embeddings` returns."""

    kv_at_full: float = Field(default=0.7, gt=0, le=1)
    """KV-cache usage reported with every slot busy (usage = kv_at_full x running / slots).
    Below 1, as on a server whose batch limit binds before its KV cache fills; set 1 to
    make the cache fill exactly with the slots."""

    answer_log: str | None = None
    """A file that gets one line per 200 answer begun: the request's `x-request-id`
    and the monotonic time (`fakeserver/answer_log.py`). The fault suite reads it to
    prove no request was started at a second site after its bytes reached a client.
    None: nothing is logged."""
