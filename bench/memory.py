"""Peak resident memory of a set of processes, sampled in a background thread."""

from __future__ import annotations

from collections.abc import Callable

import psutil

from bench.sampling import BackgroundSampler

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


class PeakMemory(BackgroundSampler):
    def __init__(self, interval_s: float = 0.5, processes: Callable[[], list[psutil.Process]] = ray_and_self) -> None:
        super().__init__(interval_s)
        self.peak_bytes = 0
        self._processes = processes

    def sample(self) -> None:
        self.peak_bytes = max(self.peak_bytes, total_rss(self._processes))
