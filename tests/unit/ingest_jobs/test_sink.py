"""What the Milvus sink reports back to the job."""

from ingest_jobs.sink import SinkStats


def test_the_job_totals_add_the_write_tasks_rows_per_embedding_node() -> None:
    parts = [SinkStats(3, 2, {"worker-0": 3}), SinkStats(5, 5, {"worker-0": 1, "worker-1": 4}), SinkStats()]
    assert SinkStats.total(parts) == SinkStats(8, 7, {"worker-0": 4, "worker-1": 4})
    assert SinkStats.total([]) == SinkStats()


def test_a_row_carries_author_and_tags_only_into_a_collection_that_has_them() -> None:
    from cluster.store.schema import ChunkFields
    from ingest_jobs.documents import TAG_SEPARATOR
    from ingest_jobs.enrich_stage import ENRICHMENT_COLUMN
    from ingest_jobs.pipeline import EMPTY_ROW
    from ingest_jobs.sink import _milvus_row

    row = EMPTY_ROW | {"text": "words", "embedding": [0.5, 0.5], "author": "A" * 600, "tags": TAG_SEPARATOR.join("xy")}
    row[ENRICHMENT_COLUMN] = ""
    stored = _milvus_row(row, None, 1000)
    assert stored["tags"] == ["x", "y"] and stored["author"] == "A" * 512  # cut to its field
    assert stored["access"] == ["*"], "a document that declares no access groups is public in its tenant"
    restricted = _milvus_row(row | {"tags": "", "access": TAG_SEPARATOR.join(["hr", "ops"])}, None, 1000)
    assert restricted["tags"] == [] and restricted["access"] == ["hr", "ops"]
    assert not set(ChunkFields.DOCUMENT_FIELDS) & set(_milvus_row(row, None, 1000, declared=()))


def test_a_row_carries_its_tags_and_access_groups_as_terms_where_the_collection_has_them() -> None:
    from cluster.labels import label_term, label_terms
    from ingest_jobs.documents import TAG_SEPARATOR
    from ingest_jobs.enrich_stage import ENRICHMENT_COLUMN
    from ingest_jobs.pipeline import EMPTY_ROW
    from ingest_jobs.sink import _milvus_row

    row = EMPTY_ROW | {"text": "words", "embedding": [0.5, 0.5], ENRICHMENT_COLUMN: ""}
    plain = _milvus_row(row, None, 1000)
    assert plain["access_terms"] == f",{label_term('*')}," and plain["tags_terms"] == ",", "public, untagged"
    restricted = _milvus_row(row | {"access": TAG_SEPARATOR.join(["hr", "ops"]), "tags": "k8s"}, None, 1000)
    assert restricted["access_terms"] == label_terms(["hr", "ops"]) == f",{label_term('hr')},{label_term('ops')},"
    assert restricted["tags_terms"] == f",{label_term('k8s')},"
    between = _milvus_row(row, None, 1000, declared=("author", "tags", "access"))  # created before the terms
    assert between["access"] == ["*"] and not {"tags_terms", "access_terms"} & set(between)
