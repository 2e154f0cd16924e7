import asyncio

import pytest
from pydantic import ValidationError

from cluster.config import RagcConfig
from serve.neighbours import stitch, widen, window_expr
from serve.pipeline import QueryPipeline
from serve.types import Passage, QueryRequest
from tests.fakes import FakeStages, fake_stages


def chunk(doc: str, index: int, text: str) -> dict:
    return {"doc_id": doc, "chunk_index": index, "text": text}


def passage(doc: str, index: int, text: str) -> Passage:
    return Passage(f"{doc}#{index}", doc, "t1", text, chunk_index=index)


def test_one_filter_asks_for_every_passage_window_in_its_tenant() -> None:
    expr = window_expr("t1", [passage("a", 0, "x"), passage('b"1', 4, "y"), passage("a", 5, "z")], 1)
    assert expr.startswith('(tenant_id == "t1") and (')
    assert '(doc_id == "a") and (chunk_index in [0, 1, 4, 5, 6])' in expr
    assert '(doc_id == "b\\"1") and (chunk_index in [3, 4, 5])' in expr


def test_the_text_neighbouring_chunks_share_is_kept_once() -> None:
    shared = "the chunker repeats this sentence."
    assert stitch(f"First part. {shared}", f"{shared} Second part.") == f"First part. {shared} Second part."
    assert stitch("Ends here.", "Starts there.") == "Ends here. Starts there."
    assert stitch("a short x.", "x. and more") == "a short x. x. and more", "a few shared characters are chance"


def test_a_window_widens_each_passage_and_stops_at_another_passage_or_a_gap() -> None:
    chunks = [chunk("a", i, f"A{i}.") for i in (0, 1, 2, 3, 5)] + [chunk("b", 0, "B0.")]
    found = [passage("a", 2, "A2."), passage("a", 3, "A3."), passage("b", 0, "B0."), passage("a", 5, "A5.")]
    widened = widen(found, chunks, window=2)
    assert widened["a#2"] == "A0. A1. A2.", "a#3 is a passage of its own: the right side stops there"
    assert "a#3" not in widened, "a#2 on its left, chunk 4 missing on its right"
    assert "a#5" not in widened, "chunk 4 is missing: the window does not jump the gap to chunk 3"
    assert "b#0" not in widened, "a document of one chunk has nothing to add"
    assert widen(found, chunks, window=1)["a#2"] == "A1. A2."


def run(stages: FakeStages, request: QueryRequest, neighbours: int = 0) -> dict:
    cfg = RagcConfig.model_validate({"serve": {"synthesize": {"timeout_s": 0.5, "neighbours": neighbours}}})
    pipeline = QueryPipeline(cfg.serve, fake_stages(stages))
    return asyncio.run(pipeline.run(request, "t1", "", "req-1")).model_dump(mode="json")


def passages() -> list[Passage]:
    return [Passage(f"c{i}", f"d{i}", "t1", f"Passage {i} about tenants.", chunk_index=1) for i in range(3)]


def test_the_answer_reads_the_widened_passages_and_the_response_keeps_each_chunk() -> None:
    stages = FakeStages(passages())
    out = run(stages, QueryRequest(query="tenants", top_k=2, rerank=False), neighbours=1)
    assert stages.read == [["Passage 0 about tenants. (+1)", "Passage 1 about tenants. (+1)"]]
    assert [p["text"] for p in out["passages"]] == ["Passage 0 about tenants.", "Passage 1 about tenants."]
    assert [p["context"] for p in out["passages"]] == stages.read[0]
    assert out["stages"]["neighbours"]["status"] == "ok"
    assert list(out["stages"]).index("neighbours") == list(out["stages"]).index("synthesize") - 1
    assert out["citations"][0]["chunk_id"] == "c0"


def test_the_request_sets_the_window_and_off_asks_nothing() -> None:
    stages = FakeStages(passages())
    out = run(stages, QueryRequest(query="tenants", top_k=2, rerank=False, neighbours=2))
    assert stages.read[-1][0].endswith("(+2)") and out["stages"]["neighbours"]["status"] == "ok"
    out = run(stages, QueryRequest(query="tenants", top_k=2, rerank=False, neighbours=0), neighbours=1)
    assert "neighbours" not in out["stages"] and out["passages"][0]["context"] is None
    out = run(stages, QueryRequest(query="tenants", top_k=2, rerank=False, mode="no_text"), neighbours=1)
    assert "neighbours" not in out["stages"]
    assert stages.calls.count("neighbours") == 1
    with pytest.raises(ValidationError, match="neighbours"):
        QueryRequest(query="tenants", neighbours=4)


def test_a_failing_neighbour_query_answers_from_the_passages_alone() -> None:
    stages = FakeStages(passages(), fail={"neighbours"})
    out = run(stages, QueryRequest(query="tenants", top_k=2, rerank=False), neighbours=1)
    assert out["stages"]["neighbours"]["status"] == "fallback"
    assert "neighbours exploded" in out["stages"]["neighbours"]["detail"]
    assert stages.read == [["Passage 0 about tenants.", "Passage 1 about tenants."]]
    assert out["stages"]["synthesize"]["status"] == "ok" and out["passages"][0]["context"] is None
