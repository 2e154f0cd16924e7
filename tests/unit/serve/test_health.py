"""Serve's health checks: a replica that cannot serve raises, so Serve replaces it; a brief outage does not."""

from __future__ import annotations

import pytest

from cluster.config import RagcConfig, RerankConfig
from serve.stages.rerank import RerankStage
from serve.stages.retrieve import HybridRetriever
from tests.fakes import HashEmbedder


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def unreachable(cfg: RagcConfig) -> None:
    raise ConnectionError("connection refused")


def test_the_retriever_is_unhealthy_only_after_a_long_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    import serve.stages.retrieve as retrieve

    clock = Clock()
    monkeypatch.setattr(retrieve.time, "monotonic", clock)
    monkeypatch.setattr(retrieve, "connect", unreachable)
    cfg = RagcConfig.model_validate({"serve": {"retrieve": {"unhealthy_after_s": 30}}})
    retriever = HybridRetriever(cfg, embedder=HashEmbedder())
    retriever.check_health()  # the outage starts: still healthy
    clock.now += 29
    retriever.check_health()
    clock.now += 2
    with pytest.raises(RuntimeError, match="milvus unreachable"):
        retriever.check_health()


def test_a_retriever_without_its_model_is_unhealthy() -> None:
    with pytest.raises(RuntimeError, match="embedding model is not loaded"):
        HybridRetriever(RagcConfig()).check_health()


def test_a_rerank_replica_without_its_configured_model_is_unhealthy() -> None:
    off = RerankStage(RerankConfig())  # no model configured: skipped, and healthy
    off.check_health()
    broken = RerankStage(RerankConfig())
    broken._cfg = broken._cfg.model_copy(update={"model": "some/cross-encoder"})
    with pytest.raises(RuntimeError, match="not loaded"):
        broken.check_health()
