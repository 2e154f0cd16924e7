"""What enrichment wrote for chunks and document versions that are going away goes with them: a deleted source,
a pruned document and an edited document's old chunks and old summary leave no text derived from them behind.

Keys are found before the chunks are deleted (a chunk's questions are keyed by its id, a document's summary by
its content hash) and forgotten first: a job killed in between still finds the chunks, and forgets again."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from pymilvus import MilvusClient

from cluster.store.client import iterate_rows
from cluster.store.expr import all_of, eq, is_in
from cluster.store.schema import ChunkFields
from ingest_jobs.enrich_stage import enrichment_collection, question_key, summary_key
from ingest_jobs.ledger import LedgerEntry

FORGET_BATCH = 500  # keys per filter expression


class GoneEnrichment:
    """The enrichment keys of one tenant's documents leaving one generation, in the fingerprint it was built with
    (nothing to do when it was built without enrichment)."""

    def __init__(self, client: MilvusClient, alias: str, physical: str, fingerprint: str, tenant: str) -> None:
        self._client = client
        self._physical = physical
        self._tenant = tenant
        self._fingerprint = fingerprint  # the generation's `CollectionIdentity.enrichment`
        self._store = enrichment_collection(alias)

    @property
    def active(self) -> bool:
        return bool(self._fingerprint) and self._client.has_collection(self._store)

    def forget(self, leaving: Iterable[LedgerEntry], keep: Collection[str] = ()) -> int:
        """Forget what was written for the chunks of `leaving`'s documents (but those in `keep`, the chunks of their
        new versions) and for these versions of the documents; the rows forgotten."""
        entries = list(leaving)
        if not entries or not self.active:
            return 0
        f, fingerprint, tenant = ChunkFields, self._fingerprint, self._tenant
        chunks = all_of(eq(f.TENANT, tenant), is_in(f.DOC_ID, [e.doc_id for e in entries]))
        ids = {str(r[f.ID]) for r in iterate_rows(self._client, self._physical, chunks, [f.ID])}
        keys = [question_key(fingerprint, i) for i in sorted(ids - set(keep))]
        keys += [summary_key(fingerprint, tenant, e.doc_id, e.content_hash) for e in entries]
        return forget_keys(self._client, self._store, keys)


def forget_keys(client: MilvusClient, store: str, keys: list[str]) -> int:
    """Delete these keys' rows from an enrichment store; how many there were."""
    forgotten = 0
    for start in range(0, len(keys), FORGET_BATCH):
        batch = is_in("key", keys[start : start + FORGET_BATCH])
        rows = client.query(store, filter=batch, output_fields=["count(*)"])
        count = int(rows[0]["count(*)"]) if rows else 0
        if count:
            client.delete(store, filter=batch)
            forgotten += count
    if forgotten:
        client.flush(store)
    return forgotten
