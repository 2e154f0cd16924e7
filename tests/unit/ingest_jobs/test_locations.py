"""Sources by location: local paths and object-store URLs (fsspec's in-memory store stands in for a bucket
here; tests/integration/test_object_store.py runs against an S3 server)."""

from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from ingest_jobs.loaders import ParseError, parse, scan
from ingest_jobs.locations import base_name, exists, normalized, remote_scheme
from ingest_jobs.sources import fallback_name


@pytest.fixture
def bucket() -> Iterator[fsspec.AbstractFileSystem]:
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    yield fs
    fs.store.clear()


def put(fs: fsspec.AbstractFileSystem, key: str, data: bytes) -> None:
    fs.pipe_file(f"/docs/{key}", data)


def test_locations_are_recorded_absolute_or_as_urls(tmp_path: Path) -> None:
    assert remote_scheme("s3://bucket/prefix") == "s3" and remote_scheme("gs://b") == "gs"
    assert remote_scheme(str(tmp_path)) is None and remote_scheme(f"file://{tmp_path}") is None
    assert normalized("s3://bucket/prefix/") == "s3://bucket/prefix"
    assert normalized(f"file://{tmp_path}") == normalized(tmp_path) == str(tmp_path.resolve())
    assert base_name("s3://bucket/team/handbook/") == "handbook" and base_name("s3://bucket") == "bucket"
    assert fallback_name("s3://bucket/My Docs") == "My-Docs"
    (tmp_path / "a.md").write_text("# A\n\nwords")
    assert [d.doc_id for d in scan(f"file://{tmp_path}", 1000).documents] == ["a.md"]
    assert exists(f"file://{tmp_path}") and not exists(f"file://{tmp_path}/nope")


def test_a_bucket_is_listed_without_reading_a_body_and_an_edit_changes_the_hash(
    bucket: fsspec.AbstractFileSystem,
) -> None:
    put(bucket, "guide.md", b"# Guide\n\nTenants are kept apart.")
    put(bucket, "notes/plain.txt", b"plain words")
    put(bucket, "notes/plain.txt.meta.json", b'{"year": 2023}')
    put(bucket, "image.png", b"\x89PNG")
    put(bucket, ".hidden.md", b"secret")
    found = scan("memory://docs", 10_000)
    assert [d.doc_id for d in found.documents] == ["guide.md", "notes/plain.txt"]
    assert (found.listed, found.read, found.skipped) == (3, 0, ["image.png"])
    plain = found.documents[1]
    assert plain.path.startswith("memory://") and plain.path.endswith("/docs/notes/plain.txt")
    assert plain.extra == {"sidecar_url": plain.path + ".meta.json"}
    assert parse(plain).year == 2023 and parse(plain).text == "plain words"

    put(bucket, "guide.md", b"# Guide\n\nTenants are kept apart, always.")
    again = {d.doc_id: d.content_hash for d in scan("memory://docs", 10_000).documents}
    assert again["guide.md"] != found.documents[0].content_hash
    assert again["notes/plain.txt"] == plain.content_hash
    put(bucket, "notes/plain.txt.meta.json", b'{"year": 2024}')
    assert scan("memory://docs", 10_000).documents[1].content_hash != plain.content_hash, "a sidecar edit counts"


def test_bad_objects_fail_with_reasons_and_lose_nothing_else(bucket: fsspec.AbstractFileSystem) -> None:
    put(bucket, "big.txt", b"x" * 200)
    put(bucket, "empty.txt", b"")
    put(bucket, "latin.txt", "caf\xe9".encode("latin-1"))
    put(bucket, "typed.md", b"# T\n\nbody")
    put(bucket, "typed.md.meta.json", b'{"year": "soon"}')
    put(bucket, "fine.txt", b"fine words")
    found = scan("memory://docs", 100)
    assert {f.doc_id: f.reason for f in found.failures} == {
        "big.txt": "file too large (200 bytes > 100)",
        "empty.txt": "empty file",
    }
    by_id = {d.doc_id: d for d in found.documents}
    assert parse(by_id["fine.txt"]).text == "fine words"
    with pytest.raises(ParseError, match="not valid UTF-8"):
        parse(by_id["latin.txt"])
    with pytest.raises(ParseError, match="year"):
        parse(by_id["typed.md"])


def test_a_missing_bucket_prefix_is_an_error() -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        scan("memory://nowhere", 100)
