"""The data-plane listener: the routed OpenAI paths on a raw asyncio protocol.

`listener.dataplane: true` serves the API port with this instead of aiohttp's server.
A connection starts here; each request's head is read and checked in place (one scan
for its end, one regular expression over its lines), and a plain routed request

    POST <one of app.ROUTED_PATHS>[?query] HTTP/1.1, Content-Length (no chunked body,
    no Expect, no Upgrade), a head under 8 KiB and 100 lines

runs the same request flow as `proxy.handle`, through the one `proxy.RouteRun` both
share (`core/flow.py`: routing, fair order, the overlay, ejection, retries, metrics,
traces) without building a request or response object. When the flow's first step is
an attempt and the chosen backend has an idle kept-alive connection (the steady state),
the attempt runs in callbacks (`splice.py`: no task, no future, the answer written as
it is parsed); anything that has to wait (a hold, a connect, a retry) continues in a
task (`proxy.drive`) from where it got. In both: its body is sliced from the bytes
received, its `model` parsed as `request_body.parse_model` does, the backend's answer
written back through the same keep-alive pools (`gateway/upstream.py`), its head in one
write with the first bytes of the body. Anything else (another path or method, a
chunked or `Expect` body, a head that does not parse, a huge head) hands the
connection, with every byte it sent so far, to aiohttp's guarded handler
(`inbound/guard.py`), which then owns it for good: admin, status, the dashboard and
every 400/404/405/431 answer are aiohttp's, as without this listener.

The listener's bounds are the guard's, on the same `Guard` (one count of open
connections, one `ClientErrors`):

    accept over max_connections   503 too_many_connections, close (not counted open)
    head not complete in header_timeout_s (from accept, or from the first byte of a
      kept-alive connection's next request): 408 when some of it came, else close
    body silent for body_timeout_s: 408, close
    Content-Length over limits.max_body_bytes: 413 before reading it, close
    body not JSON / no model: 400 (kept alive), as `proxy.read_model`
    idle between requests for keepalive_timeout_s: close (counted idle_timeout)
    draining: 503 shutting_down + Retry-After + Connection: close; every answer closes

The timers are lazy: a connection has one timer handle and a deadline; a request moves
the deadline and the timer re-arms itself when it fires early, so nothing is armed or
cancelled per request. A client that goes away cancels its request's task (as
aiohttp's `handler_cancellation`), or its callback attempt, which closes the upstream
connection.
"""

from gridroute.gateway.dataplane.answer import Headers
from gridroute.gateway.dataplane.listener import DataPlane

__all__ = ["DataPlane", "Headers"]
