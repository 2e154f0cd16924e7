import asyncio
import time

from cachetools import TTLCache

from cluster.config import RagcConfig
from serve.cache import CacheScope, ResponseCache, normalise
from serve.pipeline import QueryPipeline
from serve.types import Passage, QueryRequest
from tests.fakes import FakeStages, fake_stages


def passages() -> list[Passage]:
    return [Passage("c0", "d0", "t1", "Tenants are isolated by partition key.", score=0.5)]


def pipeline(stages: FakeStages, degraded_ttl_s: int = 0) -> QueryPipeline:
    serve = {"synthesize": {"timeout_s": 0.2}, "retrieve": {"index_version_ttl_s": 0}, "breaker": {"enabled": False}}
    cfg = RagcConfig.model_validate({"serve": serve}).serve
    cache = ResponseCache(
        TTLCache(16, 60), None, semantic=False, threshold=0.95, timeout_s=0.2, degraded_ttl_s=degraded_ttl_s
    )
    return QueryPipeline(cfg, fake_stages(stages), cache)


def ask(p: QueryPipeline, query: str, tenant: str = "t1", expr: str = "", **kw: object) -> dict:
    return asyncio.run(p.run(QueryRequest(query=query, **kw), tenant, expr, "r")).model_dump(mode="json")


def test_ttl_cache_expires_and_bounds() -> None:
    cache: TTLCache[str, int] = TTLCache(2, ttl=0.05)
    cache["a"] = 1
    cache["b"] = 2
    cache["c"] = 3
    assert cache.get("a") is None and cache.get("c") == 3 and len(cache) == 2
    time.sleep(0.06)
    assert cache.get("c") is None


def test_key_carries_tenant_filters_history_switches_and_version() -> None:
    base = CacheScope("t1", "", "[]", "[5]", 1)
    assert base.exact_key("How  are Tenants kept apart?") == base.exact_key("how are tenants kept apart?")
    assert normalise("  A  b ") == "a b"
    others = [
        CacheScope("t2", "", "[]", "[5]", 1),
        CacheScope("t1", "x", "[]", "[5]", 1),
        CacheScope("t1", "", "[1]", "[5]", 1),
        CacheScope("t1", "", "[]", "[6]", 1),
        CacheScope("t1", "", "[]", "[5]", 2),
    ]
    assert len({base.exact_key("q"), *(o.exact_key("q") for o in others)}) == 6


def test_second_ask_is_a_hit_with_the_same_answer_and_scopes_miss() -> None:
    stages = FakeStages(passages())
    p = pipeline(stages)
    first = ask(p, "How are tenants kept apart?")
    second = ask(p, "how are tenants  kept apart?")
    assert first["stages"]["cache"]["status"] == "miss" and second["stages"]["cache"]["status"] == "hit_l1"
    assert second["answer"] == first["answer"] and second["stages"]["synthesize"]["status"] == "cached"
    assert stages.calls.count("synthesize") == 1
    assert ask(p, "How are tenants kept apart?", tenant="t2")["stages"]["cache"]["status"] == "miss"
    assert ask(p, "How are tenants kept apart?", expr='doc_type == "md"')["stages"]["cache"]["status"] == "miss"
    stages.version += 1
    assert ask(p, "How are tenants kept apart?")["stages"]["cache"]["status"] == "miss"


def test_fallback_answers_are_not_cached_without_a_degraded_ttl() -> None:
    stages = FakeStages(passages(), delay_s={"synthesize": 1.0})
    p = pipeline(stages)
    assert ask(p, "q")["stages"]["synthesize"]["status"] == "fallback"
    assert ask(p, "q")["stages"]["cache"]["status"] == "miss"


def test_a_degraded_answer_is_cached_briefly_and_marked_then_a_full_one_replaces_it() -> None:
    stages = FakeStages(passages(), delay_s={"synthesize": 1.0})
    p = pipeline(stages, degraded_ttl_s=1)
    assert ask(p, "q")["stages"]["synthesize"]["status"] == "fallback"
    repeat = ask(p, "q")  # during the overload: answered from the cache, and says what it is
    assert repeat["stages"]["cache"]["status"] == "hit_l1" and "degraded answer" in repeat["stages"]["cache"]["detail"]
    assert stages.calls.count("synthesize") == 1
    stages.delay_s = {}  # the fault passes
    time.sleep(1.05)
    full = ask(p, "q")
    assert full["stages"]["cache"]["status"] == "miss" and full["stages"]["synthesize"]["status"] == "ok"
    again = ask(p, "q")
    assert again["stages"]["cache"]["status"] == "hit_l1" and again["stages"]["cache"]["detail"] is None
    assert again["answer"] == full["answer"]


def test_cache_scope_failure_is_a_bypass() -> None:
    stages = FakeStages(passages(), fail={"index_version"})
    out = ask(pipeline(stages), "q")
    assert out["stages"]["cache"]["status"] == "bypass" and out["citations"]


def test_cached_embedder_embeds_each_text_once() -> None:
    from cluster.embedding_cache import CachedEmbedder
    from tests.fakes import DictEmbeddingCache, HashEmbedder

    inner = HashEmbedder(dim=8)
    shared = DictEmbeddingCache()
    first = CachedEmbedder(inner, shared, TTLCache(8, 60))
    assert first.embed(["a b", "c"]) == inner.embed(["a b", "c"])
    inner.calls.clear()
    assert first.embed(["a b"]) and inner.calls == [], "memory hit"
    other_replica = CachedEmbedder(inner, shared, TTLCache(8, 60))
    assert other_replica.embed(["c", "new"]) and inner.calls == [["new"]], "shared hit for c, model for new"


def test_semantic_guard_refuses_flipped_claims() -> None:
    from serve.cache import same_claim

    assert same_claim(
        "What does the rerank stage do with cross-encoder scores?",
        "what does the rerank stage do with cross encoder scores",
    )
    assert same_claim("Is it true that aspirin reduces fever?", "Aspirin reduces fever - what does the evidence say?")
    # pairs from SciFact that MiniLM puts above 0.95 cosine
    assert not same_claim("4-PBA treatment decreases ER stress.", "4-PBA treatment raises ER stress.")
    assert not same_claim("10% of SIDS deaths happen before 6 months.", "90% of SIDS deaths happen before 6 months.")
    assert not same_claim("Aged patients are less susceptible.", "Aged patients are more susceptible.")


def test_index_version_is_read_once_per_ttl() -> None:
    stages = FakeStages(passages())
    cfg = RagcConfig.model_validate({"serve": {"retrieve": {"index_version_ttl_s": 60}}}).serve
    p = QueryPipeline(
        cfg, fake_stages(stages), ResponseCache(TTLCache(16, 60), None, semantic=False, threshold=0.95, timeout_s=0.2)
    )
    ask(p, "q")
    ask(p, "q")
    assert stages.calls.count("index_version") == 1


def test_an_unreadable_cache_entry_is_answered_afresh() -> None:
    stages = FakeStages(passages())
    p = pipeline(stages)
    first = ask(p, "How are tenants kept apart?")
    assert first["stages"]["cache"]["status"] == "miss"
    l1 = p._cache._l1  # type: ignore[union-attr]
    for key in list(l1):
        l1[key] = {"answer": "an entry written by another version"}
    again = ask(p, "How are tenants kept apart?")
    assert again["answer"] == first["answer"] and again["stages"]["retrieve"]["status"] == "ok"
