"""`GET /v1/documents` on the ingress over fake stages: pages in a stable order, the key's tenant and groups, the
filters compiled as for a query, and every bad argument a 400 before any stage is called. Against the real
Serve app and milvus-lite: tests/integration/test_query_service.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from cluster.config import RagcConfig
from serve.edge.listing import DEFAULT_PAGE, cursor_of, filters_param, page_size
from serve.errors import BadRequestError
from serve.types import Passage
from tests.fakes import FakeStages, fake_stages

KEYS = {"key-a": "acme", "key-hr": {"tenant": "acme", "groups": ["hr"]}}


def chunk(n: int, tenant: str = "acme", access: tuple[str, ...] = ("*",)) -> Passage:
    """A document's first chunk, its id shaped like a real one (32 hex digits), in id order by `n`."""
    return Passage(f"{n:032x}", f"doc{n}.md", tenant, "", title=f"Doc {n}", doc_type="md", year=2020 + n, access=access)


def client_over(stages: FakeStages, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    from serve.edge.ingress import Ingress

    monkeypatch.setenv("TEST_LISTING_KEYS", json.dumps(KEYS))
    cfg = RagcConfig.model_validate(
        {"serve": {"llm": {"enabled": False}, "auth": {"api_keys": {"env_var": "TEST_LISTING_KEYS"}}}}
    )

    async def ready() -> tuple[bool, None]:
        return True, None

    ingress = Ingress(cfg.model_dump(mode="json"), fake_stages(stages), ready)
    api = FastAPI()

    async def documents(request: Request) -> Any:
        return await ingress.handle_documents(request)

    api.get("/v1/documents")(documents)
    return TestClient(api)


def listed(client: TestClient, key: str = "key-a", **params: Any) -> Any:
    return client.get("/v1/documents", params=params, headers={"Authorization": f"Bearer {key}"})


def test_pages_follow_the_cursor_to_the_last_and_carry_the_documents_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    stages = FakeStages([chunk(n) for n in (3, 1, 2, 5, 4)])
    client = client_over(stages, monkeypatch)
    first = listed(client, limit=2)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["tenant"] == "acme" and [d["doc_id"] for d in body["documents"]] == ["doc1.md", "doc2.md"]
    assert body["documents"][0] == {
        "doc_id": "doc1.md",
        "title": "Doc 1",
        "source": "",
        "doc_type": "md",
        "year": 2021,
        "author": "",
        "tags": [],
    }
    seen, cursor = [d["doc_id"] for d in body["documents"]], body["next_cursor"]
    while cursor:
        page = listed(client, limit=2, cursor=cursor).json()
        seen += [d["doc_id"] for d in page["documents"]]
        cursor = page["next_cursor"]
    assert seen == [f"doc{n}.md" for n in range(1, 6)], "every document once, in one order"
    assert listed(client).json()["next_cursor"] is None, f"the default page ({DEFAULT_PAGE}) holds all five"


def test_the_filters_are_compiled_as_for_a_query_and_the_keys_groups_reach_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stages = FakeStages([chunk(1)])
    client = client_over(stages, monkeypatch)
    assert listed(client, filters=json.dumps({"doc_type": "md", "year": {"gte": 2021}})).status_code == 200
    assert listed(client, "key-hr").status_code == 200
    (expr, groups), (_, hr_groups) = stages.listed
    assert 'doc_type == "md"' in expr and "year >= 2021" in expr and groups == ()
    assert hr_groups == ("hr",)


def test_a_document_the_store_should_not_have_returned_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tenant and access clauses are in the store's query; the ingress checks them again, as for passages."""
    stages = FakeStages([chunk(1), chunk(2, tenant="beta"), chunk(3, access=("hr",))])
    client = client_over(stages, monkeypatch)
    assert [d["doc_id"] for d in listed(client).json()["documents"]] == ["doc1.md"]
    assert [d["doc_id"] for d in listed(client, "key-hr").json()["documents"]] == ["doc1.md", "doc3.md"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": "0"}, "limit must be between 1 and 1000"),
        ({"limit": "ten"}, "limit must be a whole number"),
        ({"limit": "1001"}, "limit must be between 1 and 1000"),
        ({"cursor": 'x" or tenant_id != "'}, "cursor is not one this API returned"),
        ({"filters": "{"}, "malformed JSON"),
        ({"filters": "[1]"}, "takes) must be a JSON object"),
        ({"filters": json.dumps({"nope": 1})}, "nope"),
        ({"filters": '{"title": "\\ud800"}'}, "unpaired surrogate"),
    ],
)
def test_a_bad_argument_is_a_400_with_the_reason_and_reaches_no_stage(
    params: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stages = FakeStages([chunk(1)])
    client = client_over(stages, monkeypatch)
    refused = listed(client, **params)
    assert refused.status_code == 400 and message in refused.json()["error"], refused.text
    assert stages.calls == []


def test_an_unknown_key_is_a_401_and_a_failed_store_a_503(monkeypatch: pytest.MonkeyPatch) -> None:
    stages = FakeStages([chunk(1)], fail={"documents"})
    client = client_over(stages, monkeypatch)
    assert listed(client, "nope").status_code == 401
    failed = listed(client)
    assert failed.status_code == 503 and "retrieval unavailable" in failed.json()["error"]


def test_the_page_arguments_alone() -> None:
    assert (page_size(None, 1000), page_size("", 50), page_size(7, 1000)) == (DEFAULT_PAGE, 50, 7)
    assert cursor_of(None) is None and cursor_of("0" * 32) == "0" * 32
    with pytest.raises(BadRequestError):
        cursor_of("0" * 31)
    assert filters_param(None) == {} and filters_param('{"doc_type": "md"}') == {"doc_type": "md"}
