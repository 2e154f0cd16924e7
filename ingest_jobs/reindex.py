"""`ragc reindex`: rebuild every recorded source of every tenant into a new collection, then swap the alias.

Serving reads through the alias, so queries keep hitting the old collection until the swap."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cluster.config import RagcConfig
from cluster.store.client import connect
from cluster.store.collections import ActiveCollection, Collections, generation_of, physical_name
from cluster.store.schema import CollectionIdentity
from ingest_jobs.documents import check_tenant
from ingest_jobs.lease import held
from ingest_jobs.locations import exists
from ingest_jobs.sources import NamedSource, TenantSources, legacy_source_key, sources_key
from ingest_jobs.sync import SyncReport, sync_into, tenant_lease


@dataclass(frozen=True)
class TenantSource:
    """`name`: which of the tenant's sources (None: the one recorded for this path, else a new one)."""

    tenant: str
    path: str | Path  # a folder, a file or an object-store URL
    name: str | None = None


@dataclass
class ReindexReport:
    collection: str
    previous: str | None
    dropped: list[str]
    index_version: int
    seconds: float
    tenants: list[SyncReport] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "previous": self.previous,
            "dropped": self.dropped,
            "index_version": self.index_version,
            "seconds": round(self.seconds, 3),
            "chunks_total": sum(t.chunks_total for t in self.tenants),
            "failed": sum(t.failed for t in self.tenants),
            "sources": [t.summary() for t in self.tenants],
        }


def recorded_sources(collections: Collections) -> list[TenantSource]:
    """Every source of every tenant (records from before named sources count as each tenant's first)."""
    tenants: set[str] = set()
    for key in (sources_key, legacy_source_key):
        prefix = key(collections.alias, "")
        tenants |= {k[len(prefix) :] for k in collections.catalog.get_many(prefix)}
    return [
        TenantSource(tenant, s.path, s.name)
        for tenant in sorted(tenants)
        for s in TenantSources(collections.catalog, collections.alias, tenant).sources
    ]


def named_sources(collections: Collections, sources: list[TenantSource]) -> list[tuple[TenantSources, NamedSource]]:
    """Each source to rebuild, named and prefixed as its tenant records it (a new one as `ragc ingest` would),
    beside its tenant's sources (which the rebuild records once the alias has moved)."""
    known: dict[str, TenantSources] = {}
    chosen: list[tuple[TenantSources, NamedSource]] = []
    for src in sources:
        tenant = known.setdefault(src.tenant, TenantSources(collections.catalog, collections.alias, src.tenant))
        named = replace(tenant.choose(src.path, src.name), prune=True)
        tenant.add(named)  # a second new source of the same tenant then gets a prefix
        chosen.append((tenant, named))
    return chosen


def same_vectors(old: CollectionIdentity | None, new: CollectionIdentity) -> bool:
    """Chunk ids are content-derived, so an older collection's vector for the same id is reusable
    exactly when it came from the same embedding model over the same passage text."""
    return old is not None and old.same_weights(new) and old.dense_text == new.dense_text


def run_reindex(cfg: RagcConfig, sources: list[TenantSource] | None = None) -> ReindexReport:
    started = time.perf_counter()
    client = connect(cfg)
    collections = Collections(client, cfg)
    sources = sources if sources is not None else recorded_sources(collections)
    if not sources:
        raise ValueError("nothing to reindex: no tenant has been ingested yet and no --tenant T PATH was given")
    for src in sources:
        check_tenant(src.tenant)
        if not exists(str(src.path)):
            raise FileNotFoundError(f"source of tenant {src.tenant!r} is gone: {src.path}")
    leases = [tenant_lease(cfg, collections, tenant) for tenant in sorted({src.tenant for src in sources})]
    with held(leases, cfg.ingest.lease_ttl_s):  # an ingest into the old generation now would be lost at the swap
        return _rebuild(cfg, collections, sources, started)


def _rebuild(cfg: RagcConfig, collections: Collections, sources: list[TenantSource], started: float) -> ReindexReport:
    client = collections.client
    existing = collections.generations()
    generation = max((generation_of(collections.alias, n) for n in existing), default=0) + 1
    physical = physical_name(collections.alias, generation)
    collections.create_physical(physical)
    collections.load(physical)
    target = ActiveCollection(collections.alias, physical, collections.wanted_identity())
    reuse = tuple(n for n in existing if same_vectors(collections.identity_of(n), target.identity))
    for name in reuse:
        collections.load(name)
    chosen = named_sources(collections, sources)
    try:
        reports = [
            sync_into(cfg, client, target, named, tenant.others(named), tenant.tenant, True, reuse)
            for tenant, named in chosen
        ]
    except BaseException:
        collections.drop_physical(physical)  # a failed rebuild leaves nothing behind; the alias never moved
        raise
    previous = collections.swap_alias(physical)
    version = collections.bump_index_version()
    for tenant in dict.fromkeys(t for t, _ in chosen):
        tenant.save()
    older = [n for n in collections.generations() if n != physical]
    doomed = older[: max(0, len(older) - cfg.milvus.keep_old_collections)]
    for name in doomed:
        collections.drop_physical(name)
    for name in older[len(doomed) :]:
        collections.release(name)  # kept for a rollback, on disk only: nothing searches it
    return ReindexReport(physical, previous, doomed, version, time.perf_counter() - started, reports)


@dataclass
class RollbackReport:
    collection: str
    previous: str
    index_version: int

    def summary(self) -> dict[str, Any]:
        return {"collection": self.collection, "previous": self.previous, "index_version": self.index_version}


def rollback(cfg: RagcConfig) -> RollbackReport:
    """Point the alias back at the newest kept generation older than the active one (the one the last
    reindex swapped away from). Refused with the reason when none is kept or it no longer fits the config."""
    collections = Collections(connect(cfg), cfg)
    tenants = sorted({src.tenant for src in recorded_sources(collections)})
    with held([tenant_lease(cfg, collections, t) for t in tenants], cfg.ingest.lease_ttl_s):
        active = collections.resolve()
        if active is None:
            raise ValueError(f"nothing to roll back: {collections.alias} does not exist yet")
        current = generation_of(collections.alias, active)
        older = [n for n in collections.generations() if generation_of(collections.alias, n) < current]
        if not older:
            raise ValueError(
                f"nothing to roll back to: no generation older than {active} is kept "
                f"(milvus.keep_old_collections = {cfg.milvus.keep_old_collections})"
            )
        target = older[-1]
        identity = collections.identity_of(target)
        if identity is None:
            raise ValueError(f"{target} records no embedding model: not a ragc index")
        collections.check(ActiveCollection(collections.alias, target, identity))
        collections.load(target)
        collections.swap_alias(target)
        collections.release(active)
        return RollbackReport(target, active, collections.bump_index_version())
