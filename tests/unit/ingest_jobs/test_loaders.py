import json
import os
from pathlib import Path

import pytest

from ingest_jobs.loaders import ParseError, parse, scan
from tests.unit.ingest_jobs.pdfs import text_pdf

LIMIT = 1024 * 1024


def write(root: Path, name: str, data: bytes | str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_scan_reports_bad_files_and_keeps_the_rest(tmp_path: Path) -> None:
    write(tmp_path, "good.txt", "hello world")
    write(tmp_path, "sub/guide.md", "# Guide\n\ntext")
    write(tmp_path, "latin1.txt", "caf\xe9".encode("latin-1"))
    write(tmp_path, "empty.md", "   \n")
    write(tmp_path, "image.png", b"\x89PNG")
    write(tmp_path, ".hidden/x.txt", "secret")
    found = scan(tmp_path, LIMIT)
    assert sorted(d.doc_id for d in found.documents) == ["good.txt", "sub/guide.md"]
    reasons = {f.doc_id: f.reason for f in found.failures}
    assert reasons["latin1.txt"].startswith("not valid UTF-8")
    assert reasons["empty.md"] == "empty file"
    assert found.skipped == ["image.png"]


def test_a_file_name_that_is_not_utf8_fails_that_file_only(tmp_path: Path) -> None:
    """Linux names are bytes: Python decodes the undecodable ones to lone surrogates, which once failed the
    whole Ray job where the chunk id was hashed."""
    write(tmp_path, "good.md", "# Good\n\ntext")
    write(tmp_path, os.fsdecode(b"caf\xe9 notes.md"), "# Fine text, a Latin-1 name")
    write(tmp_path, os.fsdecode(b"old\xff/corpus.jsonl"), json.dumps({"_id": "1", "text": "abc"}))
    write(tmp_path, os.fsdecode(b"pic\xff.png"), b"\x89PNG")
    found = scan(tmp_path, LIMIT)
    assert [d.doc_id for d in found.documents] == ["good.md"]
    assert {f.doc_id: f.reason for f in found.failures} == {
        "caf\ufffd notes.md": "file name is not valid UTF-8: rename it",
        "old\ufffd/corpus.jsonl": "file name is not valid UTF-8: rename it",
    }
    assert found.skipped == ["pic\ufffd.png"] and found.listed == 4


def test_too_large_file_is_a_failure(tmp_path: Path) -> None:
    write(tmp_path, "big.txt", "x" * 100)
    found = scan(tmp_path, 10)
    assert found.failures[0].reason.startswith("file too large")


def test_doc_ids_are_source_derived_and_hashes_stable(tmp_path: Path) -> None:
    write(tmp_path, "a/b.txt", "same")
    first = scan(tmp_path, LIMIT).documents[0]
    second = scan(tmp_path, LIMIT).documents[0]
    assert first.doc_id == "a/b.txt"
    assert first.content_hash == second.content_hash
    write(tmp_path, "a/b.txt", "changed")
    assert scan(tmp_path, LIMIT).documents[0].content_hash != first.content_hash


def test_beir_corpus_lines(tmp_path: Path) -> None:
    lines = [
        json.dumps({"_id": "d1", "title": "T", "text": "body", "metadata": {"year": 2019}}),
        "{broken",
        json.dumps({"title": "no id"}),
        json.dumps({"_id": "d1", "text": "duplicate"}),
        json.dumps({"_id": 7, "text": "numeric id"}),
        # valid JSON, not valid Unicode: each failed the whole job where its chunk id was hashed
        '{"_id": "s\\ud800", "text": "a lone surrogate in the id"}',
        '{"_id": "s2", "title": "\\udfff", "text": "in the title"}',
        # a year past any INT64 failed the whole upsert batch; JSON's Infinity stopped the scan itself
        '{"_id": "y1", "text": "far future", "metadata": {"year": 1e30}}',
        '{"_id": "y2", "text": "infinite", "metadata": {"year": Infinity, "updated_at": 1e300}}',
    ]
    write(tmp_path, "corpus.part1.jsonl", "\n".join(lines))
    write(tmp_path, "corpus.part2.jsonl", json.dumps({"_id": "d9", "text": "second part"}))
    found = scan(tmp_path, LIMIT)
    docs = {d.doc_id: d for d in found.documents}
    assert sorted(docs) == ["7", "d1", "d9"]
    assert docs["d1"].year == 2019
    assert parse(docs["d1"]) == ("T", "T\n\nbody", 2019, "", (), ())
    assert len(found.failures) == 7
    reasons = {f.doc_id: f.reason for f in found.failures}
    assert reasons["y1"].startswith("metadata year 1000000000000000019884624838656 is not between 0 and 9999")
    assert reasons["y2"] == "metadata updated_at does not fit a 64-bit integer"  # Infinity is no year: 0
    assert reasons["s\ufffd"] == "_id holds an unpaired surrogate escape: not valid Unicode"
    assert reasons["s2"] == "title holds an unpaired surrogate escape: not valid Unicode"


def test_parse_html_and_markdown(tmp_path: Path) -> None:
    write(tmp_path, "p.html", "<html><head><title>Page</title><style>x{}</style></head><body><p>Hi</p></body></html>")
    write(tmp_path, "m.md", "intro\n# Heading\nbody")
    docs = {d.doc_id: d for d in scan(tmp_path, LIMIT).documents}
    title, text, *_ = parse(docs["p.html"])
    assert title == "Page"
    assert text.endswith("Hi") and "x{}" not in text
    assert parse(docs["m.md"])[0] == "Heading"


def test_corrupt_pdf_is_a_parse_error(tmp_path: Path) -> None:
    write(tmp_path, "bad.pdf", b"%PDF-1.4 this is not really a pdf")
    doc = scan(tmp_path, LIMIT).documents[0]
    with pytest.raises(ParseError):
        parse(doc)


def test_file_edited_after_scan_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "a.txt", "one")
    doc = scan(tmp_path, LIMIT).documents[0]
    path.write_text("two")
    with pytest.raises(ParseError, match="changed"):
        parse(doc)


def test_a_valid_pdf_gives_its_text_title_and_year(tmp_path: Path) -> None:
    info = {"/Title": "Sharding Notes", "/Author": "A. Writer", "/CreationDate": "D:20210304120000Z"}
    write(tmp_path, "notes.pdf", text_pdf(["Replicas move between shards.", "Second page words."], info))
    title, text, year, *_ = parse(scan(tmp_path, LIMIT).documents[0])
    assert title == "Sharding Notes" and year == 2021
    assert "Replicas move between shards." in text and "Second page words." in text


def test_a_pdf_whose_font_maps_to_a_lone_surrogate_gives_text_that_encodes(tmp_path: Path) -> None:
    """pypdf passes a ToUnicode map's lone surrogate through; hashing that text failed the whole job."""
    write(tmp_path, "odd.pdf", text_pdf(["Broken xAy glyph map."], {"/Title": "Odd"}, to_unicode={"A": "D800"}))
    title, text, *_ = parse(scan(tmp_path, LIMIT).documents[0])
    assert title == "Odd" and "Broken x\ufffdy glyph map." in text
    text.encode("utf-8")


def test_metadata_from_front_matter_html_meta_and_a_sidecar_that_wins(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "---\ntitle: Front Title\nyear: 2022\ntags: [ops, k8s]\n---\n# Heading\nbody words")
    write(
        tmp_path,
        "b.html",
        '<html><head><meta name="citation_publication_date" content="2020-05-01">'
        '<meta name="author" content="X"></head><body><p>page text</p></body></html>',
    )
    write(tmp_path, "c.txt", "plain words")
    write(tmp_path, "c.txt.meta.json", json.dumps({"year": 2018, "title": "Sidecar Title"}))
    write(tmp_path, "a.md.meta.json", json.dumps({"year": 2023}))
    found = scan(tmp_path, LIMIT)
    assert not found.failures and not found.skipped  # a sidecar is read with its document, never on its own
    docs = {d.doc_id: parse(d) for d in found.documents}
    assert docs["a.md"].title == "Front Title" and docs["a.md"].year == 2023  # the sidecar's year wins
    assert not docs["a.md"].text.startswith("---") and "title:" not in docs["a.md"].text
    assert docs["a.md"].tags == ("ops", "k8s") and docs["a.md"].author == ""
    assert docs["b.html"].year == 2020 and docs["b.html"].title == "b" and docs["b.html"].author == "X"
    assert docs["c.txt"] == ("Sidecar Title", "plain words", 2018, "", (), ())


def test_tags_are_kept_once_each_and_tags_no_filter_could_match_fail_their_document(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "---\ntags: ' ops , k8s,ops,, '\nauthor: '  Ann Lee '\naccess: [hr, hr]\n---\nbody")
    write(tmp_path, "many.md", "---\ntags: [" + ", ".join(f"t{n}" for n in range(65)) + "]\n---\nbody")
    write(tmp_path, "long.md", f"---\ntags: [{'x' * 129}]\n---\nbody")
    write(tmp_path, "quote.md", "---\ntags: ['it''s']\n---\nbody")
    write(tmp_path, "typed.txt", "words")
    write(tmp_path, "typed.txt.meta.json", json.dumps({"tags": [1, 2]}))
    found = scan(tmp_path, LIMIT)
    docs = {d.doc_id: d for d in found.documents}
    parsed = parse(docs["a.md"])
    assert parsed.tags == ("ops", "k8s") and parsed.author == "Ann Lee" and parsed.access == ("hr",)
    for name, reason in [
        ("many.md", "at most 64 tags, got 65"),
        ("long.md", "one of the tags is longer than 128 characters"),
        ("quote.md", "holds a quote"),
    ]:
        with pytest.raises(ParseError, match=reason):
            parse(docs[name])
    # a sidecar is checked while scanning
    assert [f.doc_id for f in found.failures] == ["typed.txt"]
    assert "tags.0 input should be a valid string" in found.failures[0].reason


def test_corpus_records_carry_their_declared_author_and_tags(tmp_path: Path) -> None:
    lines = [
        json.dumps({"_id": "a", "text": "one", "metadata": {"author": "Ann", "tags": "x, y", "access": ["hr"]}}),
        json.dumps({"_id": "b", "text": "two", "metadata": {"tags": {"not": "a list"}}}),
    ]
    write(tmp_path, "corpus.jsonl", "\n".join(lines))
    found = scan(tmp_path, LIMIT)
    assert parse(found.documents[0]) == ("", "one", 0, "Ann", ("x", "y"), ("hr",))
    assert [f.doc_id for f in found.failures] == ["b"] and "tags" in found.failures[0].reason


def test_editing_only_the_sidecar_changes_the_documents_hash(tmp_path: Path) -> None:
    write(tmp_path, "c.txt", "plain words")
    before = scan(tmp_path, LIMIT).documents[0].content_hash
    write(tmp_path, "c.txt.meta.json", json.dumps({"year": 2018}))
    assert scan(tmp_path, LIMIT).documents[0].content_hash != before


def test_metadata_of_the_wrong_type_fails_that_document_only(tmp_path: Path) -> None:
    write(tmp_path, "bad.md", "---\nyear: soon\n---\nbody")
    write(tmp_path, "list.md", "---\n- not\n- a mapping\n---\nbody")
    write(tmp_path, "side.txt", "words")
    write(tmp_path, "side.txt.meta.json", json.dumps({"year": "2020-ish"}))
    write(tmp_path, "good.md", "---\nyear: 2021\n---\nbody")
    found = scan(tmp_path, LIMIT)
    assert [f.doc_id for f in found.failures] == ["side.txt"] and "year" in found.failures[0].reason
    docs = {d.doc_id: d for d in found.documents}
    with pytest.raises(ParseError, match=r"year .*'soon'"):
        parse(docs["bad.md"])
    with pytest.raises(ParseError, match="mapping"):
        parse(docs["list.md"])
    assert parse(docs["good.md"]).year == 2021
