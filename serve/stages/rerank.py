"""Cross-encoder rerank: score (query, passage) pairs batched across requests, keep top_n by rank.

Cross-encoder outputs are uncalibrated logits: they order candidates, they are never a threshold."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from ray import serve

from cluster.config import DeploymentConfig, EmbeddingConfig, RagcConfig, RerankConfig
from cluster.models import (
    INT8,
    Embedder,
    available_cpus,
    load_dtype,
    pick_device,
    pick_reranker_precision,
    quantize_int8,
    resolve_model_path,
    set_torch_threads,
)
from serve.answerability import TOP_SCORES
from serve.faults import FaultHooks
from serve.fusion import rrf_fuse
from serve.rerank_domain import RerankDomain
from serve.types import Passage, Reranked

Pairs = list[tuple[str, str]]
PREDICT_BATCH = 32  # sentence-transformers' own default


class PairScorer(Protocol):
    def score(self, pairs: Pairs) -> list[float]: ...


def replica_threads(requested: int, deployment: DeploymentConfig) -> int:
    """Torch threads for one rerank replica, so that a fully scaled-out stage does not oversubscribe."""
    if requested:
        return requested
    if deployment.num_cpus >= 1:
        return int(deployment.num_cpus)
    return max(1, available_cpus() // deployment.max_replicas)


def batch_size(requested: int, threads: int, device: str) -> int:
    """Requests per cross-encoder pass (`rerank.batch_max_size`, 0 = by the replica). Measured on 2 cores:
    replicas of one thread gave the same throughput at 1 as at 4 with a tighter tail (`ragc bench query`);
    one replica of two threads lost a fifth of its pairs/s at 1 (`ragc bench rerank`: 0.75 vs 0.95)."""
    if requested:
        return requested
    return 1 if threads == 1 and device == "cpu" else 4


class CrossEncoderScorer:
    def __init__(self, cfg: RerankConfig, threads: int = 0) -> None:
        import torch
        from sentence_transformers import CrossEncoder

        assert cfg.model is not None
        set_torch_threads(threads)
        device = pick_device("auto")
        precision = pick_reranker_precision(cfg.dtype, device)
        self._model = CrossEncoder(
            resolve_model_path(cfg.model),
            num_labels=1,
            max_length=cfg.max_length,  # None: the length the model was trained and saved with
            device=device,
            model_kwargs={"dtype": load_dtype(precision)},
        )
        if precision == INT8:
            quantize_int8(self._model.model)
        # int8 one pair per pass, so that a score never depends on its batchmates' ranges; bf16 pairs stay
        # batched: alone they cost a fifth of the pairs/s (ARCHITECTURE.md, Precision)
        self._batch_size = 1 if precision == INT8 else PREDICT_BATCH
        self._identity = torch.nn.Identity()

    def score(self, pairs: Pairs) -> list[float]:
        if not pairs:
            return []
        # sorted by length, the batches carry less padding; scores go back in the callers' order
        order = sorted(range(len(pairs)), key=lambda n: len(pairs[n][0]) + len(pairs[n][1]))
        scores = self._model.predict(
            [pairs[n] for n in order],
            batch_size=self._batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            activation_fn=self._identity,  # raw logits: a sigmoid would squeeze bf16 scores into ties
        )
        out = [0.0] * len(pairs)
        for n, score in zip(order, scores, strict=True):
            out[n] = float(score)
        return out


def pair_text(title: str, text: str) -> str:
    """What the cross-encoder reads of a passage: its document's title, then the chunk."""
    title = title.strip()
    return f"{title}\n{text}" if title and not text.startswith(title) else text


def rerank_pairs(query: str, passages: list[Passage]) -> Pairs:
    return [(query, pair_text(p.title, p.text)) for p in passages]


def best_scores(scores: list[float]) -> list[float]:
    """What answerability reads of the cross-encoder: its best logits, whatever order the passages take."""
    return sorted(scores, reverse=True)[:TOP_SCORES]


def order_by_scores(passages: list[Passage], scores: list[float], top_n: int) -> list[Passage]:
    ranked = sorted(zip(passages, scores, strict=True), key=lambda ps: -ps[1])
    out = []
    for passage, score in ranked[:top_n]:
        passage.rerank_score = score
        out.append(passage)
    return out


def rerank_order(passages: list[Passage], scores: list[float], top_n: int, cfg: RerankConfig) -> list[Passage]:
    """`passages` arrive in retrieval order; with `order: rrf` their rank there still counts."""
    if cfg.order == "scores":
        return order_by_scores(passages, scores, top_n)
    by_score = sorted(range(len(passages)), key=lambda n: -scores[n])
    ranks = [[str(n) for n in range(len(passages))], [str(n) for n in by_score]]
    fused = rrf_fuse(ranks, cfg.rrf_k, [1.0, cfg.rrf_weight])
    ranked = sorted(range(len(passages)), key=lambda n: -fused[str(n)])
    out = []
    for n in ranked[:top_n]:
        passages[n].rerank_score = scores[n]
        out.append(passages[n])
    return out


def domain_embedder(domain: RerankDomain, embedding: EmbeddingConfig, threads: int) -> Embedder:
    """The embedding model the domain's vectors came from, on the replica's own torch threads."""
    from cluster.models import SentenceTransformerEmbedder

    if embedding.model_id != domain.embedding_model_id:
        raise ValueError(
            f"the reranker's domain was built with embedding {domain.embedding_model_id!r}, this service embeds with "
            f"{embedding.model_id!r}: retrain the reranker here, or set serve.rerank.domain_check: false"
        )
    return SentenceTransformerEmbedder(embedding.model_copy(update={"num_threads": threads}))


class RerankStage(FaultHooks):
    """Serve deployment. Without a configured model every call is `skipped` and keeps the fusion order."""

    def __init__(
        self,
        cfg: RerankConfig,
        scorer: PairScorer | None = None,
        deployment: DeploymentConfig | None = None,
        fault_delay_s: float = 0.0,
        embedding: EmbeddingConfig | None = None,
        domain: RerankDomain | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        """`deployment`: this stage's Serve options, which size the replica's torch threads; `embedding`: the
        model questions are embedded with, loaded only for a reranker that records its domain (`domain`,
        else read from the model's folder) when `cfg.domain_check` is on."""
        self._cfg = cfg
        self.inject_delay(fault_delay_s)
        threads = replica_threads(cfg.num_threads, deployment or DeploymentConfig())
        if scorer is None and cfg.model:
            scorer = CrossEncoderScorer(cfg, threads)
        self._scorer = scorer
        self._domain, self._embedder = None, embedder
        if cfg.domain_check and scorer is not None:
            self._domain = domain or (RerankDomain.load(resolve_model_path(cfg.model)) if cfg.model else None)
        if self._domain is not None and self._embedder is None:
            self._embedder = domain_embedder(self._domain, embedding or EmbeddingConfig(), threads)
        batcher: Any = self._score_batch
        batcher.set_max_batch_size(batch_size(cfg.batch_max_size, threads, pick_device("auto")))
        batcher.set_batch_wait_timeout_s(self._cfg.batch_wait_timeout_s)

    @staticmethod
    def tree_args(tree: RagcConfig) -> dict[str, Any]:
        """This stage's arguments out of the whole tree (the app builder binds them)."""
        return {
            "cfg": tree.serve.rerank,
            "deployment": tree.serve.deployment("rerank"),
            "fault_delay_s": tree.serve.faults.delay_s.get("rerank", 0.0),
            "embedding": tree.embedding,
        }

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01)
    async def _score_batch(self, requests: list[Pairs]) -> list[list[float]]:
        """One forward pass over the pairs of every request in the batch."""
        assert self._scorer is not None
        flat = [pair for pairs in requests for pair in pairs]
        scores = await asyncio.to_thread(self._scorer.score, flat)
        out, start = [], 0
        for pairs in requests:
            out.append(scores[start : start + len(pairs)])
            start += len(pairs)
        return out

    async def rerank(self, query: str, passages: list[Passage], top_n: int) -> Reranked:
        if self._scorer is None:
            return Reranked(passages[:top_n], "skipped")
        await self._injected_delay()
        outside = await self._outside_domain(query)
        if outside:
            return Reranked(passages[:top_n], "skipped", detail=outside)
        head = passages[: self._cfg.depth]
        scores = await self._score_batch(rerank_pairs(query, head))
        return Reranked(rerank_order(head, scores, top_n, self._cfg), "ok", best_scores(scores))

    async def _outside_domain(self, query: str) -> str:
        """Why the question is not one the reranker knows, or "" (it is, or the reranker records no domain)."""
        if self._domain is None or self._embedder is None:
            return ""
        vector = (await asyncio.to_thread(self._embedder.embed, [query]))[0]
        inside, closeness = self._domain.inside(vector)
        if inside:
            return ""
        return (
            f"fusion order kept: the question is unlike those the reranker was trained on (closeness "
            f"{closeness:.2f} < {self._domain.threshold:.2f})"
        )

    def check_health(self) -> None:
        """Serve's health check: a replica that should score but has no model is replaced."""
        if self._cfg.model and self._scorer is None:
            raise RuntimeError(f"cross-encoder {self._cfg.model!r} is not loaded")
