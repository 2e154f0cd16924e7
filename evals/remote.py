"""`ragc eval --endpoint URL`: the same metrics over a running service's HTTP API.

The service answers with its top_k passages after rerank, so Recall@100 is bounded by that top_k; the
ranking metrics at 10 are comparable with the in-process pipelines."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from evals.metrics import Ranking


def remote_ranker(endpoint: str, api_key: str | None, top_k: int, timeout_s: float = 60.0) -> Callable[[str], Ranking]:
    """`top_k`: as many passages as the service lets one request have (`serve.limits.max_top_k`)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client = httpx.Client(base_url=endpoint.rstrip("/"), headers=headers, timeout=timeout_s)

    def rank(query: str) -> Ranking:
        response = client.post("/v1/query", json={"query": query, "top_k": top_k})
        if response.status_code != 200:
            raise RuntimeError(f"{endpoint} answered {response.status_code}: {response.text[:300]}")
        seen: dict[str, None] = {}
        for passage in response.json().get("passages", []):
            seen.setdefault(str(passage["doc_id"]), None)
        return list(seen)

    return rank
