"""Listener bounds: how long a client may take and how many connections it may hold.

The anchors are nginx's `client_header_timeout`, `client_body_timeout` (60 s each) and
`keepalive_timeout` (75 s); the defaults are theirs. Without them the open-file limit
is the only bound on slow-loris senders, idle connections and bodies that never come.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class ListenerSettings(BaseModel):
    """Bounds on the connections one listener (one worker) accepts. YAML keys may be
    snake_case or camelCase (the operator's files use camelCase)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
        alias_generator=to_camel,
        populate_by_name=True,
    )

    header_timeout_s: float = Field(60.0, gt=0)
    """Seconds a request's line and headers may take to arrive, from the connection's
    accept or the first byte of a kept-alive connection's next request. On expiry a
    client that sent part of a request is answered 408 and closed; one that sent nothing
    is closed. Default: 60 (nginx `client_header_timeout`)."""
    body_timeout_s: float = Field(60.0, gt=0)
    """Longest silence between two reads of a request body; on expiry the request is
    answered 408 and the connection closed. Default: 60 (nginx `client_body_timeout`)."""
    keepalive_timeout_s: float = Field(75.0, gt=0)
    """Seconds an idle kept-alive connection stays open between requests. Default: 75
    (nginx `keepalive_timeout`)."""
    max_connections: int = Field(4096, ge=1)
    """Open client connections one worker holds; one more is answered 503
    `too_many_connections` and closed. Default: 4096 (keep it under `ulimit -n`)."""
    dataplane: bool = True
    """Serve the routed OpenAI paths (`POST /v1/chat/completions` and the others) on
    the raw-protocol listener (`gateway/dataplane/`): the same request flow and the
    same bounds as above, without aiohttp's request and response objects; every other
    request, and any request it does not take (chunked body, `Expect`, an unusual
    head), goes to the aiohttp listener on the same connection. Default: on (about
    half the aiohttp listener's CPU per request, BENCHMARKS.md "Gateway proxy");
    `false` serves everything on aiohttp."""
    error_log_interval_s: float = Field(60.0, ge=0)
    """Client errors (malformed requests, timeouts, refused connections) are always
    counted; a log line is written at most once per this many seconds per error class,
    with the count since the last line. Default: 60."""
