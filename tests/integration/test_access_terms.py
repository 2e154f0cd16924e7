"""The access filter on the groups' terms (`access_terms`, what the retriever's clause matches since it was
stored) against the real store: it selects exactly the chunks the ARRAY clause does, whatever the labels hold.
The end-to-end access tests (a key without a group, a reindex that brings the fields) run through it too."""

from __future__ import annotations

import pytest

from cluster.config import RagcConfig

pytestmark = pytest.mark.integration

# what a LIKE pattern reads specially (`%`, `_`), the terms' separator, a prefix of another label, non-ASCII
ACCESS = [[], ["hr"], ["ops", "hr"], ["50%_off"], ["a|b"], ["a"], ["b"], ["ünï"], ["h_"], ["%"], ["hr-eu"]]
READERS = [(), ("hr",), ("ops",), ("a",), ("a|b",), ("50%_off",), ("5",), ("_",), ("%",), ("h_",), ("b", "ünï"), ("x",)]


def test_the_access_terms_select_exactly_what_the_array_clause_does(cfg: RagcConfig) -> None:
    from cluster.labels import PUBLIC
    from cluster.store.client import connect
    from cluster.store.expr import all_of, eq, holds_any_label, quote
    from cluster.store.schema import ChunkFields, CollectionIdentity, create_chunk_collection
    from ingest_jobs.documents import TAG_SEPARATOR
    from ingest_jobs.pipeline import EMPTY_ROW
    from ingest_jobs.sink import _milvus_row

    client = connect(cfg)
    name = f"{cfg.milvus.collection}_terms"  # dropped after the test with the alias's collections
    create_chunk_collection(client, name, CollectionIdentity("test", 4, "test", "test"), cfg.milvus)
    rows = [
        EMPTY_ROW
        | {"id": f"c{n}", "doc_id": f"d{n}", "tenant_id": "t", "text": "x", "embedding": [1.0, 0.0, 0.0, 0.0]}
        | {"access": TAG_SEPARATOR.join(groups)}
        for n, groups in enumerate(ACCESS)
    ]
    client.insert(name, [_milvus_row(row, None, 1000) for row in rows])

    def chunks(clause: str) -> set[str]:
        found = client.query(name, filter=all_of(eq(ChunkFields.TENANT, "t"), clause), output_fields=[ChunkFields.ID])
        return {row[ChunkFields.ID] for row in found}

    for groups in READERS:
        readers = (PUBLIC, *groups)
        expected = {f"c{n}" for n, access in enumerate(ACCESS) if not access or set(access) & set(groups)}
        by_terms = chunks(holds_any_label(ChunkFields.ACCESS_TERMS, readers))
        by_array = chunks(f"array_contains_any({ChunkFields.ACCESS}, [{', '.join(quote(g) for g in readers)}])")
        assert by_terms == by_array == expected, groups
