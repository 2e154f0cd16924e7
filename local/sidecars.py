"""Local sidecar processes: the milvus-lite server and redis-server, on loopback, PIDs recorded."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

STOP_TIMEOUT_S = 15.0
POLL_S = 0.2
# Linux derives a process's create time from /proc/stat's btime, which is recomputed from the wall clock at
# every read: NTP slewing moves it between two `ragc` commands (psutil#2526, #2541). A recorded process is
# matched by its start in clock ticks since boot (/proc/<pid>/stat), which no clock change moves; where that
# is not available, by a create time within this slack.
START_TIME_SLACK_S = 2.0


class SidecarError(RuntimeError):
    pass


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def start_ticks(pid: int) -> int | None:
    """The process's start in clock ticks since boot (field 22 of /proc/<pid>/stat); None off Linux."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def process_alive(record: dict[str, Any] | None) -> bool:
    """The recorded process still runs and is the one we started (PIDs get reused)."""
    if not record:
        return False
    try:
        proc = psutil.Process(int(record["pid"]))
        if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
            return False
        ticks = start_ticks(proc.pid)
        if ticks is not None and record.get("start_ticks") is not None:
            return ticks == record["start_ticks"]
        return abs(proc.create_time() - float(record["started"])) <= START_TIME_SLACK_S
    except (psutil.Error, KeyError, ValueError):
        return False


def keep_caller_priority(pid: int, proc_root: Path = Path("/proc")) -> None:
    """A sidecar's new session is a new scheduler autogroup (Linux, `kernel.sched_autogroup_enabled`) whose
    nice is 0 whatever the caller's, and `nice` ranks processes only within an autogroup: under `nice -n 19
    make test-eval` the gate's milvus-lite competed at full weight with the integration tier beside it.
    The sidecar's autogroup takes the caller's nice (nothing to do at 0, or where there are no autogroups)."""
    niceness = os.nice(0)
    if niceness <= 0:
        return
    with contextlib.suppress(OSError):
        (proc_root / str(pid) / "autogroup").write_text(str(niceness), encoding="ascii")


def spawn(name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    keep_caller_priority(proc.pid)
    started = psutil.Process(proc.pid).create_time()
    return {
        "pid": proc.pid,
        "started": started,
        "start_ticks": start_ticks(proc.pid),
        "log": str(log_path),
        "argv": argv,
    }


def wait_until(check: Any, record: dict[str, Any], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if not process_alive(record):
            raise SidecarError(f"{what} exited during start-up; see {record['log']}")
        time.sleep(POLL_S)
    raise SidecarError(f"{what} not ready after {timeout_s:.0f}s; see {record['log']}")


def stop(record: dict[str, Any] | None, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM, then SIGKILL; only a process this module started (checked by create time)."""
    if not process_alive(record):
        return False
    assert record is not None
    proc = psutil.Process(int(record["pid"]))
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    try:
        proc.wait(timeout=timeout_s)
    except psutil.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
    return True


def milvus_lite_binary() -> str:
    candidate = Path(sys.executable).parent / "milvus-lite"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("milvus-lite")
    if not found:
        raise SidecarError("milvus-lite is not installed (pip install milvus-lite)")
    return found


def start_milvus(data_dir: Path, host: str, port: int, log_dir: Path, timeout_s: float) -> dict[str, Any]:
    if port_open(host, port):
        raise SidecarError(f"port {host}:{port} is taken; set local.milvus_port (RAGC_LOCAL__MILVUS_PORT)")
    argv = [milvus_lite_binary(), "server", "--data-dir", str(data_dir), "--host", host, "--port", str(port)]
    record = spawn("milvus", argv, log_dir)
    wait_until(lambda: port_open(host, port), record, timeout_s, "milvus-lite server")
    return record | {"port": port, "uri": f"http://{host}:{port}"}


def start_redis(
    host: str, port: int, log_dir: Path, timeout_s: float, data_dir: Path | None = None
) -> dict[str, Any] | None:
    """None when redis-server is not installed: the shared cache layer is then off.

    When it is full only keys with a TTL are evicted (every cache entry, answer receipts); the feedback streams
    have none, so a full cache never takes the ratings. With `data_dir` they are also saved there when it stops
    (`ragc down`) and every few minutes, and read back when it starts; without it nothing is kept."""
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    if port_open(host, port):
        raise SidecarError(f"port {host}:{port} is taken; set local.redis_port (RAGC_LOCAL__REDIS_PORT)")
    argv = [
        binary,
        "--bind",
        host,
        "--port",
        str(port),
        *(["--dir", str(data_dir), "--dbfilename", "ragc.rdb", "--save", "300 1"] if data_dir else ["--save", ""]),
        "--appendonly",
        "no",
        "--protected-mode",
        "yes",
        "--maxmemory",
        "512mb",
        "--maxmemory-policy",
        "volatile-lru",
    ]
    if data_dir:
        data_dir.mkdir(parents=True, exist_ok=True)
    record = spawn("redis", argv, log_dir)
    wait_until(lambda: port_open(host, port), record, timeout_s, "redis-server")
    return record | {"port": port, "url": f"redis://{host}:{port}/0"}
