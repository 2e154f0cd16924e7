"""The quality gate runs the CLI as a user would, on the real SciFact data in ../shared/data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import free_port

SHARED = Path(os.environ.get("RAGC_SHARED_DIR", Path(__file__).resolve().parents[2].parent / "shared"))
SCIFACT = SHARED / "data" / "scifact"
RagcCli = Callable[..., dict[str, Any]]


@pytest.fixture(scope="session")
def scifact() -> Path:
    if not (SCIFACT / "queries.jsonl").exists():
        pytest.fail(f"SciFact is missing at {SCIFACT} (set RAGC_SHARED_DIR to the folder holding data/scifact)")
    return SCIFACT


def cli_env(state_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "RAGC_STATE_DIR": str(state_dir),
        "RAGC_LOCAL__MILVUS_PORT": str(free_port()),
        "RAGC_LOCAL__REDIS_PORT": str(free_port()),
        "RAGC_RAY__NUM_CPUS": "2",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        # `make test` runs the gate at a low CPU priority beside the integration tier: a local Ray may then
        # wait for the CPU while it starts (cluster.ray_runtime's own default is 60 s)
        "RAY_gcs_server_port_wait_time_s": "240",
    }


@dataclass
class CliRun:
    """One `ragc` command started in the background: `result()` waits for it as a `make_cli` call would."""

    args: tuple[str, ...]
    proc: subprocess.Popen[str]
    log: Path
    timeout: float
    expect: int
    started: float = field(default_factory=time.monotonic)

    def result(self) -> dict[str, Any]:
        command = f"ragc {' '.join(self.args)}"
        left = max(1.0, self.timeout - (time.monotonic() - self.started))
        try:
            stdout, stderr = self.proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:  # say how far it got: its progress goes to stderr
            self.proc.kill()
            _, partial = self.proc.communicate()
            with self.log.open("a", encoding="utf-8") as handle:
                handle.write(f"$ {command}  # killed after {self.timeout:.0f} s\n{partial[-4000:]}\n")
            pytest.fail(f"{command} ran past {self.timeout:.0f} s; its last output:\n{partial[-2000:]}")
        elapsed = time.monotonic() - self.started
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ {command}  # {elapsed:.0f} s\n{stderr[-4000:]}\n{stdout[-2000:]}\n")
        rc = self.proc.returncode
        assert rc == self.expect, f"{command} exited {rc}: {stderr[-3000:]}"
        lines = stdout.strip().splitlines()
        try:
            payload = json.loads(lines[-1]) if lines else {}
        except json.JSONDecodeError:
            payload = {}
        return payload | {"stderr": stderr} if self.expect else payload

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def start_cli(env: dict[str, str], log: Path, *args: str, expect: int = 0, timeout: float = 2400) -> CliRun:
    argv = [sys.executable, "-m", "cli.main", *args]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return CliRun(args, proc, log, timeout, expect)


def make_cli(env: dict[str, str], log: Path) -> RagcCli:
    def ragc(*args: str, expect: int = 0, timeout: float = 2400) -> dict[str, Any]:
        return start_cli(env, log, *args, expect=expect, timeout=timeout).result()

    return ragc


GATE_DIR = Path(__file__).resolve().parents[2] / ".ragc" / "gate"  # `make test-eval` prints its report


@pytest.fixture(scope="session")
def gate_dir() -> Path:
    """One local cluster (milvus-lite + Redis sidecars) for the whole gate: SciFact is embedded once.
    Wiped first: every gate run starts from nothing, as CI does."""
    shutil.rmtree(GATE_DIR, ignore_errors=True)
    GATE_DIR.mkdir(parents=True)
    return GATE_DIR


@pytest.fixture(scope="session")
def gate_env(gate_dir: Path) -> dict[str, str]:
    """The environment of every command of the gate: one state dir, one pair of sidecar ports."""
    return cli_env(gate_dir / "state")


@pytest.fixture(scope="session")
def gate_cli(gate_env: dict[str, str], gate_dir: Path) -> Iterator[RagcCli]:
    ragc = make_cli(gate_env, gate_dir / "cli.log")
    ragc("up", "--no-app", "--json")
    yield ragc
    ragc("down", "--json")


# The answer gate (test_answer_gate.py): two slices of 10 questions (`--limit 10` takes every other question of
# the 20-question slices measured in the README), through gate_cli's cluster with the answer stage's timeout
# raised: the gate measures what the model writes, not how fast (under the service's 25 s the slice would depend
# on the CI machine's speed and on what runs beside it; an answer takes ~5 s alone on 2 cores).
ANSWER_SLICE = 10
ANSWER_DATASETS = ("inscit", "scifact")
ANSWER_SYNTHESIS_TIMEOUT_S = "120"


@pytest.fixture(scope="session")
def answer_gate_run(gate_cli: RagcCli, gate_env: dict[str, str], gate_dir: Path) -> Iterator[CliRun]:
    """`ragc eval-answers` over both slices in one command (the engines start once), started in the background.
    The quality gate starts it once its reranker is trained and scored (test_quality_gate.py: `calibration`):
    by then the integration tier has ended, and the answer gate's LLM and the abstention steps share the CPU
    that each alone left partly idle (its Milvus searches ran out of time when it overlapped that tier)."""
    datasets = []
    for name in ANSWER_DATASETS:
        dataset = SHARED / "data" / name
        if not (dataset / "queries.jsonl").exists():
            pytest.fail(f"{dataset} is missing (set RAGC_SHARED_DIR to the folder holding data/{name})")
        datasets += ["--dataset", str(dataset)]
    env = gate_env | {"RAGC_SERVE__SYNTHESIZE__TIMEOUT_S": ANSWER_SYNTHESIS_TIMEOUT_S}
    output = gate_dir / "report" / "{dataset}_answers.json"
    run = start_cli(
        env,
        gate_dir / "answers.log",
        "eval-answers",
        *datasets,
        "--limit",
        str(ANSWER_SLICE),
        "--output",
        str(output),
        timeout=1800,
    )
    yield run
    run.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The answer gate's tests last: they wait for its run (`answer_gate_run`), which the quality gate starts
    once the integration tier that runs beside it under `make test` has finished. SciFact is embedded by the
    reranker's training, and the answer gate reuses it."""
    items.sort(key=lambda item: item.path.name == "test_answer_gate.py")
