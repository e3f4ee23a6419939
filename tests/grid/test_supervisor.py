"""The supervisor starts real `gridroute` children, reads their address, freezes, stops."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path

import pytest

from gridroute.grid.ports import free_ports
from gridroute.grid.supervisor import ProcessError, Supervisor


def _stats(url: str, timeout: float = 2.0) -> dict[str, object]:
    with urllib.request.urlopen(url + "/admin/stats", timeout=timeout) as resp:
        data: dict[str, object] = json.load(resp)
        return data


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(5)
    assert len(set(ports)) == 5
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_start_announce_freeze_thaw_and_stop(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "logs")
    try:
        child = sup.start("fake-a", ["fake-server", "--port", "0", "--name", "a"])
        sup.wait_announced([child], timeout_s=30)
        assert child.url is not None and child.url.startswith("http://127.0.0.1:")
        assert _stats(child.url)["name"] == "a"
        sup.freeze(child)
        with pytest.raises(OSError):  # alive, listening, answering nothing
            _stats(child.url, timeout=0.5)
        sup.thaw(child)
        assert _stats(child.url)["name"] == "a"
        sup.check()
    finally:
        popen = sup.children[0].popen if sup.children else None
        sup.stop_all(grace_s=5)
    assert popen is not None and popen.poll() is not None
    assert sup.children == []


def test_stop_ends_a_frozen_child(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "logs")
    child = sup.start("fake-b", ["fake-server", "--port", "0"])
    sup.wait_announced([child], timeout_s=30)
    sup.freeze(child)
    sup.stop_all(grace_s=5)
    assert child.popen.poll() is not None


def test_a_child_that_exits_early_is_reported_with_its_log(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "logs")
    try:
        child = sup.start("bad", ["fake-server", "--distribution", "uniform"])
        with pytest.raises(ProcessError) as err:
            sup.wait_announced([child], timeout_s=30)
    finally:
        sup.stop_all()
    text = str(err.value)
    assert "bad exited before it was listening" in text
    assert "distribution" in text  # the tail of the child's own error message
    assert str(tmp_path / "logs" / "bad.log") in text
