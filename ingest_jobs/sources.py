"""A tenant's named sources: several folders may feed one tenant without one sync deleting another's documents.

A document's id includes its source. The tenant's first source keeps plain ids (paths relative to its root,
or a corpus's own ids), so collections from before named sources, and the BEIR evaluation whose qrels name
raw ids, are unchanged; every later source prefixes its ids with `<name>::`. A source owns the ledger entries
with its prefix (the first one: those with no other source's prefix), and change detection and `--prune` see
only what the source owns. The catalog keeps every source of a tenant (`sources:<alias>:<tenant>`) for
`ragc reindex`; the single record of older versions (`source:<alias>:<tenant>`) reads as the first source,
named `default`."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from cluster.store.schema import DOC_ID_MAX
from ingest_jobs.documents import Failure, SourceDocument
from ingest_jobs.lease import KeyValueStore
from ingest_jobs.ledger import LedgerEntry
from ingest_jobs.locations import base_name, normalized

SEPARATOR = "::"
LEGACY_NAME = "default"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class UnknownSourceError(ValueError):
    pass


class SourceNameError(ValueError):
    pass


def check_source_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise SourceNameError(
            f"source name {name!r} must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def sources_key(alias: str, tenant: str) -> str:
    return f"sources:{alias}:{tenant}"


def legacy_source_key(alias: str, tenant: str) -> str:
    """The one source per tenant that versions before named sources recorded."""
    return f"source:{alias}:{tenant}"


@dataclass(frozen=True)
class NamedSource:
    name: str
    path: str  # an absolute local path or an object-store URL (`locations.normalized`)
    prune: bool = False
    prefix: str = ""  # "" for the tenant's first source, "<name>::" for every later one

    def owns(self, doc_id: str, others: list[NamedSource]) -> bool:
        if self.prefix:
            return doc_id.startswith(self.prefix)
        return not any(other.prefix and doc_id.startswith(other.prefix) for other in others)

    def claimed_by(self, doc_id: str, others: list[NamedSource]) -> NamedSource | None:
        """Another source whose prefix this (unprefixed) source's document id starts with."""
        if self.prefix:
            return None
        return next((o for o in others if o.prefix and doc_id.startswith(o.prefix)), None)


def fallback_name(location: str) -> str:
    """A source named after its folder, file or bucket prefix, made a valid name."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", base_name(location)).strip("-._") or "source"
    return cleaned[:64]


class TenantSources:
    """Every source of one tenant, read from and written to the catalog."""

    def __init__(self, catalog: KeyValueStore, alias: str, tenant: str) -> None:
        self._catalog = catalog
        self.tenant = tenant
        self._key = sources_key(alias, tenant)
        self._legacy_key = legacy_source_key(alias, tenant)
        self.sources = self._load()

    def _load(self) -> list[NamedSource]:
        recorded = self._catalog.get(self._key)
        if recorded:
            return [NamedSource(**s) for s in recorded["sources"]]
        legacy = self._catalog.get(self._legacy_key)
        if legacy:
            return [NamedSource(LEGACY_NAME, str(legacy["path"]), bool(legacy.get("prune", False)))]
        return []

    def choose(self, location: str | Path, name: str | None = None) -> NamedSource:
        """The source `name`, else the one recorded for this location, else a new one named after the folder.
        A named source that moved keeps its name, prefix and documents, at its new location."""
        resolved = normalized(location)
        if name is not None:
            check_source_name(name)
            known = next((s for s in self.sources if s.name == name), None)
            return replace(known, path=resolved) if known else self._new(name, resolved)
        known = next((s for s in self.sources if s.path == resolved), None)
        if known:
            return known
        base = fallback_name(resolved)
        taken = {s.name for s in self.sources}
        candidate, n = base, 1
        while candidate in taken:
            n += 1
            candidate = f"{base[:60]}-{n}"
        return self._new(candidate, resolved)

    def _new(self, name: str, path: str) -> NamedSource:
        return NamedSource(name, path, prefix=f"{name}{SEPARATOR}" if self.sources else "")

    def named(self, name: str) -> NamedSource:
        """The recorded source `name`; refused with the tenant's sources when it has none of that name."""
        found = next((s for s in self.sources if s.name == name), None)
        if found is None:
            known = ", ".join(s.name for s in self.sources) or "none recorded"
            raise UnknownSourceError(f"tenant {self.tenant!r} has no source {name!r} (its sources: {known})")
        return found

    def others(self, source: NamedSource) -> list[NamedSource]:
        return [s for s in self.sources if s.name != source.name]

    def add(self, source: NamedSource) -> None:
        """Add or update `source` (matched by name); `save` writes the tenant's sources."""
        self.sources = [s for s in self.sources if s.name != source.name] + [source]
        self.sources.sort(key=lambda s: (s.prefix != "", s.name))  # the unprefixed first source first

    def save(self) -> None:
        self._catalog.put(self._key, {"sources": [asdict(s) for s in self.sources]})
        self._catalog.delete([self._legacy_key])  # read as the first source above; one record from now on


def owned_entries(
    ledger: dict[str, LedgerEntry], source: NamedSource, others: list[NamedSource]
) -> dict[str, LedgerEntry]:
    return {doc_id: entry for doc_id, entry in ledger.items() if source.owns(doc_id, others)}


def scoped_documents(
    documents: list[SourceDocument], failures: list[Failure], source: NamedSource, others: list[NamedSource]
) -> tuple[list[SourceDocument], list[Failure]]:
    """The source's documents and failures under their ids in the tenant (prefixed after the first source).
    A document of the first source whose id carries another source's prefix fails instead of being taken
    for that source's."""
    kept: list[SourceDocument] = []
    failed = [replace(f, doc_id=source.prefix + f.doc_id) for f in failures]
    for doc in documents:
        claimer = source.claimed_by(doc.doc_id, others)
        if claimer is not None:
            failed.append(
                Failure(
                    doc.doc_id,
                    f"its id starts with {claimer.prefix!r}, the prefix of source "
                    f"{claimer.name!r} of this tenant: rename it",
                )
            )
            continue
        scoped = replace(doc, doc_id=source.prefix + doc.doc_id) if source.prefix else doc
        if len(scoped.doc_id.encode("utf-8")) > DOC_ID_MAX:  # the store's id field would refuse the whole batch
            failed.append(Failure(scoped.doc_id[:80] + "…", f"its id is longer than {DOC_ID_MAX} bytes: shorten it"))
            continue
        kept.append(scoped)
    return kept, failed
