"""Response modes: how the passages reach the LLM (compact, refine, tree_summarize, accumulate, no_text)."""

from __future__ import annotations

import asyncio

import pytest

from cluster.config import RagcConfig
from serve.answer_check import EmbeddingSupport
from serve.errors import BadRequestError
from serve.llm.prompts import COMBINE_SYSTEM, synthesis_messages
from serve.pipeline import QueryPipeline
from serve.roles import Stages
from serve.stages.synthesize import SynthesizeStage
from serve.types import Passage, QueryRequest, StreamReset, Synthesis
from tests.fakes import FakeStages, HashEmbedder, ScriptedGenerator, fake_stages


def passages(n: int) -> list[Passage]:
    text = "Passage {} says tenants are kept apart."
    return [Passage(f"c{i}", f"d{i}", "t1", text.format(i), title=f"T{i}") for i in range(n)]


def reply(i: int) -> str:
    """What passage i (0-based) supports, cited by its number as returned."""
    return f"Passage {i} says tenants are kept apart [{i + 1}]."


def stage(llm: ScriptedGenerator, **synthesize: object) -> SynthesizeStage:
    cfg = RagcConfig.model_validate({"serve": {"synthesize": synthesize}})
    return SynthesizeStage(**SynthesizeStage.tree_args(cfg), llm=llm, support=EmbeddingSupport(HashEmbedder(dim=512)))


def one_passage_budget(reserve: int = 0) -> int:
    """A prompt budget that holds one passage's prompt (and `reserve`) but not two."""
    one, two = asyncio.run(
        ScriptedGenerator([]).prompt_tokens(
            [synthesis_messages("are tenants apart?", passages(k), 900, strict=True) for k in (1, 2)]
        )
    )
    assert one + reserve < two
    return one + reserve


def run(s: SynthesizeStage, ps: list[Passage], mode: str) -> list:
    async def collect() -> list:
        return [item async for item in s.synthesize_stream("are tenants apart?", ps, mode=mode)]

    return asyncio.run(collect())


def test_accumulate_answers_each_passage_under_its_own_number() -> None:
    """The answers are checked one by one (answers to one question over several passages share phrases)."""
    llm = ScriptedGenerator([reply(0), reply(1), reply(2)])
    items = run(stage(llm), passages(3), "accumulate")
    final = items[-1]
    assert isinstance(final, Synthesis) and final.grounded and final.failed_check is None
    assert final.cited == [1, 2, 3] and final.llm_calls == 3
    assert final.mode == "llm, accumulate, 3 LLM calls"
    assert final.answer == "\n\n".join([reply(0), reply(1), reply(2)])
    for n, (messages, _) in enumerate(llm.calls, start=1):
        prompt = messages[-1]["content"]
        assert f"[{n}] (T{n - 1})" in prompt and prompt.count("(T") == 1
    streamed = "".join(i for i in items if isinstance(i, str))
    assert " ".join(streamed.split()) == " ".join(final.answer.split())


def test_refine_improves_the_answer_batch_by_batch() -> None:
    """A prompt budget that holds about one passage makes a batch per passage."""
    replies = [reply(0), f"{reply(0)} {reply(1)}", f"{reply(0)} {reply(2)}"]
    llm = ScriptedGenerator(list(replies))
    budget = one_passage_budget(reserve=5)
    final = run(stage(llm, max_prompt_tokens=budget, max_tokens=5), passages(3), "refine")[-1]
    assert final.llm_calls == len(llm.calls) >= 2
    second_prompt = llm.calls[1][0][-1]["content"]
    assert f"Earlier answer: {reply(0)}" in second_prompt and "[1] (T0)" not in second_prompt
    assert final.answer == replies[len(llm.calls) - 1] and final.grounded  # the last refinement is the answer
    assert final.passages_sent == 3 and final.passages_cut == 0


def test_tree_summarize_combines_the_batches_answers() -> None:
    llm = ScriptedGenerator([reply(0), reply(1), reply(2), f"{reply(0)} {reply(2)}"])
    items = run(stage(llm, max_prompt_tokens=one_passage_budget(), max_tokens=5), passages(3), "tree_summarize")
    final = items[-1]
    batches = len(llm.calls) - 1
    assert batches >= 2 and final.llm_calls == batches + 1
    combine, _ = llm.calls[-1]
    assert combine[0]["content"] == COMBINE_SYSTEM
    assert all(r in combine[-1]["content"] for r in [reply(i) for i in range(batches)])
    assert final.answer == f"{reply(0)} {reply(2)}" and final.cited == [1, 3] and final.grounded


def test_a_mode_past_the_deadline_keeps_the_best_answer_so_far() -> None:
    """Each call takes ~0.6 s of a 1 s timeout: the first answer is kept, the second is cut, and the
    stream is reset to the kept answer."""
    llm = ScriptedGenerator([reply(0), reply(1), reply(2)], word_delay_s=0.08)
    items = run(stage(llm, timeout_s=1.0), passages(3), "accumulate")
    final = items[-1]
    assert final.answer == reply(0) and final.cited == [1] and final.grounded
    assert "cut at the deadline" in final.mode and final.llm_calls == 2
    resets = [i for i in items if isinstance(i, StreamReset)]
    assert len(resets) == 1 and items[-2] == reply(0)


def test_accumulate_drops_the_answers_that_fail_their_check() -> None:
    llm = ScriptedGenerator([reply(0), "Tenants are kept apart in every passage store."])
    final = run(stage(llm), passages(2), "accumulate")[-1]
    assert final.answer == reply(0) and final.grounded and final.cited == [1]
    dropped = "1 answer dropped (uncited claim: 'Tenants are kept apart in every passage store.')"
    assert final.mode == f"llm, accumulate, 2 LLM calls, {dropped}"


def test_a_mode_whose_answer_fails_the_check_carries_the_reason() -> None:
    llm = ScriptedGenerator([reply(0), "Tenants are kept apart in every passage store."])
    final = run(stage(llm, max_prompt_tokens=one_passage_budget(reserve=5), max_tokens=5), passages(2), "refine")[-1]
    assert not final.grounded and final.failed_check and final.failed_check.startswith("uncited claim")


def pipeline(**synthesize: object) -> tuple[QueryPipeline, FakeStages]:
    fake = FakeStages(passages(3))
    cfg = RagcConfig.model_validate({"serve": {"synthesize": synthesize}})
    return QueryPipeline(cfg.serve, fake_stages(fake)), fake


def test_a_failed_mode_answer_falls_back_with_the_mode_in_the_detail() -> None:
    fake = FakeStages(passages(2))
    llm = ScriptedGenerator([reply(0), "Tenants are kept apart in every passage store."])
    s = stage(llm, max_prompt_tokens=one_passage_budget(reserve=5), max_tokens=5)
    out = asyncio.run(
        QueryPipeline(RagcConfig().serve, Stages(fake, fake, fake, s)).run(
            QueryRequest(query="are tenants apart?", mode="refine"), "t1", "", "r"
        )
    )
    detail = out.stages["synthesize"].detail or ""
    assert out.stages["synthesize"].status == "fallback"
    assert detail.startswith("extractive answer: uncited claim") and "; refine, 2 LLM calls; 2 passages sent" in detail


def test_the_request_mode_reaches_the_stage_and_the_cache_key() -> None:
    pipe, fake = pipeline()
    out = asyncio.run(pipe.run(QueryRequest(query="tenants?", mode="refine"), "t1", "", "r"))
    assert fake.modes == ["refine"] and out.stages["synthesize"].status == "ok"
    asyncio.run(pipe.run(QueryRequest(query="tenants?"), "t1", "", "r"))
    assert fake.modes == ["refine", "compact"]
    scope = [pipe.scope(QueryRequest(query="q", mode=m), "t1", "", 1).switches for m in ("refine", None)]
    assert scope[0] != scope[1]


def test_no_text_returns_the_passages_without_an_llm_call() -> None:
    pipe, fake = pipeline()
    out = asyncio.run(pipe.run(QueryRequest(query="tenants?", mode="no_text"), "t1", "", "r"))
    assert fake.modes == [] and out.answer == "" and not out.citations and out.passages
    assert out.stages["synthesize"].status == "skipped" and "no_text" in (out.stages["synthesize"].detail or "")


@pytest.mark.parametrize(
    ("mode", "allowed"),
    [("summarize_everything", None), ("accumulate", ["compact", "no_text"])],
)
def test_an_unknown_or_disallowed_mode_is_refused_with_the_allowed_values(mode: str, allowed: list | None) -> None:
    pipe, fake = pipeline(**({"response_modes": allowed} if allowed else {}))
    expected = ", ".join(allowed or ["compact", "refine", "tree_summarize", "accumulate", "no_text"])
    with pytest.raises(BadRequestError, match=f"mode '{mode}' is not allowed; use one of: {expected}"):
        asyncio.run(pipe.run(QueryRequest(query="tenants?", mode=mode), "t1", "", "r"))
    assert fake.modes == []


def test_the_default_mode_must_be_an_allowed_one() -> None:
    with pytest.raises(ValueError, match="response_mode 'refine' is not in response_modes"):
        RagcConfig.model_validate({"serve": {"synthesize": {"response_mode": "refine", "response_modes": ["compact"]}}})
