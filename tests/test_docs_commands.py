"""Every command block of README.md and docs/*.md, run as a user would paste it.

Each fenced block carries an info string: ```sh (commands to run), ```python (run
too), ```text (diagrams, output), ```yaml (configs; parsed here). For each page, its
```sh and ```python blocks run in order in ONE bash session, as in a user's terminal:
`&` background servers stay up for the next block, `. .venv/bin/activate` lasts.
Every block runs under `set -e -o pipefail` (the first failing command fails the test, naming the
block); a ```python block runs as `python - <<'EOF'` in the same session.

The session runs in a temporary copy of the repository (`git ls-files`, with their
modification times, so `make` sees an installed venv) with `.venv` linked in, with
the venv NOT on PATH: README.md and docs/quickstart.md must activate it themselves;
every other page assumes the quickstart's activated venv, as its reader would, so the
harness activates it first. Fake model servers stand in for vLLM: the pages start
them as the README does (`gridroute fake-server`), and a page that uses a running grid
without starting one (docs/gateway.md) gets it from `PRELUDE`, the README's own lines.
At the end every process the session started is killed (its process group).

`NOT_RUN` lists, with the reason, the few blocks no test can run as written (they
rebuild the venv this test runs in, run `make test` itself, or run for minutes or
until Ctrl-C); each names a test that covers the same command where one does, and an
entry that matches no block fails, so the list cannot rot.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
KINDS = {"sh", "python", "text", "yaml"}
SELF_ACTIVATING = {"README.md", "docs/quickstart.md"}
PAGE_TIMEOUT_S = 300  # a bound for a loaded machine; a page takes 10-40 s

KUBE = (
    "needs a live Kubernetes cluster, which cannot run here (docs/kubernetes.md says so); "
    "tests/deploy/ renders and validates everything it installs"
)

NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "make demo"): "make test would run this test again; make demo runs 75 s "
    "(tests/e2e/test_demo_cli.py runs the demo, smaller, and holds this README's sample "
    "output to its lines' shape: tests/demo/readme_sample.py)",
    ("docs/quickstart.md", "python3.11 -m venv .venv && .venv/bin/pip install -e '.[test]'"):
    "would rebuild the venv this test runs in (make test runs the same install)",
    ("docs/quickstart.md", "gridroute demo"): "75 s of traffic (tests/e2e/test_demo_cli.py)",
    ("docs/quickstart.md", "gridroute demo --sites hub:128,west:128,east:64 --service-ms 1000"):
    "minutes, and --serve runs until Ctrl-C "
    "(tests/e2e/test_demo_cli.py runs --duration 0 --serve)",
    ("docs/quickstart.md", "gridroute sim run examples/scenarios/partition-return.yaml "
     "--live"): "minutes of real traffic (tests/grid/test_scenario_run.py)",
    ("docs/kubernetes.md", "kind create cluster --name grid"): KUBE,
    ("docs/kubernetes.md", "kubectl apply -f examples/kubernetes/fake-backend.yaml"): KUBE,
    ("docs/kubernetes.md", "kubectl create namespace grid"): KUBE,
    ("docs/kubernetes.md", "helm install hub deploy/kubernetes/gridroute -n grid"): KUBE,
    ("docs/kubernetes.md",
     "kubectl -n grid port-forward svc/hub-gridroute-gateway 8080:8080 &"): KUBE,
    ("docs/kubernetes.md", "helm upgrade hub deploy/kubernetes/gridroute -n grid"): KUBE,
    ("docs/kubernetes.md", "for site in hub west east; do"): KUBE,
}  # fmt: skip

PRELUDE = {
    "docs/gateway.md": """
gridroute certs init --sites hub,west,east --out out/certs
gridroute fake-server --port 8001 --slots 16 --model llama-3.1-8b --name hub &
gridroute fake-server --port 8002 --slots 16 --model llama-3.1-8b --name west &
gridroute fake-server --port 8003 --slots 16 --model llama-3.1-8b --name east &
gridroute operator --config examples/operator-hub.yaml &
gridroute operator --config examples/operator-west.yaml &
gridroute operator --config examples/operator-east.yaml &
for port in 8001 8002 8003; do gridroute wait http://127.0.0.1:$port/v1/models; done
""",
}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    """1-based line of the opening fence."""
    kind: str
    text: str

    @property
    def first_line(self) -> str:
        """Its first command, without a comment or a continuation backslash."""
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        return first.split("  #")[0].rstrip(" \\").strip()

    def where(self) -> str:
        return f"{self.page}:{self.line}"


_FENCE = re.compile(r"^(\s*)```(.*)$")


def blocks(page: str) -> list[Block]:
    """The fenced blocks of `page`, in order."""
    out: list[Block] = []
    lines = (ROOT / page).read_text().splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        start, info, body = i + 1, opened.group(2).strip(), []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"{page}:{start}: fence never closed"
        out.append(Block(page, start, info, "\n".join(body) + "\n"))
        i += 1
    return out


ALL = [b for p in PAGES for b in blocks(p)]


def _not_run(block: Block) -> str | None:
    return NOT_RUN.get((block.page, block.first_line))


def test_every_block_says_what_it_is() -> None:
    unnamed = [f"{b.where()}: ```{b.kind}" for b in ALL if b.kind not in KINDS]
    assert unnamed == [], f"give each block one of {sorted(KINDS)}"


def test_every_not_run_entry_names_a_block() -> None:
    present = {(b.page, b.first_line) for b in ALL if b.kind == "sh"}
    assert sorted(set(NOT_RUN) - present) == []


def test_no_block_that_would_touch_the_linked_venv_runs() -> None:
    # The copy links the real .venv: making or installing into it here would break it.
    risky = [b.where() for b in ALL if b.kind == "sh" and not _not_run(b)
             and re.search(r"-m venv|pip install|make (test|demo)", b.text)]  # fmt: skip
    assert risky == []


@pytest.mark.parametrize("block", [b for b in ALL if b.kind == "yaml"], ids=Block.where)
def test_yaml_blocks_parse(block: Block) -> None:
    assert isinstance(yaml.safe_load(block.text), dict)


def _copy_repo(dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        src = ROOT / name
        if not src.is_file():  # deleted in the work tree, not yet in git
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")


def script(page: str) -> str:
    """The bash script of `page`: prelude, then each runnable block under `set -e`."""
    parts = ["set -e -o pipefail", "trap 'echo \"@@ block $BLOCK failed (exit $?)\"' ERR"]
    if page not in SELF_ACTIVATING:
        parts.append(". .venv/bin/activate")
    if page in PRELUDE:
        parts += ["BLOCK=prelude", PRELUDE[page]]
    for b in blocks(page):
        if b.kind not in ("sh", "python") or _not_run(b):
            continue
        parts.append(f"BLOCK={b.where()}; echo '@@ {b.where()}'")
        if b.kind == "sh":
            parts.append(b.text)
        else:
            parts.append(f"python - <<'GRIDROUTE_DOC_EOF'\n{b.text}GRIDROUTE_DOC_EOF")
    parts.append("echo '@@ page done'")
    return "\n".join(parts) + "\n"


RUNNABLE = [p for p in PAGES if any(b.kind in ("sh", "python") and not _not_run(b)
                                    for b in blocks(p))]  # fmt: skip


@pytest.mark.e2e
@pytest.mark.timeout(PAGE_TIMEOUT_S + 30)
@pytest.mark.parametrize("page", RUNNABLE)
def test_page_commands_run_as_written(page: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _copy_repo(repo)
    venv_bin = str(ROOT / ".venv" / "bin")
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH=path, HOME=str(tmp_path), TMPDIR=str(tmp_path), NO_COLOR="1",
               COLUMNS="160", GRIDROUTE_LOG_FORMAT="text")  # fmt: skip
    (repo / "doc-session.sh").write_text(script(page))
    log = tmp_path / "session.log"
    # Output to a file, not a pipe: the page's `&` servers inherit it and outlive bash.
    with log.open("w") as sink:
        proc = subprocess.Popen(
            ["bash", "doc-session.sh"], cwd=repo, env=env, stdin=subprocess.DEVNULL,
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            proc.wait(timeout=PAGE_TIMEOUT_S)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc.pid)
            proc.wait()
    out = log.read_text(errors="replace")
    sys.stdout.write(out[-6000:])
    assert not timed_out, f"{page}: still running after {PAGE_TIMEOUT_S} s\n{out[-4000:]}"
    assert proc.returncode == 0 and "@@ page done" in out, f"{page}:\n{out[-6000:]}"


def _kill_group(pgid: int) -> None:
    """TERM, then KILL what is left, of every process of the session (its `&` servers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
