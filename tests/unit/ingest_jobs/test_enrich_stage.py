"""Chunk enrichment (doc2query): the prompt, parsing what a model writes, and writing each chunk's
questions once."""

import numpy as np
import pytest
from pydantic import ValidationError

from cluster.config import RagcConfig
from cluster.store.bm25_text import bm25_scheme, chunk_bm25_text
from cluster.store.schema import CollectionIdentity
from ingest_jobs.enrich_stage import ENRICHED, QUESTIONS_COLUMN, QuestionResolver, parse_questions, question_prompt
from tests.fakes import DictQuestionStore, EchoQuestionWriter


def batch(ids: list[str], texts: list[str]) -> dict[str, np.ndarray]:
    return {"id": np.array(ids), "text": np.array(texts), "tenant_id": np.array(["acme"] * len(ids))}


def test_parse_questions_drops_numbering_repeats_and_fragments() -> None:
    written = "1. What is BC1 RNA?\n2) what is bc1 rna?\n- How is it primed?\n\nQ4: Why?\n* Where does it act in cells?"
    assert parse_questions(written, 3) == ["What is BC1 RNA?", "How is it primed?", "Where does it act in cells?"]
    assert parse_questions(written, 1) == ["What is BC1 RNA?"]
    assert parse_questions("", 3) == []


def test_the_prompt_cuts_a_long_chunk_and_asks_for_the_configured_count() -> None:
    messages = question_prompt("x" * 5000, 3, 100)
    assert messages[0]["role"] == "system" and "x" * 100 + "\n" in messages[1]["content"]
    assert "x" * 101 not in messages[1]["content"] and "Write 3 different questions" in messages[1]["content"]


def test_a_chunk_is_enriched_once_and_an_all_stored_batch_starts_no_writer() -> None:
    writers: list[EchoQuestionWriter] = []

    def make_writer() -> EchoQuestionWriter:
        writers.append(EchoQuestionWriter())
        return writers[-1]

    store = DictQuestionStore()
    resolve = QuestionResolver(make_writer, store, questions=2)
    out = resolve(batch(["a", "", "b"], ["alpha text", "", "beta text"]))  # "": a document that failed to parse
    assert out[QUESTIONS_COLUMN].tolist() == [
        "What is alpha about?\nWhy does alpha matter?",
        "",
        "What is beta about?\nWhy does beta matter?",
    ]
    assert out[ENRICHED].tolist() == [True, False, True] and writers[0].calls == [["alpha text", "beta text"]]
    assert store.rows["a"] == ("acme", "What is alpha about?\nWhy does alpha matter?")

    again = resolve(batch(["b", "c"], ["beta text", "gamma text"]))  # an edit: only the new chunk is written
    assert again[ENRICHED].tolist() == [False, True] and writers[0].calls[1:] == [["gamma text"]]

    fresh = QuestionResolver(make_writer, store, questions=2)  # a reindex's actor: everything is stored
    assert fresh(batch(["a", "b", "c"], ["alpha text", "beta text", "gamma text"]))[ENRICHED].tolist() == [False] * 3
    assert len(writers) == 1, "an actor that found every question stored started an engine"


def test_the_bm25_document_gains_the_questions_and_the_scheme_names_what_wrote_them() -> None:
    enriched = chunk_bm25_text("T", "", "cells divide", None, "Why do cells divide?")
    assert enriched == "t cells divide why do cells divide"
    assert bm25_scheme("english") == "title+section+text:words+stem:english"  # unchanged when enrichment is off
    cfg = RagcConfig.model_validate({"ingest": {"enrichment": {"questions": 3}}})
    fingerprint = cfg.enrichment_fingerprint()
    assert fingerprint == "questions:3:packaged:smollm2-135m-instruct:q1"
    identity = CollectionIdentity.from_config(cfg.embedding, cfg.chunking, cfg.milvus, fingerprint)
    assert identity.bm25 == f"title+section+text+{fingerprint}:words+stem:english"
    assert RagcConfig().enrichment_fingerprint() == ""


def test_an_enrichment_engine_that_is_not_configured_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"ingest\.enrichment\.engine 'big' is not in serve\.llm\.engines"):
        RagcConfig.model_validate({"ingest": {"enrichment": {"questions": 2, "engine": "big"}}})
    RagcConfig.model_validate({"ingest": {"enrichment": {"questions": 0, "engine": "big"}}})  # off: not looked up
