"""A recorded sidecar is recognised across `ragc` commands even when the wall clock moved between them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local.sidecars import START_TIME_SLACK_S, keep_caller_priority, process_alive, spawn, stop


@pytest.fixture()
def sleeper(tmp_path: Path) -> Iterator[dict[str, Any]]:
    record = spawn("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path)
    yield record
    stop(record, timeout_s=5)


def test_a_running_sidecar_is_alive_whatever_its_create_time_reads_later(sleeper: dict[str, Any]) -> None:
    """btime in /proc/stat follows the wall clock, so another process may read the create time seconds
    apart; the start in ticks since boot does not move."""
    assert sleeper["start_ticks"] is not None
    assert process_alive(sleeper)
    assert process_alive(sleeper | {"started": sleeper["started"] + 30.0})


def test_without_ticks_the_create_time_is_matched_within_a_slack(sleeper: dict[str, Any]) -> None:
    assert process_alive(sleeper | {"start_ticks": None, "started": sleeper["started"] + 1.0})
    assert not process_alive(sleeper | {"start_ticks": None, "started": sleeper["started"] - 10 * START_TIME_SLACK_S})


def test_a_reused_pid_is_not_taken_for_the_sidecar(sleeper: dict[str, Any]) -> None:
    assert not process_alive(sleeper | {"start_ticks": sleeper["start_ticks"] - 1})


def test_a_stopped_sidecar_is_not_alive(sleeper: dict[str, Any]) -> None:
    assert stop(sleeper, timeout_s=5)
    assert not process_alive(sleeper)
    assert not stop(sleeper)


@pytest.mark.parametrize(("caller_nice", "written"), [(19, "19"), (0, None)])
def test_a_sidecar_session_keeps_its_callers_nice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caller_nice: int, written: str | None
) -> None:
    """Its own session is its own autogroup, which would otherwise run at nice 0 beside a niced caller."""
    (tmp_path / "4242").mkdir()
    monkeypatch.setattr("local.sidecars.os.nice", lambda increment: caller_nice + increment)
    keep_caller_priority(4242, proc_root=tmp_path)
    autogroup = tmp_path / "4242" / "autogroup"
    assert (autogroup.read_text() if autogroup.exists() else None) == written
    keep_caller_priority(4243, proc_root=tmp_path)  # a process already gone (or no autogroups): nothing raised
