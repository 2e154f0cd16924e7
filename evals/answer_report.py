"""`ragc eval-answers --output FILE`: the JSON result with every question's answers, and a markdown report:
the three arms side by side, why served answers fell back, and examples of each failure kind."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evals.answer_eval import ARMS, FAILURE_KINDS, QuestionResult, fallback_kind

ARM_METRICS = (
    "token_f1",
    "rouge_l",
    "gold_citation_rate",
    "supported_claim_rate",
    "degenerate_rate",
    "check_failure_rate",
    "grounded_rate",
    "grounded_failing_check",
)
EXAMPLES = 3
QUOTE = 400  # characters of an answer quoted in an example


def question_record(r: QuestionResult) -> dict[str, Any]:
    q = r.question
    return {
        "qid": q.qid,
        "question": q.text,
        "history_turns": len(q.history),
        "unanswerable": q.unanswerable,
        "gold_docs": sorted(q.gold_docs),
        "abstained": r.abstained,
        "synthesize": r.synthesize,
        "detail": r.detail,
        "ms": round(r.total_ms, 1),
        "arms": {arm: asdict(answer) for arm, answer in r.arms.items()},
    }


def _quote(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= QUOTE else one_line[: QUOTE - 1] + "…"


def _example(r: QuestionResult, arm: str, why: str) -> list[str]:
    lines = [f"- **{r.question.qid}** {_quote(r.question.text)}", f"  - {why}"]
    lines.append(f"  - {arm}: {_quote(r.arms[arm].text)}")
    if arm != "served" and "served" in r.arms:
        lines.append(f"  - served ({r.synthesize}): {_quote(r.arms['served'].text)}")
    if r.question.references:
        lines.append(f"  - human: {_quote(r.question.references[0])}")
    return lines


def _examples(results: list[QuestionResult]) -> list[str]:
    lines: list[str] = []
    fallbacks: dict[str, list[QuestionResult]] = {}
    for r in results:
        if r.synthesize == "fallback" and not r.abstained:
            fallbacks.setdefault(fallback_kind(r.detail), []).append(r)
    for kind, found in sorted(fallbacks.items()):
        lines += [f"### Served the extractive answer: {kind} ({len(found)})", ""]
        for r in found[:EXAMPLES]:
            arm = "llm_unchecked" if "llm_unchecked" in r.arms else "served"
            lines += _example(r, arm, r.detail)
        lines.append("")
    for kind in FAILURE_KINDS:
        found = [r for r in results if "llm_unchecked" in r.arms and r.arms["llm_unchecked"].kind == kind]
        if found:
            lines += [f"### The LLM's unchecked answer: {kind} ({len(found)})", ""]
            for r in found[:EXAMPLES]:
                lines += _example(r, "llm_unchecked", r.arms["llm_unchecked"].reason or "")
            lines.append("")
    missed = [
        r
        for r in results
        if "served" in r.arms and r.question.gold_docs and not set(r.arms["served"].cited_docs) & r.question.gold_docs
    ]
    if missed:
        lines += [f"### Served answers citing no passage the humans used ({len(missed)})", ""]
        for r in missed[:EXAMPLES]:
            lines += _example(r, "served", f"cited {r.arms['served'].cited_docs}, gold {sorted(r.question.gold_docs)}")
        lines.append("")
    return lines


def write_answer_report(result: dict[str, Any], results: list[QuestionResult], output: Path) -> list[Path]:
    output.parent.mkdir(parents=True, exist_ok=True)
    full = result | {"per_question": [question_record(r) for r in results]}
    output.write_text(json.dumps(full, indent=2, default=str) + "\n", encoding="utf-8")
    lines = [
        f"# Answer evaluation: {result['dataset']} ({result['split']}, {result['questions']} questions, "
        f"mode {result['mode']})",
        "",
        f"Answered {result['answered']}, abstained {result['abstained']}; the served answer fell back to the "
        f"extractive one on {result['fallback_rate']} of the answered ({result['fallback_reasons'] or 'none'}); "
        f"{result['retried']} passed after the strict retry; {result.get('attributed', 0)} cite passages by "
        "post-hoc attribution.",
        f"Abstention on the {result['unanswerable']} unanswerable questions: {result['abstention_rate_unanswerable']}; "
        f"false abstention: {result['false_abstention_rate']}.",
        "",
        "| arm | " + " | ".join(ARM_METRICS) + " |",
        "|---" * (len(ARM_METRICS) + 1) + "|",
    ]
    for arm in ARMS:
        figures = result["arms"].get(arm)
        if figures is None:
            lines.append(f"| {arm} | " + " | ".join("-" for _ in ARM_METRICS) + " |")
            continue
        lines.append(f"| {arm} | " + " | ".join(_cell(figures.get(k)) for k in ARM_METRICS) + " |")
    lines += [
        "",
        "extractive: the passages' best sentences, cited; llm_unchecked: the LLM's first answer as generated, "
        "marked grounded when it cites a passage sent; served: what the service returns (the checked answer, "
        "its strict retry, or the extractive fallback). Every arm's text is judged by the same answer check.",
        "",
        "## Examples",
        "",
        *_examples(results),
    ]
    report = output.with_suffix(".md")
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [output, report]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)
