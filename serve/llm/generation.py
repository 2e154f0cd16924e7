"""The contract between the LLM stages (rewrite/HyDE, synthesis) and whatever generates text: the vLLM
deployment through a Serve handle in the app, a fake in unit tests."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Protocol

from serve.llm.load import EngineLoad
from serve.types import Usage

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class GenerationParams:
    max_tokens: int
    temperature: float = 0.0
    stop: tuple[str, ...] = ()
    # Structured output: the text is constrained to match this regular expression.
    regex: str | None = None


@dataclass(frozen=True)
class Piece:
    """A text delta of a streamed call, and what the call has cost so far (its prompt, and the tokens generated
    up to here): a caller that stops reading early still knows what it spent."""

    text: str
    usage: Usage


@dataclass(frozen=True)
class Generated:
    text: str
    usage: Usage


class TextGenerator(Protocol):
    async def generate(self, messages: Messages, params: GenerationParams) -> Generated: ...

    def stream(self, messages: Messages, params: GenerationParams) -> AsyncGenerator[Piece, None]: ...

    async def ready(self) -> None:
        """Returns when the engine answers its health check and has warmed up; raises otherwise."""

    async def prompt_tokens(self, prompts: list[Messages]) -> list[int]:
        """Tokens of each prompt as the engine will see it (chat template included)."""
        ...

    async def load(self) -> EngineLoad:
        """The requests in flight and how long a new one would take now (serve/llm/load.py)."""
        ...


class HandleGenerator:
    """`TextGenerator` over a deployment handle of `serve.llm_engine.LLMEngine`; `stream` is a
    streaming handle call, so tokens flow on as the engine produces them."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._streaming = handle.options(stream=True)

    async def generate(self, messages: Messages, params: GenerationParams) -> Generated:
        return await self._handle.generate.remote(messages, params)

    async def stream(self, messages: Messages, params: GenerationParams) -> AsyncGenerator[Piece, None]:
        response = self._streaming.stream.remote(messages, params)
        finished = False
        try:
            async for piece in response:
                yield piece
            finished = True
        finally:
            if not finished:
                # a caller that stops reading (a repeat found, a deadline) stops the engine: cancelling the
                # replica's call aborts its vLLM request, which would otherwise run on to max_tokens and
                # slow the next answer down
                response.cancel()

    async def ready(self) -> None:
        await self._handle.ready.remote()

    async def prompt_tokens(self, prompts: list[Messages]) -> list[int]:
        return await self._handle.prompt_tokens.remote(prompts)

    async def load(self) -> EngineLoad:
        return await self._handle.load.remote()


async def collect(stream: AsyncGenerator[Piece, None]) -> Generated:
    """A whole stream: its text and what it cost."""
    texts: list[str] = []
    usage = Usage()
    async for piece in stream:
        texts.append(piece.text)
        usage = piece.usage
    return Generated("".join(texts), usage)


def as_generator(llm: Any) -> TextGenerator | None:
    """Stages accept a deployment handle (in the app) or a `TextGenerator` (tests); None = no LLM."""
    if llm is None:
        return None
    if hasattr(llm, "options") and hasattr(llm, "deployment_name"):
        return HandleGenerator(llm)
    return llm
