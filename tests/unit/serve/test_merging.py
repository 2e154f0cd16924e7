import asyncio

import pytest
from pydantic import ValidationError

from cluster.config import RagcConfig
from serve.merging import merge, section_expr, sibling_groups
from serve.pipeline import QueryPipeline
from serve.types import Passage, QueryRequest
from tests.fakes import FakeStages, fake_stages


def chunk(doc: str, section: str, index: int, text: str) -> dict:
    return {"doc_id": doc, "section": section, "chunk_index": index, "text": text}


def passage(doc: str, section: str, index: int, text: str = "") -> Passage:
    return Passage(f"{doc}#{index}", doc, "t1", text or f"{doc}{index}.", section=section, chunk_index=index)


GUIDE = [chunk("a", "Guide / Tenants", i, f"T{i}.") for i in range(2, 6)] + [chunk("a", "Guide / Cache", 6, "C6.")]


def test_siblings_are_passages_of_one_section_of_one_document() -> None:
    found = [passage("a", "S", 1), passage("b", "S", 1), passage("a", "S", 3), passage("a", "T", 4)]
    assert sibling_groups(found, 2) == {("a", "S"): [found[0], found[2]]}
    assert sibling_groups(found, 3) == {}
    more = [*found, passage("a", "S", 7)]
    assert sibling_groups(more, 3) == {("a", "S"): [more[0], more[2], more[4]]}


def test_one_filter_asks_for_every_chunk_of_each_section_in_its_tenant() -> None:
    expr = section_expr("t1", [("a", "Guide / Tenants"), ('b"1', "")])
    assert expr.startswith('(tenant_id == "t1") and (')
    assert '((doc_id == "a") and (section == "Guide / Tenants"))' in expr
    assert '((doc_id == "b\\"1") and (section == ""))' in expr


def test_the_first_sibling_reads_the_section_whole_and_the_others_leave_the_list() -> None:
    found = [passage("a", "Guide / Tenants", 4), passage("b", "", 0), passage("a", "Guide / Tenants", 2)]
    merged = merge(found, GUIDE, 2, 1000)
    assert [p.chunk_id for p in merged.passages] == ["a#4", "b#0"], "the first keeps its rank"
    assert merged.contexts == {"a#4": "T2. T3. T4. T5."} and merged.folded == 1


def test_a_long_section_is_read_from_its_first_to_its_last_sibling_or_not_merged() -> None:
    found = [passage("a", "Guide / Tenants", 3), passage("a", "Guide / Tenants", 4)]
    assert merge(found, GUIDE, 2, len("T3. T4.")).contexts == {"a#3": "T3. T4."}
    too_long = merge(found, GUIDE, 2, len("T3. T4.") - 1)
    assert too_long.passages == found and too_long.contexts == {} and too_long.folded == 0


def test_a_section_with_a_chunk_missing_between_its_siblings_is_not_merged() -> None:
    found = [passage("a", "Guide / Tenants", 2), passage("a", "Guide / Tenants", 5)]
    gap = [c for c in GUIDE if c["chunk_index"] != 3]
    assert merge(found, gap, 2, 1000).passages == found


def test_the_overlap_neighbouring_chunks_share_is_kept_once() -> None:
    shared = "the chunker repeats this sentence."
    chunks = [chunk("d", "S", 0, f"First part. {shared}"), chunk("d", "S", 1, f"{shared} Second part.")]
    found = [passage("d", "S", 1), passage("d", "S", 0)]
    assert merge(found, chunks, 2, 1000).contexts == {"d#1": f"First part. {shared} Second part."}


def run(stages: FakeStages, request: QueryRequest, merge_siblings: int = 0, neighbours: int = 0) -> dict:
    synthesize = {"timeout_s": 0.5, "merge_siblings": merge_siblings, "neighbours": neighbours}
    cfg = RagcConfig.model_validate({"serve": {"synthesize": synthesize}})
    pipeline = QueryPipeline(cfg.serve, fake_stages(stages))
    return asyncio.run(pipeline.run(request, "t1", "", "req-1")).model_dump(mode="json")


def passages() -> list[Passage]:
    docs = ["d0", "d1", "d0", "d2"]
    return [Passage(f"c{i}", doc, "t1", f"Passage {i} about tenants.", chunk_index=i) for i, doc in enumerate(docs)]


def test_the_answer_reads_the_merged_section_and_cites_its_first_passage() -> None:
    stages = FakeStages(passages())
    out = run(stages, QueryRequest(query="tenants", top_k=4, rerank=False), merge_siblings=2)
    assert stages.read == [
        ["Passage 0 about tenants. (section of 2)", "Passage 1 about tenants.", "Passage 3 about tenants."]
    ]
    assert [p["chunk_id"] for p in out["passages"]] == ["c0", "c1", "c3"]
    assert [p["n"] for p in out["passages"]] == [1, 2, 3], "[n] counts the passages returned"
    assert out["passages"][0]["context"] == stages.read[0][0] and out["passages"][1]["context"] is None
    assert (
        out["stages"]["merge"]["status"] == "ok"
        and "1 section(s) read whole in place of 2" in out["stages"]["merge"]["detail"]
    )
    assert list(out["stages"]).index("merge") < list(out["stages"]).index("synthesize")
    assert out["citations"][0]["chunk_id"] == "c0"


def test_a_merged_passage_needs_no_window_and_the_others_are_still_widened() -> None:
    stages = FakeStages(passages())
    out = run(stages, QueryRequest(query="tenants", top_k=4, rerank=False), merge_siblings=2, neighbours=1)
    assert stages.read[0][0].endswith("(section of 2)") and stages.read[0][1].endswith("(+1)")
    assert list(out["stages"]).index("merge") < list(out["stages"]).index("neighbours")


def test_the_request_sets_merging_and_off_asks_nothing() -> None:
    stages = FakeStages(passages())
    out = run(stages, QueryRequest(query="tenants", top_k=4, rerank=False, merge_siblings=3), merge_siblings=2)
    assert "merge" in out["stages"] and len(out["passages"]) == 4, "no section has 3 of the passages"
    out = run(stages, QueryRequest(query="tenants", top_k=4, rerank=False, merge_siblings=0), merge_siblings=2)
    assert "merge" not in out["stages"] and len(out["passages"]) == 4
    assert stages.calls.count("merged") == 1
    for bad in (1, -1):
        with pytest.raises(ValidationError, match="merge_siblings"):
            QueryRequest(query="tenants", merge_siblings=bad)
    with pytest.raises(ValidationError, match="2 or more"):
        RagcConfig.model_validate({"serve": {"synthesize": {"merge_siblings": 1}}})


def test_a_failing_merge_query_answers_from_the_passages_as_retrieved() -> None:
    stages = FakeStages(passages(), fail={"merged"})
    out = run(stages, QueryRequest(query="tenants", top_k=4, rerank=False), merge_siblings=2)
    assert out["stages"]["merge"]["status"] == "fallback" and "merged exploded" in out["stages"]["merge"]["detail"]
    assert len(out["passages"]) == 4 and out["stages"]["synthesize"]["status"] == "ok"


def test_merging_is_part_of_the_cache_key_only_when_asked_for() -> None:
    cfg = RagcConfig.model_validate({})
    pipeline = QueryPipeline(cfg.serve, fake_stages(FakeStages(passages())))
    plain = pipeline.scope(QueryRequest(query="q"), "t1", "", 1)
    merged = pipeline.scope(QueryRequest(query="q", merge_siblings=2), "t1", "", 1)
    assert "merge_siblings" not in plain.switches and "merge_siblings=2" in merged.switches
