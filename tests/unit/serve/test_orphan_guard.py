"""The engine watchdog kills the engine's processes when its replica is gone, and not before."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from serve.llm.orphan_guard import WATCHDOG


def test_the_engine_watchdog_follows_its_replica_not_the_clock() -> None:
    """The watchdog kills the children only once the replica is gone; a shifted create time is tolerated."""
    replica = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    created = psutil.Process(replica.pid).create_time() + 1.0
    watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(replica.pid), repr(created), str(child.pid)])
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
