"""What an answered query cost, per tenant and model, and the one JSON log line per answered query."""

import asyncio
import json
import logging
from collections.abc import Iterator

import pytest
from cachetools import TTLCache

from cluster.config import RagcConfig, ServeConfig
from serve.cache import ResponseCache
from serve.pipeline import QueryPipeline
from serve.types import Passage, QueryRequest, QueryResponse
from serve.usage import REQUEST_LOG, answering_model, outcomes
from tests.fakes import ANSWER_COST, REWRITE_COST, FakeStages, fake_stages


def serve_config(**serve: object) -> ServeConfig:
    base = {"retrieve": {"index_version_ttl_s": 0}, "breaker": {"enabled": False}}
    return RagcConfig.model_validate({"serve": base | serve}).serve


def pipeline(stages: FakeStages, cfg: ServeConfig) -> QueryPipeline:
    cache = ResponseCache(TTLCache(16, 60), None, semantic=False, threshold=0.95, timeout_s=0.2, degraded_ttl_s=0)
    return QueryPipeline(cfg, fake_stages(stages), cache)


def ask(p: QueryPipeline, query: str, **kw: object) -> QueryResponse:
    return asyncio.run(p.run(QueryRequest(query=query, **kw), "t1", "", "r1"))


@pytest.fixture
def request_log() -> Iterator[list[str]]:
    """The lines the request log writes (its own handler: an ingress may have detached it from the root)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    REQUEST_LOG.addHandler(handler)
    level = REQUEST_LOG.level
    REQUEST_LOG.setLevel(logging.INFO)
    yield lines
    REQUEST_LOG.removeHandler(handler)
    REQUEST_LOG.setLevel(level)


def passages() -> list[Passage]:
    return [Passage("c0", "d0", "t1", "Tenants are isolated by partition key.", score=0.5)]


def test_an_answer_costs_its_rewrite_and_synthesis_and_the_cached_repeat_costs_nothing() -> None:
    p = pipeline(FakeStages(passages()), serve_config())
    first = ask(p, "How are tenants kept apart?", rewrite=True)
    expected = REWRITE_COST + ANSWER_COST
    assert first.usage == expected and first.usage.total_tokens == expected.prompt_tokens + expected.completion_tokens
    assert ask(p, "How are tenants kept apart?", rewrite=False).usage == ANSWER_COST  # another cache scope
    repeat = ask(p, "How are tenants kept apart?", rewrite=True)
    assert repeat.stages["cache"].status == "hit_l1" and repeat.usage.total_tokens == 0
    assert outcomes(repeat) == ["cache_hit"] and outcomes(first) == []


def test_a_stage_that_fell_back_reports_nothing_and_the_answer_still_counts() -> None:
    stages = FakeStages(passages(), fail={"rewrite"})
    response = ask(pipeline(stages, serve_config()), "How are tenants kept apart?", rewrite=True)
    assert response.stages["rewrite"].status == "fallback" and response.usage == ANSWER_COST
    assert outcomes(response) == ["fallback"]


def test_an_abstention_is_counted_as_one() -> None:
    response = ask(pipeline(FakeStages([]), serve_config()), "What is the airspeed of a swallow?")
    assert response.abstained and response.usage.total_tokens == 0 and outcomes(response) == ["abstained"]


def test_one_json_line_per_answered_query_and_the_question_only_when_allowed(request_log: list[str]) -> None:
    ask(pipeline(FakeStages(passages()), serve_config()), "How are tenants kept apart?")
    ask(pipeline(FakeStages(passages()), serve_config(request_log={"question_text": True})), "Who audits it?")
    ask(pipeline(FakeStages(passages()), serve_config(request_log={"enabled": False})), "Anything else?")
    assert len(request_log) == 2
    plain, with_text = (json.loads(line) for line in request_log)
    assert plain["request_id"] == "r1" and plain["tenant"] == "t1" and plain["cache"] == "miss"
    assert plain["chunk_ids"] == ["c0"] and plain["stages"]["synthesize"]["status"] == "ok"
    assert plain["usage"]["total_tokens"] == ANSWER_COST.total_tokens
    assert "question" not in plain and with_text["question"] == "Who audits it?"


def test_the_model_label_is_the_answering_engine() -> None:
    engines = {"default": {"served_name": "smol"}, "big": {"model": "/models/qwen"}}
    assert answering_model(serve_config(llm={"engines": engines})) == "smol"
    assert answering_model(serve_config(llm={"engines": engines}, synthesize={"engine": "big"})) == "/models/qwen"
    assert answering_model(serve_config(llm={"enabled": False})) == "extractive"
