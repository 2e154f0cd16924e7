"""`python -m training.operating_points`: how an operating-point rule holds the false-abstention budget on
questions it was not chosen on, judged on TRAIN only.

Calibration (`ragc calibrate-abstention`) chooses the answerability signal's threshold as the one that abstains
most while falsely abstaining on at most 0.05 of the answerable examples it sees: about 130 answerable ones, the
held-out fifth of TRAIN the reranker never trained on. A threshold chosen at the edge of a budget on a small
sample overshoots it on other questions about as often as not. This splits calibration's examples in halves by
question, many times: each rule chooses a threshold on one half (on the cross-validated probabilities of a model
fitted to that half, as calibration does, and on the cosine feature for the floor), and the half it never saw
says what its false abstention and abstention were. TEST is never read.

    python -m training.operating_points --dataset .ragc/scifact_abstention --reranker .ragc/reranker
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

from evals.abstention import TARGET_FALSE_ABSTENTION, Rates, choose_floor, rates_at
from training.abstention import COSINE, CalibrationRequest, Examples, calibration_examples, fit

DESCRIPTION = "how operating-point rules hold the false-abstention budget on unseen TRAIN questions"
# rule -> confidence_z of choose_floor: 0 is calibration's rule (the share observed)
RULES = {"observed share (calibration's rule)": 0.0, "Wilson bound, z = 0.5": 0.5, "Wilson bound, z = 1": 1.0}


def question_of(example_id: str) -> str:
    return example_id.split("/", 1)[0]  # "q12" and its withheld copy "q12/withheld" go together


def subset(examples: Examples, questions: set[str]) -> Examples:
    keep = [n for n, i in enumerate(examples.ids) if question_of(i) in questions]
    ids = [examples.ids[n] for n in keep]
    return Examples(ids, [examples.features[n] for n in keep], examples.unanswerable & set(ids))


def half_splits(examples: Examples, splits: int, seed: int) -> Iterator[tuple[Examples, Examples]]:
    """Halves by question, each half with about half of the questions that have an answerable example."""
    rng = random.Random(seed)
    questions = sorted({question_of(i) for i in examples.ids})
    with_answer = {question_of(i) for i in examples.ids if i not in examples.unanswerable}
    for _ in range(splits):
        chosen: set[str] = set()
        for group in ([q for q in questions if q in with_answer], [q for q in questions if q not in with_answer]):
            rng.shuffle(group)
            chosen |= set(group[: len(group) // 2])
        yield subset(examples, chosen), subset(examples, set(questions) - chosen)


def judge(examples: Examples, splits: int, seed: int, rules: dict[str, float] = RULES) -> dict[str, dict[str, float]]:
    """Per rule, over the splits: the unseen half's false abstention (mean, and the share of splits over the
    budget) and abstention, for the signal and for a cosine floor chosen the same way, and the share of splits
    where the signal falsely abstained on no more answerable examples than the floor."""
    seen: dict[str, dict[str, list[float]]] = {name: {} for name in rules}
    for split, (chosen_on, judged_on) in enumerate(half_splits(examples, splits, seed)):
        model, held_out = fit(chosen_on, seed + split)
        scores = {
            "signal": (
                dict(zip(chosen_on.ids, held_out, strict=True)),
                {i: model.probability(f) for i, f in zip(judged_on.ids, judged_on.features, strict=True)},
            ),
            "cosine": (
                {i: f[COSINE] for i, f in zip(chosen_on.ids, chosen_on.features, strict=True)},
                {i: f[COSINE] for i, f in zip(judged_on.ids, judged_on.features, strict=True)},
            ),
        }
        for name, z in rules.items():
            unseen: dict[str, Rates] = {}
            for kind, (choose_on, apply_to) in scores.items():
                floor = choose_floor(dict(choose_on), chosen_on.unanswerable, confidence_z=z).floor
                unseen[kind] = rates_at(floor, dict(apply_to), judged_on.unanswerable)
                record = seen[name]
                record.setdefault(f"{kind}_false_abstention", []).append(unseen[kind].false_abstention)
                over = unseen[kind].false_abstention > TARGET_FALSE_ABSTENTION
                record.setdefault(f"{kind}_over_budget", []).append(float(over))
                record.setdefault(f"{kind}_abstention", []).append(unseen[kind].abstention)
            no_more = (unseen["signal"].falsely_abstained or 0) <= (unseen["cosine"].falsely_abstained or 0)
            seen[name].setdefault("signal_no_more_than_cosine", []).append(float(no_more))
    return {name: {k: round(statistics.fmean(v), 3) for k, v in record.items()} for name, record in seen.items()}


def table(results: dict[str, dict[str, float]]) -> str:
    columns = [
        "signal_false_abstention",
        "signal_over_budget",
        "signal_abstention",
        "cosine_false_abstention",
        "cosine_over_budget",
        "cosine_abstention",
        "signal_no_more_than_cosine",
    ]
    lines = ["| rule | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(f"{row[c]:.3f}" for c in columns) + " |" for name, row in results.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from cluster.config import load_config
    from cluster.models import sleep_at_barriers

    parser = argparse.ArgumentParser(prog="python -m training.operating_points", description=DESCRIPTION)
    parser.add_argument("--dataset", type=Path, required=True, help="the abstention variant (ragc eval-variant)")
    parser.add_argument("--reranker", required=True, help="the reranker calibration is for")
    parser.add_argument("--splits", type=int, default=200)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    sleep_at_barriers()
    examples, _, questions, _ = calibration_examples(load_config(), CalibrationRequest(args.dataset, args.reranker))
    results = judge(examples, args.splits, args.seed)
    print(f"{len(examples.ids)} examples from {questions} questions, {args.splits} half splits", file=sys.stderr)
    print(table(results), file=sys.stderr)
    summary = {"examples": len(examples.ids), "questions": questions, "splits": args.splits, "rules": results}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
