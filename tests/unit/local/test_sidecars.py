"""A recorded sidecar is recognised across `ragc` commands even when the wall clock moved between them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local.sidecars import START_TIME_SLACK_S, process_alive, runs_argv, spawn, stop


@pytest.fixture()
def sleeper(tmp_path: Path) -> Iterator[dict[str, Any]]:
    record = spawn("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path)
    yield record
    stop(record, timeout_s=5)


def test_a_running_sidecar_is_alive_when_its_start_time_reads_a_second_off(sleeper: dict[str, Any]) -> None:
    assert process_alive(sleeper)
    # btime in /proc/stat follows the wall clock: another process may read the start a second apart
    assert process_alive(sleeper | {"started": sleeper["started"] + 1.0})
    assert process_alive(sleeper | {"started": sleeper["started"] - 1.0})


def test_a_reused_pid_is_not_taken_for_the_sidecar(sleeper: dict[str, Any]) -> None:
    assert not process_alive(sleeper | {"argv": [sys.executable, "-m", "some.other.program"]})
    assert not process_alive(sleeper | {"started": sleeper["started"] - 10 * START_TIME_SLACK_S})


def test_a_stopped_sidecar_is_not_alive(sleeper: dict[str, Any]) -> None:
    assert stop(sleeper, timeout_s=5)
    assert not process_alive(sleeper)
    assert not stop(sleeper)


def test_a_console_script_is_matched_under_its_interpreter() -> None:
    argv = ["/venv/bin/milvus-lite", "server", "--port", "1"]
    assert runs_argv(["/venv/bin/python", "/venv/bin/milvus-lite", "server", "--port", "1"], argv)
    assert not runs_argv(["/venv/bin/python", "/venv/bin/milvus-lite", "server", "--port", "2"], argv)
