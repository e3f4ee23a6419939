"""An attempt carried out in callbacks: the request written on a kept-alive backend
connection, its answer written to the client as the backend's bytes are parsed.

Why: on the data plane, py-spy charged about a quarter of a routed request's samples
to the await lines of the chain a task ran it through (`drive` -> `_attempt` ->
`Pool.request` -> a headers future -> `relay`), and most requests need none of it: the
flow's first step is an attempt, a kept-alive connection to the chosen backend is
idle, and the answer comes back in a read or a few. `Splice` is that case as callbacks
on the two connections; the flow's glue is the same `RouteRun` the coroutine driver
runs, so the metrics, refusal counts, affinity, trace and `own` accounting are the same
on both. Measured interleaved against the task path, the gain is smaller than that
profile suggested (BENCHMARKS.md, "Proxy hot path, third round"), and it needs the
loop's batching kept: each request's run starts from `call_soon` after the reads of
its loop pass, and each answer's write waits for the backend reads of its pass
(`_flush`); run inline, one request at a time, the callback path was slower than the
task path (126 against 111 us per request), its code and data colder per request.

Everything else goes to the coroutine driver (`proxy.drive`) from the point it was
reached, with the run's bookkeeping as it stands: a hold, a backend with no idle
connection (a connect is a wait), a failure before the answer (the flow decides the
retry; the idle race's resend of the same attempt), an answer the flow retries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gridroute.core.flow import Answered, Attempt, Relay, Step
from gridroute.gateway import proxy, upstream

if TYPE_CHECKING:
    from gridroute.gateway.dataplane.answer import Serving


class Splice(upstream.Response):
    """One attempt's exchange, relayed as it is parsed (an `upstream.Response` whose
    connection-side hooks write to the client instead of a buffer)."""

    __slots__ = (
        "att",
        "due",
        "ex",
        "handed",
        "out",
        "owned",
        "pending",
        "relaying",
        "run",
        "sent_at",
        "sized",
    )

    def __init__(
        self, conn: upstream._Conn, ex: Serving, run: proxy.RouteRun, att: Attempt
    ) -> None:
        super().__init__(conn, None)
        self.ex = ex
        self.run = run
        self.att = att
        self.relaying = False
        """The flow said `Relay`: the body goes to the client."""
        self.out = False
        """The answer's head has been written to the client."""
        self.pending: list[bytes] = []
        """Body pieces of the current read, written at its end (`_flush`)."""
        self.sized = False
        self.due = False
        self.sent_at = 0.0
        self.handed = False
        """The run went on in the coroutine driver (this exchange is over)."""
        self.owned = True
        """This attempt's `own.start` has no `own.end` yet (the coroutine driver makes
        it when the attempt is handed on `started`)."""

    # -- the backend connection's side ------------------------------------------------

    def _headers_in(self) -> None:
        self.headed = True
        try:
            flow = self.run.flow
            assert flow is not None
            nxt = flow.send(Answered(self.status))
            if isinstance(nxt, Relay):
                self.relaying = True
                self.sized = self.content_length is not None and not self.chunked
                return
            # The flow retries this answer elsewhere: drop the connection (its body
            # unread) and carry on in the coroutine driver.
            self._detach(reuse=False)
            self._end(nxt)
            self._carry_on(nxt)
        except Exception as exc:  # a fault of ours: never a request left hanging
            self._broken(exc)

    def _feed(self, data: bytes) -> None:
        if self.relaying and not self.complete:
            self.pending.append(data)

    def _ended(self) -> None:
        pass  # `_flush` (which follows) writes the end

    def _flush(self) -> None:
        if self.relaying and not self.due:
            self.due = True
            self._conn.loop.call_soon(self._due)

    def _due(self) -> None:
        self.due = False
        if self.run.finished or self._exc is not None:
            return
        try:
            self._write()
        except Exception as exc:
            self._broken(exc)

    def _fail(self, exc: BaseException) -> None:
        if self._exc is not None or self.complete or self.run.finished or self.handed:
            return
        try:
            self._failed(exc)
        except Exception as err:  # a fault of ours: never a request left hanging
            self._broken(err)

    def _failed(self, exc: BaseException) -> None:
        self._exc = exc
        conn = self._conn
        self._detach(reuse=False)
        if self.relaying:
            # The answer broke after its headers: cut the client (a truncated answer
            # must not look complete), as `Serving.relay` does.
            self.ex.abort()
            self._end(self.status)
            self._done(self.status)
            return
        if (
            isinstance(exc, upstream.Disconnected)
            and conn.pool.loop.time() - self.sent_at <= upstream.RESEND_WITHIN_S
        ):
            # The idle race (the server closed the kept-alive connection as the request
            # left): the same attempt once more on a new connection, as `Pool.request`.
            conn.pool.stale += 1
            self._carry_on(self.att, started=True)
            return
        assert isinstance(exc, upstream.UpstreamError)
        flow = self.run.flow
        assert flow is not None
        try:
            nxt = flow.send(proxy.failure_of(exc))
        except Exception as err:
            self._broken(err)
            return
        self._end(nxt)
        self._carry_on(nxt)

    # -- the client's side ------------------------------------------------------------

    def pause(self) -> None:
        """The client's socket is full: stop reading the backend (backpressure)."""
        if not self._paused and not self._conn.lost:
            self._paused = True
            self._conn.transport.pause_reading()

    def resume(self) -> None:
        if self._paused:
            self._resume()

    def client_gone(self) -> None:
        """The client closed its connection: stop the backend (closing its connection
        is what stops a generation), count the request as the client's 499."""
        if self.run.finished or self._exc is not None:
            return
        self._exc = ConnectionResetError("the client connection closed")
        if self._conn.resp is self:
            self._detach(reuse=False)
            self._end(None)
        self.run.finish()
        self.ex.splice = None

    # -- steps ------------------------------------------------------------------------

    def _write(self) -> None:
        """What the current read brought, to the client: the head with it the first
        time (one write when the whole answer came at once), the end once complete."""
        ex = self.ex
        t = ex.transport
        pending = self.pending
        self.pending = []
        complete = self.complete
        status = self.status
        if not self.out:
            self.out = True
            ex.written = True
            no_body = status in (204, 304) or status < 200
            view = self.att.view
            extra = proxy.evidence(self.run, self.att)
            if complete:
                data = pending[0] if len(pending) == 1 else b"".join(pending)
                t.write(ex._head(self, view, extra, 0 if no_body else len(data)) + data)
                self._finished()
                return
            length = self.content_length if self.sized and self.content_length is not None else -1
            head = ex._head(self, view, extra, length)
        else:
            head = b""
        if self.sized:
            out = b"".join(pending) if len(pending) != 1 else pending[0]
        else:
            out = b"".join([b"%x\r\n%b\r\n" % (len(p), p) for p in pending if p])
        if complete:
            t.write(head + out + (b"" if self.sized else b"0\r\n\r\n"))
            self._finished()
            return
        if head or out:
            t.write(head + out)
        if ex.paused:
            self.pause()

    def _finished(self) -> None:
        """The whole answer is out: the connection back to its pool, the run ended."""
        self._detach(reuse=self.keep_alive)
        self._end(self.status)
        self._done(self.status)

    def _detach(self, *, reuse: bool) -> None:
        """This exchange is over on its backend connection: back to the pool (`reuse`,
        a complete answer the server keeps alive) or closed."""
        if reuse:
            self.release()
        else:
            self.drop()

    def _own_end(self) -> None:
        if not self.owned:
            return
        self.owned = False
        run = self.run
        current = run.current
        current.own.end(self.att.view.key, current.clock(), run.model)
        current.changes.wake()

    def _end(self, got: int | Step | None) -> None:
        """`_attempt`'s `finally` and `drive`'s after it: `own.end`, the span closed."""
        self._own_end()
        self.run.attempt_end(got)

    def _done(self, status: int) -> None:
        run = self.run
        run.relayed(self.att, status)
        run.finish()
        ex = self.ex
        ex.splice = None
        ex._done()

    def _carry_on(self, step: Step, *, started: bool = False) -> None:
        """The rest in the coroutine driver: `step` (the flow's next) booked here, or
        this attempt (`started`) sent again."""
        run = self.run
        if started:
            self.owned = False  # `drive`'s attempt makes the `own.end`
            run.owed = self.att
            att: Attempt | None = self.att
        else:
            try:
                att = run.book(step)
            except Exception as exc:
                self._broken(exc)
                return
        ex = self.ex
        ex.splice = None
        if att is None:
            run.finish()
            ex._done()
            return
        ex.carry_on(proxy.drive(run, att, started=started), run)
        self.handed = True

    def _broken(self, exc: Exception) -> None:
        """A fault of ours in a callback: answered as `Serving.fail` answers one."""
        if self.handed or self.run.finished:
            return  # the task (or the end already made) owns the client now
        self._exc = exc
        self._detach(reuse=False)
        self._end(None)
        self.run.finish()
        ex = self.ex
        ex.splice = None
        ex.fail(exc)
        ex._done()


def start(ex: Serving, run: proxy.RouteRun, att: Attempt) -> bool:
    """`att` (booked) sent on an idle kept-alive connection, its answer to come back
    through a `Splice`; False (nothing done) when the backend has none idle."""
    backend = run.gw.backends.by_key.get(att.view.key)
    if backend is None:
        return False  # the coroutine driver answers it (the site left the config)
    pool = backend.pool
    conn = pool.take_idle()
    if conn is None:
        return False
    sp = Splice(conn, ex, run, att)
    sp.sent_at = pool.loop.time()
    current = run.current
    now = current.clock()
    current.own.start(att.view.key, now, run.model)
    run.sent.append(now)
    ex.splice = sp
    try:
        pool.send(conn, sp, ex.method, ex.target, run.fwd, run.body)
    except BaseException:
        ex.splice = None
        sp.drop()
        conn.close()
        sp._own_end()
        raise
    return True
