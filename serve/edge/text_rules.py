"""Text a request may carry, whichever API it came through: text that encodes. JSON lets a string hold a lone
UTF-16 surrogate (`"\\ud800"`), which decodes to a `str` that no UTF-8 encoder takes, so hashing it for the
cache, or sending it to Redis, Milvus or the model, would fail deep inside a stage."""

from __future__ import annotations

import json
import re
from typing import Any

from serve.errors import BadRequestError

REQUEST_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # an `X-Request-ID` this API keeps


def check_encodable(text: str, what: str) -> None:
    """A `BadRequestError` naming `what` when `text` holds an unpaired surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequestError(
            f"{what} contains an unpaired surrogate ({text[exc.start]!r} at character {exc.start}): not valid Unicode"
        ) from exc


def check_encodable_json(data: Any, what: str) -> None:
    """`check_encodable` over every string (keys too) of a decoded JSON value, in one pass over its text."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequestError(
            f"{what} holds a string with an unpaired surrogate (a \\uD800-\\uDFFF escape without its pair): "
            "not valid Unicode"
        ) from exc


def json_object(text: str, what: str) -> dict[str, Any]:
    """`text` as a JSON object whose strings all encode; anything else a `BadRequestError` naming `what`."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BadRequestError(f"{what}: malformed JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadRequestError(f"{what} must be a JSON object")
    check_encodable_json(data, what)
    return data
