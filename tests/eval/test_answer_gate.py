"""The answer gate: `ragc eval-answers` on a slice of INSCIT (conversational turns with human answers) and
of SciFact (claims; gold = a cited relevant abstract), through the real pipeline with the packaged LLM.

It asserts what the answer check promises, on real generations: nothing degenerate is served, nothing
served as grounded fails the check, and the served answers cite what the humans used at least as often as
the extractive answer does (an xfail: the packaged model does not) and more often than the LLM's
unchecked answers. The full sets are
`make eval-answers` (figures in the README)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.eval.conftest import ANSWER_DATASETS as DATASETS
from tests.eval.conftest import ANSWER_SLICE as SLICE
from tests.eval.conftest import BackgroundCli

# `--limit`, the datasets and the raised deadlines are the run's (tests/eval/conftest.py: answers_run)
pytestmark = [pytest.mark.eval, pytest.mark.timeout(2400)]


@pytest.fixture(scope="session")
def answers(answers_run: BackgroundCli) -> dict[str, dict[str, Any]]:
    out = answers_run.result()["datasets"]
    assert set(out) == set(DATASETS), out.keys()
    return dict(out)


@pytest.mark.parametrize("name", DATASETS)
def test_every_question_was_asked_and_most_answered(answers: dict[str, dict[str, Any]], name: str) -> None:
    result = answers[name]
    assert result["questions"] == int(SLICE) and result["answered"] >= int(SLICE) // 2, result
    assert set(result["arms"]) == {"extractive", "llm_unchecked", "served"}


@pytest.mark.parametrize("name", DATASETS)
def test_nothing_degenerate_is_served(answers: dict[str, dict[str, Any]], name: str) -> None:
    served = answers[name]["arms"]["served"]
    assert served["degenerate_rate"] == 0.0, served


@pytest.mark.parametrize("name", DATASETS)
def test_no_answer_served_as_grounded_fails_the_check(answers: dict[str, dict[str, Any]], name: str) -> None:
    served = answers[name]["arms"]["served"]
    assert served["grounded_failing_check"] == 0 and served["check_failure_rate"] == 0.0, served


@pytest.mark.parametrize("name", DATASETS)
def test_served_answers_cite_gold_more_often_than_unchecked_ones(answers: dict[str, dict[str, Any]], name: str) -> None:
    arms = answers[name]["arms"]
    assert arms["served"]["gold_citation_rate"] > arms["llm_unchecked"]["gold_citation_rate"], arms


def test_the_llm_answer_is_served_where_it_passes(answers: dict[str, dict[str, Any]]) -> None:
    """The check is not a switch that turns the LLM off: some of the packaged model's answers pass."""
    served = sum(r["llm_served"] for r in answers.values())
    assert served >= 3, {name: r["fallback_reasons"] for name, r in answers.items()}


# Not strict: the two arms differ only on the 1-3 questions whose LLM answer passed the check, so on 10 + 10
# questions a tie (which passes `>=`) came by chance: on the same machine (AVX512-BF16, 2026-12-05) one fresh-clone
# run passed it and the next did not. The gap is measured on the full slices (`make eval-answers`, README).
@pytest.mark.xfail(
    strict=False,
    reason="issue #15: the packaged 135M model's answers that pass the check cite one passage of the one or two "
    "that fit the CPU prompt budget, where the extractive answer cites three: on the 20-question slices served 23/37 "
    "against extractive 28/37 (fp32, 2026-12-04), on their 10-question halves that CI runs 11/18 against 14/18; "
    "shown three passages as excerpts it cites another than the relevant one (README, Answer quality).",
)
def test_served_answers_cite_gold_at_least_as_often_as_extractive_ones(answers: dict[str, dict[str, Any]]) -> None:
    """Over both slices: a question where the served answer is the extractive one counts the same in both arms,
    so this compares the LLM's answers that passed the check with the extractive answers to the same questions."""

    def cited_gold(arm: str) -> float:
        return sum(r["arms"][arm]["gold_citation_rate"] * r["arms"][arm]["with_gold"] for r in answers.values())

    assert cited_gold("served") >= cited_gold("extractive"), {n: r["arms"] for n, r in answers.items()}


def test_inscit_answers_are_scored_against_the_human_ones(answers: dict[str, dict[str, Any]]) -> None:
    result = answers["inscit"]
    assert result["arms"]["served"]["with_references"] > 0 and result["token_f1"] > 0 and result["rouge_l"] > 0
    assert result["unanswerable"] > 0 and result["abstention_rate_unanswerable"] is not None


def test_the_report_shows_the_arms_and_examples(answers: dict[str, dict[str, Any]]) -> None:
    for result in answers.values():
        report = Path(next(p for p in result["written"] if p.endswith(".md"))).read_text()
        assert "| served |" in report and "| llm_unchecked |" in report and "## Examples" in report
