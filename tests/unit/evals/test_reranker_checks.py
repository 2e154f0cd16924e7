"""A trained reranker's folder records what `ragc eval` checked it on."""

from __future__ import annotations

import json
from pathlib import Path

from evals.reranker_checks import CHECKS_FILE, TRAINING_RECORD, check_entry, record_check


def result(dataset: str, hybrid: float, reranked: float) -> dict:
    row = {"ndcg@10": hybrid, "recall@100": 0.9, "mrr@10": 0.5}
    return {
        "dataset": dataset,
        "split": "test",
        "queries": 300,
        "pipelines": {
            "hybrid": row,
            "hybrid_rerank": {**row, "ndcg@10": reranked, "reranked_share": 0.97},
            "bm25": row,
        },
    }


def test_each_dataset_and_split_keeps_its_latest_check(tmp_path: Path) -> None:
    (tmp_path / TRAINING_RECORD).write_text(json.dumps({"dataset": "scifact", "split": "train"}))
    first = check_entry(result("scifact", 0.70, 0.72), history_user_turns=1)
    assert first is not None and first["ndcg@10_lift"] == {"hybrid_rerank": 0.02}
    assert set(first["pipelines"]) == {"hybrid", "hybrid_rerank"}
    assert first["pipelines"]["hybrid_rerank"]["reranked_share"] == 0.97  # how much of the set it reranked
    assert "reranked_share" not in first["pipelines"]["hybrid"]
    assert record_check(str(tmp_path), first) == tmp_path / CHECKS_FILE
    record_check(str(tmp_path), check_entry(result("inscit", 0.60, 0.55), 1))  # type: ignore[arg-type]
    record_check(str(tmp_path), check_entry(result("scifact", 0.70, 0.73), 1))  # type: ignore[arg-type]
    checks = json.loads((tmp_path / CHECKS_FILE).read_text())["checks"]
    assert [(c["dataset"], c["ndcg@10_lift"]["hybrid_rerank"]) for c in checks] == [
        ("inscit", -0.05),
        ("scifact", 0.03),
    ]


def test_nothing_is_recorded_without_both_pipelines_or_for_a_model_we_did_not_train(tmp_path: Path) -> None:
    only_hybrid = {"dataset": "d", "split": "test", "queries": 1, "pipelines": {"hybrid": {"ndcg@10": 0.5}}}
    assert check_entry(only_hybrid, 1) is None
    entry = check_entry(result("scifact", 0.7, 0.72), 1)
    assert entry is not None and record_check(str(tmp_path), entry) is None
    assert not (tmp_path / CHECKS_FILE).exists()
