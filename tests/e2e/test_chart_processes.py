"""What the chart starts, started here as processes: no cluster runs on these machines, so
the one-site example is rendered with the real Helm and its files and commands are run
as the pods would run them. Only what the cluster itself provides is stood in for: the
mounts (a directory), cluster DNS and ports (loopback, free ports), the model server (a
fake one). Then the init container's `config check` passes (and names the field of a bad
file), the operator's exec probe passes, the gateway's readiness probe turns 200 and a
request is routed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_chart import ONE, one, render
from tests.gateway.processes import Proc, free_port, http, wait_for

pytestmark = pytest.mark.e2e
GRIDROUTE = str(Path(sys.executable).with_name("gridroute"))


def _pod(objs: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    return one(objs, "Deployment", suffix)["spec"]["template"]["spec"]


def _run(args: list[str], mounted: str) -> subprocess.CompletedProcess[str]:
    """A container's command line, its mount paths moved under `mounted`."""
    args = [a.replace("/etc/gridroute/", mounted) for a in args]
    exe = GRIDROUTE if args[0] == "gridroute" else None
    cmd = [exe, *args[1:]] if exe else [GRIDROUTE, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _secret(tls: Path, name: str, certs: Path, leaf: str) -> None:
    """A Secret as the kubelet mounts it: ca.crt, tls.crt, tls.key."""
    d = tls / name
    d.mkdir(parents=True)
    (d / "ca.crt").write_bytes((certs / "ca.crt").read_bytes())
    (d / "tls.crt").write_bytes((certs / "hub" / f"{leaf}.crt").read_bytes())
    (d / "tls.key").write_bytes((certs / "hub" / f"{leaf}.key").read_bytes())


def test_the_one_site_release_runs_as_rendered(tmp_path: Path) -> None:
    objs = render(ONE)
    data = one(objs, "ConfigMap")["data"]
    mounted = f"{tmp_path}/"
    certs = tmp_path / "certs"
    subprocess.run([GRIDROUTE, "certs", "init", "--sites", "hub", "--out", str(certs)],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    _secret(tmp_path / "tls", "operator", certs, "server")
    _secret(tmp_path / "tls", "operator-client", certs, "client")
    _secret(tmp_path / "tls", "gateway", certs, "client")

    fake = Proc(["fake-server", "--port", "0", "--slots", "8", "--model", "llama-3.1-8b",
                 "--service-ms", "20", "--name", "hub"])  # fmt: skip
    op_port, gw_port, metrics_port = free_port(), free_port(), free_port()
    # What cluster DNS and the Services give the pods, on loopback.
    moved = {
        "/etc/gridroute/": mounted,
        "http://vllm.models.svc:8000": fake.url,
        "https://hub-gridroute-operator:9443": f"https://127.0.0.1:{op_port}",
        "0.0.0.0:9443": f"127.0.0.1:{op_port}",
        "0.0.0.0:8080": f"127.0.0.1:{gw_port}",
        "0.0.0.0:9180": f"127.0.0.1:{metrics_port}",
    }
    config = tmp_path / "config"
    config.mkdir()
    for name in ("gateway.yaml", "operator.yaml"):
        text = data[name]
        for old, new in moved.items():
            text = text.replace(old, new)
        (config / name).write_text(text)

    gw_pod, op_pod = _pod(objs, "-gateway"), _pod(objs, "-operator")
    for pod in (gw_pod, op_pod):
        (check,) = pod["initContainers"]
        done = _run(check["args"], mounted)
        assert done.returncode == 0, done.stdout + done.stderr

    procs = [fake]
    try:
        (op_c,) = op_pod["containers"]
        procs.append(Proc([a.replace("/etc/gridroute/", mounted) for a in op_c["args"]],
                          wait=False))  # fmt: skip
        probe = [a.replace(":9443/", f":{op_port}/") for a in
                 op_c["readinessProbe"]["exec"]["command"]]  # fmt: skip
        wait_for(lambda: _run(probe, mounted).returncode == 0, timeout=30)

        (gw_c,) = gw_pod["containers"]
        procs.append(Proc([a.replace("/etc/gridroute/", mounted) for a in gw_c["args"]]))
        base = f"http://127.0.0.1:{gw_port}"
        ready = gw_c["readinessProbe"]["httpGet"]["path"]
        wait_for(lambda: http("GET", base + ready)[0] == 200, timeout=30)
        assert http("GET", base + gw_c["livenessProbe"]["httpGet"]["path"])[0] == 200
        status, body, headers = http("POST", base + "/v1/chat/completions", {
            "model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hi"}],
        })  # fmt: skip
        assert status == 200, body
        assert {k.lower(): v for k, v in headers.items()}["x-grid-backend"] == "vllm"
    finally:
        for p in reversed(procs):
            p.stop()

    bad = yaml.safe_load((config / "gateway.yaml").read_text())
    bad["sites"][0]["backend_url"] = "ftp://x"
    (config / "gateway.yaml").write_text(yaml.safe_dump(bad))
    done = _run(gw_pod["initContainers"][0]["args"], mounted)
    assert done.returncode == 2
    assert "gateway.yaml: sites.0.backend_url" in done.stdout + done.stderr
