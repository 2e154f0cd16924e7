"""Hybrid retrieval: a dense arm and a BM25 arm in Milvus, fused by reciprocal rank, tenant and request
filters pushed into both, and a cosine floor so that a question with nothing relevant gets nothing
(by default the floor gates the question: a strong BM25 match is not dropped for a low cosine).

The arms run as two searches rather than one `hybrid_search`: the floor needs each candidate's dense
cosine (a fused result only carries the RRF score), and a failing arm must degrade to the other alone."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from cachetools import TTLCache

from cluster.config import RagcConfig
from cluster.embedding_cache import CachedEmbedder, NoEmbeddingCache, open_embedding_cache
from cluster.labels import PUBLIC
from cluster.models import Embedder, SentenceTransformerEmbedder
from cluster.store.bm25_text import bm25_text
from cluster.store.client import connect, first_rows
from cluster.store.collections import CollectionMismatchError, Collections
from cluster.store.expr import all_of, eq, fields_named, holds_any_label, quote
from cluster.store.schema import ChunkFields, stored_fields
from serve.edge.filters import on_label_terms
from serve.errors import BadRequestError
from serve.faults import FaultHooks
from serve.fusion import rrf_fuse
from serve.merging import merge, section_expr, sibling_groups
from serve.neighbours import widen, window_expr
from serve.tracing import span
from serve.types import DocumentPage, Merged, Passage, RetrievalResult

logger = logging.getLogger(__name__)
ARMS = ("dense", "bm25")


class InjectedArmFailureError(RuntimeError):
    pass


def embedded_texts(query: str, hyde_passage: str | None, include_original: bool = True) -> dict[str, str]:
    """What the dense arm embeds: the query, or with HyDE the hypothetical passage (and the query)."""
    if not hyde_passage:
        return {"query": query}
    return {"query": query, "hyde": hyde_passage} if include_original else {"hyde": hyde_passage}


def query_vector(
    embedder: Embedder, query: str, hyde_passage: str | None, include_original: bool = True
) -> list[float]:
    """The query's vector; with HyDE, the normalised mean of the query and the hypothetical passage."""
    texts = list(embedded_texts(query, hyde_passage, include_original).values())
    return unit(np.asarray(embedder.embed(texts), dtype=np.float32).mean(axis=0).tolist())


def unit(vector: list[float]) -> list[float]:
    array = np.asarray(vector, dtype=np.float32)
    return (array / (float(np.linalg.norm(array)) or 1.0)).tolist()


def _batch_arm_hits(dense: Future[list[list[Passage]]], bm25: Future[list[list[Passage]]]) -> list[ArmHits]:
    """One batch's questions, each with both arms' hits (a failed search raises)."""
    return [
        ArmHits({"dense": d, "bm25": b}, dict.fromkeys(ARMS, "ok"), True, "query")
        for d, b in zip(dense.result(), bm25.result(), strict=True)
    ]


def _passage(entity: dict[str, Any], cosine: float | None) -> Passage:
    """A hit as the typed passage every later stage reads; `dense_score` is its cosine to the query."""
    f = ChunkFields
    return Passage(
        chunk_id=str(entity[f.ID]),
        doc_id=str(entity[f.DOC_ID]),
        tenant_id=str(entity[f.TENANT]),
        text=str(entity.get(f.TEXT, "")),
        title=str(entity.get(f.TITLE, "")),
        source=str(entity.get(f.SOURCE, "")),
        section=str(entity.get(f.SECTION, "")),
        doc_type=str(entity.get(f.DOC_TYPE, "")),
        year=int(entity.get(f.YEAR, 0) or 0),
        author=str(entity.get(f.AUTHOR) or ""),
        tags=tuple(str(t) for t in entity.get(f.TAGS) or ()),
        access=tuple(str(g) for g in entity.get(f.ACCESS) or ()),
        dense_score=cosine,
        chunk_index=int(entity.get(f.CHUNK_INDEX, 0) or 0),
    )


@dataclass(frozen=True)
class ArmHits:
    results: dict[str, list[Passage]]  # arm -> hits in its order, `dense_score` = cosine (None: not known)
    arms: dict[str, str]  # arm -> "ok" | failure reason
    have_vector: bool
    embedded: str

    def only(self, dense: bool, bm25: bool) -> ArmHits:
        keep = {arm for arm, wanted in (("dense", dense), ("bm25", bm25)) if wanted}
        return replace(
            self,
            results={a: h for a, h in self.results.items() if a in keep},
            arms={a: r for a, r in self.arms.items() if a in keep},
        )


def rpc_reason(exc: Exception) -> str:
    """A gRPC failure as its status and details (its str() is a long repr that a response would cut short)."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        status = code()
        return f"{getattr(status, 'name', status)}: {details()}"
    return str(exc)


class HybridRetriever:
    """Plain class: the Serve deployment, `ragc eval` and the benchmarks all run this same code."""

    def __init__(self, cfg: RagcConfig, embedder: Embedder | None = None) -> None:
        self._cfg = cfg
        self._rcfg = cfg.serve.retrieve
        self._embedder = embedder
        self._client: Any = None
        self._stale = False  # both arms failed: reconnect before the next search
        self._collections: Collections | None = None
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="retrieve")
        self._version: TTLCache[str, int] = TTLCache(1, ttl=self._rcfg.index_version_ttl_s)
        self._fields: TTLCache[str, frozenset[str]] = TTLCache(1, ttl=self._rcfg.index_version_ttl_s)
        self._caches_lock = threading.Lock()  # requests and both arms run in threads; a TTLCache is not thread-safe
        self._last_version = 0
        self.not_ready_reason: str | None = "not warmed up"
        self._unreachable_since: float | None = None

    def warm_up(self) -> None:
        if self._embedder is None:
            ccfg = self._cfg.serve.cache
            memory: TTLCache[str, list[float]] | None = (
                TTLCache(ccfg.l1_max_entries, ccfg.l1_ttl_s) if ccfg.enabled and ccfg.l1_max_entries else None
            )
            shared = open_embedding_cache(self._cfg) if ccfg.enabled else NoEmbeddingCache()
            self._embedder = CachedEmbedder(SentenceTransformerEmbedder(self._cfg.embedding), shared, memory)
        self.check_ready()

    def check_ready(self) -> bool:
        """Milvus reachable, collection loaded, the collection's embedding model is the configured one."""
        try:
            if self._client is None:
                self._client = connect(self._cfg, attempts=1)
                self._collections = Collections(self._client, self._cfg)
            assert self._collections is not None
            active = self._collections.ensure()
            state = self._client.get_load_state(active.physical)
            if "Loaded" not in str(state.get("state")):
                self.not_ready_reason = f"collection {active.physical} is not loaded ({state.get('state')})"
                return False
        except CollectionMismatchError as exc:
            self.not_ready_reason = f"embedding model mismatch: {exc}"
            return False
        except Exception as exc:  # noqa: BLE001 - any connection failure means "not ready", with its reason
            self._client = None
            self.not_ready_reason = f"milvus unreachable: {exc}"
            if self._unreachable_since is None:
                self._unreachable_since = time.monotonic()
            return False
        self.not_ready_reason = None
        self._unreachable_since = None
        return True

    def check_health(self) -> None:
        """Raises when this retriever cannot serve and a new replica could: no embedding model, or the store
        unreachable for `unhealthy_after_s` (a model mismatch keeps it unready instead: a restart cannot fix it)."""
        if self._embedder is None:
            raise RuntimeError("the embedding model is not loaded")
        self.check_ready()
        if self._unreachable_since is not None:
            down_s = time.monotonic() - self._unreachable_since
            if down_s >= self._rcfg.unhealthy_after_s:
                raise RuntimeError(f"{self.not_ready_reason} (for {down_s:.0f}s)")

    def index_version(self, fresh: bool = False) -> int:
        """The catalog's index version, re-read when the cached one is older than `index_version_ttl_s`
        (or `fresh`); the last one read while the store is not connected."""
        with self._caches_lock:
            version = None if fresh else self._version.get("v")
        if version is None and self._collections:
            version = self._last_version = self._collections.index_version()
            with self._caches_lock:
                self._version["v"] = version
        return self._last_version if version is None else version

    def embed_query(self, text: str) -> list[float]:
        if self._embedder is None:
            self.warm_up()
        assert self._embedder is not None
        return query_vector(self._embedder, text, None)

    def _ready_embedder(self) -> Embedder:
        """The embedder (loaded on first use), once Milvus is reachable; raises with the reason if not."""
        if self._embedder is None:
            self.warm_up()
        if self._stale:
            # a new client replaces the old one in one assignment: requests in flight keep a usable
            # reference (setting it to None first failed them with "'NoneType' object has no attribute")
            self._stale = False
            try:
                client = connect(self._cfg, attempts=1)
                self._collections, self._client = Collections(client, self._cfg), client
            except Exception as exc:  # noqa: BLE001 - the old client is kept; check_ready says why
                logger.warning("milvus reconnect failed", extra={"error": str(exc)})
        if self._client is None and not self.check_ready():
            raise RuntimeError(self.not_ready_reason or "retriever not ready")
        assert self._embedder is not None
        return self._embedder

    def _search_dense(self, vectors: list[list[float]], expr: str) -> list[list[Passage]]:
        """One hit list per query vector (one search request for all of them)."""
        if "dense" in self._cfg.serve.faults.fail:
            raise InjectedArmFailureError("fault hook: dense arm fails")
        hits = self._dense_hits(vectors, expr, self._rcfg.dense_candidates, self._output_fields())
        return [[_passage(h["entity"], float(h["distance"])) for h in per_query] for per_query in hits]

    def _dense_hits(self, vectors: list[list[float]], expr: str, limit: int, fields: list[str]) -> Any:
        return self._client.search(
            self._cfg.milvus.collection,
            data=vectors,
            anns_field=ChunkFields.DENSE,
            limit=limit,
            filter=expr,
            output_fields=fields,
            timeout=self._rcfg.search_timeout_s * len(vectors),
            search_params={  # the same ef whatever the limit: a smaller one could miss the nearest chunk
                "metric_type": "COSINE",
                "params": {"ef": max(self._rcfg.hnsw_ef, self._rcfg.dense_candidates)},
            },
        )

    def best_cosines(self, tenant: str, queries: list[str], batch: int = 128) -> list[float | None]:
        """Each query's nearest chunk cosine in the tenant (None: no chunk), in batched searches: what the
        query-scope floor compares, short of a BM25 hit's exact cosine above an HNSW miss."""
        embedder = self._ready_embedder()
        expr = eq(ChunkFields.TENANT, tenant)
        best: list[float | None] = []
        for start in range(0, len(queries), batch):
            vectors = embedder.embed(queries[start : start + batch])
            for hits in self._dense_hits(vectors, expr, 1, [ChunkFields.ID]):
                best.append(float(hits[0]["distance"]) if hits else None)
        return best

    def _search_bm25(self, texts: list[str], expr: str, vectors: list[list[float]] | None) -> list[list[Passage]]:
        """One hit list per text; each hit's cosine to its query's vector from the stored one (None without)."""
        if "bm25" in self._cfg.serve.faults.fail:
            raise InjectedArmFailureError("fault hook: bm25 arm fails")
        hits = self._client.search(
            self._cfg.milvus.collection,
            data=[bm25_text(text, self._cfg.milvus.bm25_stemmer) for text in texts],
            anns_field=ChunkFields.SPARSE,
            limit=self._rcfg.bm25_candidates,
            filter=expr,
            output_fields=[*self._output_fields(), ChunkFields.DENSE],
            timeout=self._rcfg.search_timeout_s * len(texts),
            search_params={"metric_type": "BM25"},
        )
        out = []
        for n, per_query in enumerate(hits):
            vector = np.asarray(vectors[n], np.float32) if vectors else None
            passages = []
            for h in per_query:
                entity = dict(h["entity"])
                stored = entity.pop(ChunkFields.DENSE, None)
                cosine = None
                if vector is not None and stored is not None:
                    cosine = float(np.dot(np.asarray(stored, np.float32), vector))
                passages.append(_passage(entity, cosine))
            out.append(passages)
        return out

    def search_arms_batch(self, tenant: str, queries: list[str], batch: int = 64) -> list[ArmHits]:
        """`search_arms` for many questions (no filters, no HyDE), one search request per arm per `batch`:
        what the evaluation and the reranker's mining run over hundreds of questions. Failures raise."""
        embedder = self._ready_embedder()
        expr = eq(ChunkFields.TENANT, tenant)
        out: list[ArmHits] = []
        # both arms' searches at once, and the next batch embedded while they run: the searches mostly wait on
        # milvus-lite, which would otherwise leave a core idle for most of an evaluation (a third of it, alone)
        searching: tuple[Future[list[list[Passage]]], Future[list[list[Passage]]]] | None = None
        for start in range(0, len(queries), batch):
            texts = queries[start : start + batch]
            vectors = [unit(v) for v in embedder.embed(texts)]
            if searching is not None:
                out += _batch_arm_hits(*searching)
            searching = (
                self._pool.submit(self._search_dense, vectors, expr),
                self._pool.submit(self._search_bm25, texts, expr, vectors),
            )
        if searching is not None:
            out += _batch_arm_hits(*searching)
        return out

    def retrieve(
        self,
        tenant: str,
        query: str,
        filter_expr: str = "",
        hyde_passage: str | None = None,
        paraphrases: tuple[str, ...] = (),
        groups: tuple[str, ...] = (),
    ) -> RetrievalResult:
        """`groups`: the caller's access groups; it reads their documents and the tenant's public ones."""
        self._ready_embedder()
        scoped, access = self.scoped(filter_expr, groups)
        hits = self.search_arms(tenant, query, scoped, hyde_passage)
        extra = self.paraphrase_hits(tenant, paraphrases, scoped) if paraphrases else {}
        if not access and ChunkFields.ACCESS in (self._stored_fields(fresh=True) or ()):
            # a reindex moved the alias to a collection with access groups while this searched: once more, with them
            return self.retrieve(tenant, query, filter_expr, hyde_passage, paraphrases, groups)
        result = self.fuse(replace(hits, results=hits.results | extra))
        result.paraphrases_searched = len(extra) // 2
        return result

    def scoped(self, filter_expr: str, groups: tuple[str, ...]) -> tuple[str, str]:
        """The request's filters (on the list fields' terms where the collection stores them) with the groups'
        access clause, and the access clause alone."""
        self.check_filter_fields(filter_expr)
        fields = self._stored_fields() or frozenset()
        terms = {field: named for field, named in ChunkFields.LABEL_TERMS.items() if named in fields}
        access = self.access_expr(groups)
        return all_of(on_label_terms(filter_expr, terms), access), access

    def check_filter_fields(self, filter_expr: str) -> None:
        """A filter on a field the serving collection lacks is the client's to know, not a failed search: the
        declared fields (author, tags) exist only in collections created since they were stored."""
        fields = self._stored_fields()
        if not filter_expr or fields is None:  # unknown: the search itself then says what is wrong
            return
        missing = sorted(fields_named(filter_expr, self._cfg.serve.filters) - fields)
        if missing:
            raise BadRequestError(
                f"filter on {', '.join(missing)}: this index was built before that field was stored; "
                "`ragc reindex` rebuilds it with the field, without downtime"
            )

    def access_expr(self, groups: tuple[str, ...]) -> str:
        """The documents `groups` may read: the public ones and those of a group among them. None in a collection
        without the field is restricted (the ingest refuses such documents there), so it needs no clause; where
        the fields are unknown the clause stays, and a search it fails is a failed search, never a wider one.
        The clause matches the groups' terms where the collection has them: on the ARRAY field milvus-lite takes
        ~30x as long (a search of 10k chunks ~0.4 s against ~12 ms; ARCHITECTURE.md, Access groups)."""
        readers = (PUBLIC, *groups)
        fields = self._stored_fields()
        if fields is not None and ChunkFields.ACCESS_TERMS in fields:
            return holds_any_label(ChunkFields.ACCESS_TERMS, readers)
        if fields is not None and ChunkFields.ACCESS not in fields:
            return ""
        return f"array_contains_any({ChunkFields.ACCESS}, [{', '.join(quote(g) for g in readers)}])"

    def _stored_fields(self, fresh: bool = False) -> frozenset[str] | None:
        """The serving collection's fields, re-read as often as the index version (or now: `fresh`)."""
        with self._caches_lock:
            fields = None if fresh else self._fields.get("alias")
        if fields is None:
            try:
                fields = stored_fields(self._client, self._cfg.milvus.collection)
            except Exception as exc:  # noqa: BLE001 - unknown; the caller goes on without them
                logger.warning("collection fields unknown", extra={"error": str(exc)})
                return None
            with self._caches_lock:
                self._fields["alias"] = fields
        return fields

    def _output_fields(self) -> list[str]:
        """What a hit carries: the chunk fields, and the declared document fields where the collection has them."""
        fields = self._stored_fields() or frozenset()
        return [*ChunkFields.OUTPUT, *(f for f in ChunkFields.DECLARED if f in fields)]

    def paraphrase_hits(
        self, tenant: str, paraphrases: tuple[str, ...], filter_expr: str = ""
    ) -> dict[str, list[Passage]]:
        """Multi-query: both arms for every paraphrase, one search request per arm, as `dense#n` / `bm25#n`
        lists. Their hits carry no cosine: the floor judges the question's own. A failure leaves the question's
        own lists to answer alone."""
        try:
            vectors = [unit(v) for v in self._ready_embedder().embed(list(paraphrases))]
            expr = all_of(eq(ChunkFields.TENANT, tenant), filter_expr)
            dense, bm25 = self._search_dense(vectors, expr), self._search_bm25(list(paraphrases), expr, None)
        except Exception as exc:  # noqa: BLE001 - the question's own search still answers
            logger.warning("paraphrase search failed", extra={"error": str(exc)})
            return {}
        out: dict[str, list[Passage]] = {}
        for n, (dense_hits, bm25_hits) in enumerate(zip(dense, bm25, strict=True), start=1):
            out[f"dense#{n}"] = [replace(p, dense_score=None) for p in dense_hits]
            out[f"bm25#{n}"] = bm25_hits
        return out

    def search_arms(self, tenant: str, query: str, filter_expr: str = "", hyde_passage: str | None = None) -> ArmHits:
        """Both searches, before fusion and the floor (the eval fuses one search per arm several ways)."""
        embedder = self._ready_embedder()
        expr = all_of(eq(ChunkFields.TENANT, tenant), filter_expr)
        arms: dict[str, str] = {}
        vector: list[float] | None = None
        include_original = self._cfg.serve.rewrite.hyde_include_original
        embedded = "+".join(embedded_texts(query, hyde_passage, include_original))
        try:
            with span("retrieve.embed", embedded=embedded):
                vector = query_vector(embedder, query, hyde_passage, include_original)
        except Exception as exc:  # noqa: BLE001 - the BM25 arm can still answer
            logger.warning("query embedding failed", extra={"error": str(exc)})
            arms["dense"] = f"embedding failed: {exc}"
        jobs = {}
        if vector is not None:  # dense first: the fused entities keep the dense arm's exact cosine
            jobs["dense"] = self._submit_arm("dense", tenant, self._search_dense, [vector], expr)
        other = None if vector is None else [vector]
        jobs["bm25"] = self._submit_arm("bm25", tenant, self._search_bm25, [query], expr, other)
        results: dict[str, list[Passage]] = {}
        for arm, job in jobs.items():
            try:
                results[arm] = job.result()[0]
                arms[arm] = "ok"
            except Exception as exc:  # noqa: BLE001 - one arm failing degrades to the other
                logger.warning("retrieval arm failed", extra={"arm": arm, "error": str(exc)})
                arms[arm] = f"failed: {rpc_reason(exc)}"
        if not results:
            self._stale = True  # reconnect on the next call: a dropped connection must not stick
            raise RuntimeError("both retrieval arms failed: " + "; ".join(f"{a}: {r}" for a, r in arms.items()))
        return ArmHits(results, arms, vector is not None, embedded)

    def neighbours(self, tenant: str, passages: list[Passage], window: int) -> dict[str, str]:
        """chunk_id -> the passage widened with up to `window` chunks of its document on each side, for each
        passage that has any (serve/neighbours.py); one query for every passage."""
        if window <= 0 or not passages:
            return {}
        self._ready_embedder()  # connected, and the collection is there
        chunks = self._client.query(
            self._cfg.milvus.collection,
            filter=window_expr(tenant, passages, window),
            output_fields=[ChunkFields.DOC_ID, ChunkFields.CHUNK_INDEX, ChunkFields.TEXT],
            timeout=self._rcfg.search_timeout_s,
        )
        return widen(passages, chunks, window)

    def merged(self, tenant: str, passages: list[Passage], min_siblings: int, max_chars: int) -> Merged:
        """The passages with each section that `min_siblings` or more of them come from read whole
        (serve/merging.py); one query for every such section, none when there is none."""
        sections = sibling_groups(passages, min_siblings)
        if not sections:
            return Merged(list(passages))
        self._ready_embedder()  # connected, and the collection is there
        chunks = self._client.query(
            self._cfg.milvus.collection,
            filter=section_expr(tenant, list(sections)),
            output_fields=[ChunkFields.DOC_ID, ChunkFields.SECTION, ChunkFields.CHUNK_INDEX, ChunkFields.TEXT],
            timeout=self._rcfg.search_timeout_s,
        )
        return merge(passages, chunks, min_siblings, max_chars)

    def documents(
        self, tenant: str, filter_expr: str, after: str | None, limit: int, groups: tuple[str, ...] = ()
    ) -> DocumentPage:
        """One page of the documents `groups` may read (each as its first chunk, without text), in chunk id order
        after the chunk id `after`: a cursor that stays valid while documents come and go."""
        self._ready_embedder()  # connected, and the collection is there
        scoped, access = self.scoped(filter_expr, groups)
        expr = all_of(
            eq(ChunkFields.TENANT, tenant),
            f"{ChunkFields.CHUNK_INDEX} == 0",
            scoped,
            f"{ChunkFields.ID} > {quote(after)}" if after else "",
        )
        fields = [f for f in self._output_fields() if f != ChunkFields.TEXT]
        rows = first_rows(self._client, self._cfg.milvus.collection, expr, fields, limit + 1)
        if not access and ChunkFields.ACCESS in (self._stored_fields(fresh=True) or ()):
            # a reindex moved the alias to a collection with access groups while this read: once more, with them
            return self.documents(tenant, filter_expr, after, limit, groups)
        page = [_passage(row, None) for row in rows[:limit]]
        return DocumentPage(page, page[-1].chunk_id if len(rows) > limit else None)

    def _submit_arm(self, arm: str, tenant: str, search: Callable[..., list[list[Passage]]], *args: Any) -> Future[Any]:
        """One arm's search on the pool, in a span of the current trace (pool threads do not inherit it)."""

        def traced() -> list[list[Passage]]:
            with span(f"retrieve.{arm}", tenant=tenant) as current:
                hits = search(*args)
                current.set_attribute("ragc.hits", len(hits[0]) if hits else 0)
                return hits

        return self._pool.submit(contextvars.copy_context().run, traced)

    def fuse(self, hits: ArmHits, weights: dict[str, float] | None = None) -> RetrievalResult:
        """RRF over the arms' hits (`weights` per arm, default the config's), then this retriever's floor."""
        result = self._fuse(hits.results, dict(hits.arms), hits.have_vector, weights)
        result.embedded = hits.embedded
        return result

    def arm_weights(self) -> dict[str, float]:
        return {"dense": self._rcfg.dense_weight, "bm25": self._rcfg.bm25_weight}

    def _fuse(
        self,
        results: dict[str, list[Passage]],
        arms: dict[str, str],
        have_vector: bool,
        weights: dict[str, float] | None = None,
    ) -> RetrievalResult:
        cosines: dict[str, float | None] = {}  # the first known cosine of each chunk (the dense arm's is exact)
        first_seen: dict[str, Passage] = {}
        for hits in results.values():
            for hit in hits:
                first_seen.setdefault(hit.chunk_id, hit)
                if cosines.get(hit.chunk_id) is None:
                    cosines[hit.chunk_id] = hit.dense_score
        weight = weights or self.arm_weights()
        # multi-query: the question's own lists (`dense`, `bm25`) outweigh each paraphrase's (`dense#n`, ...)
        lead = self._cfg.serve.rewrite.multi_query_weight if any("#" in a for a in results) else 1.0
        list_weights = [weight[a.split("#")[0]] * (1.0 if "#" in a else lead) for a in results]
        fused = rrf_fuse([[p.chunk_id for p in hits] for hits in results.values()], self._rcfg.rrf_k, list_weights)
        passages: list[Passage] = []
        dropped = 0
        floor = self._rcfg.similarity_floor
        known = [c for c in cosines.values() if c is not None]
        if have_vector and self._rcfg.floor_scope == "query" and max(known, default=-1.0) < floor:
            return RetrievalResult([], self.index_version(), arms, len(fused))
        for chunk_id, score in sorted(fused.items(), key=lambda kv: -kv[1]):
            cosine = cosines[chunk_id]
            if have_vector and self._rcfg.floor_scope == "candidate" and (cosine is None or cosine < floor):
                dropped += 1
                continue
            passages.append(replace(first_seen[chunk_id], score=score, dense_score=cosine))
        return RetrievalResult(passages[: self._rcfg.pool_size], self.index_version(), arms, dropped)


class RetrieveStage(FaultHooks):
    """Serve deployment: one retriever (embedder + Milvus client) per replica."""

    def __init__(self, cfg: RagcConfig, retriever: HybridRetriever | None = None, fault_delay_s: float = 0.0) -> None:
        """`cfg`: the tree, since retrieval reads several layers (store, embedding, caches, serve.retrieve)."""
        self.inject_delay(fault_delay_s)
        self._retriever = retriever or HybridRetriever(cfg)
        self._retriever.warm_up()

    @staticmethod
    def tree_args(tree: RagcConfig) -> dict[str, Any]:
        """This stage's arguments out of the whole tree (the app builder binds them)."""
        return {"cfg": tree, "fault_delay_s": tree.serve.faults.delay_s.get("retrieve", 0.0)}

    async def retrieve(
        self,
        tenant: str,
        query: str,
        filter_expr: str,
        hyde_passage: str | None = None,
        paraphrases: tuple[str, ...] = (),
        groups: tuple[str, ...] = (),
    ) -> RetrievalResult:
        await self._injected_delay()
        return await asyncio.to_thread(
            self._retriever.retrieve, tenant, query, filter_expr, hyde_passage, tuple(paraphrases), tuple(groups)
        )

    async def embed(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._retriever.embed_query, text)

    async def neighbours(self, tenant: str, passages: list[Passage], window: int) -> dict[str, str]:
        return await asyncio.to_thread(self._retriever.neighbours, tenant, passages, window)

    async def merged(self, tenant: str, passages: list[Passage], min_siblings: int, max_chars: int) -> Merged:
        return await asyncio.to_thread(self._retriever.merged, tenant, passages, min_siblings, max_chars)

    async def documents(
        self, tenant: str, filter_expr: str, after: str | None, limit: int, groups: tuple[str, ...] = ()
    ) -> DocumentPage:
        return await asyncio.to_thread(self._retriever.documents, tenant, filter_expr, after, limit, tuple(groups))

    async def index_version(self) -> int:
        """Fresh from the catalog: the ingress already caches it for `index_version_ttl_s`."""
        return await asyncio.to_thread(self._retriever.index_version, True)

    async def readiness(self) -> tuple[bool, str | None]:
        ready = await asyncio.to_thread(self._retriever.check_ready)
        return ready, self._retriever.not_ready_reason

    def check_health(self) -> None:
        """Serve's health check (every `health_check_period_s`): raising replaces this replica."""
        self._retriever.check_health()
