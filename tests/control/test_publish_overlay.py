"""A TrafficMap as a routing overlay for gridroute's own gateways: weights in group 0,
weight-0 homes draining in group 1, an all-zero table fails closed, weights scaled into
the overlay's range with their ratios kept."""

from __future__ import annotations

from math import gcd
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridroute.control.publish_directory import PublishError
from gridroute.control.publish_overlay import (
    Binding,
    OverlayPublisher,
    overlay_weights,
    render_overlay,
)
from gridroute.core.pickers import MAX_WEIGHT, Picker
from gridroute.wire.overlay import parse_overlay
from gridroute.wire.trafficmap import MapEntry, Metadata, Spec, TrafficMap


def tm(name: str, weights: dict[str, int], namespace: str = "demo") -> TrafficMap:
    entries = [MapEntry(cluster=c, endpoint=f"http://{c}", weight=w) for c, w in weights.items()]
    return TrafficMap(
        metadata=Metadata(name=name, namespace=namespace, generation=1),
        spec=Spec(service=name, entries=entries),
    )


def rows(overlay) -> list[tuple[str, int | None, str, int | None]]:
    (cap,) = overlay.models
    return [
        (c.key, c.selection_group, c.admission_state.value, c.traffic_weight)
        for c in [*cap.candidates, *cap.excluded]
    ]


def test_positive_weights_share_group_0_under_the_weighted_picker() -> None:
    overlay = render_overlay([tm("chat", {"a": 4, "b": 2, "c": 3})], {})
    (cap,) = overlay.models
    assert cap.model == "chat" and cap.picker is Picker.WEIGHTED
    assert rows(overlay) == [
        ("a/a", 0, "new_and_existing", 4),
        ("b/b", 0, "new_and_existing", 2),
        ("c/c", 0, "new_and_existing", 3),
    ]


def test_weight_0_homes_drain_in_group_1_taking_no_new_requests() -> None:
    overlay = render_overlay([tm("chat", {"a": 0, "b": 1})], {})
    assert rows(overlay) == [("b/b", 0, "new_and_existing", 1), ("a/a", 1, "existing_only", 0)]


@pytest.mark.parametrize("weights", [{"a": 0, "b": 0}, {}])
def test_an_all_zero_or_empty_table_excludes_every_home(weights: dict[str, int]) -> None:
    overlay = render_overlay([tm("chat", weights)], {})
    (cap,) = overlay.models
    assert cap.candidates == [] and [c.key for c in cap.excluded] == [f"{c}/{c}" for c in weights]


def test_binding_names_the_model_and_each_homes_gateway_backend() -> None:
    binding = Binding("llama-3-8b", {"a": ("east", "pool-a")})
    overlay = render_overlay([tm("chat", {"a": 2, "b": 1})], {("demo", "chat"): binding})
    (cap,) = overlay.models
    assert cap.model == "llama-3-8b"
    assert [(c.key, c.cluster) for c in cap.candidates] == [("east/pool-a", "a"), ("b/b", "b")]


def test_two_services_claiming_one_model_are_refused() -> None:
    maps = [tm("chat", {"a": 1}, "x"), tm("chat", {"a": 1}, "y")]
    with pytest.raises(PublishError, match=r"x/chat and y/chat both publish model 'chat'"):
        render_overlay(maps, {})


def test_the_publisher_bumps_the_revision_only_on_a_change(tmp_path: Path) -> None:
    pub = OverlayPublisher(tmp_path / "overlay.json")
    assert pub.write([tm("chat", {"a": 2, "b": 1})], {}).revision == 1
    mtime = (tmp_path / "overlay.json").stat().st_mtime_ns
    assert pub.write([tm("chat", {"a": 2, "b": 1})], {}).revision == 1
    assert (tmp_path / "overlay.json").stat().st_mtime_ns == mtime  # not rewritten
    assert pub.write([tm("chat", {"a": 0, "b": 1})], {}).revision == 2
    assert parse_overlay((tmp_path / "overlay.json").read_text()).revision == 2


def test_an_unwritable_overlay_is_a_publish_error(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("")
    pub = OverlayPublisher(tmp_path / "blocker" / "overlay.json")
    with pytest.raises(PublishError, match="write"):
        pub.write([tm("chat", {"a": 1})], {})


def test_weights_above_the_overlay_range_are_scaled() -> None:
    assert overlay_weights([1_000_000, 500_000, 1, 0]) == (1000, 500, 1, 0)
    assert overlay_weights([2, 1]) == (2, 1)


@given(st.lists(st.integers(0, 1_000_000), min_size=1, max_size=16))
def test_scaling_keeps_zeros_positives_and_order_within_range(weights: list[int]) -> None:
    scaled = overlay_weights(weights)
    assert all(0 <= s <= MAX_WEIGHT for s in scaled)
    assert [s == 0 for s in scaled] == [w == 0 for w in weights]
    for w1, s1 in zip(weights, scaled, strict=True):
        for w2, s2 in zip(weights, scaled, strict=True):
            if w1 <= w2:
                assert s1 <= s2
    top = max(weights)
    if top > MAX_WEIGHT:  # each share within 1/1000 of the map's (rounding of one unit)
        total_w, total_s = sum(weights), sum(scaled)
        for w, s in zip(weights, scaled, strict=True):
            assert abs(s / total_s - w / total_w) <= len(weights) / MAX_WEIGHT
    elif top:
        assert gcd(*scaled) == gcd(*weights)
