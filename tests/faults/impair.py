"""Impairments short of a cut: packet loss on a namespace link, a skewed wall clock.

Loss: `tc qdisc ... netem loss N%` on the host end of a site's veth where the kernel
has the `netem` qdisc; where it does not (these machines), an nftables rule drops a
random N% of the packets through that veth in both directions (`numgen random`). The
`nftables` Debian package is installed (as root, once) when `nft` is missing.

Clock skew: libfaketime (`LD_PRELOAD`, Debian package `faketime`) starts a process
with its wall clock `offset_s` off; its monotonic clock moves by the same constant,
which no duration notices. Every check says why it cannot run, so a scenario skips
with that reason instead of failing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.faults.links import NetnsLink

FAKETIME_LIBS = (
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/faketime/libfaketime.so.1"),
)


@functools.cache
def debian_package(package: str, probe: str) -> str | None:
    """Install `package` unless `probe` exists; None when it is there, else why not."""
    if shutil.which(probe) is not None or Path(probe).exists():
        return None
    if os.geteuid() != 0:
        return f"{package} missing and not root, so apt-get cannot install it"
    if shutil.which("apt-get") is None:
        return f"{package} missing and no apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", package],
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", package],
    ):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(cmd, env=env, capture_output=True, timeout=600)
        if shutil.which(probe) is not None or Path(probe).exists():
            return None
    return f"apt-get install {package} did not provide {probe}"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True)


@functools.cache
def loss_mechanism() -> tuple[str | None, str]:
    """('netem' | 'nft' | None, what to print): how packet loss can be made here."""
    if os.geteuid() != 0:
        return None, "not root: no namespaces, so no packet loss"
    probe = f"grlp{os.getpid() % 100000}"
    made = _run("ip", "link", "add", probe, "type", "veth", "peer", "name", probe + "x")
    if made.returncode != 0:
        return None, f"no veth pairs: {made.stderr.strip()}"
    try:
        netem = _run("tc", "qdisc", "add", "dev", probe, "root", "netem", "loss", "10%")
        if shutil.which("tc") is not None and netem.returncode == 0:
            return "netem", "tc netem loss"
        why_not = "no tc" if shutil.which("tc") is None else "the kernel has no netem qdisc"
        missing = debian_package("nftables", "nft")
        if missing is not None:
            return None, f"{why_not}, and {missing}"
        return "nft", f"nftables random drop ({why_not})"
    finally:
        _run("ip", "link", "del", probe)


@contextlib.contextmanager
def packet_loss(link: NetnsLink, percent: int) -> Iterator[str]:
    """Drop about `percent` % of the packets either way through `link`'s veth."""
    kind, what = loss_mechanism()
    if kind == "netem":
        _run("tc", "qdisc", "add", "dev", link.host_if, "root", "netem", "loss", f"{percent}%")
        try:
            yield f"{what}, {percent} %"
        finally:
            _run("tc", "qdisc", "del", "dev", link.host_if, "root")
        return
    assert kind == "nft", what
    table = f"grloss{link.host_if}"
    rules = f"""
table inet {table} {{
  chain out {{ type filter hook output priority 0; oifname "{link.host_if}" numgen random mod 100 < {percent} drop; }}
  chain in {{ type filter hook input priority 0; iifname "{link.host_if}" numgen random mod 100 < {percent} drop; }}
}}
"""  # noqa: E501
    done = subprocess.run(["nft", "-f", "-"], input=rules, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    try:
        yield f"{what}, {percent} %"
    finally:
        _run("nft", "delete", "table", "inet", table)


@functools.cache
def faketime_lib() -> Path | str:
    """libfaketime's path, installing the package if needed; else why it is missing."""
    for lib in FAKETIME_LIBS:
        if lib.exists():
            return lib
    why = debian_package("faketime", str(FAKETIME_LIBS[0]))
    for lib in FAKETIME_LIBS:
        if lib.exists():
            return lib
    return why or "libfaketime not found after installing faketime"


def skewed(offset_s: int) -> dict[str, str] | str:
    """The environment of a process whose wall clock is `offset_s` off, or why not."""
    lib = faketime_lib()
    if isinstance(lib, str):
        return lib
    sign = "+" if offset_s >= 0 else "-"
    return {"LD_PRELOAD": str(lib), "FAKETIME": f"{sign}{abs(offset_s)}s"}
