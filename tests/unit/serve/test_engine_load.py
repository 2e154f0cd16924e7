"""Admission by the engine's load: the model, and the synthesize stage refusing at once when busy."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.config import RagcConfig
from serve.answer_check import EmbeddingSupport
from serve.llm.load import MIN_SAMPLES, LoadModel
from serve.pipeline import QueryPipeline
from serve.roles import Stages
from serve.stages.synthesize import EngineBusyError, SynthesizeStage
from serve.types import Passage, QueryRequest
from tests.fakes import FakeStages, HashEmbedder, ScriptedGenerator

PASSAGES = [Passage("c1", "d1", "t1", "Passage 0 says tenants are kept apart.", title="T")]


def test_the_model_predicts_only_after_a_few_requests_and_scales_with_the_load() -> None:
    model = LoadModel()
    for _ in range(MIN_SAMPLES - 1):
        model.observe(4.0, in_flight=2)  # 2 s alone
        assert model.load(8).predicted_s is None
    model.observe(4.0, in_flight=2)
    assert model.load(0).predicted_s == pytest.approx(2.0) and model.load(9).predicted_s == pytest.approx(20.0)
    model.observe(12.0, in_flight=2)  # slower now: the estimate moves towards 6 s alone
    assert 2.0 < model.load(0).predicted_s < 6.0  # type: ignore[operator]


def stage(llm: ScriptedGenerator, admission: bool = True) -> SynthesizeStage:
    cfg = RagcConfig.model_validate({"serve": {"synthesize": {"admission": admission}}})
    return SynthesizeStage(**SynthesizeStage.tree_args(cfg), llm=llm, support=EmbeddingSupport(HashEmbedder(dim=512)))


def test_a_busy_engine_is_refused_before_any_generation() -> None:
    llm = ScriptedGenerator(
        ["Passage 0 says tenants are kept apart [1].", "Passage 0 says tenants are kept apart [1]."]
    )
    llm.in_flight, llm.predicted_s = 12, 60.0  # the stage's timeout is 25 s

    def answer(admission: bool = True) -> list:
        async def collect() -> list:
            return [i async for i in stage(llm, admission).synthesize_stream("are tenants apart?", PASSAGES)]

        return asyncio.run(collect())

    with pytest.raises(EngineBusyError, match="12 requests in flight"):
        answer()
    assert llm.calls == []  # nothing was sent to the engine
    assert answer(admission=False)[-1].answer.startswith("Passage 0")  # off: generated whatever the load
    llm.predicted_s = 5.0  # it would finish in time: answered
    assert answer()[-1].answer.startswith("Passage 0")


def test_the_pipeline_serves_the_extractive_answer_at_once_saying_why() -> None:
    llm = ScriptedGenerator([])
    llm.in_flight, llm.predicted_s = 12, 60.0
    fake = FakeStages(PASSAGES)
    pipeline = QueryPipeline(RagcConfig().serve, Stages(fake, fake, fake, stage(llm)))
    started = time.monotonic()
    out = asyncio.run(pipeline.run(QueryRequest(query="are tenants apart?"), "t1", "", "r"))
    assert time.monotonic() - started < 5  # not the 25 s timeout
    synthesize = out.stages["synthesize"]
    assert synthesize.status == "fallback" and "engine busy" in (synthesize.detail or "") and out.citations
