"""Choose the answer check's support threshold (`serve.synthesize.check.min_support`) on SciFact TRAIN.

A SciFact claim is a short statement written from its abstract: the pair (claim, its own abstract) stands
for a supported claim, and (claim, the most similar other abstract by TF-IDF) for a claim citing a passage
on the same subject that does not back it - the hardest case the check meets. For each signal the run
prints its AUC and, at the threshold that accepts `--acceptance` of the supported pairs, the share of the
unsupported ones it still accepts. For post-hoc attribution (`serve.synthesize.check.attribute_min_support`: a
citation the model did not write, added where a returned passage supports a claim) the bar is the other way
round: the threshold that accepts at most `--attribution-false-acceptance` of the unsupported pairs.

  python -m training.support --dataset ../shared/data/scifact [--limit 300] [--acceptance 0.95]
      [--attribution-false-acceptance 0.2]"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

from cluster.config import RagcConfig
from evals.beir import iter_corpus, load_qrels, load_queries
from serve.answer_check import EmbeddingSupport
from serve.text_terms import terms
from serve.types import Passage

SEED = 1


def overlap(claim: str, passage: Passage) -> float:
    wanted = terms(claim)
    return len(wanted & terms(passage.title + " " + passage.text)) / max(1, len(wanted))


def labelled_pairs(dataset: Any, limit: int) -> list[tuple[int, str, Passage]]:
    """(1, claim, its abstract) and (0, claim, the most TF-IDF-similar other abstract) per TRAIN claim."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = {
        str(r["_id"]): Passage(str(r["_id"]), str(r["_id"]), "t", r["text"], title=r.get("title", ""))
        for r in iter_corpus(dataset)
    }
    ids = list(docs)
    vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True)
    matrix = vectorizer.fit_transform([docs[i].title + " " + docs[i].text for i in ids])
    queries, qrels = load_queries(dataset), load_qrels(dataset, "train")
    chosen = sorted(qrels)
    random.Random(SEED).shuffle(chosen)
    pairs: list[tuple[int, str, Passage]] = []
    for qid in chosen[:limit]:
        relevant = set(qrels[qid])
        similarity = (matrix @ vectorizer.transform([queries[qid]]).T).toarray().ravel()
        negative = next(ids[n] for n in similarity.argsort()[::-1] if ids[n] not in relevant)
        pairs += [(1, queries[qid], docs[sorted(relevant)[0]]), (0, queries[qid], docs[negative])]
    return pairs


def summary(labels: list[int], scores: list[float], acceptance: float) -> dict[str, float]:
    import numpy as np
    from sklearn.metrics import roc_auc_score

    y, x = np.array(labels), np.array(scores)
    threshold = float(np.quantile(x[y == 1], 1 - acceptance))
    return {
        "auc": round(float(roc_auc_score(y, x)), 4),
        "threshold": round(threshold, 4),
        "supported_accepted": round(float((x[y == 1] >= threshold).mean()), 4),
        "unsupported_accepted": round(float((x[y == 0] >= threshold).mean()), 4),
    }


def attribution_summary(labels: list[int], scores: list[float], false_acceptance: float) -> dict[str, float]:
    import numpy as np

    y, x = np.array(labels), np.array(scores)
    threshold = float(np.quantile(x[y == 0], 1 - false_acceptance))
    return {
        "threshold": round(threshold, 4),
        "supported_accepted": round(float((x[y == 1] >= threshold).mean()), 4),
        "unsupported_accepted": round(float((x[y == 0] >= threshold).mean()), 4),
    }


def main() -> None:
    from pathlib import Path

    from cluster.models import SentenceTransformerEmbedder

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=300, help="TRAIN claims (two pairs each)")
    parser.add_argument("--acceptance", type=float, default=0.95, help="share of supported claims to accept")
    parser.add_argument(
        "--attribution-false-acceptance", type=float, default=0.2, help="share of unsupported claims to accept"
    )
    args = parser.parse_args()
    pairs = labelled_pairs(args.dataset, args.limit)
    labels = [label for label, _, _ in pairs]
    support = EmbeddingSupport(SentenceTransformerEmbedder(RagcConfig().embedding))
    cosines = support.score([(claim, passage) for _, claim, passage in pairs])
    overlaps = [overlap(claim, passage) for _, claim, passage in pairs]
    result = {
        "dataset": args.dataset.name,
        "split": "train",
        "claims": len(pairs) // 2,
        "acceptance": args.acceptance,
        "best_sentence_cosine": summary(labels, cosines, args.acceptance),
        "content_word_overlap": summary(labels, overlaps, args.acceptance),
        "attribution": attribution_summary(labels, cosines, args.attribution_false_acceptance),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
