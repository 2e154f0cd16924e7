"""`GET /v1/documents` (and the MCP tool `list_documents`): the page arguments, checked before any work."""

from __future__ import annotations

import re
from typing import Any

from cluster.hashing import HASH_CHARS
from serve.edge.text_rules import json_object
from serve.errors import BadRequestError

DEFAULT_PAGE = 100
CURSOR = re.compile(rf"^[0-9a-f]{{{HASH_CHARS}}}$")  # a chunk id, as `next_cursor` returns it


def page_size(limit: Any, most: int) -> int:
    """`limit` (a query parameter's text, or a number), 1 to `most`; the default page when absent."""
    if limit is None or limit == "":
        return min(DEFAULT_PAGE, most)
    try:
        size = int(limit)
    except (TypeError, ValueError):
        raise BadRequestError(f"limit must be a whole number between 1 and {most}, not {limit!r}") from None
    if not 1 <= size <= most:
        raise BadRequestError(f"limit must be between 1 and {most}")
    return size


def cursor_of(cursor: str | None) -> str | None:
    """The chunk id a page starts after; anything but a `next_cursor` this API returned is refused."""
    if cursor is None or cursor == "":
        return None
    if not CURSOR.match(cursor):
        raise BadRequestError("cursor is not one this API returned: pass a response's next_cursor as it is")
    return cursor


def filters_param(raw: str | None) -> dict[str, Any]:
    """`filters` as a query parameter: the JSON object `/v1/query` takes in its body."""
    if raw is None or raw == "":
        return {}
    return json_object(raw, "filters (the JSON object /v1/query takes)")
