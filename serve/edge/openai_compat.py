"""OpenAI-compatible chat completions over the RAG pipeline: the request's messages become a `QueryRequest`,
the `QueryResponse` becomes a `chat.completion` (or its stream of `chat.completion.chunk`s).

Plain OpenAI clients read `choices[0].message.content`; everything RAG-specific (citations, passages, stages,
`abstained`, `grounded`) travels in the `ragc` extension field of the response and of the last stream chunk,
and the request takes the same extension (filters, top_k, rewrite, hyde, rerank, neighbours, merge_siblings,
multi_query) as `extra_body={"ragc": ...}`.
Models name the response mode: `ragc` is the configured default, `ragc-<mode>` each allowed mode.

A stream sends the answer's text only once it passed the answer check: OpenAI's stream format cannot take
text back, and the native `/v1/query` stream's `reset` event has no equivalent there."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from serve.errors import BadRequestError, QueryError
from serve.types import QueryRequest, QueryResponse, Turn

MODEL_FAMILY = "ragc"
OWNER = "ragc"
STREAM_PIECE_WORDS = 8  # words per content chunk when a checked answer is streamed


class ModelNotFoundError(QueryError):
    status_code = 404


class ParameterError(BadRequestError):
    """A 400 that names the request parameter it is about (OpenAI's `error.param`)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # type: ignore[override]
        return (type(self), (self.message, self.param))


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls, ...: refused below when they matter
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        if any(part.type != "text" for part in self.content):
            kinds = sorted({part.type for part in self.content if part.type != "text"})
            raise BadRequestError(f"only text content is supported, not {', '.join(kinds)}")
        return "".join(part.text or "" for part in self.content)


class RagcOptions(BaseModel):
    """The `ragc` extension of a chat request: what `/v1/query` takes besides the question and history."""

    model_config = ConfigDict(extra="forbid")
    filters: dict[str, Any] = Field(default_factory=dict)
    top_k: int | None = None
    rewrite: bool | None = None
    hyde: bool | None = None
    rerank: bool | None = None
    neighbours: int | None = None
    merge_siblings: int | None = None
    multi_query: bool | None = None


class ChatRequest(BaseModel):
    # OpenAI clients send sampling settings (temperature, max_tokens, ...) that a RAG answer does not take
    # from the caller: they are accepted and ignored; what would change the response's shape is refused.
    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    n: int = 1
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    tool_choice: Any = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    ragc: RagcOptions = Field(default_factory=RagcOptions)


def models(allowed_modes: list[str]) -> dict[str, str | None]:
    """Model id -> the response mode it selects (None: the configured default, as `/v1/query` without one)."""
    return {MODEL_FAMILY: None} | {f"{MODEL_FAMILY}-{mode}": mode for mode in allowed_modes}


def model_list(allowed_modes: list[str], created: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": created, "owned_by": OWNER} for name in models(allowed_modes)
        ],
    }


def parse_chat(body: dict[str, Any]) -> ChatRequest:
    try:
        chat = ChatRequest.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "body"
        raise ParameterError(f"invalid request: {where}: {err.get('msg')}", where) from exc
    if chat.n != 1:
        raise ParameterError("n must be 1: one answer per question", "n")
    for name in ("tools", "functions", "tool_choice"):
        if getattr(chat, name):
            raise ParameterError(f"{name} is not supported: the answer comes from retrieved passages", name)
    for name in ("logprobs", "top_logprobs"):
        if getattr(chat, name):
            raise ParameterError(f"{name} is not supported: the answer is checked text, not sampled tokens", name)
    return chat


def to_query(chat: ChatRequest, known_models: dict[str, str | None]) -> QueryRequest:
    """The last message is the question (it must be the user's); earlier user and assistant turns are the
    history. System and developer messages are dropped: the service's own prompt governs the answer."""
    if chat.model not in known_models:
        raise ModelNotFoundError(f"model {chat.model!r} does not exist; use one of {sorted(known_models)}")
    *earlier, last = chat.messages
    if last.role != "user":
        raise BadRequestError(f"the last message must be the user's question, not a {last.role!r} message")
    history: list[Turn] = []
    for message in earlier:
        if message.role in ("tool", "function"):
            raise BadRequestError(f"{message.role} messages are not supported")
        if message.role in ("user", "assistant"):
            history.append(Turn(role=message.role, content=message.text()))
    options = chat.ragc.model_dump(exclude_none=True)
    return QueryRequest(query=last.text(), history=history, mode=known_models[chat.model], **options)


def completion_id(request_id: str) -> str:
    return f"chatcmpl-{request_id}"


def extension(result: QueryResponse) -> dict[str, Any]:
    return result.model_dump(mode="json", exclude={"answer"})


def completion(result: QueryResponse, model: str, created: int | None = None) -> dict[str, Any]:
    return {
        "id": completion_id(result.request_id),
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.answer}, "finish_reason": "stop"}],
        "usage": result.usage.model_dump(),
        MODEL_FAMILY: extension(result),
    }


def chunk(
    request_id: str, model: str, created: int, delta: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    return {
        "id": completion_id(request_id),
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def answer_chunks(result: QueryResponse, model: str, created: int) -> Iterator[dict[str, Any]]:
    """The checked answer in pieces of a few words, then the closing chunk with the extension."""
    words = result.answer.split(" ")
    for start in range(0, len(words), STREAM_PIECE_WORDS):
        piece = " ".join(words[start : start + STREAM_PIECE_WORDS])
        text = piece if start + STREAM_PIECE_WORDS >= len(words) else piece + " "
        yield chunk(result.request_id, model, created, {"content": text})
    closing = {"usage": result.usage.model_dump(), MODEL_FAMILY: extension(result)}
    yield chunk(result.request_id, model, created, {}, "stop") | closing


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
    504: "timeout",
}
ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


def error_body(status: int, message: str, request_id: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape (the official clients raise it as the matching `APIStatusError`)."""
    return {
        "error": {
            "message": message,
            "type": ERROR_TYPES.get(status, "api_error"),
            "param": param,
            "code": ERROR_CODES.get(status),
            "request_id": request_id,
        }
    }
