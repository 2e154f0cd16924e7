"""`ragc eval` as a user runs it on a fresh checkout: no cluster running, so each command starts its own
sidecars and stops them; a second run embeds nothing. A small SciFact slice. (`ragc train-reranker` and
its model in the rerank stage: the quality gate, which trains one anyway.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.beir import iter_corpus, load_qrels, load_queries, write_qrels
from tests.eval.conftest import SCIFACT, cli_env, make_cli

QUERIES = 24
EXTRA_DOCS = 120


def scifact_slice(out: Path) -> Path:
    """The relevant documents of the first test and train queries, plus unrelated documents."""
    if not (SCIFACT / "queries.jsonl").exists():
        pytest.fail(f"SciFact is missing at {SCIFACT}")
    splits = {s: dict(list(load_qrels(SCIFACT, s).items())[:QUERIES]) for s in ("train", "test")}
    wanted = {d for qrels in splits.values() for docs in qrels.values() for d in docs}
    docs = [r for r in iter_corpus(SCIFACT) if str(r["_id"]) in wanted]
    docs += [r for r in iter_corpus(SCIFACT) if str(r["_id"]) not in wanted][:EXTRA_DOCS]
    out.mkdir(parents=True)
    (out / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    queries = load_queries(SCIFACT)
    ids = [q for qrels in splits.values() for q in qrels]
    (out / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": queries[q]}) + "\n" for q in ids))
    for split, qrels in splits.items():
        write_qrels(out / "qrels" / f"{split}.tsv", qrels)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("evalcli")
    env = cli_env(root / "state")
    return {"root": root, "dataset": scifact_slice(root / "slice"), "ragc": make_cli(env, root / "cli.log")}


def test_eval_starts_and_stops_its_own_cluster_and_reuses_its_index(tiny: dict[str, Any]) -> None:
    ragc, dataset = tiny["ragc"], str(tiny["dataset"])
    first = ragc("eval", "--dataset", dataset, "--pipeline", "dense,bm25,hybrid")
    assert first["ephemeral_cluster"] is True and first["queries"] == QUERIES
    assert first["ingest"]["chunks_embedded"] == first["ingest"]["chunks_total"] > 0
    assert first["pipeline"] == "hybrid" and 0 < first["ndcg@10"] <= 1
    for key in ("recall@100", "mrr@10", "hit_rate@10"):
        assert 0 <= first[key] <= 1
    status = ragc("status", "--json", expect=1)  # nothing left running
    assert not any(p["running"] for p in status["processes"].values()), status
    again = ragc("eval", "--dataset", dataset, "--pipeline", "hybrid")
    assert again["ingest"]["chunks_embedded"] == 0 and again["ingest"]["unchanged"] > 0
    assert again["ndcg@10"] == first["pipelines"]["hybrid"]["ndcg@10"]
