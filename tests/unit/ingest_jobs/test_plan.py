"""Classifying a sync's documents against the ledger."""

from ingest_jobs.ledger import LedgerEntry
from ingest_jobs.plan import classify
from tests.unit.ingest_jobs.sample_docs import doc


def test_classify() -> None:
    ledger = {
        "same": LedgerEntry("same", "h1", ("c1",)),
        "edited": LedgerEntry("edited", "old", ("c2",)),
        "gone": LedgerEntry("gone", "h3", ("c3",)),
        "broken-now": LedgerEntry("broken-now", "h4", ("c4",)),
    }
    docs = [doc("same", "h1"), doc("edited", "new"), doc("fresh", "h5")]
    plan = classify(docs, ledger, prune=True, failed_ids={"broken-now"})
    assert [d.doc_id for d in plan.new] == ["fresh"]
    assert [d.doc_id for d in plan.changed] == ["edited"]
    assert [d.doc_id for d in plan.unchanged] == ["same"]
    assert plan.deleted == ["gone"], "a document that failed to load is never pruned"
    kept = classify(docs, ledger, prune=False)
    assert kept.deleted == [] and kept.missing == ["broken-now", "gone"]
