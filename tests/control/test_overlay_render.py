"""Rendering the overlay (control/overlay.py) and the renderer service's revisions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gridroute.config import ConfigError
from gridroute.control.overlay import (
    Reading,
    RenderInput,
    next_revision,
    render,
    with_drain,
)
from gridroute.control.overlay_service import OverlayService
from gridroute.core.groups import Admission
from gridroute.wire.overlay import digest, parse_overlay, to_index

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "groups"


def _input(**kw: object) -> RenderInput:
    data = yaml.safe_load((EXAMPLES / "drain.input.yaml").read_text())
    data.update(kw)
    return RenderInput.model_validate(data)


def _groups(inp: RenderInput, **kw: object) -> list[tuple[str, int | None, str]]:
    o = render(inp, 1, **kw)  # type: ignore[arg-type]
    cap = o.models[0]
    return [(c.key, c.selection_group, c.admission_state.value) for c in cap.candidates] + [
        (c.key, None, "excluded") for c in cap.excluded
    ]


def test_local_providers_form_group_zero_and_remote_ones_group_one() -> None:
    assert _groups(_input()) == [
        ("a/a", 0, "new_and_existing"),
        ("b/b", 0, "new_and_existing"),
        ("c/c", 0, "new_and_existing"),
        ("d/d", 1, "new_and_existing"),
    ]


def test_a_drain_moves_the_provider_behind_every_admitted_group() -> None:
    inp = _input(drains={"c/c": "existing_only", "b/b": "excluded"})
    assert _groups(inp) == [
        ("a/a", 0, "new_and_existing"),
        ("d/d", 1, "new_and_existing"),
        ("c/c", 2, "existing_only"),
        ("b/b", None, "excluded"),
    ]


def test_stale_and_unready_providers_from_signals() -> None:
    inp = _input(signals={"url": "http://127.0.0.1:1", "stale_after_s": 10})
    readings = {
        "a/a": Reading(95.0, True),
        "b/b": Reading(50.0, True),  # stale: 50 s old
        "c/c": Reading(99.0, False),  # unready: excluded
    }  # d/d: no reading at all, stale
    assert _groups(inp, readings=readings, now=100.0) == [
        ("a/a", 0, "new_and_existing"),
        ("b/b", 1, "new_and_existing"),
        ("d/d", 2, "new_and_existing"),
        ("c/c", None, "excluded"),
    ]
    o = render(inp, 1, readings, 100.0)
    assert [c.fresh for c in o.models[0].candidates] == [True, False, False]


def test_every_render_passes_the_gateway_checks_and_names_its_picker() -> None:
    o = parse_overlay(render(_input(), 3).model_dump_json(), "x")
    mg = to_index(o).models["demo-model"]
    assert mg.picker.value == "roundRobin" and mg.grouped


def test_the_revision_moves_only_on_a_semantic_change() -> None:
    first = next_revision(None, render(_input(), 0))
    assert first.revision == 1
    same = next_revision(first, render(_input(), 0))
    assert same.revision == 1 and digest(same) == digest(first)
    changed = next_revision(first, render(_input(drains={"a/a": "existing_only"}), 0))
    assert changed.revision == 2


def test_unknown_drains_and_models_are_refused_by_field() -> None:
    with pytest.raises(ValueError, match="drains"):
        _input(drains={"zz/zz": "existing_only"})
    with pytest.raises(ValueError, match=r"providers\.0\.models"):
        RenderInput.model_validate(
            {"providers": [{"site": "a", "models": ["nope"]}], "models": [{"model": "m"}]}
        )


def test_drain_edits_the_input_and_the_service_bumps_once(tmp_path: Path) -> None:
    inp = tmp_path / "in.yaml"
    inp.write_text((EXAMPLES / "drain.input.yaml").read_text())
    out = tmp_path / "overlay.json"

    async def scenario() -> None:
        svc = OverlayService(inp, out)
        assert await svc.step() is True
        assert await svc.step() is False  # nothing changed: no new revision, no write
        assert parse_overlay(out.read_bytes()).revision == 1
        inp.write_text(yaml.safe_dump(with_drain(inp, "c/c", Admission.EXISTING_ONLY)))
        assert await svc.step() is True
        assert parse_overlay(out.read_bytes()).revision == 2
        inp.write_text("providers: [")  # a broken edit keeps the last good input
        assert await svc.step() is False
        # A restarted service continues the published revision sequence.
        assert svc.input is not None
        inp.write_text(yaml.safe_dump(svc.input.model_dump(mode="json")))
        again = OverlayService(inp, out)
        assert await again.step() is True  # its first publish: same content, same revision
        assert parse_overlay(out.read_bytes()).revision == 2

    asyncio.run(scenario())
    with pytest.raises(ConfigError):
        with_drain(inp, "nope/nope", Admission.EXISTING_ONLY)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("gridroute"))
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


def test_render_then_check_on_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    r = _cli("overlay", "render", str(EXAMPLES / "round-robin.input.yaml"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["models"][0]["selection_policy"] == {"picker": "roundRobin"}
    r = _cli("overlay", "check", str(out))
    assert r.returncode == 0 and "group 0: a/a(new_and_existing), b/b" in r.stdout
    bad = tmp_path / "bad.json"
    doc = json.loads(out.read_text())
    doc["models"][0]["candidates"][1]["selection_group"] = 2
    bad.write_text(json.dumps(doc))
    r = _cli("overlay", "check", str(bad))
    assert r.returncode == 2
    assert "models.0.candidates.1.selection_group: capability 'demo-model', group 2" in r.stderr


def test_the_service_reads_freshness_and_readiness_from_operator_signals(
    tmp_path: Path,
) -> None:
    import email.utils
    import time

    from aiohttp import web

    from gridroute.core import Sample
    from gridroute.wire.signals import CONTENT_TYPE, TIME_HEADER, encode_relay

    async def scenario() -> None:
        now = time.time()
        histories = [
            [Sample("a", "a", now - 1, running=1.0, waiting=0.0, ready=1.0, max_running=8)],
            [Sample("b", "b", now - 1, running=1.0, waiting=0.0, ready=0.0, max_running=8)],
            [Sample("c", "c", now - 120, running=1.0, waiting=0.0, ready=1.0, max_running=8)],
        ]  # d: never reported

        async def signals(_: web.Request) -> web.Response:
            t = time.time()
            body = encode_relay(histories, {}, local_site="a").body
            headers = {
                "Date": email.utils.formatdate(t, usegmt=True),
                TIME_HEADER: f"{t:.3f}",
                "Content-Type": CONTENT_TYPE,
            }
            return web.Response(body=body, headers=headers)

        app = web.Application()
        app.router.add_get("/signals", signals)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        data = yaml.safe_load((EXAMPLES / "drain.input.yaml").read_text())
        data["signals"] = {"url": url, "stale_after_s": 30}
        inp = tmp_path / "in.yaml"
        inp.write_text(yaml.safe_dump(data))
        svc = OverlayService(inp)
        try:
            assert await svc.step() is True
        finally:
            await svc.close()
            await runner.cleanup()
        assert svc.overlay is not None
        cap = svc.overlay.models[0]
        got = [(c.key, c.selection_group, c.fresh) for c in cap.candidates]
        assert got == [("a/a", 0, True), ("c/c", 1, False), ("d/d", 2, False)]
        assert [c.key for c in cap.excluded] == ["b/b"]  # unready

    asyncio.run(scenario())
