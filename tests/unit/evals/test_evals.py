"""The evaluation harness's own arithmetic: metrics, the abstention variant and floor, rank fusion."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cluster.config import RagcConfig, RerankConfig
from evals.abstention import build_variant, choose_floor, curve, rates_at, read_ids, wilson_upper
from evals.beir import EvalSet, load_qrels, load_queries
from evals.metrics import mean_metrics, per_query
from evals.pipelines import PIPELINES, documents
from evals.runner import choose_pipelines, default_pipeline, stdout_summary
from serve.stages.rerank import pair_text, rerank_order
from serve.types import Passage


def test_metrics_follow_the_beir_definitions_and_count_abstentions_as_zero() -> None:
    qrels = {"q1": {"a": 1, "b": 2}, "q2": {"c": 1}, "q3": {"d": 1}}
    rankings = {"q1": ["b", "x", "a"], "q2": [f"n{i}" for i in range(10)] + ["c"], "q3": []}
    scores = per_query(rankings, qrels)
    # trec_eval's (and so BEIR's) nDCG uses the grade itself as the gain
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert scores["q1"]["ndcg@10"] == pytest.approx((2 / math.log2(2) + 1 / math.log2(4)) / ideal)
    assert scores["q1"]["mrr@10"] == 1.0 and scores["q1"]["hit_rate@10"] == 1.0
    # relevant at rank 11: found for recall@100, invisible at 10
    assert scores["q2"] == {"ndcg@10": 0.0, "recall@100": 1.0, "mrr@10": 0.0, "hit_rate@10": 0.0}
    assert scores["q3"] == dict.fromkeys(scores["q3"], 0.0)
    assert mean_metrics(scores)["recall@100"] == pytest.approx(round(2 / 3, 4))


def test_a_chunked_document_counts_once_at_its_best_chunk() -> None:
    passages = [Passage(f"c{n}", doc, "t", "") for n, doc in enumerate(["a", "b", "a", "c"])]
    assert documents(passages, 10) == ["a", "b", "c"]
    assert documents(passages, 2) == ["a", "b"]


def write_dataset(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{n}", "title": f"T{n}", "text": f"text {n}"} for n in range(40)]
    (root / "corpus.part1.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs[:20]))
    (root / "corpus.part2.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs[20:]))
    queries = [{"_id": f"q{n}", "text": f"question {n}"} for n in range(40)]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    train = "".join(f"q{n}\td{n}\t1\n" for n in range(20))
    test = "".join(f"q{n}\td{n}\t1\n" for n in range(20, 40)) + "q39\td0\t1\n"  # q39 shares d0 with q0
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + train)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + test)
    return root


def test_variant_removes_the_answers_of_a_fixed_sample_and_lists_every_unanswerable_query(tmp_path: Path) -> None:
    source = write_dataset(tmp_path / "src")
    summary = build_variant(source, tmp_path / "v1", fraction=0.1, seed=5)
    again = build_variant(source, tmp_path / "v2", fraction=0.1, seed=5)
    assert summary == again and summary["chosen"] == {"train": 2, "test": 2}
    kept = {json.loads(line)["_id"] for line in (tmp_path / "v1" / "corpus.jsonl").read_text().splitlines()}
    unanswerable = read_ids(tmp_path / "v1" / "unanswerable.txt")
    assert len(kept) == 40 - summary["documents_removed"]
    for qid in unanswerable:
        split = "train" if int(qid[1:]) < 20 else "test"
        assert not set(load_qrels(tmp_path / "v1", split)[qid]) & kept
    assert load_qrels(tmp_path / "v1", "test") == load_qrels(source, "test")  # judgements are copied unchanged
    assert EvalSet.load(tmp_path / "v1", "train").queries["q3"] == "question 3"


def test_floor_is_the_one_that_abstains_most_within_the_false_abstention_budget() -> None:
    unanswerable = {"u1", "u2", "u3"}
    best: dict[str, float | None] = {"u1": 0.2, "u2": 0.3, "u3": 0.36, "u4": None}
    best |= {f"a{n}": 0.35 + n * 0.01 for n in range(40)}  # answerable, best cosines 0.35 .. 0.74
    unanswerable.add("u4")
    chosen = choose_floor(best, unanswerable)
    assert chosen.false_abstention <= 0.05
    # a question abstains when its best cosine is below the floor: 0.37 catches u3 (0.36) at the cost of
    # a0 and a1 (2/40 = 0.05); 0.38 would cost 3/40
    assert chosen.floor == pytest.approx(0.37) and chosen.abstention == 1.0
    assert rates_at(0.0, best, unanswerable).abstention == 0.25  # no candidate at all always abstains
    points = curve(best, unanswerable)
    assert points[0].floor == 0.0 and points[-1].floor == 1.0 and points[-1].false_abstention == 1.0


def test_a_confident_floor_keeps_a_margin_that_shrinks_with_more_questions() -> None:
    assert wilson_upper(2, 40, 0.0) == 2 / 40 and wilson_upper(0, 0, 1.0) == 0.0
    assert wilson_upper(2, 40, 1.0) == pytest.approx(0.0967, abs=1e-4)  # the Wilson score interval's upper end
    unanswerable = {"u1", "u2", "u3"}
    best: dict[str, float | None] = {"u1": 0.2, "u2": 0.3, "u3": 0.355}
    best |= {f"a{n}": 0.35 + n * 0.01 for n in range(40)}  # answerable, best cosines 0.35 .. 0.74
    # the share observed: 0.36 catches u3 at the cost of a0 (1/40)
    assert choose_floor(best, unanswerable, confidence_z=0.0) == choose_floor(best, unanswerable)
    assert choose_floor(best, unanswerable).floor == pytest.approx(0.36)
    # at z = 1 one false abstention in 40 is a bound of 0.064 > 0.05: the floor stays at the lowest answerable
    confident = choose_floor(best, unanswerable, confidence_z=1.0)
    assert confident.floor == pytest.approx(0.35) and confident.falsely_abstained == 0 and confident.abstained == 2
    # the same shares over 100 times the questions: one in 40 is a bound of 0.028, so 0.36 is allowed again
    many = {f"{q}.{k}": v for q, v in best.items() for k in range(100)}
    chosen = choose_floor(many, {f"{q}.{k}" for q in unanswerable for k in range(100)}, confidence_z=1.0)
    assert chosen.floor == pytest.approx(0.36) and chosen.abstention == 1.0


def test_rates_keep_exact_shares_and_counts_so_twice_as_many_is_judged_on_questions() -> None:
    unanswerable = {f"u{n}" for n in range(67)}
    best: dict[str, float | None] = {f"u{n}": 0.1 if n < 4 else 0.9 for n in range(67)}
    best |= {f"a{n}": 0.9 for n in range(10)}
    signal, cosine = rates_at(0.5, best, unanswerable), rates_at(0.5, best | {"u2": 0.9, "u3": 0.9}, unanswerable)
    assert (signal.abstained, cosine.abstained, signal.falsely_abstained) == (4, 2, 0)
    assert signal.abstention == 2 * cosine.abstention  # 4/67 and 2/67, exactly
    shown, shown_cosine = signal.as_dict(), cosine.as_dict()
    assert shown["abstention"] < 2 * shown_cosine["abstention"]  # rounded: 0.0597 < 2 * 0.0299
    assert shown["abstained"] == 2 * shown_cosine["abstained"]


def test_rrf_order_lets_retrieval_rank_temper_the_cross_encoder() -> None:
    passages = [Passage(f"c{n}", f"d{n}", "t", "") for n in range(4)]
    scores = [0.1, 0.2, 0.3, 0.9]
    by_scores = rerank_order(list(passages), scores, 4, RerankConfig(order="scores"))
    fused = rerank_order(list(passages), scores, 4, RerankConfig(order="rrf", rrf_k=1))
    assert [p.chunk_id for p in by_scores] == ["c3", "c2", "c1", "c0"]
    # rrf k=1: c0 1/2+1/5, c3 1/5+1/2 tie; c1 1/3+1/4 vs c2 1/4+1/3 tie - stable order keeps retrieval's
    assert [p.chunk_id for p in fused] == ["c0", "c3", "c1", "c2"]
    assert fused[1].rerank_score == 0.9
    leaning = rerank_order(list(passages), scores, 4, RerankConfig(order="rrf", rrf_k=1, rrf_weight=1.5))
    assert [p.chunk_id for p in leaning] == ["c3", "c0", "c2", "c1"]  # .95, c0 1/2+1.5/5=.8, c2 .75, c1 .71
    assert [p.chunk_id for p in rerank_order(list(passages), scores, 4, RerankConfig(rrf_weight=0))] == [
        "c0",
        "c1",
        "c2",
        "c3",
    ]


def test_the_cross_encoder_reads_the_title_once() -> None:
    assert pair_text("BRCA1", "Mutations of it") == "BRCA1\nMutations of it"
    assert pair_text("Intro", "Intro to it") == "Intro to it"
    assert pair_text("", "text") == "text"


def test_pipeline_choice_and_the_default() -> None:
    cfg = RagcConfig()
    names = [s.name for s in choose_pipelines(None, cfg)]
    assert names == ["baseline_top2", "dense", "bm25", "hybrid"]  # no reranker configured, no LLM pipelines
    assert default_pipeline(cfg) == "hybrid"
    cfg.serve.rerank.model = "/models/ce"
    assert "hybrid_rerank" in [s.name for s in choose_pipelines(None, cfg)]
    assert default_pipeline(cfg) == "hybrid_rerank"
    with pytest.raises(ValueError, match="unknown pipeline"):
        choose_pipelines(["hybrid", "magic"], cfg)
    weighted = choose_pipelines(["hybrid_rerank", "hybrid_rerank@0.50"], cfg)
    assert [(s.name, s.rrf_weight) for s in weighted] == [("hybrid_rerank", None), ("hybrid_rerank@0.5", 0.5)]
    arms = choose_pipelines(["hybrid@bm25=1.50", "hybrid_rerank@0.5:dense=0.8"], cfg)
    assert [(s.name, s.rrf_weight, s.arm_weights) for s in arms] == [
        ("hybrid@bm25=1.5", None, (("bm25", 1.5),)),
        ("hybrid_rerank@0.5:dense=0.8", 0.5, (("dense", 0.8),)),
    ]
    unchecked = choose_pipelines(["hybrid_rerank@domain=off", "hybrid_rerank@0.5:domain=off"], cfg)
    assert [(s.name, s.rrf_weight, s.domain_check, s.variant) for s in unchecked] == [
        ("hybrid_rerank@domain=off", None, False, True),
        ("hybrid_rerank@0.5:domain=off", 0.5, False, True),
    ]
    assert PIPELINES["hybrid_rerank"].domain_check and not PIPELINES["hybrid_rerank"].variant
    bad_names = ("hybrid@0.5", "hybrid_rerank@-1", "hybrid_rerank@x", "dense@bm25=2", "hybrid@bm25=x", "hybrid@x=1")
    bad_names += ("hybrid@domain=off", "hybrid_rerank@domain=maybe")
    for bad in bad_names:
        with pytest.raises(ValueError, match="@"):
            choose_pipelines([bad], cfg)
    assert PIPELINES["baseline_top2"].depth == 2 and not PIPELINES["baseline_top2"].floor


def test_stdout_summary_leaves_the_curves_to_the_report() -> None:
    signal = {"curves": {"signal": []}, "auc": {"signal": 0.8}}
    result = {"abstention": {"curves": {"train": []}, "test": {}, "answerability": signal}, "queries": 3}
    summary = {"abstention": {"test": {}, "answerability": {"auc": {"signal": 0.8}}}, "queries": 3}
    assert stdout_summary(result) == summary
    assert "curves" in result["abstention"] and "curves" in result["abstention"]["answerability"]


def test_each_arm_weighs_in_the_fusion_as_configured() -> None:
    from serve.stages.retrieve import HybridRetriever

    def order(**weights: float) -> list[str]:
        cfg = RagcConfig.model_validate({"serve": {"retrieve": weights}})
        retriever = HybridRetriever(cfg, embedder=object())  # type: ignore[arg-type]
        dense = [Passage(cid, cid, "t", cid, dense_score=0.9) for cid in ("a", "b", "c")]
        bm25 = [Passage(cid, cid, "t", cid) for cid in ("c", "a")]
        result = retriever._fuse({"dense": dense, "bm25": bm25}, {"dense": "ok", "bm25": "ok"}, have_vector=True)
        return [p.chunk_id for p in result.passages]

    assert order() == ["a", "c", "b"]  # a: ranks 1 and 2; c: ranks 3 and 1; b: rank 2 in one list
    assert order(bm25_weight=3.0) == ["c", "a", "b"]
    assert order(bm25_weight=0.0) == ["a", "b", "c"]


def fused(scope: str, cosines: dict[str, float]) -> list[str]:
    from serve.stages.retrieve import HybridRetriever

    cfg = RagcConfig.model_validate({"serve": {"retrieve": {"similarity_floor": 0.5, "floor_scope": scope}}})
    retriever = HybridRetriever(cfg, embedder=object())  # type: ignore[arg-type]
    hits = [Passage(cid, cid, "t", cid, dense_score=c) for cid, c in cosines.items()]
    result = retriever._fuse({"dense": hits}, {"dense": "ok"}, have_vector=True)
    return [p.chunk_id for p in result.passages]


def test_the_floor_gates_the_question_by_default_and_can_drop_candidates() -> None:
    mixed = {"strong": 0.7, "weak-but-lexical": 0.2}
    assert fused("query", mixed) == ["strong", "weak-but-lexical"]
    assert fused("candidate", mixed) == ["strong"]
    nothing = {"a": 0.3, "b": 0.2}
    assert fused("query", nothing) == [] and fused("candidate", nothing) == []


def test_a_conversational_query_is_searched_with_the_user_turn_before_it(tmp_path: Path) -> None:
    history = [
        {"role": "user", "content": "Who invented the graphite pencil?"},
        {"role": "assistant", "content": "Conte, in 1795."},
        {"role": "user", "content": "What is graphite?"},
        {"role": "assistant", "content": "A form of carbon."},
    ]
    rows = [
        {"_id": "c:2", "text": "Is it toxic?", "metadata": {"history": history}},
        {"_id": "c:0", "text": "Who invented the graphite pencil?", "metadata": {"history": []}},
        {"_id": "s1", "text": "A plain claim."},
    ]
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert load_queries(tmp_path) == {r["_id"]: r["text"] for r in rows}
    assert load_queries(tmp_path, history_user_turns=1) == {
        "c:2": "What is graphite? Is it toxic?",
        "c:0": "Who invented the graphite pencil?",
        "s1": "A plain claim.",
    }
    assert load_queries(tmp_path, 2)["c:2"] == "Who invented the graphite pencil? What is graphite? Is it toxic?"
