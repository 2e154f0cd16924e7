"""`ragc delete --tenant T [--source NAME]`: take a tenant's documents (or one of its sources') out of the index
and forget them: their chunks in every generation the alias keeps (a rollback must not bring them back), their
ledger entries, the source's catalog record (a reindex rebuilds only recorded sources) and the text enrichment
wrote for them (for the whole tenant, every row it has there). The index version moves, so no cache serves them
again."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pymilvus import MilvusClient

from cluster.config import RagcConfig
from cluster.store.client import connect
from cluster.store.collections import Collections, ledger_name
from cluster.store.expr import all_of, eq, is_in
from cluster.store.schema import ChunkFields
from ingest_jobs.documents import check_tenant
from ingest_jobs.enrich_stage import enrichment_collection
from ingest_jobs.enrichment_gc import GoneEnrichment
from ingest_jobs.lease import held
from ingest_jobs.ledger import Ledger
from ingest_jobs.sources import NamedSource, TenantSources, owned_entries
from ingest_jobs.sync import COMMIT_BATCH, count_chunks, tenant_lease


@dataclass
class DeleteReport:
    tenant: str
    sources: list[str] = field(default_factory=list)  # removed from the tenant's catalog record
    documents: int = 0  # forgotten by the active generation's ledger
    chunks: int = 0  # rows deleted, over every generation
    generations: int = 0
    enrichment_rows: int = 0
    chunks_left: int = 0  # the tenant's rows left in the active generation (its other sources')
    index_version: int = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "sources": self.sources,
            "documents": self.documents,
            "chunks": self.chunks,
            "generations": self.generations,
            "enrichment_rows": self.enrichment_rows,
            "chunks_left": self.chunks_left,
            "index_version": self.index_version,
            "seconds": round(self.seconds, 3),
        }


def run_delete(cfg: RagcConfig, tenant: str, source: str | None = None) -> DeleteReport:
    """Everything of `tenant`, or only what its source named `source` owns (its other sources keep theirs).
    Runs under the tenant's lease, so never beside a sync or a reindex of the same tenant."""
    started = time.perf_counter()
    check_tenant(tenant)
    client = connect(cfg)
    collections = Collections(client, cfg)
    report = DeleteReport(tenant)
    with held([tenant_lease(cfg, collections, tenant)], cfg.ingest.lease_ttl_s):
        sources = TenantSources(collections.catalog, collections.alias, tenant)
        doomed = _chosen(sources, source)
        active = collections.resolve()
        generations = collections.generations()
        for physical in generations:
            # loaded first: one kept for a rollback is released, and after a restart of the store so is the active
            collections.load(physical)
            identity = collections.identity_of(physical)
            gone = GoneEnrichment(client, collections.alias, physical, identity.enrichment if identity else "", tenant)
            try:
                documents, chunks, written = _delete_in(client, physical, gone, tenant, doomed, sources)
            finally:
                if physical != active:
                    collections.release(physical)
            report.chunks += chunks
            report.enrichment_rows += written
            if physical == active:
                report.documents = documents
        report.generations = len(generations)
        if doomed is None:
            report.enrichment_rows += _delete_enrichment(client, collections.alias, tenant)
        report.sources = [s.name for s in sources.sources if doomed is None or s.name == doomed.name]
        if report.sources:
            sources.sources = [s for s in sources.sources if s.name not in report.sources]
            sources.save()
        report.chunks_left = count_chunks(client, active, tenant) if active else 0
        changed = report.chunks or report.documents or report.sources or report.enrichment_rows
        report.index_version = collections.bump_index_version() if changed else collections.index_version()
    report.seconds = time.perf_counter() - started
    return report


def _chosen(sources: TenantSources, name: str | None) -> NamedSource | None:
    """The source to delete; None: the whole tenant."""
    return None if name is None else sources.named(name)


def _delete_in(
    client: MilvusClient,
    physical: str,
    gone: GoneEnrichment,
    tenant: str,
    doomed: NamedSource | None,
    sources: TenantSources,
) -> tuple[int, int, int]:
    """(documents forgotten, chunks deleted, enrichment rows forgotten) in one generation; the whole tenant's
    enrichment rows are deleted by tenant, once, by the caller."""
    ledger = Ledger(client, ledger_name(physical))
    entries = ledger.entries(tenant)
    before = count_chunks(client, physical, tenant)
    written = 0
    if doomed is None:
        documents = sorted(entries)
        # by tenant, not by document: also the rows a crashed run wrote before its ledger recorded them
        client.delete(physical, filter=eq(ChunkFields.TENANT, tenant))
    else:
        documents = sorted(owned_entries(entries, doomed, sources.others(doomed)))
        for start in range(0, len(documents), COMMIT_BATCH):
            batch = documents[start : start + COMMIT_BATCH]
            written += gone.forget(entries[d] for d in batch)
            client.delete(physical, filter=all_of(eq(ChunkFields.TENANT, tenant), is_in(ChunkFields.DOC_ID, batch)))
    for start in range(0, len(documents), COMMIT_BATCH):
        ledger.forget(tenant, documents[start : start + COMMIT_BATCH])
    client.flush(physical)
    return len(documents), before - count_chunks(client, physical, tenant), written


def _delete_enrichment(client: MilvusClient, alias: str, tenant: str) -> int:
    name = enrichment_collection(alias)
    if not client.has_collection(name):
        return 0
    rows = client.query(name, filter=eq(ChunkFields.TENANT, tenant), output_fields=["count(*)"])
    count = int(rows[0]["count(*)"]) if rows else 0
    client.delete(name, filter=eq(ChunkFields.TENANT, tenant))
    client.flush(name)
    return count
