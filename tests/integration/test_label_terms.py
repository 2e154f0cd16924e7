"""The access and tag filters on the labels' terms (`access_terms`, `tags_terms`: what the retriever's clauses
match where the collection stores them) against the real store: they select exactly the chunks the ARRAY
clauses do, whatever the labels hold. The end-to-end access and tag tests (a key without a group, a reindex
that brings the fields, the tag filters of the API) run through them too."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.config import RagcConfig

pytestmark = pytest.mark.integration

# what a LIKE pattern reads specially (`%`, `_`), the terms' separator, a regular expression's alternation, a
# prefix of another label, non-ASCII
LABELS = [[], ["hr"], ["ops", "hr"], ["50%_off"], ["a|b"], ["a,b"], ["a"], ["b"], ["ünï"], ["h_"], ["%"], ["hr-eu"]]
ASKED = [(), ("hr",), ("ops",), ("a",), ("a|b",), ("a,b",), ("50%_off",), ("5",), ("_",), ("%",), ("h_",), ("b", "ünï")]


@pytest.fixture
def labelled(cfg: RagcConfig) -> tuple[Any, str]:
    """A chunk collection as the ingest creates it, one chunk per entry of LABELS, written by the sink's rows:
    chunk n has LABELS[n] as its tags and as its access groups."""
    from cluster.store.client import connect
    from cluster.store.schema import CollectionIdentity, create_chunk_collection
    from ingest_jobs.documents import TAG_SEPARATOR
    from ingest_jobs.pipeline import EMPTY_ROW
    from ingest_jobs.sink import _milvus_row

    client = connect(cfg)
    name = f"{cfg.milvus.collection}_terms"  # dropped after the test with the alias's collections
    create_chunk_collection(client, name, CollectionIdentity("test", 4, "test", "test"), cfg.milvus)
    rows = [
        EMPTY_ROW
        | {"id": f"c{n}", "doc_id": f"d{n}", "tenant_id": "t", "text": "x", "embedding": [1.0, 0.0, 0.0, 0.0]}
        | {"tags": TAG_SEPARATOR.join(labels), "access": TAG_SEPARATOR.join(labels)}
        for n, labels in enumerate(LABELS)
    ]
    client.insert(name, [_milvus_row(row, None, 1000) for row in rows])
    return client, name


def chunks(labelled: tuple[Any, str], clause: str) -> set[str]:
    from cluster.store.expr import all_of, eq
    from cluster.store.schema import ChunkFields

    client, name = labelled
    found = client.query(name, filter=all_of(eq(ChunkFields.TENANT, "t"), clause), output_fields=[ChunkFields.ID])
    return {row[ChunkFields.ID] for row in found}


def test_the_access_terms_select_exactly_what_the_array_clause_does(labelled: tuple[Any, str]) -> None:
    from cluster.labels import PUBLIC
    from cluster.store.expr import holds_any_label, quote
    from cluster.store.schema import ChunkFields

    for groups in ASKED:
        readers = (PUBLIC, *groups)
        expected = {f"c{n}" for n, access in enumerate(LABELS) if not access or set(access) & set(groups)}
        by_terms = chunks(labelled, holds_any_label(ChunkFields.ACCESS_TERMS, readers))
        by_array = chunks(labelled, f"array_contains_any(access, [{', '.join(quote(g) for g in readers)}])")
        assert by_terms == by_array == expected, groups


def test_the_tag_filters_on_terms_select_exactly_what_the_array_clauses_do(
    cfg: RagcConfig, labelled: tuple[Any, str]
) -> None:
    from serve.edge.filters import compile_filters, on_label_terms

    def compiled(filters: dict[str, Any]) -> str:
        return compile_filters(filters, cfg.serve.filters, cfg.serve.limits)

    for asked in filter(None, ASKED):
        for op, holds in (("contains_any", set.__and__), ("contains_all", set.__ge__)):
            expected = {f"c{n}" for n, tags in enumerate(LABELS) if holds(set(tags), set(asked))}
            array = compiled({"tags": {op: list(asked)}})
            assert chunks(labelled, on_label_terms(array, {"tags": "tags_terms"})) == expected, (op, asked)
            assert chunks(labelled, array) == expected, (op, asked)
        one = compiled({"tags": asked[0]})
        expected = {f"c{n}" for n, tags in enumerate(LABELS) if asked[0] in tags}
        assert chunks(labelled, on_label_terms(one, {"tags": "tags_terms"})) == chunks(labelled, one) == expected
