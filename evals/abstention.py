"""Abstention: a corpus variant with the answers of some questions removed, the floor chosen on TRAIN,
and the abstention / false-abstention rates it gives on TEST.

The floor drops every candidate whose dense cosine is below it, so a question abstains exactly when its
best candidate's cosine is below the floor: one retrieval per question gives the whole trade-off curve."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.beir import Qrels, iter_corpus, load_qrels, load_queries, write_qrels
from serve.answerability import FEATURES, AnswerabilityModel

VARIANT_SPLITS = ("train", "test")
UNANSWERABLE_FILE = "unanswerable.txt"
TARGET_ABSTENTION = 0.9
TARGET_FALSE_ABSTENTION = 0.05


def build_variant(dataset: Path, out: Path, fraction: float = 0.1, seed: int = 13) -> dict[str, Any]:
    """Copy `dataset` without the relevant documents of a fixed random `fraction` of each split's queries.

    Every query left with no relevant document (the chosen ones, and any other whose documents they
    shared) is listed in `unanswerable.txt`; qrels are copied unchanged."""
    rng = random.Random(seed)
    queries = load_queries(dataset)
    splits = {s: load_qrels(dataset, s) for s in VARIANT_SPLITS if (dataset / "qrels" / f"{s}.tsv").exists()}
    removed: set[str] = set()
    chosen: dict[str, list[str]] = {}
    for split, qrels in splits.items():
        ids = sorted(q for q in qrels if q in queries)
        chosen[split] = sorted(rng.sample(ids, max(1, round(fraction * len(ids)))))
        removed |= {doc for q in chosen[split] for doc, grade in qrels[q].items() if grade > 0}
    out.mkdir(parents=True, exist_ok=True)
    kept = 0
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for record in iter_corpus(dataset):
            if str(record["_id"]) not in removed:
                handle.write(json.dumps(record) + "\n")
                kept += 1
    (out / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()), encoding="utf-8"
    )
    unanswerable: list[str] = []
    for split, qrels in splits.items():
        write_qrels(out / "qrels" / f"{split}.tsv", qrels)
        unanswerable += [q for q, docs in qrels.items() if not any(g > 0 and d not in removed for d, g in docs.items())]
    (out / UNANSWERABLE_FILE).write_text("\n".join(sorted(set(unanswerable))) + "\n", encoding="utf-8")
    return {
        "documents_kept": kept,
        "documents_removed": len(removed),
        "chosen": {s: len(c) for s, c in chosen.items()},
        "unanswerable": {s: sum(q in set(unanswerable) for q in qrels) for s, qrels in splits.items()},
        "fraction": fraction,
        "seed": seed,
    }


def read_ids(path: Path) -> set[str]:
    return {line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}


@dataclass(frozen=True)
class Rates:
    """Exact shares (rounded only for the report) and, where known, the counts behind them: a comparison such
    as "twice as many" must be made on counts, since 4/67 rounds to 0.0597 and 2/67 to 0.0299."""

    floor: float
    abstention: float  # share of unanswerable questions that got no passage
    false_abstention: float  # share of answerable questions that got no passage
    abstained: int | None = None  # unanswerable questions that got no passage
    falsely_abstained: int | None = None  # answerable questions that got no passage

    def as_dict(self) -> dict[str, float]:
        rates = {
            "floor": round(self.floor, 4),
            "abstention": round(self.abstention, 4),
            "false_abstention": round(self.false_abstention, 4),
        }
        counts = {"abstained": self.abstained, "falsely_abstained": self.falsely_abstained}
        return rates | {name: n for name, n in counts.items() if n is not None}

    @classmethod
    def of(cls, point: Any) -> Rates:
        """From a calibration file's operating point (shares only)."""
        return cls(point.threshold, point.abstention, point.false_abstention)


def rates_at(floor: float, best: dict[str, float | None], unanswerable: set[str]) -> Rates:
    """`best`: question id -> best candidate cosine (None: no candidate at all)."""
    abstained = {q for q, cos in best.items() if cos is None or cos < floor}
    bad = [q for q in best if q in unanswerable]
    good = [q for q in best if q not in unanswerable]
    caught, lost = sum(q in abstained for q in bad), sum(q in abstained for q in good)
    return Rates(floor, caught / max(1, len(bad)), lost / max(1, len(good)), caught, lost)


def curve(best: dict[str, float | None], unanswerable: set[str], step: float = 0.01) -> list[Rates]:
    floors = [round(n * step, 4) for n in range(round(1 / step) + 1)]
    return [rates_at(f, best, unanswerable) for f in floors]


def wilson_upper(k: int, n: int, z: float) -> float:
    """Upper end of the Wilson score interval of a share of k in n, z standard deviations up (z = 0: k / n)."""
    if n == 0:
        return 0.0
    share = k / n
    centre = share + z * z / (2 * n)
    spread = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return (centre + spread) / (1 + z * z / n)


def choose_floor(
    best: dict[str, float | None],
    unanswerable: set[str],
    budget: float = TARGET_FALSE_ABSTENTION,
    confidence_z: float = 0.0,
) -> Rates:
    """The floor that abstains most on unanswerable questions while falsely abstaining on at most `budget`
    of the answerable ones (candidate floors: the observed scores). `confidence_z` > 0 holds the budget on the
    Wilson upper bound of the false abstention instead of on the share observed, so that a floor chosen on few
    questions keeps a margin (training/operating_points.py judges such rules)."""
    answerable = sum(q not in unanswerable for q in best)
    candidates = sorted({c for c in best.values() if c is not None} | {-1.0, 0.0})
    allowed = [
        r
        for f in candidates
        if wilson_upper((r := rates_at(f, best, unanswerable)).falsely_abstained or 0, answerable, confidence_z)
        <= budget
    ]
    return max(allowed, key=lambda r: (r.abstention, -r.false_abstention, -r.floor))


def split_members(qrels: Qrels, unanswerable: set[str]) -> tuple[list[str], list[str]]:
    answerable = [q for q in qrels if q not in unanswerable]
    return answerable, [q for q in qrels if q in unanswerable]


def trade_off_auc(scores: dict[str, float | None], unanswerable: set[str]) -> float:
    """Area under the abstention / false-abstention curve a threshold on `scores` sweeps (abstain below it):
    the chance that an unanswerable question scores below an answerable one (0.5 = no signal)."""
    from sklearn.metrics import roc_auc_score

    ids = list(scores)
    answerable = [int(q not in unanswerable) for q in ids]
    if len(set(answerable)) < 2:
        raise ValueError("the area needs both answerable and unanswerable questions")
    ranked = [-1e9 if scores[q] is None else scores[q] for q in ids]  # no candidate: abstains at any threshold
    return round(float(roc_auc_score(answerable, ranked)), 4)


def signal_section(
    features: dict[str, list[float] | None],
    model: AnswerabilityModel,
    unanswerable: set[str],
    floors: dict[str, float],
    threshold: float | None = None,
) -> dict[str, Any]:
    """The calibrated answerability on the evaluated questions, at `threshold` (default: the operating point
    chosen at calibration), alone and behind each cosine floor in `floors` (name -> floor), and the areas
    under each curve."""
    cosine_at = FEATURES.index("max_cosine")
    cosines = {q: None if f is None else f[cosine_at] for q, f in features.items()}
    signal = {q: None if f is None else model.probability(f) for q, f in features.items()}
    if threshold is None:
        threshold = model.operating_point.threshold
    behind = {
        name: {q: p if _reaches(cosines[q], floor) else None for q, p in signal.items()}
        for name, floor in floors.items()
    }
    arms = {"cosine": cosines, "signal": signal} | {f"signal+{name}": scores for name, scores in behind.items()}
    test = {name: rates_at(threshold, scores, unanswerable) for name, scores in arms.items() if name != "cosine"}
    # the cosine floor's best case on these very questions at no more false abstention than the signal's
    matched = choose_floor(cosines, unanswerable, budget=test["signal"].false_abstention)
    return {
        "threshold": threshold,
        "floors": floors,
        "test": {name: rates.as_dict() for name, rates in test.items()},
        "cosine_at_the_same_false_abstention": matched.as_dict(),
        "auc": {name: trade_off_auc(scores, unanswerable) for name, scores in arms.items()},
        "curves": {name: [r.as_dict() for r in curve(scores, unanswerable)] for name, scores in arms.items()},
    }


def _reaches(cosine: float | None, floor: float) -> bool:
    return cosine is not None and cosine >= floor
