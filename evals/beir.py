"""BEIR-format datasets: `corpus*.jsonl` (several files form one corpus), `queries.jsonl`, `qrels/<split>.tsv`."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Qrels = dict[str, dict[str, int]]  # query id -> doc id -> graded relevance


class DatasetError(ValueError):
    pass


def corpus_files(root: Path) -> list[Path]:
    files = sorted(root.glob("corpus*.jsonl"))
    if not files:
        raise DatasetError(f"no corpus*.jsonl under {root}")
    return files


def iter_corpus(root: Path) -> Iterator[dict[str, Any]]:
    for path in corpus_files(root):
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield json.loads(line)


def load_queries(root: Path, history_user_turns: int = 0) -> dict[str, str]:
    """Query text by id. A conversational query (`metadata.history`, INSCIT's layout) is searched with its
    last `history_user_turns` user turns before it: a follow-up ("how long are they kept?") alone names
    nothing to retrieve."""
    path = root / "queries.jsonl"
    if not path.exists():
        raise DatasetError(f"no queries.jsonl under {root}")
    with path.open(encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    return {str(r["_id"]): conversational_query(r, history_user_turns) for r in records}


def conversational_query(record: dict[str, Any], history_user_turns: int) -> str:
    history = (record.get("metadata") or {}).get("history") or []
    asked = [str(t["content"]) for t in history if isinstance(t, dict) and t.get("role") == "user"]
    earlier = asked[-history_user_turns:] if history_user_turns else []
    return " ".join([*earlier, str(record["text"])])


def load_qrels(root: Path, split: str) -> Qrels:
    path = root / "qrels" / f"{split}.tsv"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in (root / "qrels").glob("*.tsv"))) or "none"
        raise DatasetError(f"no qrels for split {split!r} under {root} (splits: {known})")
    qrels: Qrels = {}
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        for row in reader:
            if len(row) < 3 or row[0] == "query-id":
                continue
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return qrels


def write_qrels(path: Path, qrels: Qrels) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{qid}\t{doc}\t{grade}" for qid, docs in qrels.items() for doc, grade in docs.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class EvalSet:
    """The queries of one split that have judgements, with their judgements."""

    name: str
    split: str
    queries: dict[str, str]
    qrels: Qrels

    @classmethod
    def load(cls, root: Path, split: str, limit: int = 0, history_user_turns: int = 0) -> EvalSet:
        queries = load_queries(root, history_user_turns)
        qrels = load_qrels(root, split)
        ids = [qid for qid in qrels if qid in queries]
        if not ids:
            raise DatasetError(f"split {split!r} of {root} has no judged query that is in queries.jsonl")
        if limit:
            ids = ids[:limit]
        return cls(root.name, split, {q: queries[q] for q in ids}, {q: qrels[q] for q in ids})
