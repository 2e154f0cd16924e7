"""The quality gate runs the CLI as a user would, on the real SciFact data in ../shared/data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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


def make_cli(env: dict[str, str], log: Path) -> RagcCli:
    def ragc(*args: str, expect: int = 0, timeout: float = 2400) -> dict[str, Any]:
        argv = [sys.executable, "-m", "cli.main", *args]
        started = time.monotonic()
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:  # say how far it got: its progress goes to stderr
            partial = (exc.stderr or b"").decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else ""
            with log.open("a", encoding="utf-8") as handle:
                handle.write(f"$ ragc {' '.join(args)}  # killed after {timeout:.0f} s\n{partial[-4000:]}\n")
            pytest.fail(f"ragc {' '.join(args)} ran past {timeout:.0f} s; its last output:\n{partial[-2000:]}")
        elapsed = time.monotonic() - started
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ ragc {' '.join(args)}  # {elapsed:.0f} s\n{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}\n")
        assert proc.returncode == expect, f"ragc {' '.join(args)} exited {proc.returncode}: {proc.stderr[-3000:]}"
        lines = proc.stdout.strip().splitlines()
        try:
            payload = json.loads(lines[-1]) if lines else {}
        except json.JSONDecodeError:
            payload = {}
        return payload | {"stderr": proc.stderr} if expect else payload

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The answer gate last: under `make test` the integration tier runs beside the gate, and by the time the
    SciFact gate is done it has finished, so the answer gate's LLM does not compete with its servers for
    the CPU (its Milvus searches ran out of time when the two overlapped). SciFact is then embedded by the
    reranker's training, and the answer gate reuses it."""
    items.sort(key=lambda item: item.path.name == "test_answer_gate.py")
