"""Document and chunk identity, tenant ids."""

import pytest

from ingest_jobs.documents import check_tenant, chunk_id


def test_chunk_ids_are_deterministic_and_tenant_scoped() -> None:
    assert chunk_id("t", "d", "x", 0) == chunk_id("t", "d", "x", 0)
    assert chunk_id("t", "d", "x", 0) != chunk_id("u", "d", "x", 0)
    assert chunk_id("t", "d", "x", 0) != chunk_id("t", "d", "x", 1)


def test_tenant_ids_are_validated() -> None:
    assert check_tenant("acme-1") == "acme-1"
    for bad in ["", "a b", 'x" or 1==1', "-lead", "a" * 65]:
        with pytest.raises(ValueError):
            check_tenant(bad)
