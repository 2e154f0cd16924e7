"""Request text must encode: JSON's `"\\ud800"` decodes to a `str` no UTF-8 encoder takes."""

import json

import pytest

from serve.edge.text_rules import check_encodable, check_encodable_json
from serve.errors import BadRequestError


def test_text_that_encodes_passes_and_a_lone_surrogate_is_named() -> None:
    check_encodable("café ✓", "query")
    check_encodable(json.loads('"\\ud83d\\ude00"'), "query")  # a pair written as two escapes is one emoji: fine
    with pytest.raises(BadRequestError, match=r"query contains an unpaired surrogate \('\\udfff' at character 2\)"):
        check_encodable("ab\udfff", "query")


def test_every_string_of_a_body_is_checked_keys_included() -> None:
    check_encodable_json({"query": "q", "history": [{"content": "é"}]}, "the body")
    for body in ('{"query": "q \\ud800"}', '{"filters": {"k\\udc00": 1}}', '{"history": [{"content": "\\udfff"}]}'):
        with pytest.raises(BadRequestError, match="the body holds a string with an unpaired surrogate"):
            check_encodable_json(json.loads(body), "the body")
