"""The overlay schema (wire/overlay.py): validation messages, digest, index, JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gridroute.config import ConfigError
from gridroute.core.groups import Admission
from gridroute.core.pickers import Picker
from gridroute.wire.overlay import digest, dumps, json_schema, parse_overlay, to_index

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _doc(cands: list[dict[str, Any]], picker: str | None = "roundRobin", **extra: Any) -> str:
    model: dict[str, Any] = {"model": "m", "candidates": cands, **extra}
    if picker is not None:
        model["selection_policy"] = {"picker": picker}
    return json.dumps({"revision": 1, "models": [model]})


def _c(site: str, group: int | None = 0, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"site": site, "provider": site, **kw}
    if group is not None:
        out["selection_group"] = group
    return out


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_overlay(text, "o.json")
    return str(exc.value)


def test_a_grouped_overlay_becomes_its_index() -> None:
    o = parse_overlay(_doc([_c("a"), _c("b"), _c("c", 1, admission_state="existing_only")]))
    idx = to_index(o)
    mg = idx.models["m"]
    assert mg.picker is Picker.ROUND_ROBIN and mg.grouped
    assert [(g.number, g.admission, [s.key for s in g.slots]) for g in mg.groups] == [
        (0, Admission.NEW_AND_EXISTING, ["a/a", "b/b"]),
        (1, Admission.EXISTING_ONLY, ["c/c"]),
    ]


def test_a_legacy_overlay_keeps_ordered_deterministic_behaviour() -> None:
    o = parse_overlay(_doc([_c("b", None), _c("a", None)], picker=None))
    mg = to_index(o).models["m"]
    assert mg.picker is Picker.DETERMINISTIC and not mg.grouped
    assert [g.slots[0].key for g in mg.groups] == ["b/b", "a/a"]


@pytest.mark.parametrize(
    ("cands", "picker", "expected"),
    [
        (
            [_c("a"), _c("b", None)],
            "roundRobin",
            "candidates.1.selection_group: capability 'm': capability mixes grouped",
        ),
        (
            [_c("a", 1)],
            "roundRobin",
            "candidates.0.selection_group: capability 'm', group 1: selection_group must start",
        ),
        (
            [_c("a"), _c("b", 2)],
            "roundRobin",
            "candidates.1.selection_group: capability 'm', group 2: selection_group must be contig",
        ),
        (
            [_c("a"), _c("b", admission_state="existing_only")],
            "roundRobin",
            "capability 'm', group 0: selection_group 0 mixes admission states",
        ),
        (
            [_c("a"), _c("a", 1)],
            "roundRobin",
            "models.0.candidates.1: capability 'm': provider a/a appears again with conflicting",
        ),
        ([_c("a")], "fancy", "models.0.selection_policy.picker: Input should be"),
        (
            [_c("a", None)],
            "roundRobin",
            "selection_policy.picker: capability 'm': picker roundRobin needs selection_group",
        ),
        ([_c("a", traffic_weight=1001)], "weighted", "models.0.candidates.0.traffic_weight:"),
        ([_c("a", traffic_weight=-1)], "weighted", "models.0.candidates.0.traffic_weight:"),
        ([_c("a", traffic_weight="3")], "weighted", "models.0.candidates.0.traffic_weight:"),
        (
            [_c("a", admission_state="excluded")],
            "roundRobin",
            "models.0.candidates.0.admission_state: capability 'm': excluded providers belong in",
        ),
        ([_c("a", score=float("nan"))], "roundRobin", "models.0.candidates.0.score:"),
        ([_c("a", colour="red")], "roundRobin", "models.0.candidates.0.colour: Extra inputs"),
    ],
)
def test_invalid_overlays_are_refused_naming_capability_group_and_field(
    cands: list[dict[str, Any]], picker: str, expected: str
) -> None:
    msg = _error(_doc(cands, picker))
    assert msg.startswith("o.json: ")
    assert expected in msg


def test_a_provider_both_candidate_and_excluded_is_refused() -> None:
    msg = _error(_doc([_c("a")], excluded=[{"site": "a", "provider": "a"}]))
    assert "models.0.excluded.0: capability 'm': provider a/a is both" in msg


def test_duplicate_capabilities_are_refused() -> None:
    m = {"model": "m", "candidates": []}
    assert "models.1.model: capability 'm' appears twice" in _error(json.dumps({"models": [m, m]}))


def test_an_exact_duplicate_entry_is_an_extra_slot() -> None:
    mg = to_index(parse_overlay(_doc([_c("a"), _c("a"), _c("b")]))).models["m"]
    assert [s.key for s in mg.groups[0].slots] == ["a/a", "a/a", "b/b"]


def test_digest_ignores_revision_and_author_but_not_routing() -> None:
    a = parse_overlay(_doc([_c("a"), _c("b")]))
    b = parse_overlay(
        json.dumps({**json.loads(_doc([_c("a"), _c("b")])), "revision": 9, "generated_by": "x"})
    )
    c = parse_overlay(_doc([_c("b"), _c("a")]))
    assert digest(a) == digest(b) != digest(c)
    assert digest(parse_overlay(dumps(a))) == digest(a)  # the published form round-trips


def test_yaml_is_accepted_too() -> None:
    o = parse_overlay("models:\n- model: m\n  candidates:\n  - {site: a, provider: a}\n")
    assert to_index(o).models["m"].groups[0].slots[0].key == "a/a"


def test_the_published_json_schema_is_current() -> None:
    published = json.loads((DOCS / "overlay.schema.json").read_text())
    assert published == json_schema()


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "null\n"])
def test_an_empty_overlay_document_is_refused(text: str) -> None:
    """A file caught mid-write (truncated, not yet filled) must not replace the last good
    overlay with one of no models; "no models" is written out."""
    with pytest.raises(ConfigError, match="empty overlay"):
        parse_overlay(text, "overlay.json")
    assert parse_overlay('{"version": 1, "models": []}').models == []


def test_an_excluded_entry_reads_excluded_whether_or_not_it_says_so() -> None:
    """Two spellings of one overlay (`admission_state: excluded` written out or left
    out inside `excluded`) route alike and have one digest."""

    def doc(state: dict[str, str]) -> str:
        return json.dumps(
            {
                "version": 1,
                "models": [
                    {
                        "model": "m",
                        "candidates": [{"site": "a", "provider": "p"}],
                        "excluded": [{"site": "b", "provider": "p", **state}],
                    }
                ],
            }
        )

    bare = parse_overlay(doc({}))
    said = parse_overlay(doc({"admission_state": "excluded"}))
    assert bare.models[0].excluded[0].admission_state is Admission.EXCLUDED
    assert digest(bare) == digest(said)
    with pytest.raises(ConfigError, match="must be excluded"):
        parse_overlay(doc({"admission_state": "existing_only"}))
