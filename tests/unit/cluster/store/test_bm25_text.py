import pytest
from pydantic import ValidationError

from cluster.config import MilvusConfig
from cluster.store.bm25_text import bm25_scheme, bm25_text
from cluster.store.schema import LEGACY_BM25, CollectionIdentity


def test_documents_and_queries_meet_on_stems() -> None:
    doc = bm25_text("Mutations in BRCA1 increase the risk; studies of 1,200 cells.", "english")
    query = bm25_text("Does a BRCA1 mutation increase risks?", "english")
    assert doc.split()[:3] == ["mutat", "in", "brca1"]
    assert {"mutat", "increas", "risk", "brca1"} <= set(doc.split()) & set(query.split())


def test_without_a_stemmer_words_are_only_lowercased() -> None:
    assert bm25_text("Studies, STUDIED: studying!", None) == "studies studied studying"


def test_unknown_stemmer_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match="no stemmer for 'klingon'"):
        MilvusConfig(bm25_stemmer="klingon")


def test_collections_record_their_bm25_scheme_and_old_ones_read_as_legacy() -> None:
    identity = CollectionIdentity("m", 4, "c", bm25_scheme("english"))
    props = identity.properties()
    assert CollectionIdentity.from_properties(props) == identity
    del props["ragc.bm25_text"]
    old = CollectionIdentity.from_properties(props)
    assert old is not None and old.bm25 == LEGACY_BM25 != identity.bm25
