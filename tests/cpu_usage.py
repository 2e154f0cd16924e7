"""`--cpu-durations=N`: the N tests that used the most CPU, beside pytest's `--durations` (wall time).

Machine-wide, from /proc/stat, split by priority: `make test` runs the quality gate at nice 19 beside the other
tiers, so a test's CPU at normal priority is its own (its servers, replicas and subprocesses) and the niced
column is what the gate took meanwhile. Where CI's minutes go on a 2-core machine is a question of CPU, not
of wall time: a test that waits 60 s on a timeout leaves the cores to the gate."""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass

import pytest

PROC_STAT = "/proc/stat"
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuTicks:
    normal: int  # user + system + interrupts: the system time of niced processes counts here too
    niced: int

    @classmethod
    def now(cls) -> CpuTicks | None:
        try:
            with open(PROC_STAT, encoding="ascii") as handle:
                fields = [int(v) for v in handle.readline().split()[1:8]]
        except (OSError, ValueError):
            return None  # not Linux: the option reports nothing
        user, nice, system, _idle, _iowait, irq, softirq = fields
        return cls(user + system + irq + softirq, nice)


@dataclass(frozen=True)
class CpuUse:
    nodeid: str
    normal_s: float
    niced_s: float


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-durations", type=int, default=0, metavar="N", help="show the N tests using the most CPU")


_measured: list[CpuUse] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    before = CpuTicks.now() if item.config.getoption("cpu_durations") else None
    yield
    after = CpuTicks.now() if before is not None else None
    if before is not None and after is not None:
        normal, niced = after.normal - before.normal, after.niced - before.niced
        _measured.append(CpuUse(item.nodeid, normal / TICKS_PER_S, niced / TICKS_PER_S))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    top = config.getoption("cpu_durations")
    if not top or not _measured:
        return
    total_normal = sum(t.normal_s for t in _measured)
    total_niced = sum(t.niced_s for t in _measured)
    terminalreporter.write_sep("=", f"most CPU {top} (core-seconds, setup + call + teardown, machine-wide)")
    for test in sorted(_measured, key=lambda t: t.normal_s, reverse=True)[:top]:
        terminalreporter.write_line(f"{test.normal_s:8.1f} normal {test.niced_s:8.1f} niced  {test.nodeid}")
    terminalreporter.write_line(f"{total_normal:8.1f} normal {total_niced:8.1f} niced  all {len(_measured)} tests")
