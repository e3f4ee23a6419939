"""The dashboard in a real browser: headless Chromium (Debian's `chromium`) driven by
Playwright's Python package against a running local grid.

Needs `/usr/bin/chromium`: when it is missing and the test runs as root, it tries
`apt-get update && apt-get install -y chromium` once; otherwise, or when Playwright is
not installed, or the gateway does not serve `/dashboard`, it skips and says why.
Playwright's own browser download (`playwright install`) is never used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gridroute.grid.launcher import LocalGrid, http_json
from gridroute.grid.layout import GridSpec, LocalSite
from gridroute.load.background import BackgroundLoad

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip
SPEC = GridSpec(
    sites=(LocalSite("hub", 8), LocalSite("west", 8), LocalSite("east", 4)),
    service_s=0.2,
    distribution="exponential",
)
CLIENTS = 48
"""Well past the 20 slots (16 with east cut off): in fair order the excess first waits at
the gateway for about 1.5 turnovers of the slots, so it takes twice the slots in clients
for some requests to be shed (429s to draw)."""
PANELS = ("share", "rho", "requests", "refusals", "latency")
HISTORY_POINTS = 8
"""Points a freshly opened page must draw at once: more than it could have polled itself."""


def _install_chromium() -> str | None:
    """Try the Debian package once; None when it worked, else why not."""
    if os.geteuid() != 0:
        return "not root, so apt-get cannot install it"
    if shutil.which("apt-get") is None:
        return "no apt-get on this machine"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{' '.join(cmd)} failed: {exc}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
            return f"{' '.join(cmd)} exited {done.returncode}: {tail[0]}"
    return None if CHROMIUM.exists() else "apt-get ran but /usr/bin/chromium is still missing"


@pytest.fixture(scope="session")
def chromium() -> Path:
    if not CHROMIUM.exists():
        why = _install_chromium()
        if why is not None:
            pytest.skip(f"headless Chromium unavailable: {CHROMIUM} is missing and {why}")
    return CHROMIUM


def _serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3.0) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@pytest.mark.timeout(900)  # the one-time apt-get install may take minutes
def _shed_seen(grid: LocalGrid) -> bool:
    return bool(grid.status()["selections"]["total"].get("shed", 0) > 0)


def test_dashboard_shows_three_sites_and_a_partitioned_one_silent(
    tmp_path: Path, chromium: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the playwright package is not installed (test extra)"
    )
    with (
        LocalGrid(SPEC, workdir=tmp_path / "grid") as grid,
        BackgroundLoad(grid.gateway_url, SPEC.model, CLIENTS),
    ):
        if not _serves(grid.dashboard_url):
            pytest.skip(
                "the gateway does not serve /dashboard (needed: GET /dashboard answering "
                "gridroute/gateway/static/dashboard.html as text/html)"
            )
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1366, "height": 900})
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(grid.dashboard_url)
                page.wait_for_function(
                    "document.querySelectorAll('[data-site][data-live=\"live\"]').length === 3",
                    timeout=20_000,
                )
                names = page.locator("[data-site]").evaluate_all(
                    "cards => cards.map(c => c.dataset.site)"
                )
                assert sorted(names) == ["east", "hub", "west"]

                grid.partition("east", drain_s=0.5)
                east = page.locator('[data-site="east"][data-live="silent"]')
                east.wait_for(timeout=20_000)
                assert "silent" in east.inner_text()
                assert page.locator('[data-site="hub"]').get_attribute("data-live") == "live"

                grid.wait_for(lambda: _shed_seen(grid), 20.0, "a request shed (429)")
                # Enough history for the late page to draw (a rate needs two points).
                grid.wait_for(
                    lambda: (
                        len(http_json(grid.gateway_url + "/grid/history")["points"])
                        >= HISTORY_POINTS + 2
                    ),
                    30.0,
                    "the gateway's history to hold enough points",
                )

                # Opened mid-incident: the charts start with the gateway's own history.
                late = browser.new_page(viewport={"width": 1366, "height": 1400})
                late.on("pageerror", lambda exc: errors.append(str(exc)))
                late.goto(grid.dashboard_url)
                late.locator('[data-site="east"][data-live="silent"]').wait_for(timeout=10_000)
                drawn = {
                    panel: int(
                        late.locator(f'canvas[data-panel="{panel}"]').get_attribute("data-points")
                        or 0
                    )
                    for panel in PANELS
                }
                assert all(n > 0 for n in drawn.values()), drawn
                assert drawn["requests"] >= HISTORY_POINTS, drawn
                # The silent site's stale rho is marked and not drawn as a reading.
                assert "(stale)" in late.locator('[data-site="east"]').inner_text()
                history = http_json(grid.gateway_url + "/grid/history")["points"]
                assert history[-1]["sites"]["east"] == {**history[-1]["sites"]["east"],
                                                        "live": "silent", "rho": None}  # fmt: skip
                assert any(p["refusals_per_s"].get("429") for p in history)
                # Every state word on the page is explained in the legend.
                words = set(late.locator("[data-word]").evaluate_all(
                    "ns => ns.map(n => n.dataset.word)"))  # fmt: skip
                terms = set(late.locator("[data-term]").evaluate_all(
                    "ns => ns.map(n => n.dataset.term)"))  # fmt: skip
                assert {"silent", "live", "shed"} <= words | terms
                assert words - terms == set(), "state words without a legend entry"
                for term in ("demoted", "overlay", "returning", "pressure_p2c", "borrow"):
                    assert term in terms, term
                shot = tmp_path / "dashboard.png"
                late.screenshot(path=str(shot), full_page=True)
                assert errors == [], errors
            finally:
                browser.close()
    with capsys.disabled():
        print(f"\ndashboard screenshot: {shot}")
