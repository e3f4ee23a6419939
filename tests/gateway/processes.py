"""Real processes for gateway tests: start a `gridroute` verb, read its bound URL, stop it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_LISTENING = re.compile(r"listening on (http://\S+)")

START_S = 20.0
"""How long a process may take to start (say it listens, or answer its health check):
the interpreter and its imports, on a shared machine running the suite beside it."""


class Proc:
    """A running `gridroute` process and the first URL it said it listens on."""

    def __init__(self, args: list[str], timeout: float = START_S, wait: bool = True) -> None:
        exe = str(Path(sys.executable).with_name("gridroute"))
        self.popen = subprocess.Popen(
            [exe, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        found = threading.Event()
        self.url = ""

        def pump() -> None:
            assert self.popen.stdout is not None
            for line in self.popen.stdout:
                self.lines.append(line)
                m = _LISTENING.search(line)
                if m and not self.url:
                    self.url = m.group(1)
                    found.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if wait and not found.wait(timeout):
            self.stop()
            raise AssertionError("no 'listening on' line:\n" + "".join(self.lines))

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            code = self.popen.wait()
        self._pump.join(timeout)  # the pipe's end (EOF) ends it
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        return code

    def output(self) -> str:
        return "".join(self.lines)


@contextlib.contextmanager
def running(args: list[str]) -> Iterator[Proc]:
    proc = Proc(args)
    try:
        yield proc
    finally:
        proc.stop()


def http(
    method: str, url: str, body: Any = None, timeout: float = 10.0
) -> tuple[int, Any, dict[str, str]]:
    """A small blocking HTTP call: (status, parsed JSON or text, headers)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status, headers = r.read(), r.status, dict(r.headers)
    except urllib.error.HTTPError as err:
        with err:
            raw, status, headers = err.read(), err.code, dict(err.headers)
    try:
        return status, json.loads(raw), headers
    except ValueError:
        return status, raw.decode(), headers


def wait_for(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
