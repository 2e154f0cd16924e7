"""Ray Data sink that upserts embedded chunks into Milvus in batches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ray.data import Datasink
from ray.data.block import Block, BlockAccessor
from ray.data.datasource.datasink import WriteResult

from cluster.config import RagcConfig
from cluster.labels import PUBLIC, label_terms
from cluster.store.bm25_text import chunk_bm25_text
from cluster.store.client import connect
from cluster.store.schema import AUTHOR_MAX, SHORT_TEXT_MAX, ChunkFields, fit_bytes
from ingest_jobs.documents import TAG_SEPARATOR
from ingest_jobs.embed_stage import EMBEDDED_ON
from ingest_jobs.enrich_stage import ENRICHED, ENRICHMENT_COLUMN


class InjectedFaultError(RuntimeError):
    """Raised by the test-only fault hook `ingest.faults.fail_after_batches`."""


@dataclass(frozen=True)
class SinkStats:
    upserted: int = 0
    embedded: int = 0
    by_node: dict[str, int] = field(default_factory=dict)  # rows upserted per embedding node
    enriched: int = 0  # chunks whose questions the enrichment stage wrote in this job

    @classmethod
    def total(cls, parts: Iterable[SinkStats]) -> SinkStats:
        upserted, embedded, enriched, by_node = 0, 0, 0, Counter[str]()
        for part in parts:
            upserted, embedded, enriched = upserted + part.upserted, embedded + part.embedded, enriched + part.enriched
            by_node.update(part.by_node)
        return cls(upserted, embedded, dict(by_node), enriched)


STORED_COLUMNS = (
    ChunkFields.ID,
    ChunkFields.DOC_ID,
    ChunkFields.TENANT,
    ChunkFields.TEXT,
    ChunkFields.DENSE,
    *ChunkFields.METADATA,
)


class MilvusChunkSink(Datasink[SinkStats]):
    def __init__(self, config: dict[str, Any], collection: str, declared: tuple[str, ...]) -> None:
        """`declared`: the declared document fields the collection has (one created before them has none)."""
        self._config = config
        self._collection = collection
        self._declared = declared
        self.stats = SinkStats()

    def write(self, blocks: Iterable[Block], ctx: Any) -> SinkStats:
        cfg = RagcConfig.model_validate(self._config)
        client = connect(cfg)
        batch_size = cfg.ingest.upsert_batch_size
        fail_after = cfg.ingest.faults.fail_after_batches
        upserted = embedded = enriched = batches = 0
        by_node = Counter[str]()
        try:
            for block in blocks:
                rows: list[Any] = list(BlockAccessor.for_block(block).iter_rows(public_row_format=False))
                for start in range(0, len(rows), batch_size):
                    if fail_after is not None and batches >= fail_after:
                        raise InjectedFaultError(f"fault hook: failing after {batches} upsert batches")
                    part = rows[start : start + batch_size]
                    stemmer, limit = cfg.milvus.bm25_stemmer, cfg.milvus.text_max_chars
                    client.upsert(self._collection, [_milvus_row(r, stemmer, limit, self._declared) for r in part])
                    upserted += len(part)
                    embedded += sum(bool(r["embedded"]) for r in part)
                    enriched += sum(bool(r[ENRICHED]) for r in part)
                    by_node.update(str(r[EMBEDDED_ON]) for r in part)
                    batches += 1
        finally:
            client.close()
        return SinkStats(upserted, embedded, dict(by_node), enriched)

    def on_write_complete(self, write_result: WriteResult[SinkStats]) -> None:
        self.stats = SinkStats.total(write_result.write_returns)


def _milvus_row(
    row: Any, stemmer: str | None, text_max_bytes: int, declared: tuple[str, ...] = ChunkFields.DOCUMENT_FIELDS
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column in STORED_COLUMNS:
        value = row[column]
        if column == ChunkFields.DENSE:
            value = [float(x) for x in value]
        elif hasattr(value, "item"):
            value = value.item()
        out[column] = value
    f = ChunkFields
    for short in (f.SOURCE, f.TITLE, f.SECTION):  # a heading or title can be longer than the field
        out[short] = fit_bytes(out[short], SHORT_TEXT_MAX)
    written = str(row[ENRICHMENT_COLUMN])
    bm25 = chunk_bm25_text(out[f.TITLE], out[f.SECTION], out[f.TEXT], stemmer, written)
    # title, section and enrichment beside a text at its limit: the index keeps the words that fit
    out[f.BM25_TEXT] = fit_words(bm25, text_max_bytes)
    if f.AUTHOR in declared:
        out[f.AUTHOR] = fit_bytes(str(row[f.AUTHOR]), AUTHOR_MAX)
    stored_labels = {f.TAGS: labels(row[f.TAGS]), f.ACCESS: labels(row[f.ACCESS]) or [PUBLIC]}
    for name, values in stored_labels.items():
        if name in declared:
            out[name] = values
        if f.LABEL_TERMS[name] in declared:
            out[f.LABEL_TERMS[name]] = label_terms(values)
    return out


def labels(joined: Any) -> list[str]:
    return [label for label in str(joined).split(TAG_SEPARATOR) if label]


def fit_words(words: str, max_bytes: int) -> str:
    """Space-separated words cut to at most `max_bytes` UTF-8 bytes, at a word boundary."""
    fitted = fit_bytes(words, max_bytes)
    return fitted if fitted == words else fitted.rsplit(" ", 1)[0]
