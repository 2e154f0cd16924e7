"""Named retrieval pipelines, each run through the service's own stage classes in this process.

Every pipeline returns documents (a chunked document counts once, at its best chunk) for metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from cluster.config import RagcConfig
from cluster.models import SentenceTransformerEmbedder
from evals.pair_store import PairScoreStore
from serve.answerability import answerability_features
from serve.rerank_domain import RerankDomain
from serve.stages.rerank import PairScorer, best_scores, rerank_order, rerank_pairs
from serve.stages.retrieve import ArmHits, HybridRetriever
from serve.types import Passage

EVAL_DEPTH = 100  # documents per query: Recall@100 needs them
EVAL_CANDIDATES = 150  # chunks per arm, so that 100 distinct documents survive de-duplication

NO_FLOOR = -1.0  # cosine is never below -1
HydeWriter = Callable[[str], str | None]
Paraphraser = Callable[[str], tuple[str, ...]]


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    dense: bool = True
    bm25: bool = True
    floor: bool = True
    depth: int = EVAL_DEPTH
    rerank: bool = False
    hyde: bool = False
    multi_query: bool = False  # the LLM's paraphrases searched beside the question
    # the service's own candidate counts instead of the eval's deeper ones (abstention, negative mining)
    service_depth: bool = False
    # the cross-encoder rank's weight in the rerank fusion instead of serve.rerank.rrf_weight (`NAME@W`)
    rrf_weight: float | None = None
    # each retrieval arm's weight in the hybrid fusion instead of serve.retrieve's (`NAME@bm25=W:dense=W`)
    arm_weights: tuple[tuple[str, float], ...] | None = None
    # a reranker that records its domain keeps the fusion order for questions outside it, as the service does
    # (serve.rerank.domain_check); `NAME@domain=off` reranks every question
    domain_check: bool = True

    @property
    def variant(self) -> bool:
        """A re-weighting of a named pipeline: it reuses that pipeline's searches and cross-encoder scores."""
        return self.rrf_weight is not None or self.arm_weights is not None or not self.domain_check

    @property
    def needs_llm(self) -> bool:
        return self.hyde or self.multi_query


PIPELINES = {
    # the LlamaIndex quickstart default: dense top-2, no floor, no rerank
    "baseline_top2": PipelineSpec("baseline_top2", bm25=False, floor=False, depth=2),
    "dense": PipelineSpec("dense", bm25=False),
    "bm25": PipelineSpec("bm25", dense=False),
    "hybrid": PipelineSpec("hybrid"),
    "hybrid_rerank": PipelineSpec("hybrid_rerank", rerank=True),
    "hybrid_hyde": PipelineSpec("hybrid_hyde", hyde=True),
    "hybrid_hyde_rerank": PipelineSpec("hybrid_hyde_rerank", hyde=True, rerank=True),
    "hybrid_multiquery": PipelineSpec("hybrid_multiquery", multi_query=True),
    "hybrid_multiquery_rerank": PipelineSpec("hybrid_multiquery_rerank", multi_query=True, rerank=True),
}
SERVICE_HYBRID = replace(PIPELINES["hybrid"], service_depth=True)
NO_LLM_PIPELINES = [name for name, spec in PIPELINES.items() if not spec.needs_llm]


def pipeline_spec(name: str) -> PipelineSpec:
    """A known pipeline, or one re-weighted after `@`, settings joined by `:`: a number is the cross-encoder
    rank's fusion weight (`hybrid_rerank@0.5`), `dense=W` and `bm25=W` an arm's weight (`hybrid@bm25=1.5`),
    `domain=off` a rerank pipeline that ignores the reranker's domain (`hybrid_rerank@domain=off`)."""
    base, _, variant = name.partition("@")
    if base not in PIPELINES:
        raise ValueError(f"unknown pipeline {name!r}; known: {', '.join(PIPELINES)} (with @WEIGHT settings)")
    spec = PIPELINES[base]
    if not variant:
        return spec
    rrf_weight: float | None = None
    arms: dict[str, float] = {}
    domain_check = True
    for setting in variant.split(":"):
        key, _, text = setting.rpartition("=")
        if key == "domain" and spec.rerank and text in ("on", "off"):
            domain_check = text == "on"
            continue
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"pipeline {name!r}: {setting!r} needs a number after @ or =") from None
        if value < 0:
            raise ValueError(f"pipeline {name!r}: a fusion weight is >= 0")
        if not key and spec.rerank:
            rrf_weight = value
        elif key in ("dense", "bm25") and spec.dense and spec.bm25:
            arms[key] = value
        else:
            raise ValueError(
                f"pipeline {name!r}: {setting!r} is not a setting of {base} (a number: the cross-encoder's fusion "
                "weight of a rerank pipeline; dense=W, bm25=W: an arm's weight in a hybrid one; domain=off: a "
                "rerank pipeline that reranks questions outside the reranker's domain too)"
            )
    settings = ([f"{rrf_weight:g}"] if rrf_weight is not None else []) + [f"{a}={w:g}" for a, w in arms.items()]
    settings += [] if domain_check else ["domain=off"]
    return replace(
        spec,
        name=f"{base}@{':'.join(settings)}",
        rrf_weight=rrf_weight,
        arm_weights=tuple(arms.items()) or None,
        domain_check=domain_check,
    )


def eval_config(cfg: RagcConfig, floor: float | None = None) -> RagcConfig:
    """The service's retrieval settings, deep enough for Recall@100; `floor` overrides the cosine floor."""
    out = cfg.model_copy(deep=True)
    r = out.serve.retrieve
    r.dense_candidates = max(r.dense_candidates, EVAL_CANDIDATES)
    r.bm25_candidates = max(r.bm25_candidates, EVAL_CANDIDATES)
    r.pool_size = max(r.pool_size, EVAL_CANDIDATES)
    if floor is not None:
        r.similarity_floor = floor
    return out


def documents(passages: list[Passage], depth: int) -> list[str]:
    seen: dict[str, None] = {}
    for passage in passages:
        seen.setdefault(passage.doc_id, None)
        if len(seen) >= depth:
            break
    return list(seen)


class PipelineRunner:
    """Runs pipeline specs over one tenant of the evaluation collection."""

    def __init__(
        self,
        cfg: RagcConfig,
        tenant: str,
        scorer: PairScorer | None = None,
        hyde: HydeWriter | None = None,
        pair_store: PairScoreStore | None = None,
        paraphrase: Paraphraser | None = None,
        domain: RerankDomain | None = None,
    ) -> None:
        """`domain`: the reranker's, whose questions a rerank pipeline reranks (the others keep the fusion order)."""
        self._cfg = eval_config(cfg)
        self._tenant = tenant
        self._scorer = scorer
        self._hyde = hyde
        self._paraphrase = paraphrase
        self._paraphrase_hits: dict[tuple[bool, str], dict[str, list[Passage]]] = {}
        self._base = cfg
        self._retrievers: dict[tuple[float, bool], HybridRetriever] = {}
        # one search per arm per question, fused per pipeline and floor (same candidate counts = same hits)
        self._hits: dict[tuple[bool, str, str | None], ArmHits] = {}
        self._embedder = SentenceTransformerEmbedder(cfg.embedding)  # one model load for every floor
        self._pair_scores: dict[tuple[str, str], float] = {}
        self._pair_store = pair_store
        self._head_scores: dict[tuple[str, tuple[str, ...]], list[float]] = {}  # for the @WEIGHT variants
        if domain is not None and domain.embedding_model_id != cfg.embedding.model_id:
            raise ValueError(f"the reranker's domain was built with {domain.embedding_model_id!r}, not this embedder")
        self._domain = domain
        self._inside: dict[str, bool] = {}
        self._reranked: dict[str, dict[str, bool]] = {}  # pipeline -> question -> reranked

    def check(self, spec: PipelineSpec) -> None:
        if spec.rerank and self._scorer is None:
            raise ValueError(f"pipeline {spec.name} needs a reranker: set serve.rerank.model or pass --reranker")
        if (spec.hyde and self._hyde is None) or (spec.multi_query and self._paraphrase is None):
            raise ValueError(f"pipeline {spec.name} needs the LLM stage (serve.llm.enabled)")

    def retriever(self, floor: float, service_depth: bool = False) -> HybridRetriever:
        key = (floor, service_depth)
        if key not in self._retrievers:
            cfg = self._base.model_copy(deep=True) if service_depth else eval_config(self._base)
            cfg.serve.retrieve.similarity_floor = floor
            retriever = HybridRetriever(cfg, self._embedder)
            retriever.warm_up()
            self._retrievers[key] = retriever
        return self._retrievers[key]

    def prefetch(self, queries: list[str], service_depth: bool = False) -> None:
        """Searches both arms for every question not searched yet, in batched requests (no HyDE); the
        per-question calls below then only fuse, rerank and cut."""
        retriever = self.retriever(NO_FLOOR, service_depth)
        todo = [q for q in dict.fromkeys(queries) if (service_depth, q, None) not in self._hits]
        for query, hits in zip(todo, retriever.search_arms_batch(self._tenant, todo), strict=True):
            self._hits[(service_depth, query, None)] = hits

    def passages(self, spec: PipelineSpec, query: str, floor: float | None = None) -> list[Passage]:
        """`floor` overrides the configured floor (a pipeline without a floor ignores both)."""
        if floor is None:
            floor = self._cfg.serve.retrieve.similarity_floor
        retriever = self.retriever(floor if spec.floor else NO_FLOOR, spec.service_depth)
        hyde_passage = self._hyde(query) if spec.hyde and self._hyde else None
        key = (spec.service_depth, query, hyde_passage)
        if key not in self._hits:
            self._hits[key] = retriever.search_arms(self._tenant, query, "", hyde_passage)
        weights = retriever.arm_weights() | dict(spec.arm_weights or ())
        hits = self._hits[key].only(spec.dense, spec.bm25)
        if spec.multi_query and self._paraphrase is not None:
            hits = replace(hits, results=hits.results | self._paraphrased(retriever, spec.service_depth, query))
        passages = retriever.fuse(hits, weights).passages
        if spec.rerank and self._scorer is not None and passages:
            self._reranked.setdefault(spec.name, {})[query] = self._knows(spec, query)
        if spec.rerank and self._scorer is not None and passages and self._reranked[spec.name][query]:
            head = passages[: self._cfg.serve.rerank.depth]
            head_key = (query, tuple(p.chunk_id for p in head))
            scores = self._head_scores.get(head_key) if spec.variant else None
            if scores is None:
                pairs = rerank_pairs(query, head)
                scores = self._scorer.score(pairs)  # scored: this pipeline's time per query is measured
                if self._pair_store is not None:
                    self._pair_store.put(pairs, scores)
                self._head_scores[head_key] = scores
            rerank = self._cfg.serve.rerank
            if spec.rrf_weight is not None:
                rerank = rerank.model_copy(update={"rrf_weight": spec.rrf_weight, "order": "rrf"})
            passages = rerank_order(head, scores, len(head), rerank) + passages[len(head) :]
        return passages

    def _knows(self, spec: PipelineSpec, query: str) -> bool:
        """Whether the pipeline reranks this question: always, unless the reranker's domain leaves it out."""
        if self._domain is None or not spec.domain_check:
            return True
        if query not in self._inside:
            self._inside[query] = self._domain.inside(self._embedder.embed([query])[0])[0]
        return self._inside[query]

    def reranked_share(self, spec: PipelineSpec) -> float | None:
        """Share of the questions this rerank pipeline ran that the cross-encoder reranked."""
        seen = self._reranked.get(spec.name)
        return round(sum(seen.values()) / len(seen), 4) if seen else None

    def _paraphrased(self, retriever: HybridRetriever, service_depth: bool, query: str) -> dict[str, list[Passage]]:
        """Both arms' hits for the LLM's paraphrases of `query`, generated and searched once per question."""
        key = (service_depth, query)
        if key not in self._paraphrase_hits:
            assert self._paraphrase is not None
            paraphrases = self._paraphrase(query)
            found = retriever.paraphrase_hits(self._tenant, paraphrases) if paraphrases else {}
            self._paraphrase_hits[key] = found
        return self._paraphrase_hits[key]

    def ranking(self, spec: PipelineSpec, query: str) -> list[str]:
        return documents(self.passages(spec, query), spec.depth)

    def best_cosines(self, queries: dict[str, str]) -> dict[str, float | None]:
        """Each question's nearest-chunk cosine, in batched dense searches (no fusion, no BM25)."""
        retriever = self.retriever(NO_FLOOR, service_depth=True)
        return dict(zip(queries, retriever.best_cosines(self._tenant, list(queries.values())), strict=True))

    def max_cosine(self, query: str) -> float | None:
        """The best dense cosine among hybrid candidates: the floor abstains exactly when it is below."""
        passages = self.passages(SERVICE_HYBRID, query, NO_FLOOR)
        cosines = [p.dense_score for p in passages if p.dense_score is not None]
        return max(cosines) if cosines else None

    @property
    def pairs_reused(self) -> int:
        return self._pair_store.reused if self._pair_store is not None else 0

    def answerability_features(self, query: str, withheld: frozenset[str] = frozenset()) -> list[float] | None:
        """What the service's answerability model reads for this question: the service's hybrid candidates
        (no floor) and the cross-encoder over its rerank head. `withheld`: documents taken out first, as if
        the corpus lacked them (an answerable question made unanswerable)."""
        assert self._scorer is not None, "answerability needs the reranker"
        candidates = [p for p in self.passages(SERVICE_HYBRID, query, NO_FLOOR) if p.doc_id not in withheld]
        head = rerank_pairs(query, candidates[: self._cfg.serve.rerank.depth])
        todo = [pair for pair in dict.fromkeys(head) if pair not in self._pair_scores]
        if self._pair_store is not None and todo:
            self._pair_scores.update(self._pair_store.get(todo))
            todo = [pair for pair in todo if pair not in self._pair_scores]
        if todo:
            scores = self._scorer.score(todo)
            self._pair_scores.update(zip(todo, scores, strict=True))
            if self._pair_store is not None:
                self._pair_store.put(todo, scores)
        cosines = [p.dense_score for p in candidates if p.dense_score is not None]
        return answerability_features(best_scores([self._pair_scores[p] for p in head]), max(cosines, default=None))
