"""README.md's sample `make demo` output is a whole run, and its shape (readme_sample.py)
sees a change to what the demo prints but not a change of numbers or folds.
tests/e2e/test_demo_cli.py compares it with a live run's lines."""

from __future__ import annotations

import re

from tests.demo.readme_sample import (
    differences,
    progress_phases,
    readme_sample,
    shape,
    table_phases,
)

ORDER = [
    "start", "up", "progress", "title", "table", "fairness", "partition", "restore", "plot",
    "stopped",
]  # fmt: skip


def test_every_sample_line_is_a_line_the_demo_prints() -> None:
    lines = shape(readme_sample())
    assert [ln.shape for ln in lines if ln.kind == "unknown"] == []
    kinds = [ln.kind for ln in lines]
    assert [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k] == ORDER


def test_the_sample_is_a_whole_run_with_progress_in_every_phase() -> None:
    sample = readme_sample()
    phases = table_phases(sample)
    assert phases == ["under capacity", "partition east", "east returns",
                      "past capacity, shedding on"]  # fmt: skip
    assert progress_phases(sample) == phases


def test_numbers_and_folds_do_not_change_the_shape() -> None:
    sample = readme_sample()
    renumbered = [re.sub(r"\d", lambda m: str((int(m.group()) + 3) % 10), ln) for ln in sample]
    assert differences(shape(sample), shape(renumbered)) == []
    unfolded = [" ".join(sample)]  # one long line: every fold undone...
    refolded = [chunk for ln in sample for chunk in _fold(ln, 90)]  # ...or folded elsewhere
    assert differences(shape(sample), shape(refolded)) == []
    assert shape(unfolded)[0].kind == "start"


def _fold(line: str, width: int) -> list[str]:
    """Fold a sentence at a space as the console does (tables are never folded)."""
    if len(line) <= width or line.startswith(("┏", "┃", "┡", "│", "├", "└", "[", " ")):
        return [line]
    cut = line.rfind(" ", 0, width)
    if cut <= 0:
        return [line]
    return [line[: cut + 1], *_fold(line[cut + 1 :], width)]


def test_a_change_to_what_the_demo_prints_changes_the_shape() -> None:
    sample = readme_sample()
    base = shape(sample)

    def changed(edit: object) -> list[str]:
        assert callable(edit)
        return differences(base, shape(edit(list(sample))))

    no_fairness = changed(lambda ls: [ln for ln in ls if "Jain's fairness index" not in ln])
    assert no_fairness and "line kinds differ" in no_fairness[0]
    assert changed(lambda ls: [ln.replace("┃ failed ┃", "┃ errors ┃") for ln in ls])
    assert changed(lambda ls: [ln.replace("retried elsewhere", "retried") for ln in ls])
    assert changed(lambda ls: [ln.replace("partition east ", "cut east ", 1) for ln in ls])
    assert changed(lambda ls: [ln.replace(" req/s 429s", " rps 429s") for ln in ls])
    assert changed(lambda ls: [ln for ln in ls if not ln.startswith("stopped")])
    assert changed(lambda ls: [*ls[:-1], "logs kept in /tmp/x", ls[-1]])
