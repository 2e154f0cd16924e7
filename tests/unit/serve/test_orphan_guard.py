"""The engine watchdog kills the engine's processes when its replica is gone, and not before, and never a
process that took over one of their pids."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from serve.llm.orphan_guard import WATCHDOG

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def identity(proc: subprocess.Popen[bytes], shift_s: float = 0.0) -> str:
    return f"{proc.pid}:{psutil.Process(proc.pid).create_time() + shift_s!r}"


def test_the_engine_watchdog_follows_its_replica_not_the_clock() -> None:
    """The watchdog kills the children only once the replica is gone; a shifted create time is tolerated."""
    replica, child = subprocess.Popen(SLEEPER), subprocess.Popen(SLEEPER)
    pid, created = identity(replica, shift_s=1.0).split(":")
    watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, pid, created, identity(child, shift_s=1.0)])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=2.5)
        replica.kill()
        replica.wait()
        assert child.wait(timeout=10) != 0
        watchdog.wait(timeout=10)
    finally:
        for proc in (replica, child, watchdog):
            proc.kill()


def test_a_process_that_is_not_the_engine_child_it_was_told_of_is_left_alone() -> None:
    """A pid whose process started at another time than the engine's child did (what a reused pid looks
    like) is never killed, while the real child beside it is."""
    replica, child, stranger = subprocess.Popen(SLEEPER), subprocess.Popen(SLEEPER), subprocess.Popen(SLEEPER)
    pid, created = identity(replica).split(":")
    argv = [sys.executable, "-c", WATCHDOG, pid, created, identity(child), identity(stranger, shift_s=-600.0)]
    watchdog = subprocess.Popen(argv)
    try:
        replica.kill()
        replica.wait()
        assert child.wait(timeout=10) != 0
        assert watchdog.wait(timeout=10) == 0
        assert stranger.poll() is None, "a process that only shares a pid with an engine child survives"
    finally:
        for proc in (replica, child, stranger, watchdog):
            proc.kill()
