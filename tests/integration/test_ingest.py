"""Incremental ingestion against a real milvus-lite server, Redis, Ray Data and the packaged model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pymilvus import MilvusClient

from cluster.config import RagcConfig
from cluster.store.client import connect
from cluster.store.collections import CollectionMismatchError, Collections, ledger_name
from cluster.store.expr import all_of, eq
from ingest_jobs.ledger import Ledger
from ingest_jobs.reindex import TenantSource, rollback, run_reindex
from ingest_jobs.sink import InjectedFaultError
from ingest_jobs.sync import run_sync
from tests.integration.conftest import another_models_label

pytestmark = pytest.mark.integration

DOCS = {
    "tenancy.md": "# Tenancy\n\nEvery chunk carries a tenant id used as the Milvus partition key.\n\n"
    "## Filters\n\nThe server adds the tenant filter to every search; a request cannot widen it.\n",
    "edits.txt": "When a document is edited its content hash changes. The old chunks are deleted and only "
    "the new text is embedded again. Unchanged documents cost nothing on a re-run.",
    "cache.md": "# Caching\n\nResponses are cached per replica, in Redis, and semantically by embedding.\n",
    "long.txt": "\n\n".join(
        f"Section {n} talks about topic number {n} in detail: " + " ".join(f"word{n}x{i}" for i in range(60)) + "."
        for n in range(6)
    ),
}


def make_corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def rows_of(cfg: RagcConfig, tenant: str, doc_id: str | None = None) -> list[dict]:
    client = connect(cfg)
    clauses = [eq("tenant_id", tenant)] + ([eq("doc_id", doc_id)] if doc_id else [])
    return client.query(
        cfg.milvus.collection, filter=all_of(*clauses), output_fields=["id", "doc_id", "text"], limit=10000
    )


def doc_rows(cfg: RagcConfig, doc_id: str, *fields: str) -> list[dict]:
    """Tenant acme's rows of one document, in chunk order."""
    rows = connect(cfg).query(
        cfg.milvus.collection,
        filter=all_of(eq("tenant_id", "acme"), eq("doc_id", doc_id)),
        output_fields=["chunk_index", *fields],
    )
    return sorted(rows, key=lambda r: r["chunk_index"])


def stored_cosine(row: dict, embedder: Any, text: str) -> float:
    """The stored vector of a row against the embedder's vector of `text` (both unit length)."""
    import numpy as np

    stored = np.asarray(row["embedding"], dtype=np.float32)
    return float(stored @ np.asarray(embedder.embed([text])[0], dtype=np.float32))


def test_first_run_then_rerun_embeds_nothing(cfg: RagcConfig, tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "docs")
    first = run_sync(cfg, corpus, "acme")
    assert (first.added, first.changed, first.failed) == (4, 0, 0)
    assert first.chunks_total == first.chunks_upserted == len(rows_of(cfg, "acme")) > 4
    assert first.chunks_embedded == first.chunks_upserted
    assert first.index_version == 1

    again = run_sync(cfg, corpus, "acme")
    assert (again.added, again.changed, again.unchanged, again.chunks_embedded) == (0, 0, 4, 0)
    assert again.chunks_total == first.chunks_total
    assert again.index_version == 1, "a run that changed nothing keeps the index version"


def test_edit_reembeds_only_that_document_and_drops_its_old_chunks(cfg: RagcConfig, tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "docs")
    first = run_sync(cfg, corpus, "acme")
    old = {r["id"]: r["text"] for r in rows_of(cfg, "acme", "long.txt")}
    text = (corpus / "long.txt").read_text()
    (corpus / "long.txt").write_text(text.replace("Section 5 talks", "Section five now says something else"))

    edited = run_sync(cfg, corpus, "acme")
    assert (edited.changed, edited.added, edited.unchanged) == (1, 0, 3)
    new = {r["id"]: r["text"] for r in rows_of(cfg, "acme", "long.txt")}
    assert 0 < edited.chunks_embedded < len(new), "unchanged chunks of the edited document reuse their vectors"
    assert not any("Section 5 talks" in t for t in new.values()), "old chunks are gone"
    assert set(old) - set(new), "the edited chunk got a new id"
    assert edited.chunks_total == len(rows_of(cfg, "acme")) == first.chunks_total - len(old) + len(new)
    assert edited.index_version == first.index_version + 1
    ledger = Ledger(connect(cfg), ledger_name(Collections(connect(cfg), cfg).resolve() or ""))
    assert set(ledger.entries("acme")["long.txt"].chunk_ids) == set(new)


def test_prune_removes_deleted_documents(cfg: RagcConfig, tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "docs")
    run_sync(cfg, corpus, "acme")
    (corpus / "cache.md").unlink()
    kept = run_sync(cfg, corpus, "acme")
    assert kept.missing == 1 and kept.deleted == 0
    assert rows_of(cfg, "acme", "cache.md"), "without --prune nothing is deleted"
    pruned = run_sync(cfg, corpus, "acme", prune=True)
    assert pruned.deleted == 1
    assert rows_of(cfg, "acme", "cache.md") == []
    assert pruned.chunks_total == len(rows_of(cfg, "acme"))


def test_crash_mid_run_then_rerun_gives_the_exact_chunks(cfg: RagcConfig, tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "docs")
    faulty = cfg.model_copy(deep=True)
    faulty.ingest.faults.fail_after_batches = 1
    with pytest.raises(InjectedFaultError, match="fault hook") as excinfo:  # Ray re-raises the sink's own type
        run_sync(faulty, corpus, "acme")
    del excinfo  # the traceback pins the failed dataset (and its actor) in this process
    partial = rows_of(cfg, "acme")
    assert len(partial) > 0, "some batches landed before the crash"

    # edit a document between the crash and the re-run: leftovers of the crashed version must not survive
    (corpus / "edits.txt").write_text("Rewritten after the crash: entirely new wording about edits.")
    recovered = run_sync(cfg, corpus, "acme")
    assert recovered.added == 4
    ids = [r["id"] for r in rows_of(cfg, "acme")]
    assert len(ids) == len(set(ids)) == recovered.chunks_total

    reference = cfg.model_copy(deep=True)
    reference.milvus.collection = cfg.milvus.collection + "_ref"
    clean = run_sync(reference, corpus, "acme")
    assert clean.chunks_total == recovered.chunks_total
    assert sorted(r["text"] for r in rows_of(reference, "acme")) == sorted(r["text"] for r in rows_of(cfg, "acme"))


def cli_env(cfg: RagcConfig, state: Path, **extra: str) -> dict[str, str]:
    """The `ragc` CLI with this test's config (its servers, collection, chunker) on this session's Ray (joining
    it: a second Ray costs ~40 s)."""
    import os

    import ray
    import yaml

    state.mkdir(parents=True, exist_ok=True)
    config = state / "config.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    return {
        **os.environ,
        "RAGC_CONFIG": str(config),
        "RAGC_RAY__ADDRESS": ray.get_runtime_context().gcs_address,
        "RAGC_STATE_DIR": str(state),
        **extra,
    }


def ragc_ingest(env: dict[str, str], corpus: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cli.main", "ingest", str(corpus), "--tenant", "acme", "--json", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)


def test_a_killed_ingest_then_a_rerun_gives_the_exact_chunks(cfg: RagcConfig, tmp_path: Path) -> None:
    """SIGKILL, as a killed pod: after the chunks were upserted but before the ledger recorded them, then (in a
    second round) after the ledger but before pruning. Each re-run, once the dead run's lease lapsed, leaves
    exactly what an uninterrupted sync of the same folder leaves."""
    corpus = make_corpus(tmp_path / "docs")
    points = ("after_write", "before_prune")
    for n in range(len(points)):
        (corpus / f"old{n}.md").write_text(f"# Old {n}\n\nThis page goes away in round {n}.\n")
    lease = {"RAGC_INGEST__LEASE_TTL_S": "3", "RAGC_INGEST__LEASE_WAIT_S": "30"}
    env = cli_env(cfg, tmp_path / "s", **lease)
    assert ragc_ingest(env, corpus).returncode == 0
    reference = cfg.model_copy(deep=True)
    reference.milvus.collection = cfg.milvus.collection + "_ref"
    for n, point in enumerate(points):
        (corpus / f"old{n}.md").unlink()
        (corpus / "edits.txt").write_text(f"Rewritten before kill {n}: entirely new wording about edits.")
        (corpus / f"new{n}.md").write_text(f"# New {n}\n\nA page added in the run killed {point}.\n")

        killed = ragc_ingest({**env, "RAGC_INGEST__FAULTS__KILL_AT": point}, corpus, "--prune")
        assert killed.returncode == -9, killed.stderr[-2000:]
        leftovers = {r["doc_id"] for r in rows_of(cfg, "acme")}
        assert {f"new{n}.md", f"old{n}.md"} <= leftovers, f"{point}: killed between the writes and the prune"

        rerun = ragc_ingest(env, corpus, "--prune")
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        summary = json.loads(rerun.stdout.strip().splitlines()[-1])
        assert summary["deleted"] == 1 and summary["failed"] == 0, (point, summary)

        run_sync(reference, corpus, "acme", prune=True)
        ours = sorted((r["doc_id"], r["text"]) for r in rows_of(cfg, "acme"))
        assert ours == sorted((r["doc_id"], r["text"]) for r in rows_of(reference, "acme")), point
        assert len({r["id"] for r in rows_of(cfg, "acme")}) == len(ours) == summary["chunks_total"]
        ledger = Ledger(connect(cfg), ledger_name(Collections(connect(cfg), cfg).resolve() or ""))
        assert set(ledger.entries("acme")) == {d for d, _ in ours}, point


def test_tenants_stay_in_their_partitions(cfg: RagcConfig, tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "docs")
    a = run_sync(cfg, corpus, "tenant-a")
    b = run_sync(cfg, corpus, "tenant-b")
    assert a.chunks_total == b.chunks_total > 0
    ids_a = {r["id"] for r in rows_of(cfg, "tenant-a")}
    ids_b = {r["id"] for r in rows_of(cfg, "tenant-b")}
    assert not ids_a & ids_b
    client = connect(cfg)
    hits = client.search(
        cfg.milvus.collection,
        data=["partition key tenant"],
        anns_field="sparse_embedding",
        limit=50,
        filter=eq("tenant_id", "tenant-b"),
        output_fields=["tenant_id"],
    )[0]
    assert hits and {h["entity"]["tenant_id"] for h in hits} == {"tenant-b"}
    (corpus / "edits.txt").unlink()
    run_sync(cfg, corpus, "tenant-a", prune=True)
    assert rows_of(cfg, "tenant-b", "edits.txt"), "pruning tenant A leaves tenant B alone"


def test_another_embedding_model_is_refused(cfg: RagcConfig, tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "docs")
    run_sync(cfg, corpus, "acme")
    other = cfg.model_copy(deep=True)
    other.embedding = another_models_label(cfg)
    with pytest.raises(CollectionMismatchError, match="reindex"):
        run_sync(other, corpus, "acme")
    # other weights under the same id and width (a fine-tuned copy): the label alone would let them mix
    retrained = cfg.model_copy(deep=True)
    retrained.embedding.model = str(perturbed_copy(cfg.embedding.model, tmp_path / "retrained"))
    with pytest.raises(CollectionMismatchError, match="weights"):
        run_sync(retrained, corpus, "acme")
    assert run_sync(cfg, corpus, "acme").unchanged == len(DOCS)  # the same weights still pass


def test_the_packaged_mpnet_model_ingests_and_searches_at_its_own_width(cfg: RagcConfig, tmp_path: Path) -> None:
    """The second packaged dense model, named alone: its id and its 768-d vectors come with it, assembled from
    its split packages, and a collection it built refuses the default model."""
    from cluster.config import EmbeddingConfig
    from serve.stages.retrieve import HybridRetriever

    corpus = make_corpus(tmp_path / "docs")
    mpnet = cfg.model_copy(deep=True)
    mpnet.embedding = EmbeddingConfig(model="packaged:all-mpnet-base-v2")
    report = run_sync(mpnet, corpus, "acme")
    assert report.chunks_embedded == report.chunks_total == len(rows_of(cfg, "acme")) > 0
    active = Collections(connect(cfg), mpnet).active()
    assert active is not None
    assert (active.identity.model_id, active.identity.dim) == ("sentence-transformers/all-mpnet-base-v2", 768)
    assert {len(row["embedding"]) for row in doc_rows(cfg, "edits.txt", "embedding")} == {768}
    dense = HybridRetriever(mpnet).search_arms("acme", "What is embedded again after an edit?").results["dense"]
    assert dense and dense[0].doc_id == "edits.txt", [h.doc_id for h in dense]
    with pytest.raises(CollectionMismatchError, match="reindex"):
        run_sync(cfg, corpus, "acme")


def test_sentence_windows_store_the_window_search_by_the_sentence_and_need_a_reindex(
    cfg: RagcConfig, tmp_path: Path
) -> None:
    from cluster.models import SentenceTransformerEmbedder
    from serve.stages.retrieve import HybridRetriever

    corpus = make_corpus(tmp_path / "docs")
    windows = cfg.model_copy(deep=True)
    windows.chunking.sentence_window = 1
    report = run_sync(windows, corpus, "acme")
    rows = doc_rows(cfg, "edits.txt", "text", "embedding")
    sentences = [s.strip() + "." for s in DOCS["edits.txt"].rstrip(".").split(". ")]
    assert len(rows) == len(sentences) == 3, [r["text"] for r in rows]
    assert rows[0]["text"] == " ".join(sentences[:2]) and rows[1]["text"] == DOCS["edits.txt"]
    embedder = SentenceTransformerEmbedder(cfg.embedding)
    for row, sentence in zip(rows, sentences, strict=True):  # the vector is the sentence's, not the window's
        assert stored_cosine(row, embedder, sentence) > 0.999
    assert report.chunks_total == len(rows_of(cfg, "acme")) > len(DOCS)
    dense = HybridRetriever(windows).search_arms("acme", sentences[2]).results["dense"]
    assert dense[0].doc_id == "edits.txt" and dense[0].text == " ".join(sentences[1:]), dense[0].text
    with pytest.raises(CollectionMismatchError, match="window:1"):
        run_sync(cfg, corpus, "acme")


def test_the_dense_arm_embeds_the_passage_template_and_a_new_template_needs_a_reindex(
    cfg: RagcConfig, tmp_path: Path
) -> None:
    from cluster.models import SentenceTransformerEmbedder

    corpus = make_corpus(tmp_path / "docs")
    contextual = cfg.model_copy(deep=True)
    contextual.embedding.passage_template = "{context}: {text}"
    run_sync(contextual, corpus, "acme")
    rows = doc_rows(cfg, "tenancy.md", "text", "title", "section", "embedding")
    embedder = SentenceTransformerEmbedder(cfg.embedding)
    row = next(r for r in rows if r["section"])
    meant = contextual.embedding.passage_text(row["title"], row["section"], row["text"])
    assert meant.startswith(f"{row['title']} > {row['section']}: ")
    assert stored_cosine(row, embedder, meant) > 0.999
    assert stored_cosine(row, embedder, row["text"]) < 0.99
    with pytest.raises(CollectionMismatchError, match="passage_template"):
        run_sync(cfg, corpus, "acme")
    rebuilt = run_reindex(cfg)  # back to the bare text: nothing of the contextual vectors is reused
    assert sum(t.chunks_embedded for t in rebuilt.tenants) == sum(t.chunks_total for t in rebuilt.tenants) > 0
    assert run_sync(cfg, corpus, "acme").unchanged == len(DOCS)


def test_enrichment_puts_written_questions_and_summaries_in_the_bm25_document_once(
    cfg: RagcConfig, tmp_path: Path
) -> None:
    """Enrichment with the packaged LLM on vLLM, as a Ray Data stage: every chunk's BM25 document gains its
    document's summary and the questions written for it (its text does not), a word only they hold finds the
    chunk through the BM25 arm, and a reindex writes nothing again and starts no engine (an edit, the unit
    tests). What was written leaves with what it was written for: an edit's old version, a pruned document,
    a deleted source (in the generation kept for rollback too) and the tenant."""
    from cluster.store.bm25_text import chunk_bm25_text
    from ingest_jobs.delete import run_delete
    from ingest_jobs.enrich_stage import StoredEnrichment, enrichment_collection, question_key, summary_key
    from ingest_jobs.loaders import file_hash
    from serve.stages.retrieve import HybridRetriever

    corpus = make_corpus(tmp_path / "docs")
    enriched = cfg.model_copy(deep=True)
    enriched.ingest.enrichment.questions, enriched.ingest.enrichment.summary = 2, True
    first = run_sync(enriched, corpus, "acme")
    assert first.chunks_enriched == first.chunks_upserted == first.chunks_total > 0
    fields = ["id", "doc_id", "text", "title", "section", "content_hash", "bm25_text"]
    rows = connect(cfg).query(cfg.milvus.collection, filter=eq("tenant_id", "acme"), output_fields=fields)
    fingerprint = enriched.enrichment_fingerprint()
    summaries = {r["doc_id"]: summary_key(fingerprint, "acme", r["doc_id"], r["content_hash"]) for r in rows}
    questions = {r["id"]: question_key(fingerprint, r["id"]) for r in rows}
    store = StoredEnrichment(connect(cfg), enrichment_collection(cfg.milvus.collection))
    written = store.lookup([*summaries.values(), *questions.values()])
    assert set(written) == {*summaries.values(), *questions.values()}, "a chunk or a document was not enriched"
    assert sum(bool(written[k]) for k in questions.values()) > len(rows) // 2, written
    assert all(written[k] for k in summaries.values()), written
    stemmer = cfg.milvus.bm25_stemmer
    for row in rows:
        added = "\n".join(x for x in (written[summaries[row["doc_id"]]], written[questions[row["id"]]]) if x)
        assert row["bm25_text"] == chunk_bm25_text(row["title"], row["section"], row["text"], stemmer, added)
        assert not any(q in row["text"] for q in added.splitlines())  # the text stays as written
    base = [chunk_bm25_text(r["title"], r["section"], r["text"], stemmer) for r in rows]
    corpus_words = {w for doc in base for w in doc.split()}
    only_asked = sorted((w, row["id"]) for row in rows for w in row["bm25_text"].split() if w not in corpus_words)
    assert only_asked, "enrichment added no word of its own"
    word, chunk = only_asked[0]
    hits = {hit.chunk_id for hit in HybridRetriever(enriched).search_arms("acme", word).results["bm25"]}
    assert chunk in hits and all(word in r["bm25_text"].split() for r in rows if r["id"] in hits), (word, hits)

    rebuilt = run_reindex(enriched)
    assert sum(t.chunks_enriched for t in rebuilt.tenants) == 0 and sum(t.chunks_total for t in rebuilt.tenants) > 0
    with pytest.raises(CollectionMismatchError, match=r"questions=2\+summary"):
        run_sync(cfg, corpus, "acme")

    # what was written goes with what it was written for: an edited document's old summary and dropped chunk,
    # a pruned document's, a deleted source's, and (deleting the tenant) whatever a crashed run left
    before_edit = {r["id"] for r in rows if r["doc_id"] == "tenancy.md"}
    shorter = DOCS["tenancy.md"].split("## Filters")[0]
    (corpus / "tenancy.md").write_text(shorter, encoding="utf-8")
    new_summary = summary_key(fingerprint, "acme", "tenancy.md", file_hash(shorter.encode(), {}))
    store.store(["acme"], [new_summary], ["Tenancy, as written for an earlier version."])  # no engine needed
    edit = run_sync(enriched, corpus, "acme")
    kept = {r["id"] for r in rows_of(cfg, "acme", "tenancy.md")}
    dropped = before_edit - kept
    assert edit.changed == 1 and edit.chunks_enriched == 0 and kept and dropped and kept < before_edit, edit
    assert edit.enrichment_forgotten == len(dropped) + 1, edit.summary()
    assert store.lookup([summaries["tenancy.md"], *(questions[i] for i in dropped)]) == {}
    current = [new_summary, *(questions[i] for i in kept)]
    assert set(store.lookup(current)) == set(current)

    (corpus / "cache.md").unlink()
    pruned = run_sync(enriched, corpus, "acme", prune=True)
    cache_keys = [summaries["cache.md"], *(questions[r["id"]] for r in rows if r["doc_id"] == "cache.md")]
    assert pruned.deleted == 1 and pruned.enrichment_forgotten == len(cache_keys), pruned.summary()
    assert store.lookup(cache_keys) == {}

    left = list(store.lookup([new_summary, *summaries.values(), *questions.values()]))
    assert left and not set(left) & set(cache_keys)
    source = run_delete(enriched, "acme", source="docs")  # both generations: the one kept for rollback too
    assert source.sources == ["docs"] and source.enrichment_rows == len(left), source.summary()
    assert store.lookup(left) == {}
    store.store(["acme", "other"], ["stray-acme", "stray-other"], ["a crashed run's", "another tenant's"])
    gone = run_delete(enriched, "acme")
    assert gone.enrichment_rows == 1 and set(store.lookup(["stray-acme", "stray-other"])) == {"stray-other"}


def test_per_arm_weights_decide_the_fused_order_over_real_searches(cfg: RagcConfig, tmp_path: Path) -> None:
    """`serve.retrieve.dense_weight` / `bm25_weight` on the real arms' hits: an arm weighted 0 adds nothing, so the
    fused list opens with the other arm's order, and with both at 1 the first hit is one arm's first."""
    from serve.stages.retrieve import HybridRetriever

    run_sync(cfg, make_corpus(tmp_path / "docs"), "acme")
    hits = HybridRetriever(cfg).search_arms("acme", "How does the server keep tenants apart in search?")
    assert all(hits.results[arm] for arm in ("dense", "bm25")) and hits.results["dense"] != hits.results["bm25"]
    for arm, other in (("dense", "bm25"), ("bm25", "dense")):
        weighted = cfg.model_copy(deep=True)
        weighted.serve.retrieve.similarity_floor = 0.0  # the weights alone decide what is kept and in what order
        setattr(weighted.serve.retrieve, f"{other}_weight", 0.0)
        fused = [p.chunk_id for p in HybridRetriever(weighted).fuse(hits).passages]
        leading = [p.chunk_id for p in hits.results[arm]]
        shown = min(len(fused), len(leading))
        assert shown > 0 and fused[:shown] == leading[:shown], (arm, fused, leading)
    even = cfg.model_copy(deep=True)
    even.serve.retrieve.similarity_floor = 0.0
    first = HybridRetriever(even).fuse(hits).passages[0].chunk_id
    assert first in {hits.results["dense"][0].chunk_id, hits.results["bm25"][0].chunk_id}


def perturbed_copy(reference: str, out: Path) -> Path:
    import shutil

    from cluster.models import resolve_model_path

    shutil.copytree(resolve_model_path(reference), out)
    weights = out / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # the last byte of the last tensor: still loads, different weights
    weights.write_bytes(bytes(data))
    return out


def test_reindex_swaps_alias_and_keeps_counts(cfg: RagcConfig, tmp_path: Path) -> None:
    corpus_a = make_corpus(tmp_path / "a")
    corpus_b = make_corpus(tmp_path / "b")
    (corpus_b / "long.txt").unlink()
    a = run_sync(cfg, corpus_a, "ta")
    b = run_sync(cfg, corpus_b, "tb")
    client: MilvusClient = connect(cfg)
    collections = Collections(client, cfg)
    before = collections.resolve()

    rebuilt = run_reindex(cfg)
    assert rebuilt.previous == before and rebuilt.collection != before
    assert collections.resolve() == rebuilt.collection
    assert rebuilt.dropped == [] and client.has_collection(before), "the previous generation is kept"
    assert len(rows_of(cfg, "ta")) == a.chunks_total and len(rows_of(cfg, "tb")) == b.chunks_total
    assert rebuilt.index_version > b.index_version
    assert run_sync(cfg, corpus_a, "ta").chunks_embedded == 0, "the new collection has a ledger of its own"

    with pytest.raises(FileNotFoundError):
        run_reindex(cfg, [TenantSource("ta", tmp_path / "nope")])
    assert collections.resolve() == rebuilt.collection

    back = rollback(cfg)
    assert (back.collection, back.previous) == (before, rebuilt.collection) and collections.resolve() == before
    assert len(rows_of(cfg, "ta")) == a.chunks_total and back.index_version > rebuilt.index_version
    with pytest.raises(ValueError, match="nothing to roll back to: no generation older than"):
        rollback(cfg)
    assert collections.resolve() == before

    keep_none = cfg.model_copy(deep=True)
    keep_none.milvus.keep_old_collections = 0
    latest = run_reindex(keep_none, [TenantSource("ta", corpus_a)])
    assert sorted(latest.dropped) == sorted([before, rebuilt.collection]) and collections.generations() == [
        latest.collection
    ]


def two_folders(root: Path) -> tuple[Path, Path]:
    """A handbook (the corpus plus a README) and a wiki with a README of its own: one name, two documents."""
    handbook = make_corpus(root / "handbook")
    (handbook / "README.md").write_text("# Handbook\n\nThe handbook explains how tenants are kept apart.\n")
    wiki = root / "wiki"
    wiki.mkdir()
    (wiki / "README.md").write_text("# Wiki\n\nThe wiki collects answers about the reindex job.\n")
    (wiki / "faq.md").write_text("# FAQ\n\nA reindex builds a new collection and swaps the alias.\n")
    return handbook, wiki


def test_a_tenant_fed_from_two_folders_keeps_both_and_reindex_rebuilds_both(cfg: RagcConfig, tmp_path: Path) -> None:
    handbook, wiki = two_folders(tmp_path)
    first = run_sync(cfg, handbook, "acme", prune=True)
    second = run_sync(cfg, wiki, "acme", prune=True)
    assert (first.source, first.added, second.source, second.added) == ("handbook", 5, "wiki", 2)
    assert second.deleted == 0, "pruning the wiki never touches the handbook"
    docs = {r["doc_id"] for r in rows_of(cfg, "acme")}
    assert docs == {*DOCS, "README.md", "wiki::README.md", "wiki::faq.md"}

    (wiki / "faq.md").unlink()
    pruned = run_sync(cfg, wiki, "acme", prune=True)
    assert (pruned.deleted, pruned.unchanged) == (1, 1)
    again = run_sync(cfg, handbook, "acme", prune=True)
    assert (again.unchanged, again.deleted, again.chunks_embedded) == (5, 0, 0)
    kept = sorted((r["doc_id"], r["text"]) for r in rows_of(cfg, "acme"))
    assert {d for d, _ in kept} == {*DOCS, "README.md", "wiki::README.md"}

    rebuilt = run_reindex(cfg)
    assert sorted((s["source"], s["added"]) for s in rebuilt.summary()["sources"]) == [("handbook", 5), ("wiki", 1)]
    assert sorted((r["doc_id"], r["text"]) for r in rows_of(cfg, "acme")) == kept, "both rebuilt, nothing else"


def test_the_inventory_lists_each_source_s_documents_as_the_index_holds_them(cfg: RagcConfig, tmp_path: Path) -> None:
    """`ragc docs`: every tenant counted, then one tenant's documents under the source that owns them, with
    their chunk counts and declared metadata, read from the ledger and the store (not from the folders)."""
    from ingest_jobs.inventory import index_inventory, tenant_inventory

    handbook, wiki = two_folders(tmp_path)
    (wiki / "pay.md").write_text("---\nauthor: HR team\ntags: [payroll]\naccess: [hr]\n---\n# Pay\n\nPay day.\n")
    run_sync(cfg, handbook, "acme")
    run_sync(cfg, wiki, "acme")
    run_sync(cfg, wiki, "beta")
    (handbook / "cache.md").unlink()  # gone from the folder, still in the index until a prune: listed

    acme = tenant_inventory(cfg, "acme")
    assert [(s.name, s.documents) for s in acme.sources] == [("handbook", 5), ("wiki", 3)]
    by_id = {d.doc_id: d for d in acme.documents}
    assert set(by_id) == {*DOCS, "README.md", "wiki::README.md", "wiki::faq.md", "wiki::pay.md"}
    assert {d.chunks for d in acme.documents} >= {1} and sum(d.chunks for d in acme.documents) == len(
        rows_of(cfg, "acme")
    )
    assert by_id["long.txt"].chunks == len(rows_of(cfg, "acme", "long.txt")) > 1
    pay = by_id["wiki::pay.md"]
    assert (pay.source, pay.title, pay.author, pay.tags, pay.access) == ("wiki", "Pay", "HR team", ["payroll"], ["hr"])
    assert by_id["cache.md"].access == ["*"] and acme.missing_fields == []

    wiki_only = tenant_inventory(cfg, "acme", "wiki")
    assert {d.doc_id for d in wiki_only.documents} == {"wiki::README.md", "wiki::faq.md", "wiki::pay.md"}
    counted = {t["tenant"]: (t["documents"], t["sources"]) for t in index_inventory(cfg).tenants}
    assert counted["acme"] == (8, ["handbook", "wiki"]) and counted["beta"] == (3, ["wiki"])

    shown = subprocess.run(
        [sys.executable, "-m", "cli.main", "docs", "--tenant", "beta", "--json"],
        capture_output=True,
        text=True,
        env=cli_env(cfg, tmp_path / "state"),
        timeout=120,
        check=True,
    )
    listed = json.loads(shown.stdout.strip().splitlines()[-1])
    assert [d["doc_id"] for d in listed["documents"]] == ["README.md", "faq.md", "pay.md"], listed
    assert "mvccTs" not in shown.stderr, shown.stderr

    status = subprocess.run(
        [sys.executable, "-m", "cli.main", "status", "--json"],
        capture_output=True,
        text=True,
        env=cli_env(cfg, tmp_path / "state"),
        timeout=120,
        check=False,  # exit 1: this test started no local app
    )
    index = json.loads(status.stdout.strip().splitlines()[-1])["index"]
    assert (index["collection"], index["alias"]) == (Collections(connect(cfg), cfg).resolve(), cfg.milvus.collection)
    assert (index["documents"], index["missing_fields"]) == (8 + 3, []), index
    assert index["chunks"] == len(rows_of(cfg, "acme")) + len(rows_of(cfg, "beta")), index


def test_deleting_a_source_then_the_tenant_leaves_nothing_of_theirs_in_any_generation(
    cfg: RagcConfig, tmp_path: Path
) -> None:
    """`ragc delete`: one source's documents, then the whole tenant (after a restart of the store released every
    generation), out of the active generation and the one kept for a rollback, their ledger entries and catalog
    record with them; another tenant keeps everything."""
    from ingest_jobs.delete import run_delete
    from ingest_jobs.sources import TenantSources, UnknownSourceError

    handbook, wiki = two_folders(tmp_path)
    run_sync(cfg, handbook, "acme")
    run_sync(cfg, wiki, "acme")
    run_sync(cfg, wiki, "beta")
    beta = sorted((r["doc_id"], r["text"]) for r in rows_of(cfg, "beta"))
    old = Collections(connect(cfg), cfg).resolve()
    rebuilt = run_reindex(cfg)
    assert rebuilt.dropped == [] and old != rebuilt.collection, "the previous generation is kept for a rollback"
    with pytest.raises(UnknownSourceError, match=r"no source 'manual' \(its sources: handbook, wiki\)"):
        run_delete(cfg, "acme", "manual")

    gone = run_delete(cfg, "acme", "wiki")
    assert (gone.sources, gone.documents, gone.generations) == (["wiki"], 2, 2), gone.summary()
    assert gone.chunks > 0 and gone.index_version > rebuilt.index_version
    kept = {*DOCS, "README.md"}
    assert {r["doc_id"] for r in rows_of(cfg, "acme")} == kept == set(ledger_docs(cfg, "acme"))
    assert gone.chunks_left == len(rows_of(cfg, "acme"))
    again = run_sync(cfg, handbook, "acme", prune=True)
    assert (again.unchanged, again.deleted) == (5, 0), "the handbook's own sync sees its documents as they were"
    rollback(cfg)  # the generation kept for a rollback lost the wiki too
    assert {r["doc_id"] for r in rows_of(cfg, "acme")} == kept

    collections = Collections(connect(cfg), cfg)
    for physical in collections.generations():
        collections.release(physical)  # what a restart of the store leaves (`ragc down`, `ragc up --no-app`)
    everything = run_delete(cfg, "acme")
    assert everything.sources == ["handbook"] and everything.documents == 5 and everything.chunks_left == 0
    for physical in collections.generations():
        collections.load(physical)
        assert not connect(cfg).query(physical, filter=eq("tenant_id", "acme"), output_fields=["id"], limit=5)
    assert rows_of(cfg, "acme") == [] and ledger_docs(cfg, "acme") == []
    assert TenantSources(collections.catalog, collections.alias, "acme").sources == []
    assert sorted((r["doc_id"], r["text"]) for r in rows_of(cfg, "beta")) == beta, "another tenant keeps its own"


def ledger_docs(cfg: RagcConfig, tenant: str) -> list[str]:
    collections = Collections(connect(cfg), cfg)
    return sorted(Ledger(connect(cfg), ledger_name(collections.resolve() or "")).entries(tenant))


def test_a_collection_with_the_old_single_source_record_keeps_its_documents(cfg: RagcConfig, tmp_path: Path) -> None:
    from ingest_jobs.sources import legacy_source_key, sources_key

    handbook, wiki = two_folders(tmp_path)
    run_sync(cfg, handbook, "acme")
    collections = Collections(connect(cfg), cfg)
    # what a version before named sources recorded: one path per tenant
    collections.catalog.delete([sources_key(collections.alias, "acme")])
    collections.catalog.put(legacy_source_key(collections.alias, "acme"), {"path": str(handbook), "prune": False})

    same = run_sync(cfg, handbook, "acme", prune=True)
    assert (same.source, same.unchanged, same.added, same.deleted) == ("default", 5, 0, 0)
    added = run_sync(cfg, wiki, "acme", prune=True)
    assert (added.source, added.added, added.deleted) == ("wiki", 2, 0)
    assert collections.catalog.get(legacy_source_key(collections.alias, "acme")) is None
    recorded = collections.catalog.get(sources_key(collections.alias, "acme"))["sources"]
    assert [(s["name"], s["prefix"]) for s in recorded] == [("default", ""), ("wiki", "wiki::")]


def test_cli_reports_bad_files_and_exits_nonzero(cfg: RagcConfig, tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "docs")
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.4 garbage")
    (corpus / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (corpus / "empty.md").write_text("")
    proc = ragc_ingest(cli_env(cfg, tmp_path / "s"), corpus)
    assert proc.returncode == 1, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {k: summary[k] for k in ("added", "changed", "unchanged", "deleted", "failed")} == {
        "added": 4,
        "changed": 0,
        "unchanged": 0,
        "deleted": 0,
        "failed": 3,
    }
    assert summary["chunks_total"] == summary["chunks_upserted"] == summary["chunks_embedded"] > 0
    reasons = {f["doc_id"]: f["reason"] for f in summary["failures"]}
    assert reasons["broken.pdf"].startswith("corrupt PDF") and "UTF-8" in reasons["latin1.txt"]


def test_llama_index_attaches_to_our_collection(cfg: RagcConfig, tmp_path: Path) -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.vector_stores import ExactMatchFilter, MetadataFilters

    from bench.llamaindex_compat import RagcEmbedding, attach_vector_store
    from cluster.models import SentenceTransformerEmbedder

    corpus = make_corpus(tmp_path / "docs")
    run_sync(cfg, corpus, "acme")
    run_sync(cfg, corpus, "other")
    index = VectorStoreIndex.from_vector_store(
        attach_vector_store(cfg), embed_model=RagcEmbedding(SentenceTransformerEmbedder(cfg.embedding))
    )
    retriever = index.as_retriever(
        similarity_top_k=3, filters=MetadataFilters(filters=[ExactMatchFilter(key="tenant_id", value="acme")])
    )
    nodes = retriever.retrieve("Which Milvus field is the partition key?")
    assert nodes and all(n.node.metadata["tenant_id"] == "acme" for n in nodes)
    ours = {r["text"] for r in rows_of(cfg, "acme")}
    assert all(n.node.get_content() in ours for n in nodes), "llama-index reads our chunk text as node text"
    assert nodes[0].node.metadata["doc_id"] == "tenancy.md"


def test_declared_metadata_reaches_the_year_filter_and_a_bad_declaration_loses_nothing_else(
    cfg: RagcConfig, tmp_path: Path
) -> None:
    from tests.unit.ingest_jobs.pdfs import text_pdf

    corpus = tmp_path / "meta"
    corpus.mkdir()
    (corpus / "front.md").write_text(
        "---\nyear: 2021\ntags: [ops, k8s]\nauthor: Ann Lee\n---\n# Front\n\nFront matter sets the year.\n"
    )
    (corpus / "page.html").write_text(
        '<html><head><meta name="dc.date" content="2019-02-03"></head><body><p>An older page.</p></body></html>'
    )
    (corpus / "plain.txt").write_text("A plain file whose sidecar sets the year.")
    (corpus / "plain.txt.meta.json").write_text(json.dumps({"year": 2023, "tags": "ops, billing"}))
    (corpus / "paper.pdf").write_bytes(text_pdf(["A paper from a PDF."], {"/CreationDate": "D:20220101000000Z"}))
    (corpus / "wrong.md").write_text("---\nyear: next spring\n---\nThis one declares a year of the wrong type.\n")
    report = run_sync(cfg, corpus, "meta")
    assert (report.added, report.failed) == (4, 1), report.summary()
    assert report.failures[0].doc_id == "wrong.md" and "year" in report.failures[0].reason
    from serve.edge.filters import compile_filters

    expr = compile_filters({"year": {"gte": 2020}}, cfg.serve.filters, cfg.serve.limits)
    rows = connect(cfg).query(
        cfg.milvus.collection, filter=all_of(eq("tenant_id", "meta"), expr), output_fields=["doc_id", "year"]
    )
    assert {r["doc_id"]: r["year"] for r in rows} == {"front.md": 2021, "plain.txt": 2023, "paper.pdf": 2022}

    def matching(filters: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
        expr = compile_filters(filters, cfg.serve.filters, cfg.serve.limits)
        found = connect(cfg).query(
            cfg.milvus.collection, filter=all_of(eq("tenant_id", "meta"), expr), output_fields=["doc_id", *declared]
        )
        return {r["doc_id"]: (r["author"], list(r["tags"])) for r in found}

    declared = ("author", "tags")
    assert matching({"tags": "ops"}) == {"front.md": ("Ann Lee", ["ops", "k8s"]), "plain.txt": ("", ["ops", "billing"])}
    assert set(matching({"tags": {"contains_all": ["ops", "k8s"]}})) == {"front.md"}
    assert set(matching({"tags": {"contains_any": ["billing", "none"]}, "year": {"gte": 2020}})) == {"plain.txt"}
    assert set(matching({"author": "Ann Lee"})) == {"front.md"}


def test_a_collection_from_before_the_declared_fields_keeps_working_and_a_reindex_adds_them(
    cfg: RagcConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Milvus cannot add a field to a collection: one created before the declared fields were stored is
    written without them, a filter on them is a 400 that says to reindex, a document restricted to access
    groups is refused there (every key of the tenant would read it), and the reindex brings them all."""
    from cluster.store.schema import ChunkFields, stored_fields
    from ingest_jobs.pipeline import RESTRICTED_IN_AN_OLD_INDEX
    from serve.edge.filters import compile_filters
    from serve.errors import BadRequestError
    from serve.stages.retrieve import HybridRetriever

    corpus = make_corpus(tmp_path / "docs")
    (corpus / "cache.md.meta.json").write_text(json.dumps({"tags": ["caching"]}))
    (corpus / "payroll.md").write_text("---\naccess: [hr]\n---\n# Payroll\n\nPayroll responses are cached too.\n")
    monkeypatch.setattr(ChunkFields, "DECLARED", ())  # the schema as it was: the driver creates the collection
    monkeypatch.setattr(ChunkFields, "FILTER_TERMS", ())
    first = run_sync(cfg, corpus, "acme")
    monkeypatch.undo()
    assert not set(ChunkFields.DOCUMENT_FIELDS) & stored_fields(connect(cfg), cfg.milvus.collection)
    from ingest_jobs.inventory import index_overview, tenant_inventory

    missing = ["author", "tags", "access", "tags_terms", "access_terms"]
    assert tenant_inventory(cfg, "acme").missing_fields == missing, "`ragc docs` says so"
    assert index_overview(cfg)["missing_fields"] == missing, "and `ragc status`"
    assert [(f.doc_id, f.reason) for f in first.failures] == [("payroll.md", RESTRICTED_IN_AN_OLD_INDEX)]
    tagged = compile_filters({"tags": "caching"}, cfg.serve.filters, cfg.serve.limits)
    question = "How are responses cached?"
    retriever = HybridRetriever(cfg)
    with pytest.raises(BadRequestError, match=r"filter on tags: this index was built before .* `ragc reindex`"):
        retriever.retrieve("acme", question, tagged)
    assert retriever.retrieve("acme", question).passages, "unfiltered questions are answered as before"

    run_reindex(cfg)
    assert tenant_inventory(cfg, "acme").missing_fields == []
    rebuilt = HybridRetriever(cfg)
    found = rebuilt.retrieve("acme", question, tagged).passages
    assert {p.doc_id for p in found} == {"cache.md"} and all(p.tags == ("caching",) for p in found)
    payroll = "Are payroll responses cached?"
    assert "payroll.md" not in {p.doc_id for p in rebuilt.retrieve("acme", payroll).passages}
    assert "payroll.md" not in {p.doc_id for p in rebuilt.retrieve("acme", payroll, groups=("ops",)).passages}
    readable = rebuilt.retrieve("acme", payroll, groups=("hr",)).passages
    assert "payroll.md" in {p.doc_id for p in readable} and {p.access for p in readable} >= {("hr",), ("*",)}


def test_odd_documents_are_stored_whole_or_fail_alone(cfg: RagcConfig, tmp_path: Path) -> None:
    """Each of these once failed the whole job (nothing ingested) against the real store: a base64 image longer
    than the text field (one WordPiece token, so one chunk), a title and a heading longer than their fields, a
    file name that is not UTF-8, a JSON record with a lone surrogate escape or a year past INT64, a PDF whose
    font maps to a lone surrogate."""
    import os

    from cluster.store.schema import SHORT_TEXT_MAX
    from tests.unit.ingest_jobs.pdfs import text_pdf

    corpus = tmp_path / "odd"
    corpus.mkdir()
    blob = "iVBORw0KGgo" * 5_000
    image = f"![shot](data:image/png;base64,{blob})"
    (corpus / "shot.md").write_text(f"# Screenshot\n\nThe dashboard:\n\n{image}\n\nAfter it.\n")
    heading = " ".join(["heading"] * 400)
    (corpus / "long.md").write_text(f"---\ntitle: {'Title ' * 500}\n---\n# {heading}\n\nUnder a long heading.\n")
    (corpus / os.fsdecode(b"caf\xe9.md")).write_text("# Latin-1 name\n\nFine text.\n")
    records = [
        '{"_id": "r1", "text": "A good record."}',
        '{"_id": "r2", "text": "bad \\ud800 record"}',
        '{"_id": "r3", "text": "From the far future.", "metadata": {"year": 1e30}}',
    ]
    (corpus / "corpus.jsonl").write_text("\n".join(records))
    (corpus / "odd.pdf").write_bytes(text_pdf(["Broken xAy font."], {}, to_unicode={"A": "D800"}))
    report = run_sync(cfg, corpus, "odd")
    assert (report.added, report.failed) == (4, 3), report.summary()
    assert {f.reason for f in report.failures} == {
        "file name is not valid UTF-8: rename it",
        "text holds an unpaired surrogate escape: not valid Unicode",
        "metadata year 1000000000000000019884624838656 is not between 0 and 9999",
    }
    fields = ["doc_id", "text", "title", "section"]
    rows = connect(cfg).query(cfg.milvus.collection, filter=eq("tenant_id", "odd"), output_fields=fields)
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    assert set(by_doc) == {"shot.md", "long.md", "r1", "odd.pdf"}
    assert all(len(r["text"].encode()) <= cfg.milvus.text_max_chars for r in rows)
    assert blob in "".join(r["text"] for r in by_doc["shot.md"]) and len(by_doc["shot.md"]) >= 4
    for row in by_doc["long.md"]:  # the 400-word heading line is text too: more than one chunk
        assert row["title"].startswith("Title Title") and len(row["title"].encode()) <= SHORT_TEXT_MAX
        assert row["section"].startswith("heading heading") and len(row["section"].encode()) <= SHORT_TEXT_MAX
    assert any("Under a long heading." in r["text"] for r in by_doc["long.md"])
    assert "Broken x\ufffdy font." in by_doc["odd.pdf"][0]["text"]


def test_a_second_ingest_of_a_busy_tenant_says_who_holds_it_and_writes_nothing(cfg: RagcConfig, tmp_path: Path) -> None:
    from cluster.store.client import Catalog
    from ingest_jobs.lease import TenantBusyError, TenantLease, lease_key

    corpus = make_corpus(tmp_path / "docs")
    catalog = Catalog(connect(cfg), cfg.milvus.meta_collection)
    other_run = TenantLease(catalog, lease_key(cfg.milvus.collection, "busy"), ttl_s=60)
    other_run.acquire()
    try:
        with pytest.raises(TenantBusyError, match=r"tenant busy is being synced by .+ since"):
            run_sync(cfg, corpus, "busy")
        assert Collections(connect(cfg), cfg).resolve() is None  # refused before anything was written
    finally:
        other_run.release()
    assert catalog.get(lease_key(cfg.milvus.collection, "busy")) is None
