"""The shape of `gridroute demo`'s piped output, so README.md's sample can be held to a
live run's lines (tests/demo/test_readme_sample.py, tests/e2e/test_demo_cli.py).

A shape is the list of the output's lines, each as its kind and its text with what
varies from run to run abstracted away: numbers (`N`), site names (`SITE`), site states
(`STATE`), the plot's path, the table's column widths. The words, the punctuation,
the phases, the table's columns and the order of the lines stay, so a change to what
the demo prints changes the shape. Lines the console folded (a sentence longer than its
150 columns) are unfolded first, since where a fold falls depends on the numbers.
Consecutive progress lines make one entry, `progress`: how many a phase gets depends on
its length (one every 5 s), and a short run has phases with none; the phases they name
are read apart (`progress_phases`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gridroute.demo.run import WIDE

README = Path(__file__).resolve().parents[2] / "README.md"

SITES = ("hub", "west", "east")
"""The demo's sites, by default and in the e2e test's smaller grid."""
STATES = ("live", "silent", "returning", "demoted", "unknown", "down")
BOX = "┏┃┡│├└"

_KINDS: list[tuple[str, re.Pattern[str]]] = [
    ("start", re.compile(r"^gridroute demo: starting ")),
    ("up", re.compile(r"^up in ")),
    ("progress", re.compile(r"^\[ *[\d.]+s [^\]]+\] ")),
    ("title", re.compile(r"^ *gridroute demo: requests by phase")),
    ("table", re.compile(f"^[{BOX}]")),
    ("fairness", re.compile(r"^[^:]+: \d+ clients, served per client ")),
    ("partition", re.compile(r"^\w+: partitioned at ")),
    ("restore", re.compile(r"^\w+: restored at ")),
    ("plot", re.compile(r"^plot: ")),
    ("stopped", re.compile(r"^stopped \d+ processes$")),
]

TIMING_VARIANTS = {
    "partition": "SITE: partitioned at N s; the gateway kept it live (the partition was "
    "shorter than its freshness window and health checks)",
    "restore": "SITE: restored at N s",
}
"""What a partition sentence becomes when the gateway did not notice the cut before the
site came back (a loaded machine and the e2e test's 4 s phases): the same line kind,
timed out of its usual structure."""


@dataclass(frozen=True)
class Line:
    kind: str
    shape: str


def readme_sample(readme: Path = README) -> list[str]:
    """The lines of README.md's sample `make demo` output: the ```text block that
    follows the quick start's "A real run" sentence."""
    text = readme.read_text(encoding="utf-8")
    found = re.search(r"A real run.*?```text\n(.*?)```", text, re.S)
    assert found, "README.md: no ```text block after 'A real run'"
    return found.group(1).splitlines()


def kind_of(line: str) -> str | None:
    return next((kind for kind, pattern in _KINDS if pattern.match(line)), None)


def _folded(line: str) -> bool:
    """A sentence the console folded: it keeps the space it folded at, or drops it when
    the fold falls on the last column. Progress lines are never folded (soft wrap)."""
    if kind_of(line) in ("progress", "table", "title"):
        return False
    return line.endswith(" ") or len(line) >= WIDE


def unfold(lines: list[str]) -> list[str]:
    """Join each line that starts no known kind onto the folded line before it."""
    joined: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        if kind_of(line) is None and joined and _folded(joined[-1]):
            joined[-1] = f"{joined[-1].rstrip()} {line.lstrip()}"
        else:
            joined.append(line)
    return joined


def _abstract(text: str) -> str:
    text = re.sub(r"https?://[\w.:]+", "URL", text)
    text = re.sub(rf"\b({'|'.join(SITES)})\b", "SITE", text)
    text = re.sub(rf"\b({'|'.join(STATES)})\b(?=/share|\))", "STATE", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    text = re.sub(r"after (N s|never|none)", "after N s", text)
    return text


def _table(line: str) -> str:
    """A table line as its cells (stripped, abstracted), or a border as its drawing."""
    if line[0] in "┏┡├└":
        return re.sub(r"(.)\1+", r"\1", line.strip())  # column widths vary
    sep = line[0]
    cells = [c.strip() for c in line.strip().strip(sep).split(sep)]
    return sep.join(_abstract(c) if c != "-" else "N" for c in cells)


def shape(lines: list[str]) -> list[Line]:
    """The shape of the demo's output (see the module docstring)."""
    out: list[Line] = []
    for line in unfold(lines):
        kind = kind_of(line)
        if kind is None:
            out.append(Line("unknown", line))
        elif kind == "progress":
            if not out or out[-1].kind != "progress":
                text = re.sub(r"^\[ *[\d.]+s [^\]]+\]", "[Ns PHASE]", line)
                text = text.replace(" SHEDDING |", " |")
                out.append(Line(kind, _abstract(text)))
        elif kind == "table":
            out.append(Line(kind, _table(line)))
        elif kind == "title":
            out.append(Line(kind, line.strip()))
        elif kind == "plot":
            out.append(Line(kind, "plot: PATH"))
        else:
            out.append(Line(kind, _abstract(line)))
    return out


def progress_phases(lines: list[str]) -> list[str]:
    """The phase each progress line names, in order, repeats merged."""
    phases: list[str] = []
    for line in unfold(lines):
        found = re.match(r"^\[ *[\d.]+s ([^\]]+)\] ", line)
        if found and (not phases or phases[-1] != found.group(1)):
            phases.append(found.group(1))
    return phases


def table_phases(lines: list[str]) -> list[str]:
    """The phases of the summary table's rows, in order (not the `whole run` row)."""
    rows = [line for line in unfold(lines) if line.startswith("│")]
    names = [row.strip("│ ").split("│")[0].strip() for row in rows]
    return [n for n in names if n != "whole run"]


def differences(sample: list[Line], live: list[Line]) -> list[str]:
    """Where two shapes differ, in words (empty: the same shape). A live line in a
    timing variant of its kind matches that kind."""
    problems = []
    if [ln.kind for ln in sample] != [ln.kind for ln in live]:
        problems.append(
            "line kinds differ:\n  sample: "
            + " ".join(ln.kind for ln in sample)
            + "\n  live:   "
            + " ".join(ln.kind for ln in live)
        )
        return problems
    for i, (s, v) in enumerate(zip(sample, live, strict=True)):
        if s.shape != v.shape and TIMING_VARIANTS.get(v.kind) != v.shape:
            problems.append(
                f"line {i} ({s.kind}) differs:\n  sample: {s.shape}\n  live:   {v.shape}"
            )
    return problems
