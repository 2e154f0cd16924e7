"""`ragc bench rerank`'s request set."""

import json
from pathlib import Path

from bench.rerank_batching import rerank_requests


def test_each_question_gets_depth_passages_from_a_window_over_the_corpus(tmp_path: Path) -> None:
    docs = [{"_id": f"d{n}", "title": f"T{n}", "text": f"text {n}"} for n in range(10)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{n}", "text": f"Q{n}?"}) + "\n" for n in range(5))
    )
    requests = rerank_requests(tmp_path, count=3, depth=4)
    assert [q for q, _ in requests] == ["Q0?", "Q1?", "Q2?"]
    assert [[p.doc_id for p in ps] for _, ps in requests] == [
        ["d0", "d1", "d2", "d3"],
        ["d1", "d2", "d3", "d4"],
        ["d2", "d3", "d4", "d5"],
    ]
    assert requests[0][1][0].title == "T0" and requests[0][1][0].text == "text 0"
