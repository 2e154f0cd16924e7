"""The catalog: JSON values in a small Milvus collection."""

from __future__ import annotations


def test_the_catalog_loads_itself_again_after_the_store_restarted() -> None:
    """A restarted milvus comes back with nothing loaded: the catalog's next read loads it and reads again
    (a retrieve replica read the index version from a released catalog until it was replaced)."""
    import pytest
    from pymilvus import MilvusException

    from cluster.store.client import NOT_LOADED, Catalog

    class Restarted:
        def __init__(self) -> None:
            self.loaded = 0
            self.released = True

        def has_collection(self, name: str) -> bool:
            return True

        def load_collection(self, name: str) -> None:
            self.loaded += 1
            self.released = False

        def query(self, name: str, **query: object) -> list[dict]:
            if self.released:
                raise MilvusException(NOT_LOADED, f"collection {name} is in state 'released'")
            return [{"key": "index_version:a", "value": "7"}]

    client = Restarted()
    catalog = Catalog(client, "ragc_meta")  # type: ignore[arg-type]
    client.released = True  # the restart
    assert catalog.get("index_version:a") == 7 and client.loaded == 2
    client.query = lambda name, **q: (_ for _ in ()).throw(MilvusException(1, "other"))  # type: ignore[method-assign]
    with pytest.raises(MilvusException, match="other"):
        catalog.get("x")
