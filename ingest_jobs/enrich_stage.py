"""Chunk enrichment at ingest (doc2query): an LLM writes the questions a chunk answers, and the sink adds
them to the chunk's BM25 document. A Ray Data stage on its own actor pool, one engine per actor (a GPU in
production); the questions are kept by chunk id beside the collection, so an unchanged chunk is never
enriched again, whichever generation it is written to."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import numpy as np

from cluster.config import RagcConfig
from cluster.hashing import sha
from cluster.store.client import connect
from cluster.store.expr import is_in
from cluster.store.schema import ID_MAX, PLACEHOLDER_VECTOR, TENANT_MAX, ChunkFields, create_key_value_collection

Batch = dict[str, np.ndarray]
QUESTIONS_COLUMN = "questions"  # newline-separated; "" for a chunk without any
ENRICHED = "enriched"  # the row's questions were written by this job (not found stored)
QUESTIONS_MAX_CHARS = 4096
ENRICHMENT_SUFFIX = "_enrichment"
SYSTEM_PROMPT = "You write short search questions."
NUMBERING = re.compile(r"^\s*(?:\d+[.)]|[-*•]|Q\d*[:.])\s*")


def enrichment_collection(alias: str) -> str:
    """One per alias, not per generation: a reindex finds every question already written."""
    return alias + ENRICHMENT_SUFFIX


def question_prompt(text: str, questions: int, max_chars: int) -> list[dict[str, str]]:
    passage = text[:max_chars]
    ask = f"Write {questions} different questions that this passage answers, one per line."
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"Passage: {passage}\n\n{ask}"}]


def parse_questions(generated: str, questions: int) -> list[str]:
    """At most `questions` distinct lines of three words or more, their numbering removed."""
    out: list[str] = []
    for line in generated.splitlines():
        question = NUMBERING.sub("", line).strip()
        if len(question.split()) >= 3 and question.lower() not in {q.lower() for q in out}:
            out.append(question)
    return out[:questions]


class QuestionWriter(Protocol):
    """Writes the questions for a list of chunk texts, one string (lines) per chunk, in one engine batch."""

    def write(self, texts: list[str]) -> list[str]: ...


class VLLMQuestionWriter:
    """vLLM's offline engine over the configured model: every prompt of a batch in one `chat` call."""

    def __init__(self, cfg: RagcConfig) -> None:
        from cluster.llm_models import prepare_cpu_environment, resolve_llm_path
        from cluster.models import pick_device, pick_llm_dtype

        self._cfg = cfg.ingest.enrichment
        ecfg = cfg.serve.llm.engines[self._cfg.engine]
        prepare_cpu_environment(ecfg)
        from vllm import LLM, SamplingParams

        self._llm = LLM(
            model=resolve_llm_path(ecfg.model, cfg.state_dir),
            max_model_len=ecfg.max_model_len,
            dtype=pick_llm_dtype(ecfg.dtype, pick_device("auto")),
            enforce_eager=ecfg.enforce_eager,
            max_num_seqs=max(ecfg.max_num_seqs, self._cfg.batch_rows),
            tensor_parallel_size=ecfg.tensor_parallel_size,
            gpu_memory_utilization=ecfg.gpu_memory_utilization,
        )
        self._sampling = SamplingParams(temperature=0.0, max_tokens=self._cfg.max_tokens)

    def write(self, texts: list[str]) -> list[str]:
        prompts = [question_prompt(t, self._cfg.questions, self._cfg.chunk_max_chars) for t in texts]
        outputs = self._llm.chat(prompts, self._sampling, use_tqdm=False)  # type: ignore[arg-type]
        return [o.outputs[0].text for o in outputs]


class QuestionStore(Protocol):
    def lookup(self, chunk_ids: list[str]) -> dict[str, str]: ...

    def store(self, tenants: list[str], chunk_ids: list[str], questions: list[str]) -> None: ...


class StoredQuestions:
    """Questions already written, by chunk id and what wrote them (the enrichment fingerprint)."""

    def __init__(self, client: Any, collection: str, fingerprint: str) -> None:
        self._client = client
        self._collection = collection
        self._fingerprint = fingerprint
        if not client.has_collection(collection):
            create_key_value_collection(client, collection, {"tenant_id": TENANT_MAX, "questions": QUESTIONS_MAX_CHARS})
        client.load_collection(collection)

    def key(self, chunk_id: str) -> str:
        return sha(f"{self._fingerprint}\x00{chunk_id}")[:ID_MAX]

    def lookup(self, chunk_ids: list[str]) -> dict[str, str]:
        keys = {self.key(i): i for i in chunk_ids}
        rows = self._client.query(self._collection, filter=is_in("key", list(keys)), output_fields=["key", "questions"])
        return {keys[r["key"]]: str(r["questions"]) for r in rows}

    def store(self, tenants: list[str], chunk_ids: list[str], questions: list[str]) -> None:
        rows = [
            {"key": self.key(i), "tenant_id": t, "questions": q[:QUESTIONS_MAX_CHARS], "_v": PLACEHOLDER_VECTOR}
            for t, i, q in zip(tenants, chunk_ids, questions, strict=True)
        ]
        if rows:
            self._client.upsert(self._collection, rows)


class QuestionResolver:
    """Fills the questions column of a chunk batch: stored questions first, the writer only for the rest
    (made at its first use: a job that finds every question stored never starts an engine), and what it
    wrote stored at once (a killed job keeps what it paid for)."""

    def __init__(self, make_writer: Callable[[], QuestionWriter], stored: QuestionStore, questions: int) -> None:
        self._make_writer = make_writer
        self._writer: QuestionWriter | None = None
        self._stored = stored
        self._questions = questions

    def __call__(self, batch: Batch) -> Batch:
        ids = [str(i) for i in batch[ChunkFields.ID]]
        live = [n for n, i in enumerate(ids) if i]  # a document that failed to parse left an empty row
        known = self._stored.lookup([ids[n] for n in live]) if live else {}
        missing = [n for n in live if ids[n] not in known]
        written = np.zeros(len(ids), dtype=bool)
        written[missing] = True
        if missing:
            self._writer = self._writer or self._make_writer()
            generated = self._writer.write([str(batch[ChunkFields.TEXT][n]) for n in missing])
            fresh = ["\n".join(parse_questions(g, self._questions)) for g in generated]
            tenants = [str(batch[ChunkFields.TENANT][n]) for n in missing]
            self._stored.store(tenants, [ids[n] for n in missing], fresh)
            known |= dict(zip([ids[n] for n in missing], fresh, strict=True))
        batch[QUESTIONS_COLUMN] = np.asarray([known.get(i, "") for i in ids], dtype=object)
        batch[ENRICHED] = written
        return batch


class ChunkEnricher:
    """Ray Data callable class (`map_batches(ChunkEnricher, compute=ActorPoolStrategy(...))`)."""

    def __init__(self, config: dict[str, Any]) -> None:
        cfg = RagcConfig.model_validate(config)
        collection = enrichment_collection(cfg.milvus.collection)
        stored = StoredQuestions(connect(cfg), collection, cfg.enrichment_fingerprint())
        self._resolve = QuestionResolver(partial(VLLMQuestionWriter, cfg), stored, cfg.ingest.enrichment.questions)

    def __call__(self, batch: Batch) -> Batch:
        return self._resolve(batch)
