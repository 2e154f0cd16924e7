from __future__ import annotations

from pathlib import Path

from cluster.config import RerankConfig
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
