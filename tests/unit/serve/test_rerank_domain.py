"""A reranker's domain: the threshold read from held-out questions, and the stage keeping the fusion order for
a question outside it."""

import asyncio
from pathlib import Path

import numpy as np
import pytest

from cluster.config import EmbeddingConfig, RerankConfig
from serve.rerank_domain import DOMAIN_RECORD, RerankDomain
from serve.stages.rerank import RerankStage, domain_embedder
from serve.types import Passage
from tests.fakes import HashEmbedder

TRAINED = [f"aspirin dose {n} lowers colorectal cancer risk in trial {n}" for n in range(40)]
HELD_OUT = [f"aspirin dose {n} and colorectal cancer in cohort {n}" for n in range(40, 60)]
OUTSIDE = "which animal milk besides cow milk makes cheese"


def domain(embedder: HashEmbedder, coverage: float = 0.95) -> RerankDomain:
    return RerankDomain.build(embedder.embed(TRAINED), embedder.embed(HELD_OUT), 5, coverage, embedder.model_id)


def test_the_threshold_admits_the_chosen_share_of_the_held_out_questions() -> None:
    embedder = HashEmbedder(dim=64)
    for coverage in (0.5, 0.9, 1.0):
        built = domain(embedder, coverage)
        admitted = np.mean(built.closeness(embedder.embed(HELD_OUT)) >= built.threshold)
        assert admitted >= coverage and (coverage == 1.0 or admitted < coverage + 0.1), (coverage, admitted)
    built = domain(embedder)
    assert built.inside(embedder.embed([HELD_OUT[0]])[0])[0]
    inside, closeness = built.inside(embedder.embed([OUTSIDE])[0])
    assert not inside and closeness < built.threshold
    assert built.summary() | {"threshold": 0} == {
        "neighbours": 5,
        "threshold": 0,
        "coverage": 0.95,
        "embedding_model_id": "test/hash",
        "held_out": 20,
        "trained": 40,
    }


def test_a_domain_needs_questions_held_out_of_training() -> None:
    with pytest.raises(ValueError, match="held out"):
        RerankDomain.build([[1.0, 0.0]], [], 5, 0.98, "m")


def test_a_domain_is_saved_beside_the_reranker_and_read_back(tmp_path: Path) -> None:
    assert RerankDomain.load(tmp_path) is None  # a reranker trained before domains: no check
    built = domain(HashEmbedder(dim=64))
    built.save(tmp_path)
    assert (tmp_path / DOMAIN_RECORD).is_file()
    loaded = RerankDomain.load(tmp_path)
    assert loaded is not None and loaded.summary() == built.summary()
    assert np.array_equal(loaded.reference, built.reference)


class CountingScorer:
    def __init__(self) -> None:
        self.pairs = 0

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        self.pairs += len(pairs)
        return [float(n) for n in range(len(pairs))]  # the last candidate scores best: the order changes


def candidates() -> list[Passage]:
    return [Passage(f"d{n}#0", f"d{n}", "t", f"passage {n}") for n in range(4)]


def stage(cfg: RerankConfig, scorer: CountingScorer, embedder: HashEmbedder) -> RerankStage:
    built = RerankStage(cfg, scorer=scorer, domain=domain(embedder), embedder=embedder)

    async def unbatched(pairs: list[tuple[str, str]]) -> list[float]:  # Serve's batching needs a replica
        return scorer.score(pairs)

    built._score_batch = unbatched  # type: ignore[method-assign]
    return built


def test_a_question_outside_the_domain_keeps_the_fusion_order_and_says_why() -> None:
    embedder, scorer = HashEmbedder(dim=64), CountingScorer()
    out = asyncio.run(stage(RerankConfig(), scorer, embedder).rerank(OUTSIDE, candidates(), 3))
    assert out.status == "skipped" and out.top_scores == [] and scorer.pairs == 0
    assert [p.doc_id for p in out.passages] == ["d0", "d1", "d2"]
    assert out.detail.startswith("fusion order kept: the question is unlike those the reranker was trained on")


def test_a_question_inside_the_domain_is_reranked() -> None:
    embedder, scorer = HashEmbedder(dim=64), CountingScorer()
    out = asyncio.run(stage(RerankConfig(), scorer, embedder).rerank(HELD_OUT[0], candidates(), 3))
    assert out.status == "ok" and scorer.pairs == 4 and out.detail == ""
    assert all(p.rerank_score is not None for p in out.passages)


def test_domain_check_off_reranks_every_question() -> None:
    embedder, scorer = HashEmbedder(dim=64), CountingScorer()
    out = asyncio.run(stage(RerankConfig(domain_check=False), scorer, embedder).rerank(OUTSIDE, candidates(), 3))
    assert out.status == "ok" and scorer.pairs == 4


def test_a_domain_built_with_another_embedder_is_refused_with_the_way_out() -> None:
    built = domain(HashEmbedder(dim=64))
    with pytest.raises(ValueError, match="domain_check: false"):
        domain_embedder(built, EmbeddingConfig(), threads=1)
