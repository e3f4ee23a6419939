"""Scrape parsing: every fixture page, the EPP name pairs, malformed pages, fuzzing."""

from __future__ import annotations

import contextlib
import math
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gridroute.wire.prometheus import (
    MAX_EXPOSITION_LINES,
    ExpositionError,
    MetricsFormat,
    parse_exposition,
    parse_labels,
    parse_series,
)

FIXTURES = Path(__file__).parent / "fixtures"


def page(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_fixture_is_read_without_error_by_the_line_grammar() -> None:
    files = sorted(FIXTURES.glob("*.txt"))
    assert len(files) == 7
    for path in files:
        text = path.read_text()
        ours = parse_series(text)
        theirs = {
            s.name: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        for name, values in ours.items():
            assert theirs[name] == values[-1], (path.name, name)


def test_vllm_v0_page() -> None:
    load = parse_exposition(page("vllm-metrics-v0-qwen3vl-issue55.txt"))
    assert load.format is MetricsFormat.VLLM
    assert (load.running, load.waiting, load.ready, load.kv_usage) == (0.0, 0.0, 1.0, 0.0)
    assert load.held is None


def test_vllm_v1_design_doc_page_has_running_but_no_queue() -> None:
    load = parse_exposition(page("vllm-metrics-v1-design-doc-example.txt"), MetricsFormat.VLLM)
    assert load.running == 8.0 and load.ready == 1.0
    assert load.waiting is None and load.deepest_queue is None and load.kv_usage is None


def test_vllm_early_v1_page_reads_legacy_kv_name() -> None:
    load = parse_exposition(page("vllm-metrics-v1-early-prodstack-issue318.txt"))
    assert load.format is MetricsFormat.VLLM
    assert load.kv_usage == 0.0 and load.running == 0.0 and load.waiting == 0.0


def test_vllm_page_with_only_kv_is_not_load() -> None:
    text = page("vllm-metrics-v0.10-prodstack-issue617.txt")
    assert parse_series(text)["vllm:kv_cache_usage_perc"] == [9.75010481363281e-06]
    with pytest.raises(ExpositionError) as caught:
        parse_exposition(text)
    assert caught.value.reason == "empty"


def test_sglang_page() -> None:
    load = parse_exposition(page("sglang-metrics-docs-example.txt"))
    assert load.format is MetricsFormat.SGLANG
    assert (load.running, load.waiting, load.ready) == (162.0, 2826.0, 1.0)
    assert load.kv_usage == 0.28 and load.deepest_queue == 2826.0


def test_epp_legacy_names() -> None:
    load = parse_exposition(page("epp-metrics-gie-v1.5.0-testdata.txt"))
    assert load.format is MetricsFormat.EPP
    assert (load.running, load.waiting, load.kv_usage) == (0.5, 0.4, 0.3)
    assert load.ready is None and load.held is None


def test_epp_current_names() -> None:
    load = parse_exposition(page("epp-metrics-llm-d-router-testdata.txt"), MetricsFormat.EPP)
    assert (load.running, load.waiting, load.kv_usage) == (0.5, 0.4, 0.3)


@pytest.mark.parametrize(
    "name", ["epp-metrics-gie-v1.5.0-testdata.txt", "epp-metrics-llm-d-router-testdata.txt"]
)
def test_epp_golden_pages_name_their_pool_on_the_name_label(name: str) -> None:
    """The EPP's own golden expositions label the pool gauges `name="p1"`: naming p1
    reads them as the unnamed read does; naming another pool finds nothing."""
    load = parse_exposition(page(name), MetricsFormat.EPP, "p1")
    assert (load.running, load.waiting, load.kv_usage) == (0.5, 0.4, 0.3)
    with pytest.raises(ExpositionError) as caught:
        parse_exposition(page(name), pool="p2")
    assert caught.value.reason == "empty"


def test_labels_are_read_with_their_escapes() -> None:
    block = '{a="x=\\"b\\", c", b = "line\\nbreak",c="back\\\\slash",}'
    assert parse_labels(block) == {"a": 'x="b", c', "b": "line\nbreak", "c": "back\\slash"}
    assert parse_labels("{}") == {}


def test_a_pool_is_matched_on_the_series_own_pool_label_only() -> None:
    text = (
        'llm_d_epp_average_queue_size{name="qwen3",inference_pool="llama"} 2\n'
        'llm_d_epp_average_queue_size{inference_pool="qwen3"} 5\n'
        'vllm:num_requests_waiting{name="qwen3"} 9\n'
    )
    assert parse_series(text, "qwen3") == {"llm_d_epp_average_queue_size": [2.0]}
    assert parse_series(text, "llama") == {}
    assert parse_series(text) == {
        "llm_d_epp_average_queue_size": [2.0, 5.0],
        "vllm:num_requests_waiting": [9.0],
    }


def test_epp_prefers_current_name_over_legacy_twin() -> None:
    text = (
        "llm_d_epp_average_queue_size 2\n"
        "inference_pool_average_queue_size 7\n"
        "inference_pool_average_running_requests 3\n"
    )
    load = parse_exposition(text)
    assert load.waiting == 2.0 and load.running == 3.0


def test_epp_ready_held_summed_and_deepest_max() -> None:
    text = "\n".join(
        [
            'llm_d_epp_average_running_requests{name="p"} 4',
            'llm_d_epp_average_queue_size{name="p"} 1.5',
            'inference_pool_ready_pods{name="p"} 3',
            'llm_d_epp_flow_control_queue_size{fairness_id="a",priority="0"} 2',
            'llm_d_epp_flow_control_queue_size{fairness_id="b",priority="10"} 5',
            'llm_d_epp_per_endpoint_queue_size{name="p",model_server_endpoint="x"} 1',
            'llm_d_epp_per_endpoint_queue_size{name="p",model_server_endpoint="y"} 4',
        ]
    )
    load = parse_exposition(text)
    assert (load.ready, load.held, load.deepest_queue) == (3.0, 7.0, 4.0)


def test_engines_are_summed_and_counted_into_per_endpoint_averages() -> None:
    text = "\n".join(
        [
            'vllm:num_requests_running{engine="0"} 6',
            'vllm:num_requests_running{engine="1"} 2',
            'vllm:num_requests_waiting{engine="0"} 3',
            'vllm:num_requests_waiting{engine="1"} 0',
            'vllm:kv_cache_usage_perc{engine="0"} 0.5',
            'vllm:kv_cache_usage_perc{engine="1"} 0.9',
            'vllm:gpu_cache_usage_perc{engine="1"} 0.1',
        ]
    )
    load = parse_exposition(text)
    assert (load.running, load.waiting, load.ready) == (4.0, 1.5, 2.0)
    assert (load.deepest_queue, load.kv_usage) == (3.0, 0.9)


def test_non_finite_series_values_are_ignored() -> None:
    load = parse_exposition("vllm:num_requests_running NaN\nvllm:num_requests_waiting 2\n")
    assert (load.running, load.waiting, load.ready) == (None, 2.0, 1.0)
    # no finite running or queue reading at all: the page is not load
    with pytest.raises(ExpositionError):
        parse_exposition("vllm:num_requests_running NaN\n")


def test_forced_format_ignores_other_exporters() -> None:
    text = "vllm:num_requests_running 3\nsglang:num_running_reqs 9\n"
    assert parse_exposition(text, MetricsFormat.SGLANG).running == 9.0
    assert parse_exposition(text, MetricsFormat.VLLM).running == 3.0


@pytest.mark.parametrize(
    "text",
    [
        "<html><body>502 Bad Gateway</body></html>",
        '{"error": "not found"}',
        'vllm:num_requests_running{model="a} 1',
        "vllm:num_requests_running one",
        "vllm:num_requests_running",
        "vllm:num_requests_running 1\n\x00\x01 2",
    ],
)
def test_garbage_is_a_typed_parse_error(text: str) -> None:
    with pytest.raises(ExpositionError) as caught:
        parse_exposition(text)
    assert caught.value.reason == "parse"


def test_windows_line_endings_timestamps_and_exemplars_are_accepted() -> None:
    text = (
        "# HELP x y\r\n"
        'vllm:num_requests_running{a="1",} 2 1700000000000\r\n'
        'other_bucket{le="1"} 3 # {trace_id="abc"} 1.0\r\n'
    )
    assert parse_exposition(text).running == 2.0


def test_too_many_lines_is_refused_without_walking_the_page() -> None:
    text = "x 1\n" * (MAX_EXPOSITION_LINES + 1)
    with pytest.raises(ExpositionError) as caught:
        parse_series(text)
    assert caught.value.reason == "too_large"


# --- fuzzing ------------------------------------------------------------------------

_names = st.sampled_from(
    [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "sglang:num_running_reqs",
        "llm_d_epp_average_queue_size",
        "unrelated_total",
    ]
)
_label_values = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters='"\\\n'), max_size=8
)
_values = st.floats(allow_nan=False, width=64)


@st.composite
def expositions(draw: st.DrawFn) -> tuple[str, dict[str, list[float]]]:
    lines: list[str] = []
    expected: dict[str, list[float]] = {}
    used: set[tuple[str, str]] = set()
    for _ in range(draw(st.integers(0, 12))):
        name = draw(_names)
        label = draw(_label_values)
        if (name, label) in used:
            continue
        used.add((name, label))
        value = draw(_values)
        lines.append(f'{name}{{engine="{label}"}} {value!r}')
        if name != "unrelated_total":
            expected.setdefault(name, []).append(value)
    return "\n".join(lines) + "\n", expected


@given(expositions())
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_line_grammar_agrees_with_prometheus_client_on_valid_pages(
    case: tuple[str, dict[str, list[float]]],
) -> None:
    text, expected = case
    assert parse_series(text) == expected
    reference: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in expected:
                reference.setdefault(s.name, []).append(s.value)
    assert reference == expected


@given(st.text(max_size=2000))
@settings(max_examples=300)
def test_arbitrary_text_never_raises_anything_but_exposition_error(text: str) -> None:
    try:
        load = parse_exposition(text)
    except ExpositionError:
        return
    assert load.running is not None or load.waiting is not None
    for v in (load.running, load.waiting, load.ready, load.kv_usage):
        assert v is None or math.isfinite(v)


@given(st.binary(max_size=2000))
@settings(max_examples=200)
def test_arbitrary_bytes_decoded_leniently_never_crash(data: bytes) -> None:
    with contextlib.suppress(ExpositionError):
        parse_exposition(data.decode("utf-8", "replace"))


def test_memory_stays_proportional_to_the_page() -> None:
    # A 4 MiB page of unknown series: the parser keeps nothing of it.
    text = 'unrelated_metric{label="' + "x" * 100 + '"} 1\n'
    text *= (4 * 1024 * 1024) // len(text)
    tracemalloc.start()
    try:
        parse_series(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # split() holds the lines once (about the page size); nothing grows beyond that.
    assert peak < 3 * len(text)
