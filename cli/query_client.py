"""`ragc query`: call the running service over HTTP (JSON or SSE) and print the answer."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from typing import Any

import httpx
from httpx_sse import connect_sse

from cluster.config import FilterField, RagcConfig
from local.cluster import http_url

FILTER = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(>=|<=|!=|=)(.*)$")
OPS = {"=": "eq", "!=": "ne", ">=": "gte", "<=": "lte"}
CLIENT_TIMEOUT_S = 120.0


def parse_filters(items: list[str], fields: Mapping[str, FilterField]) -> dict[str, Any]:
    """`FIELD=VALUE` flags as the API's filter object, typed by the config's filter fields. On a list field
    (`tags`) `=` means it holds the value, or every one of a comma-separated list."""
    filters: dict[str, Any] = {}
    for item in items:
        match = FILTER.match(item)
        if not match:
            raise ValueError(f"bad filter {item!r}: use FIELD=VALUE, FIELD>=N or FIELD<=N")
        field, op, raw = match.groups()
        known = fields.get(field)
        if known is not None and known.type == "str_list":
            values = [v.strip() for v in raw.split(",") if v.strip()]
            if op != "=" or not values:
                raise ValueError(f"bad filter {item!r}: {field} is a list; use {field}=VALUE or {field}=A,B")
            single = len(values) == 1
            filters.setdefault(field, {})["contains" if single else "contains_all"] = values[0] if single else values
            continue
        value: Any = int(raw) if known is not None and known.type == "int" and raw.lstrip("-").isdigit() else raw
        filters.setdefault(field, {})[OPS[op]] = value
    return filters


def render(result: dict[str, Any]) -> str:
    lines = [result["answer"], ""]
    for c in result.get("citations", []):
        lines.append(f"[{c['n']}] {c['title'] or c['doc_id']} ({c['source']})")
    stages = result.get("stages", {})
    timings = "  ".join(f"{k}={v['status']}:{v['ms']:.0f}ms" for k, v in stages.items())
    lines.append(f"stages: {timings}  index_version={result.get('index_version')}")
    # what a stage used or why it fell back (e.g. the answer check's reason for an extractive answer)
    lines += [f"  {k}: {v['detail']}" for k, v in stages.items() if v.get("detail") and v["status"] != "skipped"]
    return "\n".join(lines)


def run_query(cfg: RagcConfig, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {
        "query": args.question,
        "filters": parse_filters(args.filter, cfg.serve.filters),
        "stream": args.stream,
    }
    if args.top_k:
        body["top_k"] = args.top_k
    if args.no_rerank:
        body["rerank"] = False
    if args.mode:
        body["mode"] = args.mode
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    url = (args.url or http_url(cfg)).rstrip("/") + "/v1/query"
    if args.stream:
        return _stream(url, body, headers, args.json)
    response = httpx.post(url, json=body, headers=headers, timeout=CLIENT_TIMEOUT_S)
    if response.status_code != 200:
        print(f"ragc query: HTTP {response.status_code}: {response.text}", file=sys.stderr)
        return 1
    result = response.json()
    print(json.dumps(result) if args.json else render(result))
    return 0


def _stream(url: str, body: dict[str, Any], headers: dict[str, str], as_json: bool) -> int:
    final: dict[str, Any] | None = None
    with (
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as client,
        connect_sse(client, "POST", url, json=body, headers=headers) as source,
    ):
        if source.response.status_code != 200:
            print(f"ragc query: HTTP {source.response.status_code}: {source.response.read().decode()}", file=sys.stderr)
            return 1
        for event in source.iter_sse():
            if event.event == "token" and not as_json:
                print(event.json()["text"], end="", flush=True)
            elif event.event == "final":
                final = event.json()
            elif event.event == "error":
                print(f"\nragc query: {event.json()}", file=sys.stderr)
                return 1
    if final is None:
        return 1
    print(json.dumps(final) if as_json else "\n\n" + render(final).split("\n\n", 1)[-1])
    return 0
