from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cli.since import parse_since

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("90m", datetime(2026, 12, 6, 10, 30, tzinfo=UTC)),
        ("24h", datetime(2026, 12, 5, 12, 0, tzinfo=UTC)),
        ("7d", datetime(2026, 11, 29, 12, 0, tzinfo=UTC)),
        ("2w", datetime(2026, 11, 22, 12, 0, tzinfo=UTC)),
        ("30s", datetime(2026, 12, 6, 11, 59, 30, tzinfo=UTC)),
        ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC)),  # a date or time without a zone is UTC
        ("2026-12-01T09:30", datetime(2026, 12, 1, 9, 30, tzinfo=UTC)),
        ("2026-12-01T09:30+02:00", datetime(2026, 12, 1, 7, 30, tzinfo=UTC)),
    ],
)
def test_a_span_back_from_now_or_a_moment(text: str, moment: datetime) -> None:
    assert parse_since(text, NOW) == moment


@pytest.mark.parametrize("text", ["yesterday", "7 days", "-3h", "3y", "", "2026-13-01"])
def test_anything_else_is_refused_with_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match=r"a span back from now \(90m, 24h, 7d, 2w\) or a UTC date or time"):
        parse_since(text, NOW)


def test_a_moment_to_come_is_refused() -> None:
    with pytest.raises(ValueError, match="is in the future"):
        parse_since("2026-12-07", NOW)
