import json
from pathlib import Path

import pytest

from evals.beir import EvalSet
from training.abstention import CalibrationRequest, Examples, calibration_questions, collect_examples, fit
from training.train_reranker import TRAINING_RECORD, held_for_calibration


def test_the_calibration_share_is_fixed_by_the_question_ids() -> None:
    ids = [f"q{n}" for n in range(2000)]
    held = [q for q in ids if held_for_calibration(q, 0.2, 13)]
    assert 0.17 < len(held) / len(ids) < 0.23
    assert held == [q for q in ids if held_for_calibration(q, 0.2, 13)], "the same ones on every run"
    assert not any(held_for_calibration(q, 0.0, 13) for q in ids)


def variant(tmp_path: Path) -> Path:
    root = tmp_path / "variant"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": "x"}) + "\n")
    queries = "".join(json.dumps({"_id": f"q{n}", "text": f"question {n}"}) + "\n" for n in range(4))
    (root / "queries.jsonl").write_text(queries)
    rows = "".join(f"q{n}\td{n}\t1\n" for n in range(4))
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    (root / "unanswerable.txt").write_text("q1\n")
    return root


def test_calibration_uses_only_the_questions_the_reranker_never_saw(tmp_path: Path) -> None:
    reranker = tmp_path / "reranker"
    reranker.mkdir()
    (reranker / TRAINING_RECORD).write_text(json.dumps({"calibration_queries": ["q1", "q2"]}))
    questions, unanswerable, named = calibration_questions(CalibrationRequest(variant(tmp_path), str(reranker)))
    assert set(questions.queries) == {"q1", "q2"} and unanswerable == {"q1"} and named


def test_a_reranker_without_a_record_calibrates_on_the_whole_split(tmp_path: Path) -> None:
    questions, _, named = calibration_questions(CalibrationRequest(variant(tmp_path), str(tmp_path / "external")))
    assert len(questions.queries) == 4 and not named


class FeatureRunner:
    """Stands in for PipelineRunner: the top logit is 5 while the relevant document is a candidate."""

    def __init__(self) -> None:
        self.prefetched: list[str] = []

    def prefetch(self, queries: list[str], service_depth: bool = False) -> None:
        self.prefetched = queries

    def answerability_features(self, query: str, withheld: frozenset[str] = frozenset()) -> list[float] | None:
        relevant = f"d{query.split()[-1]}"
        return [0.0 if relevant in withheld else 5.0, 1.0, 2.0, 0.5]


def test_each_answerable_question_also_counts_once_with_its_documents_withheld(tmp_path: Path) -> None:
    questions = EvalSet.load(variant(tmp_path), "train")
    examples = collect_examples(FeatureRunner(), questions, {"q1"})
    assert examples.ids == ["q0", "q0/withheld", "q1", "q2", "q2/withheld", "q3", "q3/withheld"]
    assert examples.unanswerable == {"q0/withheld", "q1", "q2/withheld", "q3/withheld"}
    assert examples.features[1][0] == 0.0 and examples.features[2][0] == 5.0


def test_the_fitted_model_reproduces_sklearns_probabilities() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rows = [[float(n), float(n % 3), float(n) / 2, 0.3 + n / 100] for n in range(-20, 20)]
    ids = [f"e{n}" for n in range(len(rows))]
    negatives = {i for i, row in zip(ids, rows, strict=True) if row[0] < 0}
    examples = Examples(ids, rows, negatives)
    model, held_out = fit(examples, seed=13)
    reference = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, class_weight="balanced"))
    reference.fit(rows, examples.labels())
    for row in rows[::7]:
        assert model.probability(row) == pytest.approx(reference.predict_proba([row])[0][1], abs=1e-9)
    assert len(held_out) == len(rows) and all(0.0 <= p <= 1.0 for p in held_out)


def test_too_few_of_one_class_is_refused() -> None:
    examples = Examples(["a", "b", "c"], [[1.0, 0, 0, 0], [2.0, 0, 0, 0], [3.0, 0, 0, 0]], {"a"})
    with pytest.raises(ValueError, match="too few"):
        fit(examples, seed=13)


def test_a_wilson_margin_holds_the_budget_at_the_bound_and_calibration_at_the_share_observed() -> None:
    """130 answerable examples, as calibration has: abstaining on 6 of them (0.046) meets 0.05 by the share
    observed, but its Wilson bound (z = 1) is 0.068; with that margin the threshold stays where the bound holds it
    (4 of 130). Calibration takes no margin (z = 0, training/abstention.py: with it the signal abstained barely
    more than the cosine floor on TRAIN)."""
    from evals.abstention import TARGET_FALSE_ABSTENTION, choose_floor, wilson_upper
    from training.abstention import CONFIDENCE_Z, operating_point

    unanswerable = {f"u{n}" for n in range(40)}
    scores = {f"a{n}": 0.10 + 0.005 * n for n in range(130)}
    scores |= {f"u{n}": 0.1025 + 0.005 * n for n in range(40)}  # each just above one more answerable example
    observed = choose_floor(dict(scores), unanswerable)
    bounded = choose_floor(dict(scores), unanswerable, confidence_z=1.0)
    assert observed.falsely_abstained == 6
    lost = bounded.falsely_abstained or 0
    assert wilson_upper(lost, 130, 1.0) <= TARGET_FALSE_ABSTENTION < wilson_upper(lost + 1, 130, 1.0)
    assert bounded.floor is not None and observed.floor is not None and bounded.floor < observed.floor
    chosen = operating_point(scores, unanswerable)
    assert CONFIDENCE_Z == 0.0 and chosen.threshold == observed.floor and chosen.abstention == observed.abstention
