"""Peak resident memory of a set of processes, sampled in a background thread."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psutil

MB = 1024 * 1024


def ray_and_self() -> list[psutil.Process]:
    """This process, its children, and every Ray process on the machine (raylet, GCS, workers)."""
    me = psutil.Process()
    procs = {me.pid: me, **{c.pid: c for c in me.children(recursive=True)}}
    for proc in psutil.process_iter(["name", "cmdline"]):
        name = proc.info["name"] or ""
        cmd = " ".join(proc.info["cmdline"] or [])
        if (
            name.startswith("ray::")
            or name in ("raylet", "gcs_server")
            or "ray/_private" in cmd
            or "milvus-lite" in cmd
        ):
            procs[proc.pid] = proc
    return list(procs.values())


def total_rss(processes: Callable[[], list[psutil.Process]] = ray_and_self) -> int:
    total = 0
    for proc in processes():
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


class PeakMemory:
    def __init__(self, interval_s: float = 0.5, processes: Callable[[], list[psutil.Process]] = ray_and_self) -> None:
        self.peak_bytes = 0
        self._interval_s = interval_s
        self._processes = processes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, total_rss(self._processes))
            self._stop.wait(self._interval_s)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
