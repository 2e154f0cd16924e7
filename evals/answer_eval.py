"""`ragc eval-answers`: questions (with their conversation) through the real pipeline, and the served answers
scored against the human ones. Three arms on the same questions and passages: the extractive answer, the
LLM's answer as generated (no check), and what the service serves (the checked answer, or its fallback)."""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.config import RagcConfig
from evals.answer_metrics import rouge_l, token_f1
from evals.answer_service import AnswerService, EndpointService, PipelineService, Served, passages_of
from evals.answer_set import AnswerQuestion, load_answer_set
from serve.answer_check import AnswerCheck, SupportScorer, check_answer
from serve.extractive import extractive_answer
from serve.stages.synthesize import validate_citations
from serve.types import ATTRIBUTED, Passage

ARMS = ("extractive", "llm_unchecked", "served")
FAILURE_KINDS = ("degenerate", "uncited", "unsupported")


@dataclass
class AnswerEvalRequest:
    dataset: Path
    split: str = "test"
    limit: int = 0
    mode: str | None = None
    endpoint: str | None = None
    api_key: str | None = None
    reranker: str | None = None
    output: Path | None = None


@dataclass
class ArmAnswer:
    text: str
    cited_docs: list[str]
    grounded: bool
    reason: str | None  # the answer check's verdict on this text (None: passed)
    claims: int
    supported_claims: int
    check_ms: float

    @property
    def kind(self) -> str | None:
        """degenerate, uncited or unsupported; None when it passed."""
        return None if self.reason is None else self.reason.split(" ")[0].rstrip(":")


@dataclass
class QuestionResult:
    question: AnswerQuestion
    abstained: bool
    synthesize: str  # the served synthesize stage's status
    detail: str
    total_ms: float
    arms: dict[str, ArmAnswer] = field(default_factory=dict)
    merged_sections: int = 0  # passages returned that read their section whole (merge_siblings, neighbours off)


def fallback_kind(detail: str) -> str:
    """The reason class of a synthesize fallback, from its stage detail."""
    reason = detail.removeprefix("extractive answer: ")
    for kind in FAILURE_KINDS:
        if reason.startswith(kind):
            return kind
    if reason.startswith("timed out"):
        return "timeout"
    if "circuit" in reason:
        return "circuit open"
    return reason.split(":")[0][:60] or "unknown"


class Judge:
    """The service's own answer check, run on each arm's text against the passages the answer saw."""

    def __init__(self, support: SupportScorer, min_support: float) -> None:
        self._support = support
        self._min_support = min_support

    def __call__(
        self, text: str, cited: list[int], grounded: bool, question: str, passages: list[Passage]
    ) -> ArmAnswer:
        started = time.perf_counter()
        verdict: AnswerCheck = check_answer(text, question, passages, self._support, self._min_support)
        check_ms = (time.perf_counter() - started) * 1000
        supported = sum(1 for c in verdict.claims if c.cited and c.support >= self._min_support)
        docs = [passages[n - 1].doc_id for n in cited if 1 <= n <= len(passages)]
        return ArmAnswer(text, docs, grounded, verdict.reason, len(verdict.claims), supported, check_ms)


def arm_answers(
    served: Served, question: AnswerQuestion, cfg: RagcConfig, judge: Judge, tenant: str
) -> dict[str, ArmAnswer]:
    response = served.response
    passages = passages_of(response, tenant)
    out: dict[str, ArmAnswer] = {}
    extractive = extractive_answer(question.text, passages, cfg.serve.synthesize)
    out["extractive"] = judge(extractive.answer, extractive.cited, extractive.grounded, question.text, passages)
    if served.unchecked_text is not None:
        text, cited, _ = validate_citations(served.unchecked_text, served.unchecked_passages_sent)
        out["llm_unchecked"] = judge(text, cited, bool(cited), question.text, passages)  # grounded before the check
    elif served.recorded and cfg.serve.llm.enabled:
        # no attempt finished before the stage failed: a service without the check falls back the same way
        out["llm_unchecked"] = out["extractive"]
    cited_served = [c.n for c in response.citations]
    out["served"] = judge(response.answer, cited_served, response.grounded, question.text, passages)
    return out


def ask_all(
    service: AnswerService, questions: list[AnswerQuestion], req: AnswerEvalRequest
) -> list[tuple[AnswerQuestion, Served, float]]:
    asked = []
    for i, question in enumerate(questions, start=1):
        started = time.perf_counter()
        served = service.run(question.text, question.history, req.mode)
        elapsed = (time.perf_counter() - started) * 1000
        synth = served.response.stages.get("synthesize")
        print(
            f"eval-answers: {i}/{len(questions)} {question.qid}: {synth.status if synth else '-'} in {elapsed:.0f} ms",
            file=sys.stderr,
            flush=True,
        )
        asked.append((question, served, elapsed))
    return asked


def score_arm(results: list[QuestionResult], arm: str) -> dict[str, Any] | None:
    answered = [r for r in results if not r.abstained and arm in r.arms]
    if not any(arm in r.arms for r in results):
        return None
    with_refs = [r for r in results if r.question.references and not r.question.unanswerable]
    with_gold = [r for r in results if r.question.gold_docs and not r.question.unanswerable]

    def text(r: QuestionResult) -> str:
        return r.arms[arm].text if arm in r.arms else ""

    claims = sum(r.arms[arm].claims for r in answered)
    kinds = [r.arms[arm].kind for r in answered]
    return {
        "answered": len(answered),
        "token_f1": _mean([token_f1(text(r), list(r.question.references)) for r in with_refs]),
        "rouge_l": _mean([rouge_l(text(r), list(r.question.references)) for r in with_refs]),
        "gold_citation_rate": _mean([_gold_cited(r, arm) for r in with_gold]),
        "supported_claim_rate": round(sum(r.arms[arm].supported_claims for r in answered) / claims, 4)
        if claims
        else None,
        "degenerate_rate": _rate(kinds.count("degenerate"), len(answered)),
        "check_failure_rate": _rate(sum(k is not None for k in kinds), len(answered)),
        "check_failures": {k: kinds.count(k) for k in FAILURE_KINDS if k in kinds},
        "grounded_rate": _rate(sum(r.arms[arm].grounded for r in answered), len(answered)),
        "grounded_failing_check": sum(r.arms[arm].grounded and r.arms[arm].kind is not None for r in answered),
        "with_references": len(with_refs),
        "with_gold": len(with_gold),
    }


def _gold_cited(r: QuestionResult, arm: str) -> float:
    return float(arm in r.arms and not r.abstained and bool(set(r.arms[arm].cited_docs) & r.question.gold_docs))


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _rate(count: int, total: int) -> float | None:
    return round(count / total, 4) if total else None


def summarize(results: list[QuestionResult], seconds: float) -> dict[str, Any]:
    answered = [r for r in results if not r.abstained]
    fallbacks = [fallback_kind(r.detail) for r in answered if r.synthesize == "fallback"]
    unanswerable = [r for r in results if r.question.unanswerable]
    arms = {arm: score_arm(results, arm) for arm in ARMS}
    served = arms["served"] or {}
    # the check's cost where it measured support (an uncited or degenerate answer stops before the model)
    check_ms = [a.check_ms for r in answered for a in r.arms.values() if a.kind in (None, "unsupported")]
    synth_ms = [r.total_ms for r in answered]
    return {
        "questions": len(results),
        "answered": len(answered),
        "abstained": len(results) - len(answered),
        "fallback_rate": _rate(len(fallbacks), len(answered)),
        "fallback_reasons": {k: fallbacks.count(k) for k in sorted(set(fallbacks))},
        "llm_served": sum(r.synthesize == "ok" for r in answered),  # the LLM's answer passed and was served
        "retried": sum("strict retry" in r.detail for r in answered),
        "attributed": sum(ATTRIBUTED in r.detail for r in answered),  # served answers citing more than the LLM did
        "answers_reading_a_merged_section": sum(r.merged_sections > 0 for r in answered),
        **{k: served.get(k) for k in ("token_f1", "rouge_l", "gold_citation_rate", "supported_claim_rate")},
        "degenerate_rate": served.get("degenerate_rate"),
        "grounded_failing_check": served.get("grounded_failing_check"),
        "unanswerable": len(unanswerable),
        "abstention_rate_unanswerable": _rate(sum(r.abstained for r in unanswerable), len(unanswerable)),
        "false_abstention_rate": _rate(
            sum(r.abstained for r in results if not r.question.unanswerable), len(results) - len(unanswerable)
        ),
        "arms": arms,
        "support_check_ms_p50": round(statistics.median(check_ms), 1) if check_ms else None,
        "answer_ms_p50": round(statistics.median(synth_ms), 1) if synth_ms else None,
        "seconds": round(seconds, 1),
    }


def result_of(
    question: AnswerQuestion, served: Served, elapsed_ms: float, arms: dict[str, ArmAnswer]
) -> QuestionResult:
    response = served.response
    synth = response.stages.get("synthesize")
    merge = response.stages.get("merge")
    merged = merge is not None and merge.status == "ok" and "neighbours" not in response.stages
    return QuestionResult(
        question,
        response.abstained,
        synth.status if synth else "missing",
        (synth.detail or "") if synth else "",
        elapsed_ms,
        arms,
        sum(p.context is not None for p in response.passages) if merged else 0,
    )


def evaluate(
    service: AnswerService,
    questions: list[AnswerQuestion],
    cfg: RagcConfig,
    req: AnswerEvalRequest,
    judge: Judge,
    tenant: str,
) -> list[QuestionResult]:
    results = []
    for question, served, elapsed in ask_all(service, questions, req):
        arms = {} if served.response.abstained else arm_answers(served, question, cfg, judge, tenant)
        results.append(result_of(question, served, elapsed, arms))
    return results


def run_eval_answers(cfg: RagcConfig, req: AnswerEvalRequest) -> dict[str, Any]:
    return run_eval_answers_many(cfg, [req])[0]


def run_eval_answers_many(cfg: RagcConfig, reqs: list[AnswerEvalRequest]) -> list[dict[str, Any]]:
    """One result per request (dataset); in process, every dataset is asked through one pipeline host, so the
    engines start once."""
    from cluster.models import SentenceTransformerEmbedder
    from serve.answer_check import EmbeddingSupport

    first = reqs[0]
    if first.reranker:
        cfg = cfg.model_copy(deep=True)
        cfg.serve.rerank.model = first.reranker
    question_sets = [load_answer_set(r.dataset, r.split, r.limit) for r in reqs]
    for req in reqs:
        _check_mode(cfg, req.mode)
    support = EmbeddingSupport(SentenceTransformerEmbedder(cfg.embedding))
    judge = Judge(support, cfg.serve.synthesize.check.min_support)
    if first.endpoint:
        return [_over_endpoint(cfg, req, questions, judge) for req, questions in zip(reqs, question_sets, strict=True)]
    return _in_process(cfg, reqs, question_sets, judge, support)


def _check_mode(cfg: RagcConfig, mode: str | None) -> None:
    if mode == "no_text":
        raise ValueError("mode no_text makes no answer to score: `ragc eval` scores retrieval")
    if mode is not None and mode not in cfg.serve.synthesize.response_modes:
        raise ValueError(f"mode {mode!r} is not allowed; use one of: {', '.join(cfg.serve.synthesize.response_modes)}")


def _over_endpoint(
    cfg: RagcConfig, req: AnswerEvalRequest, questions: list[AnswerQuestion], judge: Judge
) -> dict[str, Any]:
    assert req.endpoint is not None
    started = time.perf_counter()
    service = EndpointService(req.endpoint, req.api_key)
    try:
        results = evaluate(service, questions, cfg, req, judge, "endpoint")
    finally:
        service.close()
    return _finish(cfg, req, results, started, {"endpoint": req.endpoint})


def _in_process(
    cfg: RagcConfig,
    reqs: list[AnswerEvalRequest],
    question_sets: list[list[AnswerQuestion]],
    judge: Judge,
    support: SupportScorer,
) -> list[dict[str, Any]]:
    from evals.runner import EVAL_TENANT, eval_collection, ingest_dataset
    from local.cluster import sidecars_running

    out: list[dict[str, Any]] = []
    service: PipelineService | None = None
    with sidecars_running(eval_collection(cfg, reqs[0].dataset)) as ephemeral:
        try:
            for req, questions in zip(reqs, question_sets, strict=True):
                ecfg = eval_collection(cfg, req.dataset)
                found: dict[str, Any] = {"ephemeral_cluster": ephemeral, "ingest": ingest_dataset(ecfg, req.dataset)}
                if service is None:
                    service = PipelineService.in_process(ecfg, EVAL_TENANT, support)
                else:
                    service.over_collection(ecfg)
                started = time.perf_counter()
                results = evaluate(service, questions, ecfg, req, judge, EVAL_TENANT)
                out.append(_finish(cfg, req, results, started, found))
        finally:
            if service is not None:
                service.close()
    return out


def _finish(
    cfg: RagcConfig, req: AnswerEvalRequest, results: list[QuestionResult], started: float, found: dict[str, Any]
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "dataset": req.dataset.name,
        "split": req.split,
        "mode": req.mode or cfg.serve.synthesize.response_mode,
        **found,
    }
    result |= summarize(results, time.perf_counter() - started)
    result["reranker"] = cfg.serve.rerank.model
    if req.output:
        from evals.answer_report import write_answer_report

        result["written"] = [str(p) for p in write_answer_report(result, results, req.output)]
    return result
