"""`gridroute wait URL`: exit 0 once the URL answers 2xx, exit 1 naming why on timeout."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from gridroute.cli import app


class _Readyz(BaseHTTPRequestHandler):
    """503 for the first `server.not_ready` GETs, then 200."""

    def do_GET(self) -> None:
        srv = self.server
        srv.hits += 1  # type: ignore[attr-defined]
        ready = srv.hits > srv.not_ready  # type: ignore[attr-defined]
        body = b"ok" if ready else b"not ready"
        self.send_response(200 if ready else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Readyz)
    srv.hits, srv.not_ready = 0, 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def _url(srv: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}/readyz"


def test_returns_once_the_url_turns_ready(server: ThreadingHTTPServer) -> None:
    server.not_ready = 3  # type: ignore[attr-defined]
    result = CliRunner().invoke(app, ["wait", _url(server), "--interval", "0.01"])
    assert result.exit_code == 0, result.output
    assert server.hits == 4  # type: ignore[attr-defined]  # three 503s, then the 200


def test_times_out_with_the_last_status(server: ThreadingHTTPServer) -> None:
    server.not_ready = 10**9  # type: ignore[attr-defined]
    result = CliRunner().invoke(
        app, ["wait", _url(server), "--timeout", "0.3", "--interval", "0.05"]
    )
    assert result.exit_code == 1
    assert f"{_url(server)} did not answer 2xx within 0.3 s (last try: HTTP 503)" in result.output


def test_nothing_listening_says_connection_refused() -> None:
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(app, ["wait", f"http://127.0.0.1:{port}/", "--timeout", "0.2"])
    assert result.exit_code == 1
    assert "last try: connection refused" in result.output


def test_refuses_a_url_without_a_scheme() -> None:
    result = CliRunner().invoke(app, ["wait", "127.0.0.1:8080/readyz"])
    assert result.exit_code == 2
    assert "expected an http:// or https:// URL" in result.output
