"""Engine processes must not outlive their replica. vLLM's engine core runs in child processes that do not
watch their parent; when Serve's replica is killed (SIGKILL: node pressure, `ray.kill`, a crash) they would
stay behind holding the model's memory. A small watchdog process kills them when the replica is gone."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

# The parent is bound once, then followed with is_running(), which psutil checks by the process's start in
# ticks since boot. Re-reading create_time() would not do: it follows the wall clock, and an NTP slew makes a
# live parent look replaced (psutil#2526), which would kill a healthy engine.
WATCHDOG = """
import sys, time, psutil
parent, created, children = int(sys.argv[1]), float(sys.argv[2]), [int(p) for p in sys.argv[3:]]
try:
    replica = psutil.Process(parent)
    alive = abs(replica.create_time() - created) < 5.0
except psutil.Error:
    alive = False
def replica_alive():
    try:
        return replica.is_running() and replica.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
while alive and replica_alive():
    time.sleep(1.0)
for pid in children:
    try:
        psutil.Process(pid).kill()
    except psutil.Error:
        pass
"""


def guard_children() -> subprocess.Popen[bytes] | None:
    """Start a watchdog over this process's current children (recursively); None when there are none."""
    me = psutil.Process(os.getpid())
    children = [str(child.pid) for child in me.children(recursive=True)]
    if not children:
        return None
    argv = [sys.executable, "-c", WATCHDOG, str(me.pid), repr(me.create_time()), *children]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
