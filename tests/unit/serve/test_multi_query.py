import asyncio
import re

from cluster.config import RagcConfig
from evals.runner import choose_pipelines
from serve.llm.prompts import clean_paraphrases, multi_query_pattern
from serve.pipeline import QueryPipeline
from serve.stages.retrieve import HybridRetriever
from serve.stages.rewrite import RewriteStage
from serve.types import Passage, QueryRequest
from tests.fakes import FakeStages, ScriptedGenerator, fake_stages

QUESTION = "Does vitamin D improve bone density?"


def test_paraphrases_are_cleaned_deduplicated_and_kept_on_the_subject() -> None:
    raw = '1. Vitamin D and bone density in adults\n- "vitamin D bones"\nVitamin D bones\nWhat about cats today?\n'
    assert clean_paraphrases(raw, QUESTION, 3, 400) == ["Vitamin D and bone density in adults", "vitamin D bones"]
    assert clean_paraphrases("Does vitamin D improve bone density?", QUESTION, 3, 400) == [], "the question again"
    assert clean_paraphrases("a\nb\nc\nvitamin bone\nvitamin density\nbone density", QUESTION, 2, 400) == [
        "vitamin bone",
        "vitamin density",
    ]
    pattern = re.compile(multi_query_pattern(2))
    assert pattern.fullmatch("vitamin D and bones\nbone density and sunlight")
    assert not pattern.fullmatch("one\ntwo\nthree lines here")


def rewrite(replies: list[str], multi_query: bool = True):  # type: ignore[no-untyped-def]
    llm = ScriptedGenerator(replies)
    stage = RewriteStage(**RewriteStage.tree_args(RagcConfig()), llm=llm)
    return asyncio.run(stage.rewrite(QUESTION, [], False, False, multi_query)), llm


def test_the_rewrite_stage_proposes_paraphrases_under_a_line_pattern() -> None:
    out, llm = rewrite(["vitamin D supplements and bone mineral density\nbone density after vitamin D"])
    assert out.status == "ok" and out.query == QUESTION and len(out.paraphrases) == 2
    assert "2 paraphrase(s)" in out.detail
    messages, params = llm.calls[0]
    assert "3 different search queries" in messages[0]["content"] and params.regex == multi_query_pattern(3)
    refused, _ = rewrite(["cats and dogs play outside"])
    assert refused.status == "fallback" and refused.paraphrases == [] and "searched alone" in refused.detail
    off, llm = rewrite([], multi_query=False)
    assert off.status == "skipped" and not llm.calls


def test_the_questions_own_lists_outweigh_each_paraphrase() -> None:
    cfg = RagcConfig.model_validate({"serve": {"rewrite": {"multi_query_weight": 2.0}}})
    retriever = HybridRetriever(cfg, embedder=object())  # type: ignore[arg-type]

    def hits(*ids: str) -> list[Passage]:
        return [Passage(cid, cid, "t1", cid, dense_score=0.9) for cid in ids]

    own = {"dense": hits("a", "b"), "bm25": hits("a", "b")}
    twice = own | {"dense#1": hits("b", "a"), "bm25#1": hits("b", "a"), "dense#2": hits("b"), "bm25#2": hits("b")}
    arms = {"dense": "ok", "bm25": "ok"}
    assert [p.chunk_id for p in retriever._fuse(own, arms, True).passages] == ["a", "b"]
    assert [p.chunk_id for p in retriever._fuse(twice, arms, True).passages] == ["b", "a"], "two paraphrases agree"
    once = own | {"dense#1": hits("b", "a"), "bm25#1": hits("b", "a")}
    assert [p.chunk_id for p in retriever._fuse(once, arms, True).passages] == ["a", "b"], "one does not outvote"


def run(stages: FakeStages, request: QueryRequest, **rewrite: object) -> dict:
    cfg = RagcConfig.model_validate({"serve": {"rewrite": {"timeout_s": 0.5, **rewrite}}})
    return asyncio.run(QueryPipeline(cfg.serve, fake_stages(stages)).run(request, "t1", "", "r")).model_dump()


def passages() -> list[Passage]:
    return [Passage(f"c{i}", f"d{i}", "t1", f"Passage {i} about vitamin D.") for i in range(3)]


def test_a_multi_query_request_searches_the_paraphrases_beside_the_question() -> None:
    stages = FakeStages(passages())
    out = run(stages, QueryRequest(query="vitamin", multi_query=True))
    assert stages.searched == [("vitamin rewritten", ("vitamin paraphrased",))]  # the fake rewrites too
    assert out["retrieval_query"]["paraphrases"] == ["vitamin paraphrased"]
    out = run(stages, QueryRequest(query="vitamin"), multi_query_default=True)
    assert stages.searched[-1] == ("vitamin rewritten", ("vitamin paraphrased",))
    run(stages, QueryRequest(query="vitamin"))
    assert stages.searched[-1] == ("vitamin", ()) and stages.calls.count("rewrite") == 2, "off by default"


def test_a_slow_rewrite_searches_the_question_alone() -> None:
    stages = FakeStages(passages(), delay_s={"rewrite": 1.0})
    out = run(stages, QueryRequest(query="vitamin", multi_query=True))
    assert out["stages"]["rewrite"]["status"] == "fallback" and stages.searched == [("vitamin", ())]
    assert out["retrieval_query"]["paraphrases"] == [] and out["answer"]


def test_the_eval_has_multi_query_pipelines_that_need_the_llm() -> None:
    cfg = RagcConfig()
    specs = choose_pipelines(["hybrid_multiquery", "hybrid_multiquery_rerank"], cfg)
    assert [(s.multi_query, s.rerank, s.needs_llm) for s in specs] == [(True, False, True), (True, True, True)]
    assert "hybrid_multiquery" not in [s.name for s in choose_pipelines(None, cfg)]
