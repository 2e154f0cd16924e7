"""What `ragc train-reranker` keeps beside the model: the questions held out of training and the domain read
from them (the training loop itself: test_loop.py; the real run: the quality gate)."""

import json
from pathlib import Path

import pytest

from cluster.config import EmbeddingConfig, RagcConfig
from evals.beir import write_qrels
from evals.reranker_checks import TRAINING_RECORD
from serve.rerank_domain import RerankDomain
from tests.fakes import HashEmbedder
from training.loop import TrainingGroup
from training.train_reranker import TrainRequest, groups_digest, record_domain, run_domain_only, training_queries

TOPICS = ("aspirin", "statin", "insulin", "vaccine")


def dataset(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    queries = {f"q{n}": f"does {TOPICS[n % 4]} dose {n} change the risk of disease {n % 7}" for n in range(60)}
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    write_qrels(root / "qrels" / "train.tsv", {q: {f"d{q}": 1} for q in queries})
    write_qrels(root / "qrels" / "test.tsv", {"q0": {"dq0": 1}})  # the gate's: never trained on, never held out
    return root


def test_the_questions_held_out_are_a_fixed_share_never_trained_on(tmp_path: Path) -> None:
    cfg = RagcConfig()
    train, held_out = training_queries(TrainRequest(dataset(tmp_path), tmp_path / "out"), cfg.train_reranker)
    assert not set(train.queries) & set(held_out) and "q0" not in set(train.queries) | set(held_out)
    assert len(train.queries) + len(held_out) == 59 and 0 < len(held_out) < 25
    assert held_out == training_queries(TrainRequest(tmp_path, tmp_path / "out"), cfg.train_reranker)[1]


def test_the_domain_is_recorded_from_the_held_out_questions(tmp_path: Path) -> None:
    cfg, embedder = RagcConfig(), HashEmbedder(dim=64)
    cfg.embedding = EmbeddingConfig(model="test/hash", model_id=embedder.model_id, dim=embedder.dim)
    train, held_out = training_queries(TrainRequest(dataset(tmp_path), tmp_path), cfg.train_reranker)
    summary = record_domain(cfg, list(train.queries.values()), list(held_out.values()), tmp_path, embedder)
    assert summary["recorded"] and summary["held_out"] == len(held_out) and summary["trained"] == len(train.queries)
    assert summary["coverage"] == cfg.train_reranker.domain_coverage and RerankDomain.load(tmp_path) is not None
    nothing_held = record_domain(cfg, ["a question"], [], tmp_path / "none", embedder)
    assert nothing_held == {"recorded": False, "why": "no question was held out of training (calibration_share 0)"}


def test_a_reranker_trained_before_domains_gets_one_for_the_same_held_out_questions(tmp_path: Path) -> None:
    cfg, embedder = RagcConfig(), HashEmbedder(dim=64)
    cfg.embedding = EmbeddingConfig(model="test/hash", model_id=embedder.model_id, dim=embedder.dim)
    req = TrainRequest(dataset(tmp_path / "data"), tmp_path / "reranker")
    req.out.mkdir()
    with pytest.raises(ValueError, match="no reranker trained by"):
        run_domain_only(cfg, req, embedder)
    _, held_out = training_queries(req, cfg.train_reranker)
    record = req.out / TRAINING_RECORD
    record.write_text(json.dumps({"calibration_queries": sorted(held_out)[1:]}))
    with pytest.raises(ValueError, match="other questions"):
        run_domain_only(cfg, req, embedder)
    record.write_text(json.dumps({"calibration_queries": sorted(held_out), "groups": 7}))
    summary = run_domain_only(cfg, req, embedder)
    assert summary["recorded"] and json.loads(record.read_text()) == {
        "calibration_queries": sorted(held_out),
        "groups": 7,
        "domain": summary,
    }


def test_the_mined_groups_digest_tells_whether_two_runs_mined_the_same_negatives() -> None:
    mined = [TrainingGroup("q", "relevant", ("a", "b")), TrainingGroup("r", "relevant", ("c",))]
    again = [TrainingGroup("q", "relevant", ("a", "b")), TrainingGroup("r", "relevant", ("c",))]
    other = [TrainingGroup("q", "relevant", ("a", "d")), TrainingGroup("r", "relevant", ("c",))]
    assert groups_digest(mined) == groups_digest(again) != groups_digest(other)
