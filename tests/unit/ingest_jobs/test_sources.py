"""A tenant's named sources: ids, ownership, what prune may touch, and the catalog record (old and new)."""

from pathlib import Path

import pytest

from ingest_jobs.documents import Failure
from ingest_jobs.ledger import LedgerEntry
from ingest_jobs.plan import classify
from ingest_jobs.sources import (
    LEGACY_NAME,
    NamedSource,
    SourceNameError,
    TenantSources,
    legacy_source_key,
    owned_entries,
    scoped_documents,
    sources_key,
)
from tests.fakes import DictStore
from tests.unit.ingest_jobs.sample_docs import doc

ALIAS = "ragc_chunks"


def tenant_sources(store: DictStore, tenant: str = "t") -> TenantSources:
    return TenantSources(store, ALIAS, tenant)


def recorded(store: DictStore, tenant: str, source: NamedSource) -> NamedSource:
    sources = tenant_sources(store, tenant)
    sources.add(source)
    sources.save()
    return source


def test_the_first_source_keeps_plain_ids_and_later_ones_are_prefixed(tmp_path: Path) -> None:
    store = DictStore()
    first = recorded(store, "t", tenant_sources(store).choose(tmp_path / "a"))
    second = tenant_sources(store).choose(tmp_path / "b")
    assert (first.name, first.prefix) == ("a", "")
    assert (second.name, second.prefix) == ("b", "b::")
    docs, failures = scoped_documents([doc("README.md")], [Failure("bad.pdf", "x")], second, [first])
    assert [d.doc_id for d in docs] == ["b::README.md"]
    assert failures == [Failure("b::bad.pdf", "x")]
    plain, _ = scoped_documents([doc("README.md")], [], first, [second])
    assert [d.doc_id for d in plain] == ["README.md"]


def test_a_path_keeps_its_source_and_a_name_keeps_a_moved_folder(tmp_path: Path) -> None:
    store = DictStore()
    first = recorded(store, "t", tenant_sources(store).choose(tmp_path / "docs"))
    assert tenant_sources(store).choose(tmp_path / "docs") == first
    moved = tenant_sources(store).choose(tmp_path / "elsewhere", name="docs")
    assert (moved.name, moved.prefix, moved.path) == ("docs", "", str((tmp_path / "elsewhere").resolve()))
    # another folder with the same base name is a new source, not the old one
    clash = tenant_sources(store).choose(tmp_path / "x" / "docs")
    assert (clash.name, clash.prefix) == ("docs-2", "docs-2::")
    with pytest.raises(SourceNameError, match="source name"):
        tenant_sources(store).choose(tmp_path, name="no spaces")


def test_prune_of_one_source_never_reaches_another(tmp_path: Path) -> None:
    store = DictStore()
    a = recorded(store, "t", tenant_sources(store).choose(tmp_path / "a"))
    b = recorded(store, "t", tenant_sources(store).choose(tmp_path / "b"))
    ledger = {
        "README.md": LedgerEntry("README.md", "h", ("c1",)),
        "guide.md": LedgerEntry("guide.md", "h", ("c2",)),
        "b::README.md": LedgerEntry("b::README.md", "h", ("c3",)),
    }
    # b now holds nothing: pruning b deletes only b's document
    plan_b = classify([], owned_entries(ledger, b, [a]), prune=True)
    assert plan_b.deleted == ["b::README.md"]
    # a still holds README.md only: pruning a deletes guide.md, never b's
    plan_a = classify([doc("README.md")], owned_entries(ledger, a, [b]), prune=True)
    assert plan_a.deleted == ["guide.md"] and [d.doc_id for d in plan_a.unchanged] == ["README.md"]


def test_a_first_source_file_named_like_another_sources_prefix_fails_instead_of_being_misattributed(
    tmp_path: Path,
) -> None:
    store = DictStore()
    a = recorded(store, "t", tenant_sources(store).choose(tmp_path / "a"))
    b = recorded(store, "t", tenant_sources(store).choose(tmp_path / "b"))
    docs, failures = scoped_documents([doc("b::notes.md"), doc("ok.md")], [], a, [b])
    assert [d.doc_id for d in docs] == ["ok.md"]
    assert failures[0].doc_id == "b::notes.md" and "prefix of source 'b'" in failures[0].reason


def test_an_id_longer_than_the_store_takes_fails_that_document_only(tmp_path: Path) -> None:
    store = DictStore()
    a = recorded(store, "t", tenant_sources(store).choose(tmp_path / "a"))
    b = tenant_sources(store).choose(tmp_path / "b")
    deep = "/".join(["folder"] * 145) + "/abcd.md"  # 1,022 bytes: fits alone, not behind the prefix "b::"
    alone, _ = scoped_documents([doc(deep)], [], a, [b])
    docs, failures = scoped_documents([doc(deep), doc("ok.md")], [], b, [a])
    assert [d.doc_id for d in alone] == [deep] and [d.doc_id for d in docs] == ["b::ok.md"]
    assert failures[0].reason == "its id is longer than 1024 bytes: shorten it" and len(failures[0].doc_id) < 100


def test_the_old_single_source_record_reads_as_the_first_source_and_is_replaced_once_saved(tmp_path: Path) -> None:
    store = DictStore({legacy_source_key(ALIAS, "t"): {"path": str(tmp_path / "old"), "prune": True}})
    sources = tenant_sources(store)
    assert sources.sources == [NamedSource(LEGACY_NAME, str(tmp_path / "old"), True, "")]
    assert sources.choose(tmp_path / "old").name == LEGACY_NAME
    added = sources.choose(tmp_path / "new")
    assert added.prefix == "new::"
    sources.add(added)
    sources.save()
    assert legacy_source_key(ALIAS, "t") not in store.data
    names = [s["name"] for s in store.data[sources_key(ALIAS, "t")]["sources"]]
    assert names == [LEGACY_NAME, "new"]
    assert [s.name for s in tenant_sources(store).sources] == [LEGACY_NAME, "new"]


def test_tenants_have_their_own_sources(tmp_path: Path) -> None:
    store = DictStore()
    recorded(store, "t", tenant_sources(store, "t").choose(tmp_path / "a"))
    assert tenant_sources(store, "u").choose(tmp_path / "b").prefix == ""
