"""Enrichment at ingest: an LLM writes the questions a chunk answers (doc2query) and/or a short summary of its
document, and the sink adds them to the chunk's BM25 document. A Ray Data stage on its own actor pool, one
engine per actor (a GPU in production); what was written is kept beside the collection, by chunk id (a
summary by document content), so an unchanged chunk is never enriched again, whichever generation it is
written to."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import numpy as np

from cluster.config import EnrichmentConfig, RagcConfig
from cluster.hashing import sha
from cluster.store.client import connect
from cluster.store.expr import is_in
from cluster.store.schema import ID_MAX, PLACEHOLDER_VECTOR, TENANT_MAX, ChunkFields, create_key_value_collection

Batch = dict[str, np.ndarray]
Messages = list[dict[str, str]]
ENRICHMENT_COLUMN = "enrichment"  # what the LLM wrote for the row (summary, then questions; lines), "" = none
ENRICHED = "enriched"  # some of the row's enrichment was written by this job (not found stored)
DOC_HEAD_COLUMN = "doc_head"  # the start of the chunk's document, what a summary reads ("" without summaries)
WRITTEN_MAX_CHARS = 4096
ENRICHMENT_SUFFIX = "_enrichment"
QUESTIONS_SYSTEM = "You write short search questions."
SUMMARY_SYSTEM = "You summarize documents in one or two plain sentences."
NUMBERING = re.compile(r"^\s*(?:\d+[.)]|[-*•]|Q\d*[:.])\s*")


def enrichment_collection(alias: str) -> str:
    """One per alias, not per generation: a reindex finds everything already written."""
    return alias + ENRICHMENT_SUFFIX


def question_key(fingerprint: str, chunk_id: str) -> str:
    """A chunk's questions: its id is content-derived (tenant, document, text)."""
    return sha(f"{fingerprint}\x00questions\x00{chunk_id}")[:ID_MAX]


def summary_key(fingerprint: str, tenant: str, doc_id: str, content_hash: str) -> str:
    """A document's summary, for this version of its content."""
    return sha(f"{fingerprint}\x00summary\x00{tenant}\x00{doc_id}\x00{content_hash}")[:ID_MAX]


def question_prompt(text: str, questions: int, max_chars: int) -> Messages:
    ask = f"Write {questions} different questions that this passage answers, one per line."
    return [
        {"role": "system", "content": QUESTIONS_SYSTEM},
        {"role": "user", "content": f"Passage: {text[:max_chars]}\n\n{ask}"},
    ]


def summary_prompt(title: str, head: str, max_chars: int) -> Messages:
    document = f"{title}\n\n{head[:max_chars]}" if title else head[:max_chars]
    ask = "Summarize this document in one or two sentences."
    return [
        {"role": "system", "content": SUMMARY_SYSTEM},
        {"role": "user", "content": f"Document: {document}\n\n{ask}"},
    ]


def parse_questions(generated: str, questions: int) -> list[str]:
    """At most `questions` distinct lines of three words or more, their numbering removed."""
    out: list[str] = []
    for line in generated.splitlines():
        question = NUMBERING.sub("", line).strip()
        if len(question.split()) >= 3 and question.lower() not in {q.lower() for q in out}:
            out.append(question)
    return out[:questions]


def parse_summary(generated: str) -> str:
    """One line: a model's line breaks and a leading "Summary:" removed."""
    text = " ".join(generated.split())
    return re.sub(r"^(?:summary|in summary)\s*[:,]\s*", "", text, flags=re.IGNORECASE)


class TextGenerator(Protocol):
    """Completes a list of chat prompts, one text each, in one engine batch."""

    def generate(self, prompts: list[Messages], max_tokens: list[int]) -> list[str]: ...


class VLLMGenerator:
    """vLLM's offline engine over the configured model: every prompt of a batch in one `chat` call."""

    def __init__(self, cfg: RagcConfig) -> None:
        from cluster.llm_models import prepare_cpu_environment, resolve_llm_path
        from cluster.models import pick_device, pick_llm_dtype

        enrichment = cfg.ingest.enrichment
        ecfg = cfg.serve.llm.engines[enrichment.engine]
        prepare_cpu_environment(ecfg)
        from vllm import LLM

        self._llm = LLM(
            model=resolve_llm_path(ecfg.model, cfg.state_dir),
            max_model_len=ecfg.max_model_len,
            dtype=pick_llm_dtype(ecfg.dtype, pick_device("auto")),
            enforce_eager=ecfg.enforce_eager,
            max_num_seqs=max(ecfg.max_num_seqs, enrichment.batch_rows),
            tensor_parallel_size=ecfg.tensor_parallel_size,
            gpu_memory_utilization=ecfg.gpu_memory_utilization,
        )

    def generate(self, prompts: list[Messages], max_tokens: list[int]) -> list[str]:
        from vllm import SamplingParams

        sampling = [SamplingParams(temperature=0.0, max_tokens=n) for n in max_tokens]
        outputs = self._llm.chat(prompts, sampling, use_tqdm=False)  # type: ignore[arg-type]
        return [o.outputs[0].text for o in outputs]


class WrittenStore(Protocol):
    """What enrichment wrote, by key (a chunk's questions, a document's summary)."""

    def lookup(self, keys: list[str]) -> dict[str, str]: ...

    def store(self, tenants: list[str], keys: list[str], texts: list[str]) -> None: ...


class StoredEnrichment:
    """`WrittenStore` in a Milvus key-value collection beside the chunk collection."""

    def __init__(self, client: Any, collection: str) -> None:
        self._client = client
        self._collection = collection
        if not client.has_collection(collection):
            create_key_value_collection(client, collection, {"tenant_id": TENANT_MAX, "text": WRITTEN_MAX_CHARS})
        client.load_collection(collection)

    def lookup(self, keys: list[str]) -> dict[str, str]:
        if not keys:
            return {}
        rows = self._client.query(self._collection, filter=is_in("key", keys), output_fields=["key", "text"])
        return {str(r["key"]): str(r["text"]) for r in rows}

    def store(self, tenants: list[str], keys: list[str], texts: list[str]) -> None:
        rows = [
            {"key": k, "tenant_id": t, "text": x[:WRITTEN_MAX_CHARS], "_v": PLACEHOLDER_VECTOR}
            for t, k, x in zip(tenants, keys, texts, strict=True)
        ]
        if rows:
            self._client.upsert(self._collection, rows)


class EnrichmentResolver:
    """Fills the enrichment column of a chunk batch: what is stored first, the generator only for the rest (made
    at its first use: a job that finds everything stored never starts an engine), and what it wrote stored at
    once (a killed job keeps what it paid for). A document's summary is written once for all its chunks."""

    def __init__(
        self, make_generator: Callable[[], TextGenerator], stored: WrittenStore, cfg: EnrichmentConfig, fingerprint: str
    ) -> None:
        self._make_generator = make_generator
        self._generator: TextGenerator | None = None
        self._stored = stored
        self._cfg = cfg
        self._fingerprint = fingerprint

    def __call__(self, batch: Batch) -> Batch:
        f = ChunkFields
        ids = [str(i) for i in batch[f.ID]]
        live = [n for n, i in enumerate(ids) if i]  # a document that failed to parse left an empty row
        tenants = [str(t) for t in batch[f.TENANT]]
        wanted: dict[str, tuple[str, Messages, int]] = {}  # key -> tenant, prompt, max tokens
        questions_of: dict[int, str] = {}
        summary_of: dict[int, str] = {}
        for n in live:
            if self._cfg.questions:
                key = questions_of[n] = question_key(self._fingerprint, ids[n])
                prompt = question_prompt(str(batch[f.TEXT][n]), self._cfg.questions, self._cfg.chunk_max_chars)
                wanted[key] = (tenants[n], prompt, self._cfg.max_tokens)
            if self._cfg.summary:
                doc, content = str(batch[f.DOC_ID][n]), str(batch[f.CONTENT_HASH][n])
                key = summary_of[n] = summary_key(self._fingerprint, tenants[n], doc, content)
                prompt = summary_prompt(
                    str(batch[f.TITLE][n]), str(batch[DOC_HEAD_COLUMN][n]), self._cfg.document_max_chars
                )
                wanted[key] = (tenants[n], prompt, self._cfg.summary_max_tokens)
        known = self._stored.lookup(list(wanted))
        missing = [k for k in wanted if k not in known]
        if missing:
            self._generator = self._generator or self._make_generator()
            generated = self._generator.generate([wanted[k][1] for k in missing], [wanted[k][2] for k in missing])
            summaries = set(summary_of.values())
            fresh = {
                k: parse_summary(g) if k in summaries else "\n".join(parse_questions(g, self._cfg.questions))
                for k, g in zip(missing, generated, strict=True)
            }
            self._stored.store([wanted[k][0] for k in missing], missing, [fresh[k] for k in missing])
            known |= fresh
        written = set(missing)
        texts, enriched = [""] * len(ids), np.zeros(len(ids), dtype=bool)
        for n in live:
            keys = [k for k in (summary_of.get(n), questions_of.get(n)) if k]
            texts[n] = "\n".join(known[k] for k in keys if known[k])
            enriched[n] = any(k in written for k in keys)
        batch[ENRICHMENT_COLUMN] = np.asarray(texts, dtype=object)
        batch[ENRICHED] = enriched
        return batch


class ChunkEnricher:
    """Ray Data callable class (`map_batches(ChunkEnricher, compute=ActorPoolStrategy(...))`)."""

    def __init__(self, config: dict[str, Any]) -> None:
        cfg = RagcConfig.model_validate(config)
        stored = StoredEnrichment(connect(cfg), enrichment_collection(cfg.milvus.collection))
        enrichment = cfg.ingest.enrichment
        self._resolve = EnrichmentResolver(
            partial(VLLMGenerator, cfg), stored, enrichment, cfg.enrichment_fingerprint()
        )

    def __call__(self, batch: Batch) -> Batch:
        return self._resolve(batch)
