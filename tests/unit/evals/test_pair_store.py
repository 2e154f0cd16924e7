from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from cluster.config import RerankConfig
from evals import pair_store
from evals.pair_store import PairScoreStore, reranker_fingerprint


def reranker_dir(root: Path, weights: bytes) -> RerankConfig:
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.safetensors").write_bytes(weights)
    (root / "config.json").write_text("{}")
    return RerankConfig(model=str(root))


def test_scores_come_back_only_for_the_same_weights_settings_and_texts(tmp_path: Path) -> None:
    cfg = reranker_dir(tmp_path / "ce", b"weights-1")
    path = tmp_path / "scores.sqlite"
    store = PairScoreStore(path, reranker_fingerprint(cfg))
    store.put([("q", "a"), ("q", "b")], [1.5, -2.0])
    store.close()

    again = PairScoreStore(path, reranker_fingerprint(cfg))  # another run of the same reranker
    assert again.get([("q", "a"), ("q", "b"), ("q", "c"), ("other q", "a")]) == {("q", "a"): 1.5, ("q", "b"): -2.0}
    assert again.reused == 2

    longer = RerankConfig(model=cfg.model, max_length=64)
    assert reranker_fingerprint(longer) != reranker_fingerprint(cfg)
    assert PairScoreStore(path, reranker_fingerprint(longer)).get([("q", "a")]) == {}
    retrained = reranker_dir(tmp_path / "ce", b"weights-2")  # the same directory, trained again
    assert PairScoreStore(path, reranker_fingerprint(retrained)).get([("q", "a")]) == {}


def test_many_pairs_are_looked_up_past_sqlites_parameter_limit(tmp_path: Path) -> None:
    store = PairScoreStore(tmp_path / "scores.sqlite", "fp")
    pairs = [("q", f"passage {n}") for n in range(1200)]
    store.put(pairs, [float(n) for n in range(1200)])
    found = store.get(pairs)
    assert len(found) == 1200 and found[("q", "passage 1199")] == 1199.0


def test_a_writer_waits_for_another_runs_transaction_on_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two evaluations of one reranker at once (the gate's calibration beside its scoring): the second writer
    waits for the first's transaction; without the wait it fails at once."""
    path = tmp_path / "scores.sqlite"
    PairScoreStore(path, "fp").close()  # the table exists
    other_run = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def hold_the_write_lock(seconds: float) -> threading.Thread:
        other_run.execute("BEGIN IMMEDIATE")
        release = threading.Timer(seconds, lambda: other_run.execute("COMMIT"))
        release.start()
        return release

    monkeypatch.setattr(pair_store, "LOCK_WAIT_S", 0.0)
    impatient = PairScoreStore(path, "fp")
    held = hold_the_write_lock(0.5)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        impatient.put([("q", "a")], [1.0])
    held.join()

    monkeypatch.setattr(pair_store, "LOCK_WAIT_S", 10.0)
    patient = PairScoreStore(path, "fp")
    held = hold_the_write_lock(0.5)
    patient.put([("q", "a")], [1.0])
    held.join()
    assert patient.get([("q", "a")]) == {("q", "a"): 1.0}
