"""The OpenAI-compatible API's translation: messages to a query, a response to a completion and its chunks."""

from __future__ import annotations

from typing import Any

import pytest

from serve.edge import openai_compat
from serve.edge.openai_compat import ModelNotFoundError, parse_chat, to_query
from serve.errors import BadRequestError
from serve.types import QueryResponse

MODELS = openai_compat.models(["compact", "refine", "no_text"])


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "ragc", "messages": [{"role": "user", "content": "How are tenants kept apart?"}]} | fields


def response(answer: str = "Tenants are filtered in the store [1].") -> QueryResponse:
    return QueryResponse.model_validate(
        {
            "answer": answer,
            "citations": [{"n": 1, "chunk_id": "c", "doc_id": "d", "title": "t", "source": "s", "score": 0.5}],
            "passages": [],
            "abstained": False,
            "grounded": True,
            "stages": {"retrieve": {"status": "ok", "ms": 3}},
            "index_version": 2,
            "request_id": "r1",
            "tenant": "alpha",
            "retrieval_query": {"query": "q"},
            "usage": {"prompt_tokens": 310, "completion_tokens": 12, "total_tokens": 322},
        }
    )


def test_models_are_the_default_and_each_allowed_mode() -> None:
    assert MODELS == {"ragc": None, "ragc-compact": "compact", "ragc-refine": "refine", "ragc-no_text": "no_text"}
    listed = openai_compat.model_list(["compact"], created=5)
    assert listed["object"] == "list" and [m["id"] for m in listed["data"]] == ["ragc", "ragc-compact"]


def test_the_last_user_message_is_the_question_and_earlier_turns_the_history() -> None:
    body = chat(
        model="ragc-refine",
        messages=[
            {"role": "system", "content": "You are a pirate."},
            {"role": "user", "content": "What is tenant isolation?"},
            {"role": "assistant", "content": "Each tenant sees only its own documents [1]."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "How is it "}, {"type": "text", "text": "enforced?"}],
            },
        ],
        temperature=0.2,
        max_tokens=50,
        ragc={"filters": {"doc_type": "md"}, "top_k": 3, "rerank": False},
    )
    query = to_query(parse_chat(body), MODELS)
    assert query.query == "How is it enforced?" and query.mode == "refine"
    # the system message is dropped: the service's own prompt governs the answer
    assert [(t.role, t.content) for t in query.history] == [
        ("user", "What is tenant isolation?"),
        ("assistant", "Each tenant sees only its own documents [1]."),
    ]
    assert (query.filters, query.top_k, query.rerank, query.hyde) == ({"doc_type": "md"}, 3, False, None)
    assert to_query(parse_chat(chat()), MODELS).mode is None  # `ragc`: the configured default


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (chat(messages=[]), "messages"),
        (chat(messages=[{"role": "assistant", "content": "hi"}]), "must be the user's question"),
        (chat(n=2), "n must be 1"),
        (chat(tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
        (chat(logprobs=True), "logprobs"),
        (chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]), "image_url"),
        (chat(ragc={"top_k": "many"}), "ragc.top_k"),
        (chat(ragc={"tenant": "other"}), "ragc.tenant"),
        (chat(messages=[{"role": "tool", "content": "x"}, {"role": "user", "content": "q"}]), "tool messages"),
        ({"messages": [{"role": "user", "content": "q"}]}, "model"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(body: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequestError, match=message):
        to_query(parse_chat(body), MODELS)


def test_an_unknown_model_is_not_found() -> None:
    with pytest.raises(ModelNotFoundError, match="ragc-compact"):
        to_query(parse_chat(chat(model="gpt-4o")), MODELS)
    assert ModelNotFoundError.status_code == 404


def test_a_completion_carries_the_answer_and_the_extension() -> None:
    out = openai_compat.completion(response(), "ragc", created=7)
    assert out["object"] == "chat.completion" and out["id"] == "chatcmpl-r1" and out["created"] == 7
    assert out["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Tenants are filtered in the store [1]."},
            "finish_reason": "stop",
        }
    ]
    assert out["usage"] == {"prompt_tokens": 310, "completion_tokens": 12, "total_tokens": 322}
    ext = out["ragc"]
    assert "answer" not in ext and ext["citations"][0]["doc_id"] == "d" and ext["grounded"] is True
    assert QueryResponse.model_validate(ext | {"answer": "x"}).stages["retrieve"].status == "ok"


def test_stream_chunks_rebuild_the_answer_and_the_last_carries_the_extension() -> None:
    answer = " ".join(f"w{n}" for n in range(19)) + " [1]."
    chunks = list(openai_compat.answer_chunks(response(answer), "ragc", created=7))
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == answer
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-r1" for c in chunks)
    *pieces, last = chunks
    assert len(pieces) == 3 and all(c["choices"][0]["finish_reason"] is None for c in pieces)
    assert last["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert last["ragc"]["request_id"] == "r1" and last["usage"]["total_tokens"] == 322
    assert all("usage" not in c for c in pieces)


def test_errors_have_openais_shape() -> None:
    body = openai_compat.error_body(404, "model 'x' does not exist", "r9")
    assert body == {
        "error": {
            "message": "model 'x' does not exist",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
            "request_id": "r9",
        }
    }
    assert openai_compat.error_body(503, "busy", "r")["error"]["type"] == "service_unavailable"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat(n=3), "n"),
        (chat(logprobs=True), "logprobs"),
        (chat(tool_choice="auto"), "tool_choice"),
        (chat(ragc={"top_k": "x"}), "ragc.top_k"),
    ],
)
def test_a_refused_parameter_is_named(body: dict[str, Any], param: str) -> None:
    with pytest.raises(openai_compat.ParameterError) as refused:
        parse_chat(body)
    assert refused.value.param == param and refused.value.status_code == 400
    assert openai_compat.error_body(400, refused.value.message, "r", refused.value.param)["error"]["param"] == param
