"""deploy/prometheus checked by Prometheus's own tool: the scrape config loads, the rules
parse, and the unit tests in deploy/prometheus/tests fire every alert when they should
and keep it quiet when they should not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gridroute.operator.certs import init_certs
from tests.prometheus_package import PrometheusBinaries

pytestmark = pytest.mark.timeout(900)  # the one-time apt-get install may take minutes

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = sorted((DEPLOY / "rules").glob("*.yml"))
UNIT_TESTS = sorted((DEPLOY / "tests").glob("*_test.yml"))


def _promtool(bins: PrometheusBinaries, *args: str, cwd: Path = DEPLOY) -> str:
    done = subprocess.run(
        [str(bins.promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    return out


def test_scrape_config_loads_with_its_certificates(
    prometheus_binaries: PrometheusBinaries, tmp_path: Path
) -> None:
    # The config names its TLS files relative to itself; promtool checks they exist.
    copy = tmp_path / "prometheus"
    shutil.copytree(DEPLOY, copy)
    init_certs(copy / "certs", ["prometheus"])
    shutil.copy(copy / "certs" / "prometheus" / "client.crt", copy / "certs" / "prometheus.crt")
    shutil.copy(copy / "certs" / "prometheus" / "client.key", copy / "certs" / "prometheus.key")
    out = _promtool(prometheus_binaries, "check", "config", "prometheus.yml", cwd=copy)
    assert "SUCCESS" in out
    jobs = {
        j["job_name"]
        for j in yaml.safe_load((copy / "prometheus.yml").read_text())["scrape_configs"]
    }
    assert jobs == {"gridroute-gateway", "gridroute-operator", "gridroute-signals"}


def test_rules_pass_promtool_check(prometheus_binaries: PrometheusBinaries) -> None:
    out = _promtool(prometheus_binaries, "check", "rules", *map(str, RULES))
    assert out.count("SUCCESS") == len(RULES)


def test_promtool_unit_tests_pass(prometheus_binaries: PrometheusBinaries) -> None:
    out = _promtool(prometheus_binaries, "test", "rules", *map(str, UNIT_TESTS))
    assert "SUCCESS" in out


def _alerts() -> list[dict[str, object]]:
    data = yaml.safe_load((DEPLOY / "rules" / "alerts.yml").read_text())
    return [r for g in data["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_is_unit_tested_firing_and_quiet() -> None:
    """Each alert appears in some unit test once with expected alerts and once with none."""
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {str(a["alert"]) for a in _alerts()}
    assert names - fired == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested quiet"


def test_every_alert_has_summary_description_and_a_runbook_section() -> None:
    ops = (DEPLOY.parents[1] / "docs" / "operations.md").read_text()
    anchors = {
        line.lstrip("#").strip().lower() for line in ops.splitlines() if line.startswith("### ")
    }
    for alert in _alerts():
        notes = alert["annotations"]
        assert isinstance(notes, dict)
        assert notes.get("summary") and notes.get("description"), alert["alert"]
        name = str(alert["alert"]).lower()
        assert notes.get("runbook") == f"docs/operations.md#{name}"
        assert name in anchors, f"docs/operations.md has no '### {alert['alert']}' section"
