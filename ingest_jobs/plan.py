"""Classify a source against the ledger: what is new, changed, unchanged or gone."""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest_jobs.documents import SourceDocument
from ingest_jobs.ledger import LedgerEntry


@dataclass
class SyncPlan:
    new: list[SourceDocument] = field(default_factory=list)
    changed: list[SourceDocument] = field(default_factory=list)
    unchanged: list[SourceDocument] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def to_process(self) -> list[SourceDocument]:
        return self.new + self.changed


def classify(
    documents: list[SourceDocument],
    ledger: dict[str, LedgerEntry],
    prune: bool,
    failed_ids: set[str] | None = None,
) -> SyncPlan:
    """Documents absent from the source are `deleted` with `prune`, else only listed as `missing`.
    A document that failed to load this time is never pruned: its old chunks are kept."""
    plan = SyncPlan()
    present = {doc.doc_id for doc in documents}
    for doc in documents:
        entry = ledger.get(doc.doc_id)
        if entry is None:
            plan.new.append(doc)
        elif entry.content_hash != doc.content_hash:
            plan.changed.append(doc)
        else:
            plan.unchanged.append(doc)
    gone = sorted(set(ledger) - present - (failed_ids or set()))
    if prune:
        plan.deleted = gone
    else:
        plan.missing = gone
    return plan
