"""The circuit breaker's states on a fake clock, and the pipeline taking the fallback at once while one is open."""

from __future__ import annotations

import asyncio

from cluster.config import BreakerConfig
from serve.breaker import CircuitBreaker, breakers
from serve.pipeline import QueryPipeline
from serve.types import QueryRequest
from tests.fakes import FakeStages, fake_stages
from tests.unit.serve.test_pipeline import config, passages


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_consecutive_failures_in_the_window_open_it_then_one_trial_decides() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures=3, window_s=10, open_s=30, clock=clock)
    assert breaker.refusal() is None and breaker.failed() == "closed"
    clock.now = 20  # the first failure left the window
    assert breaker.failed() == "closed" and breaker.failed() == "closed"
    assert breaker.failed() == "open"
    assert "circuit open after 3 failures" in (breaker.refusal() or "")
    clock.now = 51
    assert breaker.refusal() is None  # half-open: this call is the trial
    assert "trial request is in flight" in (breaker.refusal() or "")
    assert breaker.failed() == "open"  # the trial failed: open again, for open_s from now
    clock.now = 80
    assert breaker.refusal() is not None
    clock.now = 82
    assert breaker.refusal() is None and breaker.succeeded() == "closed"
    assert breaker.refusal() is None and breaker.refusal() is None  # closed: everyone goes


def test_a_success_resets_the_count() -> None:
    breaker = CircuitBreaker(failures=2, window_s=60, open_s=30, clock=Clock())
    breaker.failed()
    breaker.succeeded()
    assert breaker.failed() == "closed"


def test_only_the_configured_stages_get_a_breaker() -> None:
    assert set(breakers(BreakerConfig())) == {"rewrite", "rerank", "synthesize"}
    assert breakers(BreakerConfig(stages=["rerank"])).keys() == {"rerank"}
    assert breakers(BreakerConfig(enabled=False)) == {}


def test_an_open_breaker_sends_requests_to_the_fallback_without_calling_the_stage() -> None:
    stages = FakeStages(passages(), delay_s={"synthesize": 1.0})  # slower than its 0.2 s timeout
    cfg = config(breaker={"failures": 2, "stages": ["synthesize"]})
    pipeline = QueryPipeline(cfg.serve, fake_stages(stages))

    def ask() -> dict:
        return asyncio.run(pipeline.run(QueryRequest(query="q"), "t1", "", "r")).model_dump(mode="json")

    for _ in range(2):
        assert "timed out" in ask()["stages"]["synthesize"]["detail"]
    out = ask()
    synthesize = out["stages"]["synthesize"]
    assert synthesize["status"] == "fallback" and "circuit open" in synthesize["detail"], synthesize
    assert stages.calls.count("synthesize") == 2 and out["citations"]  # not called; the extractive answer
