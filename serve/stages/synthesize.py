"""Answer synthesis: the LLM answers from numbered passages, streaming; its citations are checked
against the passages sent, then the answer against them (serve/answer_check.py): an answer that fails is
withdrawn from the stream and generated once more under a stricter prompt and a cited-sentences output
constraint; failing again, it carries the reason and the pipeline serves the extractive answer. The
extractive answer - the passages' best sentences, each cited [n] - is the stage's behaviour without an
LLM and the pipeline's fallback when synthesis times out or fails."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

from cluster.config import EmbeddingConfig, LLMEngineConfig, RagcConfig, ResponseMode, SynthesizeConfig
from serve.answer_check import (
    CITATION,
    AnswerCheck,
    EmbeddingSupport,
    SupportScorer,
    attribute,
    check_answer,
    repetition,
)
from serve.extractive import extractive_answer
from serve.faults import FaultHooks
from serve.llm.generation import GenerationParams, Messages, as_generator
from serve.llm.prompts import (
    cited_sentences_pattern,
    combine_messages,
    recent_history,
    shortened_passages,
    synthesis_messages,
)
from serve.types import AnswerContext, Passage, StreamReset, Synthesis, SynthesisItem, Usage

RESULT_MARGIN = 0.05  # share of the timeout kept to hand a failed retry's verdict back before the pipeline gives up
RETRY_PACE = 1.2  # a retry is expected to take up to this times the first answer
ORPHAN_SPACE = re.compile(r"[ \t]+([.,;:!?])")  # left where a removed citation stood before punctuation


def validate_citations(answer: str, passages_sent: int) -> tuple[str, list[int], int]:
    """Keep citations that point at a passage actually sent; remove the rest and count them."""
    removed = 0

    def check(match: re.Match[str]) -> str:
        nonlocal removed
        n = int(match.group(1))
        if 1 <= n <= passages_sent:
            return match.group(0)
        removed += 1
        return ""

    cleaned = ORPHAN_SPACE.sub(r"\1", CITATION.sub(check, answer))
    cited = sorted({int(m) for m in CITATION.findall(cleaned)})
    return cleaned, cited, removed


@dataclass(frozen=True)
class PromptBudget:
    """What went into the prompt: passages sent, passages cut, and the prompt's tokens."""

    sent: int
    cut: int
    tokens: int

    def synthesis(self, answer: str, cited: list[int], grounded: bool, mode: str, **fields: Any) -> Synthesis:
        return Synthesis(
            answer,
            cited,
            grounded,
            mode,
            passages_sent=self.sent,
            passages_cut=self.cut,
            prompt_tokens=self.tokens,
            **fields,
        )


class EmptyAnswerError(RuntimeError):
    pass


class ContextBudgetError(RuntimeError):
    pass


class EngineBusyError(RuntimeError):
    pass


class SynthesizeStage(FaultHooks):
    """Streams the LLM's answer (text deltas), then yields the checked `Synthesis`; without an LLM it
    yields the extractive answer alone."""

    def __init__(
        self,
        cfg: SynthesizeConfig,
        llm: Any = None,
        support: SupportScorer | None = None,
        max_model_len: int | None = None,
        embedding: EmbeddingConfig | None = None,
        fault_delay_s: float = 0.0,
    ) -> None:
        """`max_model_len`: the engine's context (None: an engine's default); `embedding`: the model the answer
        check measures support with, loaded only when `support` is not given."""
        self._cfg = cfg
        self._max_model_len = max_model_len or LLMEngineConfig().max_model_len
        self._embedding = embedding or EmbeddingConfig()
        self._llm = as_generator(llm)
        self._support = support
        self._support_loading = threading.Lock()
        self.inject_delay(fault_delay_s)

    @staticmethod
    def tree_args(tree: RagcConfig) -> dict[str, Any]:
        """This stage's arguments out of the whole tree (the app builder binds them)."""
        cfg = tree.serve.synthesize
        return {
            "cfg": cfg,
            "max_model_len": tree.serve.llm.engines[cfg.engine].max_model_len,
            "embedding": tree.embedding,
            "fault_delay_s": tree.serve.faults.delay_s.get("synthesize", 0.0),
        }

    def _support_scorer(self) -> SupportScorer:
        """The embedding model, loaded when the LLM is first reported ready (a stage without an LLM never
        needs it), so that the first answer does not pay for the load."""
        with self._support_loading:
            if self._support is None:
                from cluster.models import SentenceTransformerEmbedder

                self._support = EmbeddingSupport(SentenceTransformerEmbedder(self._embedding))
            return self._support

    async def synthesize_stream(
        self,
        query: str,
        passages: list[Passage],
        context: AnswerContext | None = None,
        mode: ResponseMode = "compact",
        output_pattern: str | None = None,
    ) -> AsyncIterator[SynthesisItem]:
        """`output_pattern` constrains the generated text (structured output), e.g. to force a format;
        `context`: the conversation and the searched query, so a follow-up is answered in context;
        `mode`: how the passages reach the LLM (`serve.synthesize.response_mode`)."""
        if not passages:
            raise ValueError("synthesis needs at least one passage (zero passages is the abstention path)")
        if mode == "no_text":
            raise ValueError("no_text makes no LLM call: the pipeline does not call synthesis for it")
        await self._injected_delay()
        if self._llm is None:
            yield extractive_answer(query, passages, self._cfg)
            return
        started = time.monotonic()
        spent: list[Usage] = []  # what each LLM call cost, up to where it was read
        await self._admit(started)
        context = await self._context_that_fits(query, passages, context)
        items = (
            self._compact(query, passages, output_pattern, context, spent)
            if mode == "compact"
            else self._multi_call(query, passages, context, mode, spent)
        )
        async for item in items:
            if isinstance(item, Synthesis):
                item.usage = sum(spent, Usage())
            yield item

    async def _call(
        self,
        messages: Messages,
        params: GenerationParams,
        deadline: float,
        sink: list[str],
        spent: list[Usage],
        passages: list[Passage],
    ) -> AsyncIterator[str]:
        """One LLM call, streamed into `sink` and yielded piece by piece, its cost so far into `spent`. It stops
        reading (which aborts the engine's request) at the deadline or as soon as the text repeats itself: a
        model that started repeating will not recover, and its tokens cost time the retry needs."""
        assert self._llm is not None
        usage = Usage()
        source = "\n".join(p.text for p in passages)  # what the answer may quote, repetitions included
        try:
            async with aclosing(self._llm.stream(messages, params)) as stream:
                async for piece in stream:
                    usage = piece.usage
                    if not piece.text:
                        continue
                    sink.append(piece.text)
                    yield piece.text
                    if time.monotonic() > deadline:
                        return
                    if self._cfg.check.enabled and repetition("".join(sink), partial=True, source=source):
                        return
        finally:
            spent.append(usage)

    async def _compact(
        self,
        query: str,
        passages: list[Passage],
        output_pattern: str | None,
        context: AnswerContext | None,
        spent: list[Usage],
    ) -> AsyncIterator[SynthesisItem]:
        started = time.monotonic()
        fitting, prompt_tokens = await self._passages_that_fit(query, passages, context)
        budget = PromptBudget(len(fitting), len(passages) - len(fitting), prompt_tokens)
        returned, passages = passages, fitting
        check = self._cfg.check
        strict = False
        # the stage returns its own verdict a little before the pipeline's timeout would cut it off
        deadline = started + self._cfg.timeout_s * (1 - RESULT_MARGIN)
        first_reason = ""
        for attempt in (1, 2):
            pieces: list[str] = []
            pattern = cited_sentences_pattern(len(passages)) if strict and output_pattern is None else output_pattern
            params = GenerationParams(self._cfg.max_tokens, self._cfg.temperature, regex=pattern)
            messages = self._messages(query, passages, strict, context)
            attempt_started = time.monotonic()
            async for piece in self._call(
                messages, params, deadline if strict else float("inf"), pieces, spent, passages
            ):
                yield piece
            if strict and time.monotonic() > deadline:
                why = f"{first_reason} (the strict retry ran out of time)"
                yield budget.synthesis("", [], False, "llm, strict retry", failed_check=why, attempts=2, checked=True)
                return
            raw = "".join(pieces).strip()
            if not raw:
                raise EmptyAnswerError("the model returned an empty answer")
            answer, cited, removed = validate_citations(raw, len(passages))
            if not check.enabled:
                yield budget.synthesis(answer, cited, bool(cited), "llm", removed_citations=removed, llm_calls=attempt)
                return
            verdict = await asyncio.to_thread(
                check_answer, answer, query, passages, self._support_scorer(), check.min_support
            )
            now = time.monotonic()
            left = self._cfg.timeout_s - (now - started)
            if verdict.passed or attempt == 2 or not check.retry:
                synthesis = self._checked(answer, cited, removed, verdict, attempt, verdict.reason, budget)
                yield await self._attributed(synthesis, returned) if verdict.passed and check.attribute else synthesis
                return
            # the retry gets at least as long as the first answer took, and the configured share of the timeout
            if left < max(check.retry_within_share * self._cfg.timeout_s, RETRY_PACE * (now - attempt_started)):
                why = f"{verdict.reason} (no time to retry)"
                yield self._checked(answer, cited, removed, verdict, attempt, why, budget)
                return
            yield StreamReset(f"the answer failed its check ({verdict.reason}); generating it again")
            first_reason = verdict.reason or ""
            strict = True

    async def _multi_call(
        self,
        query: str,
        passages: list[Passage],
        context: AnswerContext | None,
        mode: ResponseMode,
        spent: list[Usage],
    ) -> AsyncIterator[SynthesisItem]:
        """refine, tree_summarize and accumulate: several LLM calls over batches of the passages, numbered as
        returned. Only the call whose text becomes the answer streams; a deadline reached between or during
        calls ends the mode with the best answer so far. The answer then takes the same check (no strict
        retry: the retry is compact's)."""
        started = time.monotonic()
        deadline = started + self._cfg.timeout_s * (1 - RESULT_MARGIN)
        batches = await self._batches(query, passages, context, mode)
        sent_passages = [passage for _, batch in batches for passage in batch]
        sent = len(sent_passages)
        params = GenerationParams(self._cfg.max_tokens, self._cfg.temperature)
        planned = len(batches) + (1 if mode == "tree_summarize" and len(batches) > 1 else 0)
        answers: list[str] = []  # refine: the answer so far; else one per batch
        calls, cut, streamed = 0, False, False
        for n, (start, batch) in enumerate(batches):
            if time.monotonic() > deadline:
                cut = True
                break
            earlier = answers[-1] if mode == "refine" and answers else None
            messages = self._messages(query, batch, False, context, start + 1, earlier)
            # accumulate streams every answer; refine and a one-batch tree stream their last call
            streams = mode == "accumulate" or n == len(batches) - 1
            if streams and streamed:
                yield "\n\n"
            sink: list[str] = []
            async for piece in self._call(messages, params, deadline, sink, spent, batch):
                if streams:
                    streamed = True
                    yield piece
            calls += 1
            text = "".join(sink).strip()
            if time.monotonic() > deadline:
                cut = True
                break
            if text:
                answers = [text] if mode == "refine" else [*answers, text]
        if mode == "tree_summarize" and len(answers) > 1 and not cut:
            sink = []
            if streamed:
                yield StreamReset("combining the batches' answers")
                streamed = False
            combine = combine_messages(query, answers)
            async for piece in self._call(combine, params, deadline, sink, spent, sent_passages):
                streamed = True
                yield piece
            calls += 1
            if time.monotonic() > deadline:
                cut = True
            elif "".join(sink).strip():
                answers = ["".join(sink).strip()]
        label = f"llm, {mode}, {calls} LLM calls" + (f", cut at the deadline ({calls} of {planned})" if cut else "")
        verdict: AnswerCheck | None = None
        if mode == "accumulate" and self._cfg.check.enabled and answers:
            # each passage's answer is checked alone: answers to one question share phrases, which in
            # one text would read as repetition; an answer that fails is dropped, the others are served
            verdicts = [await self._verdict(part, query, sent_passages) for part in answers]
            dropped = [v.reason for v in verdicts if not v.passed]
            kept = [(part, v) for part, v in zip(answers, verdicts, strict=True) if v.passed]
            if dropped and kept:
                label += f", {len(dropped)} answer{'s' if len(dropped) > 1 else ''} dropped ({dropped[0]})"
            answers = [part for part, _ in kept] or answers
            support: dict[int, float] = {}
            for _, v in kept:
                support |= {n: max(score, support.get(n, score)) for n, score in v.support.items()}
            verdict = AnswerCheck(None if kept else dropped[0], support=support)
        best = "\n\n".join(answers)
        if streamed and (cut or (verdict is not None and "dropped" in label)):
            yield StreamReset("the answer was cut at the deadline or lost answers to the check; what is kept follows")
            if best:
                yield best
        if not best:
            raise EmptyAnswerError(f"{mode}: no LLM call finished before the deadline" if cut else "empty answers")
        budget = PromptBudget(sent, len(passages) - sent, 0)
        answer, cited, removed = validate_citations(best, sent)
        if not self._cfg.check.enabled:
            yield budget.synthesis(
                answer, cited, bool(cited), label, removed_citations=removed, llm_calls=calls, response_mode=mode
            )
            return
        if verdict is None:
            verdict = await self._verdict(answer, query, sent_passages)
        yield budget.synthesis(
            answer,
            cited,
            verdict.passed,
            label,
            removed_citations=removed,
            support=verdict.support,
            failed_check=verdict.reason,
            checked=True,
            llm_calls=calls,
            response_mode=mode,
        )

    async def _attributed(self, synthesis: Synthesis, returned: list[Passage]) -> Synthesis:
        """The passing answer with the citations post-hoc attribution adds (serve/answer_check.py); the streamed
        text lacks their markers, so the final answer is the one to show."""
        check = self._cfg.check
        bar = max(check.min_support, check.attribute_min_support)
        found = await asyncio.to_thread(attribute, synthesis.answer, returned, self._support_scorer(), bar)
        support = dict(synthesis.support)
        for n, score in found.added.items():
            support[n] = max(score, support.get(n, score))
        return replace(synthesis, answer=found.answer, cited=found.cited, support=support, attributed=len(found.added))

    async def _verdict(self, text: str, query: str, passages: list[Passage]) -> AnswerCheck:
        answer, _, _ = validate_citations(text, len(passages))
        scorer = self._support_scorer()
        return await asyncio.to_thread(check_answer, answer, query, passages, scorer, self._cfg.check.min_support)

    async def _batches(
        self, query: str, passages: list[Passage], context: AnswerContext | None, mode: ResponseMode
    ) -> list[tuple[int, list[Passage]]]:
        """Consecutive batches of the passages, as (index of the first, the passages sent), each as long as
        fits the prompt budget (accumulate: one passage each; refine keeps room for the earlier answer,
        `max_tokens` long)."""
        if mode == "accumulate":
            return [
                (start, (await self._passages_that_fit(query, [passage], context, start + 1))[0])
                for start, passage in enumerate(passages)
            ]
        reserve = self._cfg.max_tokens if mode == "refine" else 0
        batches: list[tuple[int, list[Passage]]] = []
        start = 0
        while start < len(passages):
            fitting, _ = await self._passages_that_fit(query, passages[start:], context, start + 1, reserve)
            batches.append((start, fitting))
            start += len(fitting)
        return batches

    def _messages(
        self,
        query: str,
        passages: list[Passage],
        strict: bool,
        context: AnswerContext | None,
        first_number: int = 1,
        earlier_answer: str | None = None,
    ) -> Messages:
        turns = [{"role": role, "content": text} for role, text in context.history] if context else []
        history = recent_history(turns, self._cfg.history_turns, self._cfg.history_max_chars)
        searched = context.retrieval_query if context else None
        return synthesis_messages(
            query,
            passages,
            self._cfg.passage_max_chars,
            strict,
            history,
            searched,
            first_number,
            earlier_answer,
            self._cfg.passage_excerpt_chars,
        )

    async def _admit(self, started: float) -> None:
        """Admission by the engine's own load: when it predicts that a new answer cannot finish within this
        stage's timeout, refuse now (the pipeline serves the extractive answer at once) rather than wait."""
        if not self._cfg.admission:
            return
        assert self._llm is not None
        load = await self._llm.load()
        left = self._cfg.timeout_s * (1 - RESULT_MARGIN) - (time.monotonic() - started)
        if load.predicted_s is not None and load.predicted_s > left:
            raise EngineBusyError(
                f"engine busy: {load.in_flight} requests in flight, a new answer would take about "
                f"{load.predicted_s:.0f}s and {left:.0f}s are left"
            )

    def _prompt_room(self, reserve: int = 0) -> int:
        room = self._max_model_len - self._cfg.max_tokens
        if self._cfg.max_prompt_tokens is not None:
            room = min(room, self._cfg.max_prompt_tokens)
        return room - reserve

    async def _context_that_fits(
        self, query: str, passages: list[Passage], context: AnswerContext | None
    ) -> AnswerContext | None:
        """The conversation gives way to the passages: when the question and the first
        `history_min_passages` passages do not fit the prompt budget with the recent turns the answer would
        see, the oldest turns are left out until they do (a long conversation otherwise crowds the passages
        out of a CPU-sized prompt, or leaves room for none)."""
        if context is None or not context.history:
            return context
        assert self._llm is not None
        turns = self._cfg.history_turns
        conversation = tuple(t for t in context.history if t[0] in ("user", "assistant"))
        context = replace(context, history=conversation[-turns:] if turns else ())
        wanted = passages[: self._cfg.history_min_passages]
        while context.history:
            tokens = await self._llm.prompt_tokens([self._messages(query, wanted, True, context)])
            if tokens[0] <= self._prompt_room():
                break
            context = replace(context, history=context.history[1:])
        return context

    async def _passages_that_fit(
        self,
        query: str,
        passages: list[Passage],
        context: AnswerContext | None,
        first_number: int = 1,
        reserve: int = 0,
    ) -> tuple[list[Passage], int]:
        """The passages, in order, that fit the prompt budget (`max_prompt_tokens`, and the engine's context
        with `max_tokens` left to generate; the strict retry's longer system prompt included), and the tokens
        of that prompt, counted by the engine's own tokenizer. A first passage too long to fit alone is sent
        shortened (cut at a word) rather than not at all. `reserve`: tokens kept free for text added later
        (refine's earlier answer)."""
        assert self._llm is not None
        prompts = [
            self._messages(query, passages[:k], True, context, first_number) for k in range(1, len(passages) + 1)
        ]
        tokens = await self._llm.prompt_tokens(prompts)
        room = self._prompt_room(reserve)
        fits = sum(1 for n in tokens if n <= room)  # counts grow with k: the fitting ones are a prefix
        if fits:
            return passages[:fits], tokens[fits - 1]
        shortened = shortened_passages(passages[0], self._cfg.passage_max_chars)
        counted = await self._llm.prompt_tokens(
            [self._messages(query, [p], True, context, first_number) for p in shortened]
        )
        longest = next(((p, n) for p, n in zip(shortened, counted, strict=True) if n <= room), None)
        if longest is None:
            raise ContextBudgetError(
                f"the question leaves no room for a passage: with one passage cut to "
                f"{len(shortened[-1].text) if shortened else 0} characters the prompt takes "
                f"{counted[-1] if counted else tokens[0]} tokens; the prompt budget is {room} "
                f"(max_prompt_tokens {self._cfg.max_prompt_tokens}, max_model_len {self._max_model_len} "
                f"less max_tokens {self._cfg.max_tokens})"
            )
        return [longest[0]], longest[1]

    @staticmethod
    def _checked(
        answer: str,
        cited: list[int],
        removed: int,
        verdict: AnswerCheck,
        attempts: int,
        failed: str | None,
        budget: PromptBudget,
    ) -> Synthesis:
        return budget.synthesis(
            answer,
            cited,
            verdict.passed,
            "llm" if attempts == 1 else "llm, strict retry",
            removed_citations=removed,
            support=verdict.support,
            failed_check=failed,
            attempts=attempts,
            checked=True,
            llm_calls=attempts,
        )

    async def llm_state(self, timeout_s: float = 2.0) -> str:
        """ "ready", "off" (no LLM configured) or "unavailable: <why>" (starting, dead or overloaded)."""
        if self._llm is None:
            return "off"
        try:
            await asyncio.wait_for(self._llm.ready(), timeout_s)
            if self._cfg.check.enabled:
                await asyncio.to_thread(self._support_scorer)
        except TimeoutError:
            return f"unavailable: no answer within {timeout_s:g}s (starting or busy)"
        except Exception as exc:  # noqa: BLE001 - the state is reported, not raised
            return f"unavailable: {type(exc).__name__}: {exc}"
        return "ready"
