"""The fault suite's own checks, on made-up records: each must fail on the breach it
names, or a green scenario proves nothing. These start no process (they run in
`make test`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridroute.fakeserver.answer_log import AnswerLog, read_answer_log
from tests.faults import harness
from tests.faults.harness import Tally, assert_no_duplicates, check_no_duplicates, duplicates


def test_a_retry_after_bytes_reached_the_client_is_a_duplicate() -> None:
    # r7's answer came from b (begun at 10.0); a began it 0.4 s later: the gateway
    # retried after relaying b's first bytes.
    reached = {"r7": "b", "r8": "a"}
    begun = {"b": {"r7": 10.0}, "a": {"r7": 10.4, "r8": 11.0}}
    found = duplicates(reached, begun)
    assert len(found) == 1 and found[0].startswith("r7: its bytes came from b")


def test_a_retry_of_an_answer_lost_before_it_reached_the_client_is_allowed() -> None:
    # b began r3 and died before its headers reached the gateway; the flow retried on
    # a, whose answer reached the client. b's start came first: no duplicate.
    assert duplicates({"r3": "a"}, {"b": {"r3": 5.0}, "a": {"r3": 5.2}}) == []


def test_an_answer_its_site_never_logged_is_reported() -> None:
    # a check that sees no log at all must not pass as "no duplicates"
    assert duplicates({"r1": "a"}, {}) == ["r1: answered by a, which never logged beginning it"]


def test_the_scenario_check_reads_the_fake_servers_logs(tmp_path: Path) -> None:
    """End to end on files: two sites' answer logs with a duplicate fail the check."""
    logs = {site: tmp_path / f"answers-{site}.log" for site in ("a", "b")}
    b = AnswerLog(str(logs["b"]))
    b.began("r1")
    b.close()
    a = AnswerLog(str(logs["a"]))
    a.began("r1")  # later than b's: a retry after b's bytes went out
    a.began(None)  # a request without an id (a health probe) is not logged
    a.close()
    assert set(read_answer_log(logs["a"])) == {"r1"}
    harness.ANSWER_LOGS[:] = list(logs.items())
    tally = Tally("made up", served=1, reached={"r1": "b"})
    found = check_no_duplicates(tally)
    assert tally.row("-")["duplicated"] == 1
    with pytest.raises(AssertionError, match="r1: its bytes came from b"):
        assert_no_duplicates(found)
    tally.reached = {"r1": "a"}  # a's answer reached the client; b had begun it first
    assert check_no_duplicates(tally) == [] and tally.duplicated == 0
