"""Tracing's switches and our spans (the tree across real deployments is tested in the integration tier)."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cluster.config import RagcConfig, TracesConfig
from serve.pipeline import QueryPipeline, StageFailure, call_stage
from serve.tracing import EXPORTER_IMPORT_PATH, serve_tracing_config, tracing_env
from serve.types import Passage, QueryRequest
from tests.fakes import FakeStages, fake_stages

EXPORTED = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    """The process's provider can be set once: this module's spans go to EXPORTED."""
    sdk = TracerProvider()
    sdk.add_span_processor(SimpleSpanProcessor(EXPORTED))
    trace.set_tracer_provider(sdk)


def test_off_by_default_and_on_through_the_environment_and_serve() -> None:
    assert tracing_env(TracesConfig()) == {} and serve_tracing_config(TracesConfig()) == {"enabled": False}
    on = TracesConfig(enabled=True, sampling_ratio=0.5)
    assert tracing_env(on) == {
        "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": EXPORTER_IMPORT_PATH,
        "RAY_SERVE_TRACING_SAMPLING_RATIO": "0.5",
    }
    assert serve_tracing_config(on)["exporter_import_path"] == EXPORTER_IMPORT_PATH


def test_a_failed_stage_call_is_an_error_span_with_the_reason() -> None:
    EXPORTED.clear()

    async def slow() -> None:
        await asyncio.sleep(1)

    with pytest.raises(StageFailure):
        asyncio.run(call_stage("rerank", slow, 0.01))
    (span,) = EXPORTED.get_finished_spans()
    assert span.name == "ragc.rerank" and span.attributes is not None
    assert span.attributes["ragc.status"] == "error" and "timed out" in str(span.attributes["ragc.detail"])
    assert not span.status.is_ok


def test_a_query_is_one_tree_with_its_stage_statuses() -> None:
    EXPORTED.clear()
    passages = [Passage("c1", "d1", "t1", "Tenants are kept apart by a partition key.", title="T")]
    pipeline = QueryPipeline(RagcConfig().serve, fake_stages(FakeStages(passages)))
    out = asyncio.run(pipeline.run(QueryRequest(query="apart?", rewrite=True), "t1", "", "req-1"))
    spans = {s.name: s for s in EXPORTED.get_finished_spans()}
    assert {"ragc.query", "ragc.rewrite", "ragc.retrieve", "ragc.rerank", "ragc.synthesize"} <= set(spans)
    root = spans["ragc.query"]
    assert root.attributes is not None and root.attributes["ragc.request_id"] == "req-1"
    assert root.attributes["ragc.stage.synthesize"] == out.stages["synthesize"].status
    for name in ("ragc.rewrite", "ragc.retrieve", "ragc.synthesize"):
        parent = spans[name].parent
        assert parent is not None and parent.span_id == root.context.span_id
