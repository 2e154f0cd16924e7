"""`ragc eval-answers`' scoring over the real pipeline and synthesis stage, with a scripted LLM and fake
retrieval (the real engine and Milvus run in the gate: tests/eval/test_answer_gate.py)."""

from __future__ import annotations

from cluster.config import RagcConfig
from evals.answer_eval import AnswerEvalRequest, Judge, evaluate, fallback_kind, summarize
from evals.answer_service import PipelineService
from evals.answer_set import AnswerQuestion
from serve.answer_check import EmbeddingSupport
from serve.roles import Stages
from serve.stages.synthesize import SynthesizeStage
from serve.types import Passage
from tests.fakes import FakeStages, HashEmbedder, ScriptedGenerator

REPEATED = "Tenants are kept apart [1]\nTenants are kept apart [1]\nTenants are kept apart [1]"
SUPPORTED = "Passage 2 says tenants are kept apart [1]."
UNCITED = "Passage 2 says tenants are kept apart."


def passages() -> list[Passage]:
    text = "Passage {} says tenants are kept apart."
    return [Passage(f"c{i}", f"d{i}", "t1", text.format(i), title=f"T{i}") for i in range(3)]


def question(qid: str, gold: str = "d2", unanswerable: bool = False) -> AnswerQuestion:
    return AnswerQuestion(
        qid, "are tenants apart?", (), ("Passage 2 says tenants are kept apart.",), frozenset({gold}), unanswerable
    )


def service(
    replies: list[str], found: list[Passage], merge_siblings: int = 0, attribute: bool = False
) -> tuple[PipelineService, RagcConfig]:
    # the bar below the hashed vectors' 0.67 between "Passage 2 says ..." and "Passage 0 says ..."
    check = {"attribute": attribute, "attribute_min_support": 0.6}
    synthesize = {"merge_siblings": merge_siblings, "check": check}
    cfg = RagcConfig.model_validate({"serve": {"synthesize": synthesize}})
    fake = FakeStages(found)
    support = EmbeddingSupport(HashEmbedder(dim=512))
    synthesize = SynthesizeStage(**SynthesizeStage.tree_args(cfg), llm=ScriptedGenerator(replies), support=support)
    return PipelineService(cfg.serve, Stages(fake, fake, fake, synthesize), "t1"), cfg


def run(
    replies: list[str],
    questions: list[AnswerQuestion],
    found: list[Passage] | None = None,
    merge_siblings: int = 0,
    attribute: bool = False,
):  # type: ignore[no-untyped-def]
    svc, cfg = service(replies, passages() if found is None else found, merge_siblings, attribute)
    judge = Judge(EmbeddingSupport(HashEmbedder(dim=512)), cfg.serve.synthesize.check.min_support)
    try:
        return evaluate(svc, questions, cfg, AnswerEvalRequest(dataset=None), judge, "t1")  # type: ignore[arg-type]
    finally:
        svc.close()


def test_the_unchecked_arm_is_the_first_attempt_and_the_served_one_its_checked_retry() -> None:
    (result,) = run([REPEATED, SUPPORTED], [question("q")])
    unchecked, served = result.arms["llm_unchecked"], result.arms["served"]
    # as generated up to where the stage stopped reading: the repetition (a third copy is never generated)
    assert REPEATED.startswith(unchecked.text) and unchecked.text.count("kept apart") == 2
    assert unchecked.kind == "degenerate" and unchecked.grounded
    assert served.text == SUPPORTED and served.kind is None and served.grounded
    assert result.synthesize == "ok" and "strict retry" in result.detail
    assert served.cited_docs == ["d2"] and served.supported_claims == served.claims == 1


def test_a_twice_failed_answer_serves_the_extractive_one_and_says_why() -> None:
    (result,) = run([REPEATED, UNCITED], [question("q")])
    assert result.synthesize == "fallback" and fallback_kind(result.detail) == "uncited"  # the retry's reason
    assert result.arms["served"].text == result.arms["extractive"].text
    assert result.arms["llm_unchecked"].kind == "degenerate"


def test_summary_compares_the_arms_on_the_same_questions() -> None:
    results = run([REPEATED, SUPPORTED, SUPPORTED], [question("q1"), question("q2", gold="d0")])
    summary = summarize(results, 1.0)
    arms = summary["arms"]
    assert summary["questions"] == summary["answered"] == 2 and summary["fallback_rate"] == 0.0
    assert (
        summary["llm_served"] == 2
        and summary["retried"] == 1
        and summary["degenerate_rate"] == 0.0
        and summary["grounded_failing_check"] == 0
    )
    assert arms["llm_unchecked"]["degenerate_rate"] == 0.5 and arms["llm_unchecked"]["grounded_failing_check"] == 1
    # the LLM cites [1] (d2): gold for q1 only; the extractive answer cites its three passages
    assert arms["served"]["gold_citation_rate"] == 0.5 and arms["extractive"]["gold_citation_rate"] == 1.0
    assert arms["served"]["token_f1"] is not None and arms["served"]["with_references"] == 2


def test_abstained_questions_count_for_the_unanswerable_and_against_the_answerable() -> None:
    results = run([], [question("q1", unanswerable=True), question("q2")], found=[])
    summary = summarize(results, 1.0)
    assert summary["abstained"] == 2 and summary["abstention_rate_unanswerable"] == 1.0
    assert summary["false_abstention_rate"] == 1.0
    assert summary["arms"]["served"] is None  # nothing was answered: no arm has an answer to score


def test_the_summary_counts_the_answers_that_read_a_merged_section() -> None:
    siblings = [*passages(), Passage("c3", "d0", "t1", "Passage 3 says the same of d0.", title="T0")]
    merged = summarize(run([SUPPORTED], [question("q")], siblings, merge_siblings=2), 1.0)
    plain = summarize(run([SUPPORTED], [question("q")], siblings), 1.0)
    assert merged["answers_reading_a_merged_section"] == 1 and plain["answers_reading_a_merged_section"] == 0


def test_fallback_kinds() -> None:
    assert fallback_kind("extractive answer: unsupported claim: 'x' (support 0.1 < 0.4)") == "unsupported"
    assert fallback_kind("extractive answer: timed out after 25s") == "timeout"
    assert fallback_kind("extractive answer: ContextBudgetError: one passage ...") == "ContextBudgetError"


def test_attribution_counts_in_the_served_arm_and_the_summary() -> None:
    """The LLM cites [1] (d2); the other two passages say the same, so attribution cites them too."""
    questions = [question("q1"), question("q2", gold="d0")]
    plain = summarize(run([SUPPORTED, SUPPORTED], questions), 1.0)
    attributed = summarize(run([SUPPORTED, SUPPORTED], questions, attribute=True), 1.0)
    assert plain["attributed"] == 0 and plain["arms"]["served"]["gold_citation_rate"] == 0.5
    assert attributed["attributed"] == 2 and attributed["arms"]["served"]["gold_citation_rate"] == 1.0
    assert attributed["llm_served"] == 2 and attributed["grounded_failing_check"] == 0
