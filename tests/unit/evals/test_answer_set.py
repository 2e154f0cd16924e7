"""Loading questions, their conversation, human answers and gold documents for `ragc eval-answers`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.answer_set import load_answer_set, spread
from evals.beir import DatasetError, write_qrels


def dataset(root: Path, answers: bool = True) -> Path:
    history = [{"role": "user", "content": "what is cheese?"}, {"role": "assistant", "content": "A food."}]
    queries = [
        {"_id": "c:0", "text": "what is cheese?", "metadata": {"history": []}},
        {"_id": "c:1", "text": "and from goats?", "metadata": {"history": history}},
        {"_id": "c:2", "text": "who invented it?", "metadata": {"history": history}},
        {"_id": "c:3", "text": "never judged", "metadata": {}},
    ]
    root.mkdir(parents=True)
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    write_qrels(root / "qrels" / "test.tsv", {"c:0": {"Cheese:1": 1}, "c:1": {"Goat:2": 1, "Cheese:3": 0}})
    (root / "unanswerable.txt").write_text("c:2\n")
    if answers:
        rows = [
            {"_id": "c:1", "responses": [{"type": "directAnswer", "text": "Goat milk is used."}]},
            {"_id": "c:2", "responses": [{"type": "noAnswerNoRelevantInfo", "text": "Not in the source."}]},
        ]
        (root / "answers.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root


def test_questions_carry_history_references_gold_and_the_unanswerable_flag(tmp_path: Path) -> None:
    questions = {q.qid: q for q in load_answer_set(dataset(tmp_path / "d"))}
    assert list(questions) == ["c:0", "c:1", "c:2"]  # judged or unanswerable, in the file's order
    goat = questions["c:1"]
    assert goat.history == (("user", "what is cheese?"), ("assistant", "A food."))
    assert goat.references == ("Goat milk is used.",) and goat.gold_docs == {"Goat:2"}  # grade 0 is not gold
    unanswerable = questions["c:2"]
    assert unanswerable.unanswerable and unanswerable.references == ()  # "not in the source" is no reference
    assert questions["c:0"].references == () and not questions["c:0"].unanswerable


def test_a_dataset_without_answers_has_no_references(tmp_path: Path) -> None:
    assert all(not q.references for q in load_answer_set(dataset(tmp_path / "d", answers=False)))


def test_limit_spreads_over_the_set() -> None:
    assert spread([str(i) for i in range(10)], 3) == ["0", "3", "6"]
    assert spread(["a", "b"], 0) == ["a", "b"] and spread(["a", "b"], 5) == ["a", "b"]


def test_a_split_without_judged_questions_is_refused(tmp_path: Path) -> None:
    root = dataset(tmp_path / "d")
    with pytest.raises(DatasetError, match="no qrels for split 'train'"):
        load_answer_set(root, "train")
