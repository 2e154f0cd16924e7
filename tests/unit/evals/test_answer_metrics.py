"""Token F1 and ROUGE-L of an answer against human answers."""

from __future__ import annotations

import pytest

from evals.answer_metrics import normalized_tokens, rouge_l, token_f1


def test_normalisation_drops_case_punctuation_articles_and_citations() -> None:
    assert normalized_tokens("The Cat, [2] sat on a mat!") == ["cat", "sat", "on", "mat"]


def test_token_f1_is_the_best_over_the_references() -> None:
    assert token_f1("cats sat [1]", ["dogs ran", "the cats sat"]) == pytest.approx(1.0)
    assert token_f1("cats sat down", ["cats sat"]) == pytest.approx(0.8)
    assert token_f1("nothing shared", ["cats sat"]) == 0.0
    assert token_f1("cats sat", []) == 0.0


def test_rouge_l_ignores_citations_and_is_the_best_over_references() -> None:
    assert rouge_l("goats and sheep [1] [2]", ["milk of goats and sheep", "unrelated"]) == pytest.approx(
        2 * (3 / 3) * (3 / 5) / (1 + 3 / 5)
    )
    assert rouge_l("anything", []) == 0.0
