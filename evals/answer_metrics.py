"""Scores of a served answer against human answers: SQuAD-style token F1 and ROUGE-L (Google's reference
implementation, Porter-stemmed), each the best over the references. Citation markers are not words."""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import cache

from rouge_score import rouge_scorer

from serve.answer_check import CITATION

ARTICLES = re.compile(r"\b(a|an|the)\b")
PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalized_tokens(text: str) -> list[str]:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = CITATION.sub(" ", text).lower().translate(PUNCTUATION)
    return ARTICLES.sub(" ", text).split()


def token_f1(answer: str, references: list[str]) -> float:
    """The best token F1 of the answer over the references (0 without references)."""
    predicted = normalized_tokens(answer)
    best = 0.0
    for reference in references:
        gold = normalized_tokens(reference)
        common = sum((Counter(predicted) & Counter(gold)).values())
        if common:
            precision, recall = common / len(predicted), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


@cache
def _scorer() -> rouge_scorer.RougeScorer:
    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(answer: str, references: list[str]) -> float:
    """The best ROUGE-L F-measure of the answer over the references (0 without references)."""
    text = CITATION.sub(" ", answer)
    return max((_scorer().score(ref, text)["rougeL"].fmeasure for ref in references), default=0.0)
