"""`ragc docs`: what the index holds, read from the same records the ingest keeps (the active generation's ledger,
the tenant's named sources in the catalog, each document's first chunk), never from the source folders.

Without a tenant: every tenant with its sources, documents and chunks. With one: its documents, each with the
source that owns it, its chunk count and the metadata the filters and access groups read."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from pymilvus import MilvusClient

from cluster.config import RagcConfig
from cluster.store.client import connect, iterate_rows
from cluster.store.collections import Collections, ledger_name
from cluster.store.expr import all_of, eq
from cluster.store.schema import ChunkFields, declared_fields
from cluster.tenancy import check_tenant
from ingest_jobs.ledger import Ledger, LedgerEntry
from ingest_jobs.sources import NamedSource, TenantSources, sources_key
from ingest_jobs.sync import count_chunks

# what a listing shows of a document's first chunk; the declared fields are added where the index has them
FIRST_CHUNK_FIELDS = (ChunkFields.DOC_ID, ChunkFields.TITLE, ChunkFields.DOC_TYPE, ChunkFields.YEAR)
UNOWNED = ""  # a ledger entry no recorded source claims (its source's record was lost): shown, never hidden


class NoIndexError(RuntimeError):
    pass


@dataclass(frozen=True)
class DocumentRecord:
    doc_id: str
    source: str
    chunks: int
    title: str = ""
    doc_type: str = ""
    year: int | None = None
    author: str | None = None  # None: the index has no such field (built before it was stored)
    tags: list[str] | None = None
    access: list[str] | None = None


@dataclass(frozen=True)
class SourceRecord:
    name: str
    path: str
    documents: int
    chunks: int


@dataclass
class TenantInventory:
    tenant: str
    collection: str
    index_version: int
    missing_fields: list[str]  # declared fields the active generation lacks: `ragc reindex` adds them
    sources: list[SourceRecord] = field(default_factory=list)
    documents: list[DocumentRecord] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return asdict(self) | {
            "documents_total": len(self.documents),
            "chunks_total": sum(d.chunks for d in self.documents),
        }


@dataclass
class IndexInventory:
    collection: str
    index_version: int
    missing_fields: list[str]
    tenants: list[dict[str, Any]]  # {tenant, sources, documents, chunks}

    def summary(self) -> dict[str, Any]:
        return asdict(self)


def documents_of(
    entries: dict[str, LedgerEntry],
    sources: list[NamedSource],
    first_chunks: dict[str, dict[str, Any]],
    chunk_counts: dict[str, int],
    declared: tuple[str, ...],
) -> list[DocumentRecord]:
    """One record per ledger entry, sorted by source then id; the declared fields only where the index has them."""
    records = []
    for doc_id, entry in entries.items():
        owner = next((s.name for s in sources if s.owns(doc_id, [o for o in sources if o is not s])), UNOWNED)
        row = first_chunks.get(doc_id, {})
        records.append(
            DocumentRecord(
                doc_id=doc_id,
                source=owner,
                chunks=len(entry.chunk_ids) or chunk_counts.get(doc_id, 0),
                title=str(row.get(ChunkFields.TITLE, "")),
                doc_type=str(row.get(ChunkFields.DOC_TYPE, "")),
                year=_year(row.get(ChunkFields.YEAR)),
                author=str(row.get(ChunkFields.AUTHOR) or "") if ChunkFields.AUTHOR in declared else None,
                tags=_labels(row.get(ChunkFields.TAGS)) if ChunkFields.TAGS in declared else None,
                access=_labels(row.get(ChunkFields.ACCESS)) if ChunkFields.ACCESS in declared else None,
            )
        )
    return sorted(records, key=lambda r: (r.source, r.doc_id))


def source_records(sources: list[NamedSource], documents: list[DocumentRecord]) -> list[SourceRecord]:
    docs, chunks = Counter(d.source for d in documents), Counter[str]()
    for d in documents:
        chunks[d.source] += d.chunks
    named = [SourceRecord(s.name, s.path, docs[s.name], chunks[s.name]) for s in sources]
    if docs[UNOWNED]:
        named.append(SourceRecord(UNOWNED, "", docs[UNOWNED], chunks[UNOWNED]))
    return named


def tenant_inventory(cfg: RagcConfig, tenant: str, source: str | None = None) -> TenantInventory:
    check_tenant(tenant)
    client = connect(cfg)
    try:
        collections = Collections(client, cfg)
        physical = _active(collections)
        recorded = TenantSources(collections.catalog, collections.alias, tenant)
        if source is not None:
            recorded.named(source)
        sources = recorded.sources
        entries = Ledger(client, ledger_name(physical)).entries(tenant)
        declared = declared_fields(client, physical)
        first = _first_chunks(client, physical, tenant, declared)
        counted = _chunk_counts(client, physical, tenant, [d for d, e in entries.items() if not e.chunk_ids])
        documents = documents_of(entries, sources, first, counted, declared)
        if source is not None:
            documents = [d for d in documents if d.source == source]
            sources = [s for s in sources if s.name == source]
        return TenantInventory(
            tenant,
            physical,
            collections.index_version(),
            _missing(declared),
            source_records(sources, documents),
            documents,
        )
    finally:
        client.close()


def index_inventory(cfg: RagcConfig) -> IndexInventory:
    """Every tenant that has documents in the active generation or a recorded source."""
    client = connect(cfg)
    try:
        collections = Collections(client, cfg)
        physical = _active(collections)
        per_tenant = Counter(row["tenant_id"] for row in iterate_rows(client, ledger_name(physical), "", ["tenant_id"]))
        prefix = sources_key(collections.alias, "")
        recorded = {key.removeprefix(prefix) for key in collections.catalog.get_many(prefix)}
        tenants = [
            {
                "tenant": tenant,
                "sources": [s.name for s in TenantSources(collections.catalog, collections.alias, tenant).sources],
                "documents": per_tenant[tenant],
                "chunks": count_chunks(client, physical, tenant),
            }
            for tenant in sorted(set(per_tenant) | recorded)
        ]
        missing = _missing(declared_fields(client, physical))
        return IndexInventory(physical, collections.index_version(), missing, tenants)
    finally:
        client.close()


def index_overview(cfg: RagcConfig) -> dict[str, Any]:
    """What `ragc status` says of the index, in count queries only (no row is read): the serving generation, its
    version, every tenant's documents and chunks together, and the declared fields it lacks. `collection` is
    None before anything was ingested."""
    client = connect(cfg)
    try:
        collections = Collections(client, cfg)
        physical = collections.resolve()
        if physical is None:
            return {"collection": None, "alias": collections.alias}
        collections.load(physical)
        return {
            "collection": physical,
            "alias": collections.alias,
            "index_version": collections.index_version(),
            "documents": _count(client, ledger_name(physical)),
            "chunks": _count(client, physical),
            "missing_fields": _missing(declared_fields(client, physical)),
        }
    finally:
        client.close()


def _count(client: MilvusClient, collection: str) -> int:
    rows = client.query(collection, filter="", output_fields=["count(*)"])
    return int(rows[0]["count(*)"]) if rows else 0


def _active(collections: Collections) -> str:
    physical = collections.resolve()
    if physical is None:
        raise NoIndexError(f"no index yet: nothing was ingested into {collections.alias!r}")
    collections.load(physical)
    return physical


def _first_chunks(
    client: MilvusClient, physical: str, tenant: str, declared: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    expr = all_of(eq(ChunkFields.TENANT, tenant), f"{ChunkFields.CHUNK_INDEX} == 0")
    shown = ChunkFields.DECLARED  # the filter terms are for filters, never read back
    return {
        row[ChunkFields.DOC_ID]: row
        for row in iterate_rows(client, physical, expr, [*FIRST_CHUNK_FIELDS, *(f for f in declared if f in shown)])
    }


def _chunk_counts(client: MilvusClient, physical: str, tenant: str, doc_ids: list[str]) -> dict[str, int]:
    """Chunks per document for the ledger entries too long to list their ids (they keep only a count)."""
    counts: dict[str, int] = {}
    for doc_id in doc_ids:
        expr = all_of(eq(ChunkFields.TENANT, tenant), eq(ChunkFields.DOC_ID, doc_id))
        rows = client.query(physical, filter=expr, output_fields=["count(*)"])
        counts[doc_id] = int(rows[0]["count(*)"]) if rows else 0
    return counts


def _missing(declared: tuple[str, ...]) -> list[str]:
    return [f for f in ChunkFields.DOCUMENT_FIELDS if f not in declared]


def _labels(value: Any) -> list[str]:
    """Tags or access groups as a plain list (the client returns a repeated field)."""
    return [str(v) for v in value or ()]


def _year(value: Any) -> int | None:
    """The stored year, or None for the store's "no year" (0)."""
    return int(value) if value else None
