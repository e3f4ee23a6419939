"""Links the fault tests cut and heal: a real network namespace, or a loopback proxy.

`NetnsLink` puts one site's process in its own Linux network namespace joined to the
host by a veth pair (iproute2); `cut()` takes the host end down, so the site vanishes
from the gateway's network as a pulled cable does. It needs root and `ip netns`.
`ProxyLink` is the fallback: a small asyncio TCP proxy on loopback the test controls;
`cut()` closes every connection through it and refuses new ones; `delay_s` holds
every chunk (a slow link) and `let_one()` lets one connection through a cut.

`open_link(i)` returns a namespace link where namespaces work and a proxy otherwise;
`MECHANISM` says which one this run used (the report prints it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def netns_available() -> tuple[bool, str]:
    """Whether namespaces and veth pairs can be made here, and why not."""
    if os.geteuid() != 0:
        return False, "not root"
    if shutil.which("ip") is None:
        return False, "no iproute2"
    probe = f"grprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
        _ip("netns", "del", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return False, f"ip netns add failed: {exc}"
    return True, "ip netns + veth"


class NetnsLink:
    """A namespace `ns` with a veth pair 10.213.<i>.1 (host) <-> 10.213.<i>.2 (site)."""

    kind = "netns"

    def __init__(self, index: int) -> None:
        tag = f"{os.getpid() % 100000}{index}"
        self.ns = f"grf{tag}"
        self.host_if = f"grh{tag}"
        self.site_if = f"grs{tag}"
        self.host_ip = f"10.213.{index}.1"
        self.site_ip = f"10.213.{index}.2"
        _ip("netns", "add", self.ns)
        try:
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.site_if)
            _ip("link", "set", self.site_if, "netns", self.ns)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            ns = ["netns", "exec", self.ns, "ip"]
            _ip(*ns, "addr", "add", f"{self.site_ip}/30", "dev", self.site_if)
            _ip(*ns, "link", "set", self.site_if, "up")
            _ip(*ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def wrap(self, argv: list[str]) -> list[str]:
        """The command line that runs `argv` inside the site's namespace."""
        return ["ip", "netns", "exec", self.ns, *argv]

    @property
    def bind_host(self) -> str:
        return self.site_ip

    def target(self, port: int) -> str:
        """The URL the gateway uses for the site's port."""
        return f"http://{self.site_ip}:{port}"

    def cut(self) -> None:
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            _ip("link", "del", self.host_if)
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            _ip("netns", "del", self.ns)


class ProxyLink:
    """A loopback TCP proxy in a thread of its own; `target` is set once the site runs."""

    kind = "proxy"

    def __init__(self, index: int) -> None:
        self.index = index
        self.upstream: tuple[str, int] | None = None
        self._up = True
        self.delay_s = 0.0
        """Each chunk waits this long before it is forwarded (a slow link, in order)."""
        self.rewrite: Callable[[bytes], bytes] | None = None
        """Applied to each chunk of the answer on its way back (e.g. a wrong `Date`)."""
        self._pass_one = False
        self.passed = 0
        """Connections let through a cut by `let_one`."""
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(5)
        assert self._server is not None
        self.port = int(self._server.sockets[0].getsockname()[1])

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()
        # stopped by close(): free the listener, every connection and the loop itself
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        one_shot = not self._up and self._pass_one
        if (not self._up and not one_shot) or self.upstream is None:
            writer.transport.abort()
            return
        if one_shot:
            self._pass_one = False
            self.passed += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while chunk := await src.read(65536):
                    if self.delay_s:
                        await asyncio.sleep(self.delay_s)
                    if self.rewrite is not None and dst is writer:
                        chunk = self.rewrite(chunk)
                    dst.write(chunk)
                    await dst.drain()
                    if one_shot and dst is writer:  # the answer is through: cut again
                        self._loop.call_later(0.1, writer.transport.abort)
                        self._loop.call_later(0.1, up_writer.transport.abort)
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    def wrap(self, argv: list[str]) -> list[str]:
        return argv

    @property
    def bind_host(self) -> str:
        return "127.0.0.1"

    def target(self, port: int) -> str:
        self.upstream = ("127.0.0.1", port)
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        def drop() -> None:
            self._up = False
            for w in list(self._writers):
                w.transport.abort()

        self._loop.call_soon_threadsafe(drop)

    def heal(self) -> None:
        self._loop.call_soon_threadsafe(setattr, self, "_up", True)

    def let_one(self) -> None:
        """While cut, let the next connection through for one answer, then cut it (a
        lossy link where one poll gets through)."""
        self._loop.call_soon_threadsafe(setattr, self, "_pass_one", True)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


NETNS_OK, NETNS_WHY = netns_available()
MECHANISM = NETNS_WHY if NETNS_OK else f"loopback fault proxy ({NETNS_WHY})"


@contextlib.contextmanager
def open_link(index: int) -> Iterator[NetnsLink | ProxyLink]:
    link: NetnsLink | ProxyLink = NetnsLink(index) if NETNS_OK else ProxyLink(index)
    try:
        yield link
    finally:
        link.close()
