"""A small supervisor for the local grid's child processes.

Every process the local grid runs (fake model servers, operators, the gateway) is a
real `gridroute ...` subprocess, because the point of the grid is to exercise the same
binaries a user deploys. This module owns their whole life:

* **start**: `python -m gridroute.cli ARGS` with stdout and stderr going to one log
  file per process (never a pipe: a chatty child writing to a pipe nobody drains
  would block). Children get their own session, so a Ctrl-C in the terminal reaches
  only the launcher, which then stops them in order; and, on Linux, a parent-death
  signal, so even a launcher killed with SIGKILL leaves nothing running.
* **announce**: servers started on port 0 print `listening on http://HOST:PORT`; the
  supervisor reads the URL back from the log.
* **freeze / thaw** (SIGSTOP / SIGCONT): a process that is alive but answers nothing,
  which is what a network partition looks like from its peers.
* **stop**: SIGCONT (a frozen process cannot act on SIGTERM), SIGTERM, a grace period,
  then SIGKILL, in reverse start order.

A child that exits early is reported with its exit status and the tail of its log, so
"the demo did not start" always comes with the reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ANNOUNCE = re.compile(rb"listening on (https?://\S+)")
LOG_TAIL_LINES = 25


class ProcessError(RuntimeError):
    """A child did not start, or exited when it should be running; says which and why."""


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.splitlines()[-lines:]
    return "\n".join("    " + line for line in tail) or "    (empty log)"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to SIGKILL this child when the launcher dies, however it dies."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass
class Child:
    """One running process and what is known about it."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes]
    url: str | None = None
    """Base URL it announced (`listening on ...`), once read."""
    frozen: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def failure(self, what: str) -> ProcessError:
        code = self.popen.poll()
        state = "still running" if code is None else f"exited with status {code}"
        return ProcessError(f"{self.name} {what} ({state}); log {self.log}:\n{_log_tail(self.log)}")


@dataclass
class Supervisor:
    """Starts `gridroute` subprocesses and guarantees they are stopped."""

    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for every child, on top of this process's."""
    children: list[Child] = field(default_factory=list)

    def start(self, name: str, args: Sequence[str]) -> Child:
        """Spawn `gridroute ARGS` as `name`; its output goes to `log_dir/NAME.log`."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{name}.log"
        argv = [sys.executable, "-m", "gridroute.cli", *args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        child = Child(name, argv, log, popen)
        self.children.append(child)
        return child

    def wait_announced(self, children: Sequence[Child], timeout_s: float) -> None:
        """Wait until every child in `children` printed its URL; fail on exit or timeout."""
        deadline = time.monotonic() + timeout_s
        waiting = [c for c in children if c.url is None]
        while waiting:
            for child in list(waiting):
                with contextlib.suppress(OSError):
                    found = ANNOUNCE.search(child.log.read_bytes())
                    if found:
                        child.url = found.group(1).decode()
                        waiting.remove(child)
                        continue
                if not child.alive():
                    raise child.failure("exited before it was listening")
            if waiting and time.monotonic() > deadline:
                raise waiting[0].failure(f"did not announce its address within {timeout_s:g} s")
            if waiting:
                time.sleep(0.05)

    def check(self) -> None:
        """Raise if any child that should be running has exited."""
        for child in self.children:
            if not child.alive():
                raise child.failure("stopped unexpectedly")

    def freeze(self, child: Child) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing (a partition)."""
        if child.alive() and not child.frozen:
            os.kill(child.pid, signal.SIGSTOP)
            child.frozen = True

    def thaw(self, child: Child) -> None:
        """SIGCONT: resume a frozen process where it stopped."""
        if child.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGCONT)
            child.frozen = False

    def stop(self, child: Child, grace_s: float = 5.0) -> None:
        """Stop one child (SIGTERM, then SIGKILL after `grace_s`) and forget it."""
        self.thaw(child)
        if child.alive():
            with contextlib.suppress(ProcessLookupError):
                child.popen.send_signal(signal.SIGTERM)
        try:
            child.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            child.popen.kill()
            child.popen.wait()
        if child in self.children:
            self.children.remove(child)

    def stop_all(self, grace_s: float = 5.0) -> None:
        """Stop every child, newest first: SIGTERM, then SIGKILL after `grace_s`. Safe to
        call twice, and from a `finally` while an exception is in flight."""
        for child in reversed(self.children):
            self.thaw(child)
            if child.alive():
                with contextlib.suppress(ProcessLookupError):
                    child.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in reversed(self.children):
            try:
                child.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    child.popen.kill()
                child.popen.wait()
        self.children.clear()
