"""A real `prometheus` on 127.0.0.1 for a test: started on a config directory, queried
through its HTTP API, stopped (and its storage removed with the test's tmp dir)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from gridroute.grid.ports import free_port
from tests.prometheus_package import PrometheusBinaries

START_TIMEOUT_S = 30.0


class PrometheusError(RuntimeError):
    """Prometheus did not start, or answered a query with an error."""


class RunningPrometheus:
    """`with RunningPrometheus(bins, config) as prom: prom.query("up")`."""

    def __init__(self, bins: PrometheusBinaries, config: Path, workdir: Path) -> None:
        self.bins = bins
        self.config = config
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RunningPrometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(
                [
                    str(self.bins.prometheus),
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.config.parent,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._ready():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise PrometheusError(f"prometheus did not start: {self.log_tail()}")
            time.sleep(0.1)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=1.0) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the `data` of a success, else `PrometheusError`."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=5.0) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('error', body)}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector (a scalar comes back as one unlabelled sample)."""
        data = self.api("query", query=expr)
        if data["resultType"] == "vector":
            return list(data["result"])
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        raise PrometheusError(f"{expr}: a {data['resultType']}, not an instant vector")
