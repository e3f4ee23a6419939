"""`gridroute fake-server` as a real child process, the way the demo launcher runs it."""

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

GRIDROUTE = Path(sys.executable).parent / "gridroute"


def test_cli_prints_the_address_serves_and_stops_on_sigterm() -> None:
    cmd = [str(GRIDROUTE), "fake-server", "--port", "0", "--service-ms", "1",
           "--slots", "3", "--model", "a", "--model", "b", "--name", "site-x"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.removeprefix("listening on ").strip()
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            assert r.status == 200
            assert r.headers["x-fake-server"] == "site-x"
        req = urllib.request.Request(
            url + "/v1/chat/completions",
            data=json.dumps({"model": "b", "messages": []}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            assert json.load(r)["model"] == "b"
        with urllib.request.urlopen(url + "/admin/stats", timeout=5) as r:
            stats = json.load(r)
        assert stats["models"]["b"] == stats["models"]["b"] | {"slots": 3, "served": 1}
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


def test_cli_rejects_a_bad_setting() -> None:
    cmd = [str(GRIDROUTE), "fake-server", "--distribution", "uniform"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "distribution" in proc.stderr
