"""The service that `ragc eval-answers` asks: the query pipeline with the service's own stage classes in
this process (its config, no cache), or a running service over HTTP. Either way each question comes back as
the served `QueryResponse`; in process, also the text the LLM streamed before the answer check withdrew it
(what a service without the check would have served)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

import httpx

from cluster.config import RagcConfig, ResponseMode, ServeConfig
from serve.answer_check import SupportScorer
from serve.answerability import AnswerabilityModel
from serve.roles import Stages, Synthesizer
from serve.types import AnswerContext, Passage, QueryRequest, QueryResponse, StreamReset, Synthesis, SynthesisItem, Turn


@dataclass(frozen=True)
class Served:
    response: QueryResponse
    # in process: the LLM's first answer as it was generated, before the check (compact: the first attempt, as
    # streamed before the check withdrew it; other modes, which are not retried: their answer), None when no
    # attempt finished (the stage timed out or failed: a service without the check falls back the same way)
    unchecked_text: str | None = None
    unchecked_passages_sent: int = 0
    recorded: bool = False  # False: a remote service, whose unchecked text never leaves it


class AnswerService(Protocol):
    def run(self, question: str, history: tuple[tuple[str, str], ...], mode: str | None) -> Served: ...

    def close(self) -> None: ...


def passages_of(response: QueryResponse, tenant: str) -> list[Passage]:
    """The response's passages as the stages' type, numbered as the answer cites them, each with the text the
    answer read (widened by its neighbours when they were asked for)."""
    return [
        Passage(p.chunk_id, p.doc_id, tenant, p.context or p.text, p.title, p.source, p.section, score=p.score)
        for p in response.passages
    ]


class RecordingSynthesizer:
    """Passes the synthesis stream through and keeps what the unchecked arm needs."""

    def __init__(self, inner: Synthesizer) -> None:
        self._inner = inner
        self.first_text: str | None = None
        self.final: Synthesis | None = None

    async def synthesize_stream(
        self,
        query: str,
        passages: list[Passage],
        context: AnswerContext | None = None,
        mode: ResponseMode = "compact",
    ) -> AsyncIterator[SynthesisItem]:
        pieces: list[str] = []
        withdrawn = False
        self.first_text, self.final = None, None
        async for item in self._inner.synthesize_stream(query, passages, context=context, mode=mode):
            if isinstance(item, Synthesis):
                self.final = item
                if self.first_text is None:
                    self.first_text = item.answer if mode != "compact" else "".join(pieces).strip()
            elif isinstance(item, StreamReset):
                if not withdrawn and mode == "compact":
                    self.first_text = "".join(pieces).strip()
                withdrawn = True
            elif not withdrawn:
                pieces.append(item)
            yield item


class PipelineService:
    """The query pipeline over stages given to it (`in_process`: the stage classes, as the Serve app wires
    them, without Serve and without a cache); its synthesizer is recorded for the unchecked arm."""

    def __init__(
        self,
        cfg: ServeConfig,
        stages: Stages,
        tenant: str,
        answerability: AnswerabilityModel | None = None,
        engines: tuple[Any, ...] = (),
    ) -> None:
        from serve.pipeline import QueryPipeline

        self._synthesizer = RecordingSynthesizer(stages.synthesizer)
        self._stages = replace(stages, synthesizer=self._synthesizer)
        self._answerability = answerability
        self._pipeline = QueryPipeline(cfg, self._stages, None, answerability)
        self._tenant = tenant
        self._engines = engines
        self._loop = asyncio.new_event_loop()
        for engine in engines:  # warmed up, as before /readyz says ready
            self._loop.run_until_complete(engine.ready())

    @classmethod
    def in_process(cls, cfg: RagcConfig, tenant: str, support: SupportScorer) -> PipelineService:
        from serve.answerability import load_answerability
        from serve.llm.engine import LLMEngine
        from serve.stages.rerank import RerankStage
        from serve.stages.retrieve import RetrieveStage
        from serve.stages.rewrite import RewriteStage
        from serve.stages.synthesize import SynthesizeStage

        engines: dict[str, LLMEngine] = {}
        if cfg.serve.llm.enabled:
            for name in {cfg.serve.synthesize.engine, cfg.serve.rewrite.engine}:
                engines[name] = LLMEngine(**LLMEngine.tree_args(cfg, name))
        answering = engines.get(cfg.serve.synthesize.engine)
        stages = Stages(
            RewriteStage(**RewriteStage.tree_args(cfg), llm=engines.get(cfg.serve.rewrite.engine)),
            RetrieveStage(**RetrieveStage.tree_args(cfg)),
            RerankStage(**RerankStage.tree_args(cfg)),
            SynthesizeStage(**SynthesizeStage.tree_args(cfg), llm=answering, support=support),
        )
        return cls(cfg.serve, stages, tenant, load_answerability(cfg.serve), tuple(engines.values()))

    def over_collection(self, cfg: RagcConfig) -> None:
        """Ask over another collection (another dataset's) from now on: a retrieve stage of its own, the same
        engines, models and event loop (an engine is bound to the loop it first ran on)."""
        from serve.pipeline import QueryPipeline
        from serve.stages.retrieve import RetrieveStage

        self._stages = replace(self._stages, retriever=RetrieveStage(**RetrieveStage.tree_args(cfg)))
        self._pipeline = QueryPipeline(cfg.serve, self._stages, None, self._answerability)

    async def _ask(self, question: str, history: tuple[tuple[str, str], ...], mode: str | None) -> Served:
        turns = [Turn(role=role, content=text) for role, text in history]  # type: ignore[arg-type]
        request = QueryRequest(query=question, history=turns, mode=mode)
        response = await self._pipeline.run(request, self._tenant, "", uuid.uuid4().hex)
        final = self._synthesizer.final
        sent = final.passages_sent if final is not None and final.passages_sent else len(response.passages)
        first = None if response.abstained else self._synthesizer.first_text
        return Served(response, first or None, sent, recorded=True)

    def run(self, question: str, history: tuple[tuple[str, str], ...], mode: str | None) -> Served:
        return self._loop.run_until_complete(self._ask(question, history, mode))

    def close(self) -> None:
        for engine in self._engines:
            engine.shutdown()
        self._loop.close()


class EndpointService:
    """A running service's `/v1/query`: the served arm only (the unchecked text never leaves the service)."""

    def __init__(self, endpoint: str, api_key: str | None, timeout_s: float = 120.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=endpoint.rstrip("/"), headers=headers, timeout=timeout_s)
        self._endpoint = endpoint

    def run(self, question: str, history: tuple[tuple[str, str], ...], mode: str | None) -> Served:
        body: dict[str, Any] = {"query": question, "history": [{"role": r, "content": c} for r, c in history]}
        if mode:
            body["mode"] = mode
        reply = self._client.post("/v1/query", json=body)
        if reply.status_code != 200:
            raise RuntimeError(f"{self._endpoint} answered {reply.status_code}: {reply.text[:300]}")
        response = QueryResponse.model_validate(reply.json())
        return Served(response)

    def close(self) -> None:
        self._client.close()
