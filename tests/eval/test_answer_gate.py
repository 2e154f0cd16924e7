"""The answer gate: `ragc eval-answers` on a slice of INSCIT (conversational turns with human answers) and
of SciFact (claims; gold = a cited relevant abstract), through the real pipeline with the packaged LLM.

It asserts what the answer check promises, on real generations: nothing degenerate is served, nothing
served as grounded fails the check, and the served answers cite what the humans used at least as often as
the extractive answer does and more often than the LLM's unchecked answers. The full sets are
`make eval-answers` (figures in the README)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.eval.conftest import SHARED, RagcCli

# two slices of 20 questions: ~4-5 s each on 2 cores, plus INSCIT's corpus (~1 min) and two engine starts
pytestmark = [pytest.mark.eval, pytest.mark.timeout(2400)]

SLICE = "20"
DATASETS = ("inscit", "scifact")


@pytest.fixture(scope="session")
def answers(gate_cli: RagcCli, gate_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for name in DATASETS:
        dataset = SHARED / "data" / name
        if not (dataset / "queries.jsonl").exists():
            pytest.fail(f"{dataset} is missing (set RAGC_SHARED_DIR to the folder holding data/{name})")
        output = gate_dir / "report" / f"{name}_answers.json"
        out[name] = gate_cli(
            "eval-answers", "--dataset", str(dataset), "--limit", SLICE, "--output", str(output), timeout=1800
        )
    return out


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
def test_served_answers_cite_gold_as_often_as_extractive_and_more_than_unchecked(
    answers: dict[str, dict[str, Any]], name: str
) -> None:
    arms = answers[name]["arms"]
    served, extractive, unchecked = (arms[a]["gold_citation_rate"] for a in ("served", "extractive", "llm_unchecked"))
    assert served >= extractive and served > unchecked, arms


def test_inscit_answers_are_scored_against_the_human_ones(answers: dict[str, dict[str, Any]]) -> None:
    result = answers["inscit"]
    assert result["arms"]["served"]["with_references"] > 0 and result["token_f1"] > 0 and result["rouge_l"] > 0
    assert result["unanswerable"] > 0 and result["abstention_rate_unanswerable"] is not None


def test_the_report_shows_the_arms_and_examples(answers: dict[str, dict[str, Any]]) -> None:
    for result in answers.values():
        report = Path(next(p for p in result["written"] if p.endswith(".md"))).read_text()
        assert "| served |" in report and "| llm_unchecked |" in report and "## Examples" in report
