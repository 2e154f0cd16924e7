"""The Serve app over HTTP against a real milvus-lite server, Redis, Ray and the packaged models.

Three applications share one Serve instance: `ragc` (the default config), `faulty` (fault hooks: the
dense arm fails, synthesis is slower than its timeout, a real cross-encoder reranks) and `mismatch`
(configured with another embedding model than the collection records). The LLM is off here (answers
are extractive); tests/integration/test_llm_service.py runs the app with the vLLM engine."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from cluster.config import BreakerConfig, DeploymentConfig, RagcConfig, TenantLimits
from ingest_jobs.sync import run_sync
from local.cluster import DEMO_CORPUS
from local.http_wait import wait_for_http
from serve.answerability import FEATURES, AnswerabilityModel, OperatingPoint
from tests.clients.client_env import client_python
from tests.integration.conftest import another_models_label, free_port, make_config
from tests.sse import post_stream

pytestmark = pytest.mark.integration

KEYS = {"key-alpha": "alpha", "key-beta": "beta"}
GAMMA = {"Authorization": "Bearer key-gamma"}  # the tenant with small limits (not in the load test's keys)
ALPHA = {"Authorization": "Bearer key-alpha"}
BETA = {"X-API-Key": "key-beta"}
KEYS_RELOAD_S = 1.0
BETA_HR = {"Authorization": "Bearer key-beta-hr"}  # beta's tenant, and the documents of its group hr
SALARIES = "Salary bands of the zeppelin crew: a captain earns nine thousand florins a month."
CACHE_TTL_S = 20
BETA_SECRET = "Project Nightingale quarterly revenue forecast: the zeppelin fleet earns forty million florins."


def deploy(cfg: RagcConfig, name: str, prefix: str) -> None:
    from ray import serve

    from serve.app import build_app

    serve.run(build_app(cfg), name=name, route_prefix=prefix, blocking=False)


def lenient_calibration(path: Path) -> Path:
    """A calibration that finds everything answerable: the untrained head's logits mean nothing, so this
    checks the mechanics (file loaded by the ingress, scores carried back from the rerank replica)."""
    n = len(FEATURES)
    model = AnswerabilityModel(
        features=list(FEATURES),
        mean=[0.0] * n,
        scale=[1.0] * n,
        coef=[0.0] * n,
        intercept=8.0,
        operating_point=OperatingPoint(threshold=0.5, abstention=0.0, false_abstention=0.0),
        reranker="packaged:all-MiniLM-L6-v2",
    )
    path.write_text(model.model_dump_json())
    return path


FAULTY_QUESTIONS = [
    "How are tenants kept apart?",
    "What is the similarity floor?",
    "How does reindex work?",
    "What happens to deleted documents?",
]
OFF_DOMAIN_QUESTION = "How are filters validated?"  # in the demo corpus, unlike the reranker's questions


def reranker_with_a_domain(folder: Path, cfg: RagcConfig) -> Path:
    """The packaged MiniLM as a cross-encoder (untrained head), with a domain recorded as `ragc train-reranker`
    records one: questions about this service, embedded by the real model, some held out."""
    from cluster.models import SentenceTransformerEmbedder, resolve_model_path
    from serve.rerank_domain import RerankDomain

    folder.mkdir()
    for part in Path(resolve_model_path("packaged:all-MiniLM-L6-v2")).iterdir():
        (folder / part.name).symlink_to(part)
    topics = ["tenants", "the cache", "reindexing", "deleted documents", "the similarity floor", "ingestion"]
    asked = [f"{how} {topic}?" for topic in topics for how in ("How does the service handle", "What is", "Explain")]
    embedder = SentenceTransformerEmbedder(cfg.embedding)
    trained, held_out = asked[::2] + FAULTY_QUESTIONS, asked[1::2]
    RerankDomain.build(embedder.embed(trained), embedder.embed(held_out), 3, 1.0, cfg.embedding.model_id).save(folder)
    return folder


@pytest.fixture(scope="module")
def service(
    milvus_server: dict[str, Any],
    redis_server: dict[str, Any],
    ray_session: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    from ray import serve

    root = tmp_path_factory.mktemp("service")
    keys = root / "keys.json"
    keys.write_text(json.dumps(KEYS | {"key-gamma": "gamma", "key-beta-hr": {"tenant": "beta", "groups": ["hr"]}}))
    # L1 off in this app so that repeats exercise the shared Redis levels (L1 is unit-tested)
    serve_cfg = {
        "auth": {"api_keys": {"file": str(keys)}, "reload_s": KEYS_RELOAD_S},
        "request_timeout_s": 60,
        "cache": {"l1_max_entries": 0, "ttl_s": CACHE_TTL_S},
        "llm": {"enabled": False},
        "limits": {"tenants": {"gamma": {"requests_per_s": 0.01, "burst": 2}}},
        # behaviour, not milvus-lite's latency on 2 busy cores: near the end of a reindex under load (its flush
        # and index build) both arms missed the 3 s search deadline in two of the last three CI simulations
        "retrieve": {"search_timeout_s": 20.0, "timeout_s": 25.0},
    }
    cfg = make_config(milvus_server, redis_server, root / "state", serve=serve_cfg)
    beta_docs = root / "beta"
    beta_docs.mkdir()
    (beta_docs / "beta-secret.txt").write_text(BETA_SECRET)
    (beta_docs / "beta-notes.md").write_text("# Notes\n\nThe beta team keeps its own notes about caching.\n")
    (beta_docs / "salaries.md").write_text(f"---\naccess: [hr]\n---\n# Salaries\n\n{SALARIES}\n")
    alpha = run_sync(cfg, DEMO_CORPUS, "alpha")
    run_sync(cfg, beta_docs, "beta")
    run_sync(cfg, beta_docs, "gamma")

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    deploy(cfg, "ragc", "/")
    faulty = cfg.model_copy(deep=True)
    faulty.serve.faults.fail = ["dense"]
    faulty.serve.faults.delay_s = {"synthesize": 5.0}
    faulty.serve.synthesize.timeout_s = 0.5
    # untrained head: exercises the mechanics only
    faulty.serve.rerank.model = str(reranker_with_a_domain(root / "reranker", cfg))
    faulty.serve.rerank.timeout_s = 60.0  # 4 requests' pairs in one fp32 batch take seconds on a slow CPU
    faulty.serve.cache.enabled = False
    faulty.serve.limits.tenants = {"gamma": TenantLimits(concurrent=1)}  # each request waits out synthesize
    faulty.serve.breaker.enabled = False  # ... every time: the breaker has its own app (`strained`)
    faulty.serve.answerability.calibration = str(lenient_calibration(root / "answerability.json"))
    deploy(faulty, "faulty", "/faulty")
    mismatch = cfg.model_copy(deep=True)
    mismatch.embedding = another_models_label(cfg)
    deploy(mismatch, "mismatch", "/mismatch")
    base = f"http://127.0.0.1:{port}"
    _wait_ready(base + "/readyz")
    yield {"base": base, "cfg": cfg, "alpha_docs": alpha.chunks_total, "metrics_port": ray_session, "keys": keys}
    serve.shutdown()


def _wait_ready(url: str) -> None:
    wait_for_http(url, timeout_s=240)


def ask(
    service: dict[str, Any], body: dict[str, Any], headers: dict[str, str] | None = None, prefix: str = ""
) -> httpx.Response:
    return httpx.post(
        f"{service['base']}{prefix}/v1/query", json=body, headers=ALPHA if headers is None else headers, timeout=60
    )


def alpha_doc_ids() -> set[str]:
    return {p.relative_to(DEMO_CORPUS).as_posix() for p in DEMO_CORPUS.rglob("*") if p.is_file()}


def test_cited_answer_from_ingested_documents(service: dict[str, Any]) -> None:
    response = ask(service, {"query": "How are tenants kept apart?"})
    assert response.status_code == 200, response.text
    out = response.json()
    assert not out["abstained"] and out["grounded"] and out["tenant"] == "alpha"
    assert out["citations"], "an answer from the corpus cites it"
    for citation in out["citations"]:
        passage = out["passages"][citation["n"] - 1]
        assert passage["chunk_id"] == citation["chunk_id"] and f"[{citation['n']}]" in out["answer"]
        assert citation["doc_id"] in alpha_doc_ids()
    assert "security/tenant-isolation.md" in {c["doc_id"] for c in out["citations"]}
    assert {k: v["status"] for k, v in out["stages"].items()} == {
        "cache": "miss",
        "rewrite": "skipped",
        "retrieve": "ok",
        "rerank": "skipped",
        "answerability": "skipped",
        "synthesize": "ok",
    }
    assert out["index_version"] >= 2 and out["request_id"]


def test_out_of_corpus_question_abstains(service: dict[str, Any]) -> None:
    for question in ["What is the capital of France?", "Best recipe for a sourdough pizza crust"]:
        out = ask(service, {"query": question}).json()
        assert out["abstained"] is True, (question, out["passages"][:1])
        assert out["answer"] == "I don't have documents covering that." and out["citations"] == []
        assert out["stages"]["synthesize"]["status"] == "skipped"


def test_tenant_b_never_sees_tenant_a_even_with_its_exact_text(service: dict[str, Any]) -> None:
    alpha_text = (DEMO_CORPUS / "security" / "tenant-isolation.md").read_text().split("\n\n")[1]
    out = ask(service, {"query": alpha_text, "top_k": 10}, headers=BETA).json()
    assert out["tenant"] == "beta"
    # nothing of beta's is near alpha's paragraph: beta abstains rather than see alpha's chunk
    assert out["abstained"] is True and out["passages"] == [], out["passages"][:2]
    out = ask(service, {"query": BETA_SECRET, "top_k": 10}).json()
    assert all(p["doc_id"] in alpha_doc_ids() for p in out["passages"])
    assert "zeppelin" not in out["answer"]
    mine = ask(service, {"query": BETA_SECRET}, headers=BETA).json()
    assert mine["passages"][0]["doc_id"] == "beta-secret.txt"


def test_a_document_restricted_to_a_group_is_read_only_by_keys_of_that_group(service: dict[str, Any]) -> None:
    question = "How much does a zeppelin captain earn?"
    hr = ask(service, {"query": question}, headers=BETA_HR).json()
    assert hr["tenant"] == "beta" and "salaries.md" in {p["doc_id"] for p in hr["passages"]}, hr["passages"]
    for _ in range(2):  # the second time, a cache shared with the hr key would answer
        plain = ask(service, {"query": question}, headers=BETA).json()
        assert "salaries.md" not in {p["doc_id"] for p in plain["passages"]} and "nine thousand" not in plain["answer"]
    chat = httpx.post(
        f"{service['base']}/v1/chat/completions",
        json={"model": "ragc", "messages": [{"role": "user", "content": question}]},
        headers=BETA,
        timeout=60,
    )
    assert chat.status_code == 200 and "nine thousand" not in chat.text and "salaries.md" not in chat.text


def listed_documents(service: dict[str, Any], headers: dict[str, str], **params: Any) -> list[dict[str, Any]]:
    """Every page of `GET /v1/documents`, followed by its cursor."""
    documents: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = httpx.get(
            f"{service['base']}/v1/documents", params=params | {"cursor": cursor or ""}, headers=headers, timeout=60
        )
        assert page.status_code == 200, page.text
        documents += page.json()["documents"]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return documents


def test_the_documents_a_key_may_read_are_listed_page_by_page(service: dict[str, Any]) -> None:
    """The ledger says what each tenant has (`ragc docs`); the API lists the same documents, a page at a time,
    each once, without another tenant's or a group's the key lacks, and with the query API's filters."""
    from ingest_jobs.inventory import tenant_inventory

    alpha = listed_documents(service, ALPHA, limit=7)
    ids = [d["doc_id"] for d in alpha]
    assert len(ids) == len(set(ids)) and set(ids) == {
        d.doc_id for d in tenant_inventory(service["cfg"], "alpha").documents
    }
    tenancy = next(d for d in alpha if d["doc_id"] == "security/tenant-isolation.md")
    assert tenancy["title"] == "How tenants are kept apart" and tenancy["tags"] == ["security"]
    secured = {d["doc_id"] for d in listed_documents(service, ALPHA, filters=json.dumps({"tags": "security"}))}
    assert secured == {i for i in ids if i.startswith("security/")} and len(secured) >= 2

    assert {d["doc_id"] for d in listed_documents(service, BETA)} == {"beta-secret.txt", "beta-notes.md"}
    readable = {d["doc_id"] for d in listed_documents(service, BETA_HR, limit=1)}
    assert readable == {"beta-secret.txt", "beta-notes.md", "salaries.md"}

    bad = httpx.get(f"{service['base']}/v1/documents", params={"cursor": "zz"}, headers=ALPHA, timeout=30)
    assert bad.status_code == 400 and "cursor" in bad.json()["error"]
    assert httpx.get(f"{service['base']}/v1/documents", timeout=30).status_code == 401


def test_a_key_added_then_revoked_in_the_keys_file_takes_effect_without_a_restart(service: dict[str, Any]) -> None:
    """Each ingress replica reads the file again on a request once `reload_s` passed since its last read, so
    this holds with any number of them. A bad edit keeping the keys in use: tests/unit/serve/edge."""
    import time

    keys: Path = service["keys"]
    before = keys.read_text()
    question = {"query": "How are tenants kept apart?", "mode": "no_text"}
    new_key = {"Authorization": "Bearer key-alpha-rotated"}
    try:
        assert ask(service, question, headers=new_key).status_code == 401
        keys.write_text(json.dumps(json.loads(before) | {"key-alpha-rotated": "alpha"}))
        time.sleep(KEYS_RELOAD_S + 0.5)
        added = ask(service, question, headers=new_key)
        assert added.status_code == 200 and added.json()["tenant"] == "alpha", added.text
        keys.write_text(before)  # revoked
        time.sleep(KEYS_RELOAD_S + 0.5)
        assert ask(service, question, headers=new_key).status_code == 401
        assert ask(service, question).status_code == 200, "the other keys stay"
    finally:
        keys.write_text(before)


def rate(service: dict[str, Any], body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{service['base']}/v1/feedback", json=body, headers=headers, timeout=30)


def test_answers_are_rated_by_their_own_tenant_and_read_back_with_what_was_served(
    service: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSON answer, a streamed one and an OpenAI completion each leave a receipt in Redis; each key rates only
    its tenant's; `ragc feedback` reads every rating back with the question, answer and cited documents."""
    from cli.main import main

    answer = ask(service, {"query": "How does the reindex job avoid downtime?"}).json()
    streamed = post_stream(
        f"{service['base']}/v1/query", {"query": "What do the beta team's notes say about caching?"}, BETA, 60
    ).events[-1][1]
    completion = openai_client(service, "key-beta").chat.completions.create(
        model="ragc", messages=[{"role": "user", "content": "What does the beta team keep notes about?"}]
    )
    comment = "right document, but it misses the alias swap"
    down = rate(service, {"request_id": answer["request_id"], "rating": "down", "comment": comment}, ALPHA)
    assert down.status_code == 200 and down.json()["rating"] == "down", down.text
    foreign = rate(service, {"request_id": answer["request_id"], "rating": "up"}, BETA)
    assert foreign.status_code == 404 and "served to this key's tenant" in foreign.json()["error"]
    assert rate(service, {"request_id": streamed["request_id"], "rating": "up"}, BETA).status_code == 200
    assert rate(service, {"request_id": completion.id, "rating": "down"}, BETA).status_code == 200
    assert rate(service, {"request_id": completion.id, "rating": "up"}, BETA).status_code == 200  # changed mind
    bad = rate(service, {"request_id": answer["request_id"], "rating": 5}, ALPHA)
    assert bad.status_code == 400 and "rating" in bad.json()["error"]
    assert rate(service, {"request_id": answer["request_id"], "rating": "up"}, {}).status_code == 401

    monkeypatch.setenv("RAGC_REDIS__URL", service["cfg"].redis.url)
    assert main(["feedback", "--tenant", "alpha", "--json"]) == 0
    alpha = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    [rated] = [e for e in alpha["feedback"] if e["request_id"] == answer["request_id"]]
    receipt = rated["receipt"]
    assert (rated["rating"], rated["comment"], receipt["tenant"]) == ("down", comment, "alpha")
    assert (receipt["question"], receipt["answer"]) == ("How does the reindex job avoid downtime?", answer["answer"])
    assert [c["doc_id"] for c in receipt["cited"]] == [c["doc_id"] for c in answer["citations"]]
    assert main(["feedback", "--tenant", "beta", "--json"]) == 0
    beta = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ratings = {e["request_id"]: e["rating"] for e in beta["feedback"]}
    assert ratings == {streamed["request_id"]: "up", completion.id.removeprefix("chatcmpl-"): "up"}
    assert beta["revised"] == 1 and all(e["receipt"]["tenant"] == "beta" for e in beta["feedback"])


def test_each_milvus_arm_filters_by_tenant_before_any_post_check(service: dict[str, Any]) -> None:
    """The tenant clause is in both searches themselves: the pipeline's own post-filter would mask a leak."""
    from serve.stages.retrieve import ARMS, HybridRetriever

    retriever = HybridRetriever(service["cfg"])
    alpha_text = (DEMO_CORPUS / "security" / "tenant-isolation.md").read_text().split("\n\n")[1]
    for tenant, query, other in (("beta", alpha_text, "alpha"), ("alpha", BETA_SECRET, "beta")):
        searched = retriever.search_arms(tenant, query)
        leaked = retriever.search_arms(other, query)  # the same words do match the other tenant's chunks
        for arm in ARMS:
            assert searched.arms[arm] == "ok", searched.arms
            hits = searched.results[arm]
            assert hits, f"{arm} found nothing for {tenant}: the check below would be vacuous"
            assert {h.tenant_id for h in hits} == {tenant}, (arm, [h.doc_id for h in hits])
            assert {h.tenant_id for h in leaked.results[arm]} == {other}


def test_batched_nearest_chunk_cosines_match_the_retrievers_dense_arm(service: dict[str, Any]) -> None:
    """What the abstention eval chooses its floor from, in one batched search per 128 questions."""
    from serve.stages.retrieve import HybridRetriever

    retriever = HybridRetriever(service["cfg"])
    questions = ["How are tenants kept apart?", "What happens when a document is edited?", BETA_SECRET]
    best = retriever.best_cosines("alpha", questions, batch=2)
    for question, cosine in zip(questions, best, strict=True):
        dense = retriever.search_arms("alpha", question).results["dense"]
        assert cosine == pytest.approx(max(h.dense_score or -1.0 for h in dense), abs=1e-5)
    (own,) = retriever.best_cosines("beta", [BETA_SECRET])
    assert own is not None and own > 0.95 > (best[2] or 0.0)  # the tenant filter is in the batched search too
    assert retriever.best_cosines("nobody", ["anything"]) == [None]


def test_batched_arm_searches_equal_one_search_per_question(service: dict[str, Any]) -> None:
    """What the evaluation and the reranker's mining run: one request per arm for many questions."""
    from serve.stages.retrieve import ARMS, HybridRetriever

    retriever = HybridRetriever(service["cfg"])
    questions = ["How are tenants kept apart?", "What happens when a document is edited?", "redis cache keys"]
    batched = retriever.search_arms_batch("alpha", questions, batch=2)
    assert len(batched) == len(questions)
    for question, hits in zip(questions, batched, strict=True):
        single = retriever.search_arms("alpha", question)
        for arm in ARMS:
            assert hits.results[arm], (question, arm)
            assert [p.chunk_id for p in hits.results[arm]] == [p.chunk_id for p in single.results[arm]]
            for mine, theirs in zip(hits.results[arm], single.results[arm], strict=True):
                assert mine.dense_score == pytest.approx(theirs.dense_score, abs=1e-4)
                assert mine.tenant_id == "alpha"


def test_the_answer_reads_each_passage_with_its_neighbouring_chunks(service: dict[str, Any]) -> None:
    """`neighbours: 1` over HTTP: one Milvus query widens each passage with the chunks of its document on each
    side (as stored: checked against the collection), the citation and `text` stay the retrieved chunk."""
    from cluster.store.client import connect
    from cluster.store.expr import eq

    question = {"query": "How does incremental sync decide what to embed again?", "top_k": 3}
    plain = ask(service, question).json()
    response = ask(service, question | {"neighbours": 1})
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["stages"]["neighbours"]["status"] == "ok" and "neighbours" not in plain["stages"]
    assert [p["chunk_id"] for p in out["passages"]] == [p["chunk_id"] for p in plain["passages"]]
    assert all(p["context"] is None for p in plain["passages"])
    client, collection = connect(service["cfg"]), service["cfg"].milvus.collection
    returned = {p["chunk_id"] for p in out["passages"]}
    widened = 0
    for passage in out["passages"]:
        (row,) = client.query(collection, filter=eq("id", passage["chunk_id"]), output_fields=["chunk_index"])
        siblings = client.query(
            collection,
            filter=f"{eq('doc_id', passage['doc_id'])} and {eq('tenant_id', 'alpha')}",
            output_fields=["id", "chunk_index", "text"],
        )
        beside = [c for c in siblings if abs(c["chunk_index"] - row["chunk_index"]) == 1 and c["id"] not in returned]
        if not beside:
            assert passage["context"] is None, passage
            continue
        widened += 1
        assert passage["text"] in passage["context"] and len(passage["context"]) > len(passage["text"])
        context = " ".join(passage["context"].split())
        for neighbour in beside:  # the seam is kept once: each neighbour's last words are there
            assert " ".join(neighbour["text"].split()[-6:]) in context, (neighbour, passage["context"])
    assert widened, "the question's passages come from documents of several sections"
    for citation in out["citations"]:
        assert citation["chunk_id"] in returned
    assert "1 neighbouring chunk(s)" in out["stages"]["neighbours"]["detail"]
    refused = ask(service, question | {"neighbours": 4})
    assert refused.status_code == 400 and "neighbours" in refused.text, refused.text


def test_passages_of_one_section_are_read_as_their_section_whole(service: dict[str, Any]) -> None:
    """`merge_siblings: 2` over HTTP: one Milvus query reads each section two or more passages come from
    (checked against the collection); the first of them keeps its rank and carries the section, the others
    leave the list, and every citation points at a passage returned."""
    from cluster.store.client import connect
    from cluster.store.expr import eq

    # top_k 6: no other test asks this with 6, so neither ask is a cache hit of theirs, nor theirs of ours
    question = {"query": "What happens when a document is edited?", "top_k": 6}
    plain = ask(service, question).json()
    by_section: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in plain["passages"]:
        by_section.setdefault((p["doc_id"], p["section"]), []).append(p)
    groups = {key: found for key, found in by_section.items() if len(found) >= 2}
    assert groups, "the question's passages include two chunks of one section (128-token chunks)"
    response = ask(service, question | {"merge_siblings": 2})
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["stages"]["merge"]["status"] == "ok" and "merge" not in plain["stages"]
    folded = {p["chunk_id"] for found in groups.values() for p in found[1:]}
    assert [p["chunk_id"] for p in out["passages"]] == [
        p["chunk_id"] for p in plain["passages"] if p["chunk_id"] not in folded
    ]
    client, collection = connect(service["cfg"]), service["cfg"].milvus.collection
    for (doc, section), found in groups.items():
        first = next(p for p in out["passages"] if p["chunk_id"] == found[0]["chunk_id"])
        rows = client.query(
            collection,
            filter=f"{eq('doc_id', doc)} and {eq('section', section)} and {eq('tenant_id', 'alpha')}",
            output_fields=["chunk_index", "text"],
        )
        context = " ".join(first["context"].split())
        for row in sorted(rows, key=lambda r: r["chunk_index"]):  # every chunk of the section, each once
            assert " ".join(row["text"].split()[-6:]) in context, (row, first["context"])
        assert first["text"] in first["context"]
    assert {c["chunk_id"] for c in out["citations"]} <= {p["chunk_id"] for p in out["passages"]}
    refused = ask(service, question | {"merge_siblings": 1})
    assert refused.status_code == 400 and "merge_siblings" in refused.text, refused.text


def test_paraphrases_are_searched_in_the_tenant_and_fused_below_the_question(service: dict[str, Any]) -> None:
    """Multi-query on real Milvus: a paraphrase brings in what it finds, inside the tenant and its filters,
    and the question's own lists keep the lead."""
    from cluster.store.expr import eq
    from serve.stages.retrieve import HybridRetriever

    retriever = HybridRetriever(service["cfg"])
    question = "How are tenants kept apart?"
    alone = retriever.retrieve("alpha", question)
    paraphrase = "What happens when a document is edited?"
    widened = retriever.retrieve("alpha", question, paraphrases=(paraphrase,))
    assert widened.paraphrases_searched == 1 and alone.paraphrases_searched == 0
    # weighted 2:1, a chunk only the paraphrase finds scores at most what rank 1 in one of the question's
    # arms does: the lead is something the question found itself
    assert widened.passages[0].chunk_id in {p.chunk_id for p in alone.passages}
    own_top = {p.doc_id for p in alone.passages[:5]}
    edited = retriever.retrieve("alpha", paraphrase).passages[0]
    assert edited.doc_id not in own_top, "the paraphrase's best document is not one the question finds alone"
    assert edited.doc_id in {p.doc_id for p in widened.passages[:5]}
    leaked = retriever.retrieve("alpha", question, paraphrases=(BETA_SECRET,))
    assert all(p.tenant_id == "alpha" for p in leaked.passages), "another tenant's text stays out"
    load_tests = "How do I run the Locust load tests?"
    unfiltered = retriever.retrieve("alpha", question, paraphrases=(load_tests,))
    assert "txt" in {p.doc_type for p in unfiltered.passages}
    only_md = retriever.retrieve("alpha", question, eq("doc_type", "md"), paraphrases=(load_tests,))
    assert only_md.passages and {p.doc_type for p in only_md.passages} == {"md"}, "the filter holds for paraphrases"


def test_filters_are_pushed_down_and_injection_is_refused(service: dict[str, Any]) -> None:
    out = ask(
        service, {"query": "What do I do when the service says it is not ready?", "filters": {"doc_type": "txt"}}
    ).json()
    assert out["passages"] and all(p["doc_id"].endswith(".txt") for p in out["passages"])
    # the demo corpus tags each document with its folder (front matter; a sidecar for the .txt files)
    security = ask(service, {"query": "How are tenants kept apart?", "filters": {"tags": "security"}}).json()
    assert security["passages"] and all(p["tags"] == ["security"] for p in security["passages"])
    assert {p["doc_id"].split("/")[0] for p in security["passages"]} == {"security"}
    not_ready = "What do I do when the service says it is not ready?"
    either = {"tags": {"contains_any": ["operations", "serving"]}}
    out = ask(service, {"query": not_ready, "filters": either}).json()
    assert out["passages"] and {p["doc_id"].split("/")[0] for p in out["passages"]} <= {"operations", "serving"}
    sidecar = ask(service, {"query": not_ready, "filters": {"tags": "operations", "doc_type": "txt"}}).json()
    assert sidecar["passages"] and all(p["tags"] == ["operations"] for p in sidecar["passages"])
    for filters in [
        {"tags": {"eq": "security"}},
        {"tags": {"contains_any": "security"}},
        {"doc_type": '" or tenant_id != "'},
        {"tenant_id": "beta"},
        {"year": "1 or 1==1"},
        {"doc_type": {"like": "%"}},
    ]:
        response = ask(service, {"query": "tenants", "filters": filters})
        assert response.status_code == 400, (filters, response.text)
        assert response.json()["error"]


def test_bad_input_is_4xx_with_a_message(service: dict[str, Any]) -> None:
    url = f"{service['base']}/v1/query"
    cases = [
        (httpx.post(url, json={"query": "   "}, headers=ALPHA), 400, "empty"),
        (httpx.post(url, json={"query": "x" * 5000}, headers=ALPHA), 400, "too long"),
        (httpx.post(url, json={"query": "q", "top_k": 0}, headers=ALPHA), 400, "top_k"),
        (httpx.post(url, json={"query": "q", "top_k": 10_000}, headers=ALPHA), 400, "top_k"),
        (
            httpx.post(url, json={"query": "q", "history": [{"role": "user", "content": "x"}] * 50}, headers=ALPHA),
            400,
            "history",
        ),
        (
            httpx.post(url, content=b'{"query": ', headers={**ALPHA, "content-type": "application/json"}),
            400,
            "malformed",
        ),
        (
            httpx.post(url, content=b'{"query": "\xff"}', headers={**ALPHA, "content-type": "application/json"}),
            400,
            "UTF-8",
        ),
        (httpx.post(url, content=b"query=x", headers={**ALPHA, "content-type": "text/plain"}), 415, "content type"),
        # valid JSON, not valid Unicode: a lone surrogate once reached the cache's hash as a 500
        (
            httpx.post(url, content=b'{"query": "q \\ud800"}', headers={**ALPHA, "content-type": "application/json"}),
            400,
            "surrogate",
        ),
        (httpx.post(url, json=["q"], headers=ALPHA), 400, "object"),
        (httpx.post(url, json={"query": "q", "unknown": 1}, headers=ALPHA), 400, "unknown"),
        (httpx.post(url, json={"query": "q"}), 401, "missing"),
        (httpx.post(url, json={"query": "q"}, headers={"Authorization": "Bearer stolen"}), 401, "unknown"),
    ]
    for response, status, word in cases:
        assert response.status_code == status, (status, response.text)
        assert word.lower() in response.json()["error"].lower()
    chat = httpx.post(
        f"{service['base']}/v1/chat/completions",
        content=b'{"model": "ragc", "messages": [{"role": "user", "content": "\\udfff q"}]}',
        headers={**ALPHA, "content-type": "application/json"},
    )
    assert chat.status_code == 400 and "surrogate" in chat.json()["error"]["message"], chat.text


def test_streaming_sends_stages_tokens_and_the_final_object(service: dict[str, Any]) -> None:
    stream = post_stream(
        f"{service['base']}/v1/query",
        {"query": "What happens when a document is edited?"},
        {**ALPHA, "Accept": "text/event-stream"},
        60,
    )
    assert stream.status == 200 and stream.content_type.startswith("text/event-stream")
    events = stream.events
    kinds = stream.kinds()
    assert kinds[-1] == "final" and "token" in kinds
    assert {d["stage"] for e, d in events if e == "stage"} == {
        "cache",
        "rewrite",
        "retrieve",
        "rerank",
        "answerability",
        "synthesize",
    }
    final = events[-1][1]
    assert "".join(d["text"] for e, d in events if e == "token").strip() == final["answer"].strip()
    assert final["citations"]


def openai_client(service: dict[str, Any], key: str = "key-alpha") -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{service['base']}/v1", api_key=key, timeout=60, max_retries=0)


def test_the_official_openai_client_gets_a_cited_answer(service: dict[str, Any]) -> None:
    client = openai_client(service)
    assert {m.id for m in client.models.list()} >= {"ragc", "ragc-compact", "ragc-no_text"}
    completion = client.chat.completions.create(
        model="ragc",
        messages=[
            {"role": "system", "content": "Answer like a pirate."},
            {"role": "user", "content": "What does the ingest ledger record?"},
            {"role": "assistant", "content": "It records each document's content hash [1]."},
            {"role": "user", "content": "How does the reindex job avoid downtime?"},
        ],
        temperature=0.3,
        extra_body={"ragc": {"top_k": 3}},
    )
    answer = completion.choices[0].message.content
    ext = completion.model_extra["ragc"]
    assert completion.choices[0].finish_reason == "stop" and completion.id == f"chatcmpl-{ext['request_id']}"
    assert ext["tenant"] == "alpha" and not ext["abstained"] and ext["grounded"]
    assert ext["citations"] and all(f"[{c['n']}]" in answer for c in ext["citations"])
    assert completion.usage is not None and completion.usage.total_tokens == 0  # extractive: no LLM tokens
    assert len(ext["passages"]) <= 3 and {c["doc_id"] for c in ext["citations"]} <= alpha_doc_ids()
    # the same pipeline as /v1/query (the system message dropped): the same turns there are a cache hit
    history = [
        {"role": "user", "content": "What does the ingest ledger record?"},
        {"role": "assistant", "content": "It records each document's content hash [1]."},
    ]
    native = ask(service, {"query": "How does the reindex job avoid downtime?", "top_k": 3, "history": history}).json()
    assert native["answer"] == answer and native["stages"]["cache"]["status"] != "miss"


def test_the_openai_stream_ends_with_the_extension_and_done(service: dict[str, Any]) -> None:
    import asyncio

    from openai import AsyncOpenAI

    async def collect() -> list[Any]:
        client = AsyncOpenAI(base_url=f"{service['base']}/v1", api_key="key-beta", timeout=60, max_retries=0)
        stream = await client.chat.completions.create(
            model="ragc-compact",
            messages=[{"role": "user", "content": "What do the beta team's notes say about caching?"}],
            stream=True,
        )
        return [chunk async for chunk in stream]

    chunks = asyncio.run(collect())
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop" and len(chunks) >= 3
    ext = last.model_extra["ragc"]
    assert ext["tenant"] == "beta" and ext["citations"] and "beta-notes.md" in {c["doc_id"] for c in ext["citations"]}
    assert text.strip() and all(f"[{c['n']}]" in text for c in ext["citations"])


LLAMAINDEX_CLIENT = """
import asyncio, json, sys
from llama_index.core.llms import ChatMessage
from llama_index.llms.openai_like import OpenAILike

llm = OpenAILike(
    model="ragc", api_base=sys.argv[1], api_key=sys.argv[2], is_chat_model=True, context_window=2048,
    timeout=60, max_retries=0,
)
question = [ChatMessage(role="user", content="How does the reindex job avoid downtime?")]
reply = llm.chat(question)
streamed = "".join(part.delta or "" for part in llm.stream_chat(question))
later = asyncio.run(llm.achat([ChatMessage(role="user", content="What do the beta team's notes say?")]))
print(json.dumps({
    "content": reply.message.content,
    "ragc": reply.raw.model_extra["ragc"],
    "streamed": streamed,
    "async": later.message.content,
}))
"""


def test_llamaindex_openai_like_llm_gets_the_cited_answer(service: dict[str, Any]) -> None:
    """LlamaIndex's OpenAI-compatible LLM class, in a client environment of its own (its openai<3 pin
    conflicts with the service's openai 3): chat, stream_chat and achat against the Serve app."""
    python = client_python(Path(__file__).parents[1] / "clients" / "llamaindex.txt")
    done = subprocess.run(
        [str(python), "-c", LLAMAINDEX_CLIENT, f"{service['base']}/v1", "key-alpha"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    ext = out["ragc"]
    assert ext["tenant"] == "alpha" and ext["citations"] and {c["doc_id"] for c in ext["citations"]} <= alpha_doc_ids()
    assert all(f"[{c['n']}]" in out["content"] for c in ext["citations"])
    assert out["streamed"].strip() == out["content"].strip()
    assert out["async"].strip() and out["async"] != out["content"]


def test_openai_errors_come_in_openais_shape(service: dict[str, Any]) -> None:
    import openai

    question = [{"role": "user", "content": "How are tenants kept apart?"}]
    with pytest.raises(openai.AuthenticationError, match="unknown"):
        openai_client(service, key="stolen").chat.completions.create(model="ragc", messages=question)
    client = openai_client(service)
    with pytest.raises(openai.NotFoundError, match="gpt-4o") as missing:
        client.chat.completions.create(model="gpt-4o", messages=question)
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="unknown filter field"):
        client.chat.completions.create(model="ragc", messages=question, extra_body={"ragc": {"filters": {"x": 1}}})
    with pytest.raises(openai.BadRequestError, match="user's question"):
        client.chat.completions.create(model="ragc", messages=[{"role": "assistant", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="n must be 1") as refused:
        client.chat.completions.create(model="ragc", messages=question, n=2)
    assert refused.value.param == "n"
    # beta's key never reaches alpha's documents through this API either
    out = openai_client(service, key="key-beta").chat.completions.create(model="ragc", messages=question)
    assert out.model_extra["ragc"]["tenant"] == "beta"
    assert not {c["doc_id"] for c in out.model_extra["ragc"]["citations"]} & alpha_doc_ids()


def test_the_mcp_client_lists_and_calls_search_ask_list_documents_and_rate_answer(service: dict[str, Any]) -> None:
    import asyncio

    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def session(headers: dict[str, str], rate: str | None = None) -> tuple[set[str], Any, Any, Any, Any]:
        """The tools, and a call of each; `rate_answer` rates `rate`, else the answer `ask` gave."""
        url = f"{service['base']}/mcp"
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            tools = {t.name for t in (await client.list_tools()).tools}
            search = await client.call_tool("search", {"query": "How are tenants kept apart?", "top_k": 3})
            answer = await client.call_tool("ask", {"question": "What happens when a document is edited?"})
            listed = await client.call_tool("list_documents", {"limit": 100})
            rated_id = rate or answer.structured_content["request_id"]
            rated = await client.call_tool("rate_answer", {"request_id": rated_id, "rating": "up", "comment": "ok"})
            return tools, search, answer, listed, rated

    tools, search, answer, listed, rated = asyncio.run(session(ALPHA))
    assert tools == {"search", "ask", "list_documents", "rate_answer"} and not search.is_error and not answer.is_error
    assert rated.structured_content == {
        "request_id": answer.structured_content["request_id"],
        "rating": "up",
        "recorded": True,
    }
    assert {d["doc_id"] for d in listed.structured_content["documents"]} <= alpha_doc_ids()
    assert "security/tenant-isolation.md" in {d["doc_id"] for d in listed.structured_content["documents"]}
    found = search.structured_content
    assert found["tenant"] == "alpha" and 1 <= len(found["passages"]) <= 3
    assert [p["n"] for p in found["passages"]] == list(range(1, len(found["passages"]) + 1))
    assert "security/tenant-isolation.md" in {p["doc_id"] for p in found["passages"]}
    out = answer.structured_content
    assert out["answer"] and out["citations"] and out["grounded"] and out["tenant"] == "alpha"
    assert all(f"[{c['n']}]" in out["answer"] for c in out["citations"])
    assert {c["doc_id"] for c in out["citations"]} <= alpha_doc_ids()
    # beta's key: beta's tenant, never alpha's documents
    _, beta_search, _, beta_listed, beta_rated = asyncio.run(session(BETA, answer.structured_content["request_id"]))
    assert beta_rated.is_error and "404: no answer with request_id" in beta_rated.content[0].text
    assert {d["doc_id"] for d in beta_listed.structured_content["documents"]} == {"beta-secret.txt", "beta-notes.md"}
    assert beta_search.structured_content["tenant"] == "beta"
    assert not {p["doc_id"] for p in beta_search.structured_content["passages"]} & alpha_doc_ids()
    # no key: refused before the protocol, as on every other route
    refused = httpx.post(f"{service['base']}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=10)
    assert refused.status_code == 401 and "missing" in refused.json()["error"].lower()


def test_faults_fall_back_and_still_answer(service: dict[str, Any]) -> None:
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(lambda q: ask(service, {"query": q}, prefix="/faulty"), FAULTY_QUESTIONS))
    for response in responses:
        assert response.status_code == 200, response.text
        out = response.json()
        stages = out["stages"]
        assert stages["retrieve"]["status"] == "fallback" and "dense" in stages["retrieve"]["detail"]
        assert stages["rerank"]["status"] == "ok", "a real cross-encoder reranked (batched across requests)"
        assert stages["answerability"]["status"] == "ok" and out["answerability"] > 0.99, "the calibration decided"
        assert stages["synthesize"]["status"] == "fallback" and "timed out" in stages["synthesize"]["detail"]
        assert out["citations"] and "[1]" in out["answer"]


def test_a_question_outside_the_rerankers_domain_keeps_the_fusion_order(service: dict[str, Any]) -> None:
    """The faulty app's reranker records the questions it knows; one unlike them is not reranked, and says so."""
    response = ask(service, {"query": OFF_DOMAIN_QUESTION, "top_k": 3}, prefix="/faulty")
    assert response.status_code == 200, response.text
    stages = response.json()["stages"]
    assert stages["rerank"]["status"] == "skipped", stages["rerank"]
    assert "unlike those the reranker was trained on" in stages["rerank"]["detail"], stages["rerank"]
    assert stages["answerability"]["status"] == "skipped", "no cross-encoder scores: the cosine floor decides"


def test_a_tenant_over_its_rate_gets_429_with_retry_after_and_others_do_not(service: dict[str, Any]) -> None:
    responses = [ask(service, {"query": "What does the zeppelin fleet earn?"}, GAMMA) for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429], [r.text for r in responses]
    refused = responses[-1]
    assert "rate of 0.01 requests/s" in refused.json()["error"] and int(refused.headers["retry-after"]) > 60
    chat = httpx.post(
        f"{service['base']}/v1/chat/completions",
        json={"model": "ragc", "messages": [{"role": "user", "content": "zeppelin fleet"}]},
        headers=GAMMA,
        timeout=60,
    )
    assert chat.status_code == 429 and chat.headers["retry-after"]
    assert chat.json()["error"]["type"] == "rate_limit_error"
    assert ask(service, {"query": "What does the zeppelin fleet earn?"}, BETA).status_code == 200


def test_requests_in_flight_beyond_a_tenants_limit_get_429_then_their_places_come_back(
    service: dict[str, Any],
) -> None:
    import concurrent.futures

    def slow() -> httpx.Response:  # /faulty waits out its synthesize timeout: each request holds its place
        return ask(service, {"query": "What does the zeppelin fleet earn?"}, GAMMA, prefix="/faulty")

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        responses = list(pool.map(lambda _: slow(), range(3)))
    codes = sorted(r.status_code for r in responses)
    assert codes[0] == 200 and codes[-1] == 429, [r.text for r in responses]
    refused = next(r for r in responses if r.status_code == 429)
    assert "1 requests in flight" in refused.json()["error"] and refused.headers["retry-after"] == "1"
    assert slow().status_code == 200  # every place was given back


RETRIEVE_DELAY_S = 3.0
SYNTH_TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def strained(service: dict[str, Any]) -> Iterator[str]:
    """An app whose retrieval replica is slow with Serve's queue made small (one running, one queued), and
    whose synthesize stage is slower than its timeout behind a breaker that opens after two failures."""
    from ray import serve

    cfg = service["cfg"].model_copy(deep=True)
    cfg.serve.faults.delay_s = {"retrieve": RETRIEVE_DELAY_S, "synthesize": 30.0}
    cfg.serve.retrieve.timeout_s = 20.0
    cfg.serve.synthesize.timeout_s = SYNTH_TIMEOUT_S
    cfg.serve.cache.enabled = False
    cfg.serve.breaker = BreakerConfig(stages=["synthesize"], failures=2, open_s=3.0)
    cfg.serve.deployments["retrieve"] = DeploymentConfig(
        min_replicas=1, max_replicas=1, max_ongoing_requests=1, max_queued_requests=1
    )
    cfg.serve.deployments["ingress"] = DeploymentConfig(min_replicas=1, max_replicas=1)  # one breaker
    deploy(cfg, "strained", "/strained")
    _wait_ready(f"{service['base']}/strained/readyz")
    yield "/strained"
    serve.delete("strained")


def test_a_full_retrieval_queue_answers_503_with_retry_after_at_once(service: dict[str, Any], strained: str) -> None:
    """The rest are refused at once with 503 and Retry-After instead of waiting in line."""
    import concurrent.futures
    import time

    def timed(_: int) -> tuple[httpx.Response, float]:
        started = time.monotonic()
        response = ask(service, {"query": "How are tenants kept apart?"}, prefix=strained)
        return response, time.monotonic() - started

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(timed, range(6)))
    refused = [(r, s) for r, s in results if r.status_code == 503]
    assert refused and any(r.status_code == 200 for r, _ in results), [r.text for r, _ in results]
    for response, seconds in refused:
        assert "retrieval overloaded" in response.json()["error"] and response.headers["retry-after"] == "1"
        assert seconds < RETRIEVE_DELAY_S, "refused without waiting for the replica"


def test_an_open_breaker_answers_at_once_then_one_trial_closes_it(service: dict[str, Any], strained: str) -> None:
    import time

    from ray import serve

    def synthesize_report() -> dict[str, Any]:
        response = ask(service, {"query": "How are tenants kept apart?"}, prefix=strained)
        assert response.status_code == 200 and response.json()["citations"], response.text
        return dict(response.json()["stages"]["synthesize"])

    serve.get_deployment_handle("retrieve", app_name="strained").inject_delay.remote(0).result()  # quick asks
    reports = [synthesize_report() for _ in range(3)]  # two timeouts open it (fewer if the test above added)
    opened = reports[-1]
    assert all(r["status"] == "fallback" for r in reports) and "circuit open" in opened["detail"], reports
    assert opened["ms"] < SYNTH_TIMEOUT_S * 1000, "the fallback at once, not after the stage's timeout"
    handle = serve.get_deployment_handle("synthesize", app_name="strained")
    handle.inject_delay.remote(0).result()
    time.sleep(3.5)  # open_s: the next request is the trial, and it succeeds
    assert synthesize_report()["status"] == "ok"
    assert synthesize_report()["status"] == "ok"  # closed again


def test_embedding_model_mismatch_keeps_the_service_unready(service: dict[str, Any]) -> None:
    ready = httpx.get(f"{service['base']}/mismatch/readyz", timeout=30)
    assert ready.status_code == 503 and "mismatch" in ready.json()["reason"]
    response = ask(service, {"query": "tenants"}, prefix="/mismatch")
    assert response.status_code == 503 and "mismatch" in response.json()["error"]
    assert httpx.get(f"{service['base']}/readyz", timeout=30).status_code == 200


def test_each_deployment_runs_with_its_own_settings(service: dict[str, Any]) -> None:
    from ray.serve.context import _get_global_client

    cfg: RagcConfig = service["cfg"]
    details = _get_global_client().get_serve_details()
    deployments = details["applications"]["ragc"]["deployments"]
    assert set(deployments) == {"ingress", "rewrite", "retrieve", "rerank", "synthesize"}
    for stage, info in deployments.items():
        wanted = cfg.serve.deployment(stage)
        applied = info["deployment_config"]
        assert applied["autoscaling_config"]["min_replicas"] == wanted.min_replicas
        assert applied["autoscaling_config"]["max_replicas"] == wanted.max_replicas
        assert applied["autoscaling_config"]["target_ongoing_requests"] == wanted.target_ongoing_requests
        assert applied["max_ongoing_requests"] == wanted.max_ongoing_requests
        assert applied["max_queued_requests"] == wanted.max_queued_requests
        assert info["status"] == "HEALTHY"


def test_metrics_and_health(service: dict[str, Any]) -> None:
    """Every replica's metrics reach Ray's metrics agent, tagged with their deployment and replica."""
    import time

    ask(service, {"query": "How are tenants kept apart?"})
    ask(service, {"query": "What is the capital of France?"})  # an abstention
    assert httpx.get(f"{service['base']}/healthz", timeout=10).json() == {"status": "ok"}
    url = f"http://127.0.0.1:{service['metrics_port']}/metrics"
    wanted = (
        "ray_ragc_stage_seconds_count{",
        "ray_ragc_abstentions_total{",
        "ray_ragc_requests_total{",
        "ray_ragc_tenant_requests_total{",
        "ray_ragc_tenant_outcomes_total{",
    )
    # the agent exports on its own period (~10 s); on a saturated machine it may still be starting, so a
    # refused or timed-out connection is tried again until the deadline (CI saw one 10 s connect timeout)
    deadline = time.monotonic() + 90
    series: list[str] = []
    while True:
        try:
            series = [line for line in httpx.get(url, timeout=10).text.splitlines() if line.startswith("ray_ragc_")]
        except httpx.TransportError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"Ray's metrics agent at {url} did not answer for 90 s: {exc!r}") from exc
        if all(any(s.startswith(w) for s in series) for w in wanted) or time.monotonic() > deadline:
            break
        time.sleep(2)
    retrieve_ok = [s for s in series if s.startswith("ray_ragc_stage_seconds_count{") and 'stage="retrieve"' in s]
    assert any('status="ok"' in s and 'deployment="ingress"' in s and "replica=" in s for s in retrieve_ok), series
    assert any(s.startswith("ray_ragc_abstentions_total{") for s in series), series
    # usage per tenant and answering model (this app answers without an LLM: extractive, no tokens)
    assert any('tenant="alpha"' in s and 'model="extractive"' in s for s in series if "tenant_requests" in s), series
    abstained = [s for s in series if s.startswith("ray_ragc_tenant_outcomes_total{") and 'outcome="abstained"' in s]
    assert any('tenant="alpha"' in s for s in abstained), series
    schema = httpx.get(f"{service['base']}/openapi.json", timeout=10).json()
    assert "/v1/query" in schema["paths"] and "QueryRequest" in schema["components"]["schemas"]


def test_a_real_prometheus_fires_the_charts_alert_on_real_metrics(service: dict[str, Any], tmp_path: Path) -> None:
    """The chart's alerting rules (rendered for namespace `rag`) in a real Prometheus that scrapes Ray's metrics
    agent: every rule evaluates without error, and a keys file the ingress refuses fires RagcApiKeysRefused, a
    counter's first event (the refusing replica keeps the keys it had)."""
    import time

    from tests.prometheus import running_prometheus
    from tests.unit.helm.test_alerts import ENABLED, NAMESPACE, rule_object

    spec = rule_object(ENABLED)["spec"]
    keys: Path = service["keys"]
    before = keys.read_text()
    target = f"127.0.0.1:{service['metrics_port']}"
    with running_prometheus(tmp_path / "prometheus", spec, target, {"namespace": NAMESPACE}) as prometheus:
        try:
            keys.write_text('{"key-alpha": ')  # a half-written edit
            time.sleep(KEYS_RELOAD_S + 0.5)
            for _ in range(4):  # each ingress replica reads the file on a request
                assert ask(service, {"query": "How are tenants kept apart?", "mode": "no_text"}).status_code == 200
        finally:
            keys.write_text(before)
        deadline = time.monotonic() + 120  # Ray's agent exports every ~10 s; the scrape and rules run every 1 s
        while not any(a["labels"]["alertname"] == "RagcApiKeysRefused" for a in prometheus.alerts()):
            assert time.monotonic() < deadline, (prometheus.alerts("pending"), prometheus.targets())
            time.sleep(2)
        (fired,) = [a for a in prometheus.alerts() if a["labels"]["alertname"] == "RagcApiKeysRefused"]
        assert fired["labels"]["severity"] == "warning" and fired["labels"]["namespace"] == NAMESPACE
        assert [t["health"] for t in prometheus.targets()] == ["up"]
        evaluated = prometheus.rules()
        assert len(evaluated) == sum(len(g["rules"]) for g in spec["groups"])
        assert all(r["health"] == "ok" for r in evaluated), [(r["name"], r.get("lastError")) for r in evaluated]


def test_new_ingest_is_visible_and_bumps_the_index_version(service: dict[str, Any], tmp_path: Path) -> None:
    before = ask(service, {"query": BETA_SECRET}, headers=BETA).json()["index_version"]
    docs = tmp_path / "beta"
    docs.mkdir()
    (docs / "beta-secret.txt").write_text(BETA_SECRET)
    (docs / "beta-launch.txt").write_text("The airship launch window opens at dawn over the harbour of Lisbon.")
    run_sync(service["cfg"], docs, "beta", source_name="launches")  # beta's second source
    import time

    time.sleep(service["cfg"].serve.retrieve.index_version_ttl_s + 0.5)
    out = ask(service, {"query": "When does the airship launch window open?"}, headers=BETA).json()
    assert out["passages"][0]["doc_id"] == "launches::beta-launch.txt"
    assert out["index_version"] > before


def cache_status(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["stages"]["cache"]["status"])


def test_repeats_and_paraphrases_hit_the_shared_cache(service: dict[str, Any]) -> None:
    question = "What does the rerank stage do with cross-encoder scores?"
    first = ask(service, {"query": question})
    second = ask(service, {"query": question})
    assert cache_status(first) == "miss" and cache_status(second) == "hit_l2"
    assert second.json()["answer"] == first.json()["answer"]
    assert second.json()["stages"]["retrieve"]["status"] == "cached"
    paraphrase = ask(service, {"query": "what does the rerank stage do with cross encoder scores"})
    assert cache_status(paraphrase) == "hit_semantic" and paraphrase.json()["answer"] == first.json()["answer"]
    assert cache_status(ask(service, {"query": question}, headers=BETA)) == "miss", "another tenant"
    assert cache_status(ask(service, {"query": question, "filters": {"doc_type": "md"}})) == "miss", "another filter"
    assert cache_status(ask(service, {"query": question, "top_k": 2})) == "miss", "other pipeline settings"


def test_cached_answers_stream_too(service: dict[str, Any]) -> None:
    question = "How does the ingestion job embed chunks?"
    ask(service, {"query": question})
    stream = post_stream(f"{service['base']}/v1/query", {"query": question, "stream": True}, ALPHA, 60)
    assert stream.kinds()[-1] == "final"
    assert stream.events[-1][1]["stages"]["cache"]["status"] == "hit_l2"
    assert len(stream.data("token")) >= 3, "tokens are streamed from the cached answer"


def test_cache_entries_expire(service: dict[str, Any]) -> None:
    import time

    question = "Which formats can the ingestion job read?"
    ask(service, {"query": question})
    assert cache_status(ask(service, {"query": question})) == "hit_l2"
    time.sleep(CACHE_TTL_S + 1)
    assert cache_status(ask(service, {"query": question})) == "miss"


def test_changed_index_misses_the_cache(service: dict[str, Any], tmp_path: Path) -> None:
    import time

    question = "What is kept in the beta notes?"
    ask(service, {"query": question}, headers=BETA)
    assert cache_status(ask(service, {"query": question}, headers=BETA)) == "hit_l2"
    docs = tmp_path / "beta"
    docs.mkdir()
    (docs / "beta-secret.txt").write_text(BETA_SECRET)
    (docs / "beta-notes.md").write_text("# Notes\n\nThe beta team keeps its notes about caching and about rockets.\n")
    # the beta folder moved and was edited: naming its source keeps its documents (and edits them)
    assert run_sync(service["cfg"], docs, "beta", prune=True, source_name="beta").changed_anything
    time.sleep(service["cfg"].serve.retrieve.index_version_ttl_s + 0.5)
    assert cache_status(ask(service, {"query": question}, headers=BETA)) == "miss"


def test_hostile_bodies_are_4xx(service: dict[str, Any]) -> None:
    url = f"{service['base']}/v1/query"
    json_headers = {**ALPHA, "content-type": "application/json"}
    huge = httpx.post(url, content=b'{"query": "' + b"a" * 3_000_000 + b'"}', headers=json_headers, timeout=60)
    deep = httpx.post(
        url,
        content=b'{"query": "q", "filters": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        headers=json_headers,
        timeout=60,
    )
    form = httpx.post(url, files={"query": ("q.txt", b"tenants")}, headers=ALPHA, timeout=60)
    nul = httpx.post(url, json={"query": "tenants\u0000"}, headers=ALPHA, timeout=60)
    bad_history = httpx.post(url, json={"query": "q", "history": [{"role": "root", "content": "x"}]}, headers=ALPHA)
    for response, status in [(huge, 413), (deep, 400), (form, 415), (nul, 400), (bad_history, 400)]:
        assert response.status_code == status, (status, response.status_code, response.text[:300])
        assert response.json()["error"]


def test_fuzzed_requests_never_get_a_5xx(service: dict[str, Any]) -> None:
    """schemathesis cases for every operation of the service's own OpenAPI schema (bounded, derandomized)."""
    schema = schemathesis.openapi.from_url(f"{service['base']}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/query", "/v1/chat/completions", "/v1/models", "/healthz", "/readyz"}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
        )
        def call(case: Any) -> None:
            response = case.call(base_url=service["base"], headers=ALPHA, timeout=60)
            assert response.status_code < 500, (case.method, case.path, case.body, response.text[:300])

        call()


def test_load_smoke_meets_its_slos(service: dict[str, Any], tmp_path: Path) -> None:
    """A short bounded Locust run (loadtests/profiles/smoke.yaml: 4 users, 35 s) with two tenants' keys."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "RAGC_LOADTEST_PROFILE": "smoke", "RAGC_LOADTEST_KEYS": json.dumps(KEYS)}
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        "loadtests/locustfile.py",
        "--headless",
        "--host",
        service["base"],
        "--csv",
        str(tmp_path / "run"),
        "--html",
        str(tmp_path / "report.html"),
        "--only-summary",
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, check=False)
    summary_line = next((line for line in done.stdout.splitlines() if line.startswith('{"loadtest": "summary"')), None)
    assert summary_line, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(summary_line)
    total = summary["stats"]["Aggregated"]
    assert done.returncode == 0 and summary["slo_ok"], summary["violations"]
    assert total["requests"] >= 20 and total["failures"] == 0, total
    assert {"query:fresh", "query:cached", "query:stream"} <= set(summary["stats"])
    assert (tmp_path / "report.html").stat().st_size > 10_000 and (tmp_path / "run_stats.csv").exists()


def test_queries_keep_answering_while_a_reindex_swaps_the_generation(service: dict[str, Any]) -> None:
    """Zero downtime: a closed loop of queries (each one past every cache: a unique history turn) runs while
    `ragc reindex` builds the next generation and swaps the alias. Every answer is a 200 whose retrieval ran
    in full on one generation, and the index version moves once, from the old value to the reindex's."""
    import threading
    import time

    from ingest_jobs.reindex import run_reindex

    cfg: RagcConfig = service["cfg"]
    questions = ["How are tenants kept apart?", "What happens when a document is edited?", "How are filters validated?"]
    outcomes: list[tuple[float, int, dict[str, Any]]] = []
    stop = threading.Event()

    def loop(worker: int) -> None:
        n = 0
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                turn = {"role": "user", "content": f"reindex probe {worker}-{n}"}
                body = {"query": questions[n % len(questions)], "history": [turn]}
                started = time.monotonic()
                response = client.post(f"{service['base']}/v1/query", json=body, headers=ALPHA)
                outcomes.append((started, response.status_code, response.json()))
                n += 1

    threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(2)
    reindex_started = time.monotonic()
    rebuilt = run_reindex(cfg)
    time.sleep(cfg.serve.retrieve.index_version_ttl_s + 2)
    stop.set()
    for thread in threads:
        thread.join(timeout=90)
    assert rebuilt.previous and rebuilt.collection != rebuilt.previous
    failed = [(code, body) for _, code, body in outcomes if code != 200 or body["stages"]["retrieve"]["status"] != "ok"]
    # when each failure was sent, against the reindex's start and length: a stall of milvus-lite shows as a run
    when = [round(t - reindex_started, 1) for t, code, body in outcomes if (code, body) in failed]
    assert not failed and len(outcomes) >= 10, (len(outcomes), rebuilt.seconds, when, failed[:3])
    assert all(body["citations"] for _, _, body in outcomes), "every answer cites its passages"
    in_order = sorted(outcomes, key=lambda o: o[0])
    versions = [body["index_version"] for _, _, body in in_order]
    assert versions[-1] == rebuilt.index_version and versions[0] < rebuilt.index_version, (versions[0], versions[-1])
    switch = versions.index(rebuilt.index_version)
    assert set(versions[:switch]) == {versions[0]} and set(versions) == {versions[0], rebuilt.index_version}, versions
    # each retrieve replica caches the version for index_version_ttl_s: after the first answer that reports the
    # new one, another replica may still report the old one, but not past that TTL (its documented bound)
    first_new = in_order[switch][0]
    late = [started - first_new for started, _, body in in_order[switch:] if body["index_version"] != versions[-1]]
    assert all(lag < cfg.serve.retrieve.index_version_ttl_s for lag in late), late
    print(
        f"reindex under load: {len(outcomes)} queries, 0 failed, version {versions[0]} -> {rebuilt.index_version} "
        f"after {switch} queries; reindex took {rebuilt.seconds:.1f} s"
    )


def test_redis_outage_is_a_bypass_and_hits_resume(service: dict[str, Any], redis_server: dict[str, Any]) -> None:
    """Runs last in this module: it stops the shared Redis and starts it again on the same port."""
    import time

    from local.sidecars import start_redis, stop

    stop(redis_server)
    down = ask(service, {"query": "How are API keys mapped to tenants?"})
    assert cache_status(down) == "bypass" and down.json()["citations"]
    restarted = start_redis("127.0.0.1", redis_server["port"], Path(redis_server["log"]).parent, timeout_s=30)
    assert restarted is not None
    redis_server.update(restarted)
    question = "What does ragc up start on one machine?"
    statuses = []
    for _ in range(10):
        statuses.append(cache_status(ask(service, {"query": question})))
        if statuses[-1] == "hit_l2":
            break
        time.sleep(0.5)
    assert statuses[-1] == "hit_l2", statuses
