"""Questions for `ragc eval-answers`: a BEIR-layout dataset's queries with their conversation so far
(`metadata.history`), the human answers when the dataset has them (`answers.jsonl`, INSCIT's layout), the
documents the humans used (qrels) and the questions whose answer is not in the corpus (`unanswerable.txt`).

SciFact has claims, qrels and no human answers: only its citation figures are scored."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.abstention import read_ids
from evals.beir import DatasetError, load_qrels

ANSWERS_FILE = "answers.jsonl"
UNANSWERABLE_FILE = "unanswerable.txt"
NO_ANSWER_TYPES = ("noAnswerButRelevantInfo", "noAnswerNoRelevantInfo")


@dataclass(frozen=True)
class AnswerQuestion:
    qid: str
    text: str
    history: tuple[tuple[str, str], ...]  # (role, content), oldest first
    references: tuple[str, ...]  # human answers that answer it (no "not in the source" replies)
    gold_docs: frozenset[str]  # documents the humans used (qrels with a positive grade)
    unanswerable: bool


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _history(record: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    turns = (record.get("metadata") or {}).get("history") or []
    return tuple((str(t["role"]), str(t["content"])) for t in turns if isinstance(t, dict))


def _references(root: Path) -> dict[str, tuple[str, ...]]:
    path = root / ANSWERS_FILE
    if not path.exists():
        return {}
    return {
        str(r["_id"]): tuple(
            str(a["text"]).strip() for a in r.get("responses", []) if a.get("type") not in NO_ANSWER_TYPES
        )
        for r in _read_jsonl(path)
    }


def spread(ids: list[str], limit: int) -> list[str]:
    """`limit` ids spread evenly over the list (every k-th), so a slice sees every part of the set: the
    first N turns of a conversational set are a few conversations on one topic."""
    if not limit or limit >= len(ids):
        return ids
    return [ids[i * len(ids) // limit] for i in range(limit)]


def load_answer_set(root: Path, split: str = "test", limit: int = 0) -> list[AnswerQuestion]:
    """The split's judged questions, plus the unanswerable ones (judged or not), in the file's order."""
    queries_path = root / "queries.jsonl"
    if not queries_path.exists():
        raise DatasetError(f"no queries.jsonl under {root}")
    records = {str(r["_id"]): r for r in _read_jsonl(queries_path)}
    qrels = load_qrels(root, split)
    unanswerable = read_ids(root / UNANSWERABLE_FILE) if (root / UNANSWERABLE_FILE).exists() else set()
    references = _references(root)
    ids = [qid for qid in records if qid in qrels or qid in unanswerable]
    if not ids:
        raise DatasetError(f"split {split!r} of {root} has no judged question that is in queries.jsonl")
    return [
        AnswerQuestion(
            qid=qid,
            text=str(records[qid]["text"]),
            history=_history(records[qid]),
            references=references.get(qid, ()),
            gold_docs=frozenset(d for d, grade in qrels.get(qid, {}).items() if grade > 0),
            unanswerable=qid in unanswerable,
        )
        for qid in spread(ids, limit)
    ]
