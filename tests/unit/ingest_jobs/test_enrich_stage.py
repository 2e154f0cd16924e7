"""Enrichment at ingest: the prompts, parsing what a model writes, and writing each chunk's questions and
each document's summary once."""

import numpy as np
import pytest
from pydantic import ValidationError

from cluster.config import EnrichmentConfig, RagcConfig
from cluster.store.bm25_text import bm25_scheme, chunk_bm25_text
from cluster.store.schema import CollectionIdentity
from ingest_jobs.enrich_stage import (
    DOC_HEAD_COLUMN,
    ENRICHED,
    ENRICHMENT_COLUMN,
    EnrichmentResolver,
    parse_questions,
    parse_summary,
    question_key,
    question_prompt,
    summary_prompt,
)
from tests.fakes import DictWrittenStore, EchoGenerator


def batch(ids: list[str], texts: list[str], docs: list[str] | None = None) -> dict[str, np.ndarray]:
    docs = docs or ids
    return {
        "id": np.array(ids),
        "text": np.array(texts),
        "tenant_id": np.array(["acme"] * len(ids)),
        "doc_id": np.array(docs),
        "content_hash": np.array([f"h-{d}" for d in docs]),
        "title": np.array(["" for _ in ids]),
        DOC_HEAD_COLUMN: np.array([f"{d} starts here" for d in docs]),
    }


class Generators:
    def __init__(self) -> None:
        self.made: list[EchoGenerator] = []

    def __call__(self) -> EchoGenerator:
        self.made.append(EchoGenerator())
        return self.made[-1]


def test_parse_questions_drops_numbering_repeats_and_fragments() -> None:
    written = "1. What is BC1 RNA?\n2) what is bc1 rna?\n- How is it primed?\n\nQ4: Why?\n* Where does it act in cells?"
    assert parse_questions(written, 3) == ["What is BC1 RNA?", "How is it primed?", "Where does it act in cells?"]
    assert parse_questions(written, 1) == ["What is BC1 RNA?"]
    assert parse_questions("", 3) == []
    assert parse_summary("Summary: A20 drives\n glioma stem cells.") == "A20 drives glioma stem cells."


def test_the_prompts_cut_long_text_and_ask_for_what_is_configured() -> None:
    messages = question_prompt("x" * 5000, 3, 100)
    assert messages[0]["role"] == "system" and "x" * 100 + "\n" in messages[1]["content"]
    assert "x" * 101 not in messages[1]["content"] and "Write 3 different questions" in messages[1]["content"]
    summary = summary_prompt("Golli-MBP", "y" * 5000, 50)[1]["content"]
    assert summary.startswith("Document: Golli-MBP\n\n" + "y" * 50 + "\n") and "Summarize" in summary


def test_a_chunk_is_enriched_once_and_an_all_stored_batch_starts_no_engine() -> None:
    generators, store = Generators(), DictWrittenStore()
    resolve = EnrichmentResolver(generators, store, EnrichmentConfig(questions=2), "fp")
    out = resolve(batch(["a", "", "b"], ["alpha text", "", "beta text"]))  # "": a document that failed to parse
    assert out[ENRICHMENT_COLUMN].tolist() == [
        "What is alpha about?\nWhy does alpha matter?",
        "",
        "What is beta about?\nWhy does beta matter?",
    ]
    assert out[ENRICHED].tolist() == [True, False, True] and len(generators.made[0].calls) == 1
    assert store.rows[question_key("fp", "a")] == ("acme", "What is alpha about?\nWhy does alpha matter?")

    again = resolve(batch(["b", "c"], ["beta text", "gamma text"]))  # an edit: only the new chunk is written
    assert again[ENRICHED].tolist() == [False, True] and generators.made[0].calls[1] == [
        question_prompt("gamma text", 2, 1500)[1]["content"]
    ]

    fresh = EnrichmentResolver(generators, store, EnrichmentConfig(questions=2), "fp")  # a reindex's actor
    assert fresh(batch(["a", "b", "c"], ["alpha text", "beta text", "gamma text"]))[ENRICHED].tolist() == [False] * 3
    assert len(generators.made) == 1, "an actor that found everything stored started an engine"

    other = EnrichmentResolver(generators, store, EnrichmentConfig(questions=3), "fp3")  # another fingerprint
    assert other(batch(["a"], ["alpha text"]))[ENRICHED].tolist() == [True]


def test_a_document_is_summarized_once_for_all_its_chunks_and_again_when_it_changes() -> None:
    generators, store = Generators(), DictWrittenStore()
    resolve = EnrichmentResolver(generators, store, EnrichmentConfig(questions=1, summary=True), "fp")
    out = resolve(batch(["a1", "a2", "b1"], ["alpha one", "alpha two", "beta one"], docs=["A", "A", "B"]))
    prompts = generators.made[0].calls[0]
    assert sum(p.startswith("Document: ") for p in prompts) == 2 and len(prompts) == 5  # 2 summaries, 3 chunks
    assert out[ENRICHMENT_COLUMN].tolist()[:2] == ["about A\nWhat is alpha about?"] * 2
    edited = batch(["a3"], ["alpha three"], docs=["A"]) | {"content_hash": np.array(["h-A-edited"])}
    resolve(edited)
    assert sorted(p.split(":")[0] for p in generators.made[0].calls[1]) == ["Document", "Passage"]
    summaries_only = EnrichmentResolver(generators, store, EnrichmentConfig(summary=True), "fp-s")
    assert summaries_only(batch(["b1"], ["beta one"], docs=["B"]))[ENRICHMENT_COLUMN].tolist() == ["about B"]


def test_the_bm25_document_gains_what_was_written_and_the_scheme_names_what_wrote_it() -> None:
    enriched = chunk_bm25_text("T", "", "cells divide", None, "Why do cells divide?")
    assert enriched == "t cells divide why do cells divide"
    assert bm25_scheme("english") == "title+section+text:words+stem:english"  # unchanged when enrichment is off
    cfg = RagcConfig.model_validate({"ingest": {"enrichment": {"questions": 3}}})
    fingerprint = cfg.enrichment_fingerprint()
    assert fingerprint == "questions=3:packaged:smollm2-135m-instruct:q1"
    identity = CollectionIdentity.from_config(cfg.embedding, cfg.chunking, cfg.milvus, fingerprint)
    assert identity.bm25 == f"title+section+text+{fingerprint}:words+stem:english"
    assert identity.enrichment == fingerprint  # what a delete reads back to find what was written
    unstemmed = cfg.model_copy(deep=True)
    unstemmed.milvus.bm25_stemmer = None
    assert CollectionIdentity.from_config(cfg.embedding, cfg.chunking, unstemmed.milvus, fingerprint).enrichment == (
        fingerprint
    )
    plain = CollectionIdentity.from_config(cfg.embedding, cfg.chunking, cfg.milvus)
    assert plain.enrichment == "" and CollectionIdentity("m", 4, "c", "analyzer-only").enrichment == ""
    both = RagcConfig.model_validate({"ingest": {"enrichment": {"questions": 2, "summary": True}}})
    assert both.enrichment_fingerprint() == "questions=2+summary:packaged:smollm2-135m-instruct:q1"
    assert RagcConfig().enrichment_fingerprint() == ""


def test_an_enrichment_engine_that_is_not_configured_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"ingest\.enrichment\.engine 'big' is not in serve\.llm\.engines"):
        RagcConfig.model_validate({"ingest": {"enrichment": {"summary": True, "engine": "big"}}})
    RagcConfig.model_validate({"ingest": {"enrichment": {"questions": 0, "engine": "big"}}})  # off: not looked up
