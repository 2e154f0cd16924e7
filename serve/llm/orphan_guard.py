"""Engine processes must not outlive their replica. vLLM's engine core runs in child processes that do not
watch their parent; when Serve's replica is killed (SIGKILL: node pressure, `ray.kill`, a crash) they would
stay behind holding the model's memory. A small watchdog process kills them when the replica is gone."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

# Every process is bound once, by pid and the create time the engine saw, then followed with is_running(),
# which psutil checks by the process's start in ticks since boot. Re-reading create_time() would not do: it
# follows the wall clock, and an NTP slew makes a live parent look replaced (psutil#2526), which would kill a
# healthy engine. The children are bound the same way and killed through those bound objects, which psutil
# refuses for a pid that now belongs to another process: on a busy machine pids wrap around within minutes,
# and a bare pid killed long after its engine exited once took down a Ray node started since.
WATCHDOG = """
import sys, time, psutil
def bound(pid, created):
    try:
        proc = psutil.Process(int(pid))
        return proc if abs(proc.create_time() - float(created)) < 5.0 else None
    except psutil.Error:
        return None
replica = bound(sys.argv[1], sys.argv[2])
children = [bound(*arg.split(":")) for arg in sys.argv[3:]]
def replica_alive():
    try:
        return replica.is_running() and replica.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
while replica is not None and replica_alive():
    time.sleep(1.0)
for child in children:
    try:
        if child is not None:
            child.kill()
    except psutil.Error:
        pass
"""


def guard_children() -> subprocess.Popen[bytes] | None:
    """Start a watchdog over this process's current children (recursively); None when there are none."""
    me = psutil.Process(os.getpid())
    children = [f"{child.pid}:{child.create_time()!r}" for child in me.children(recursive=True)]
    if not children:
        return None
    argv = [sys.executable, "-c", WATCHDOG, str(me.pid), repr(me.create_time()), *children]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
