"""`--since WHEN`: a span back from now (`90m`, `24h`, `7d`) or a UTC date or time (`2026-12-01`,
`2026-12-01T09:30`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

SPAN = re.compile(r"^(\d+)([smhdw])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime) -> datetime:
    """The moment `text` names, in UTC; a ValueError that says what is accepted otherwise."""
    span = SPAN.match(text.strip())
    if span:
        return now - timedelta(**{UNITS[span[2]]: int(span[1])})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since {text!r}: give a span back from now (90m, 24h, 7d, 2w) or a UTC date or time "
            "(2026-12-01, 2026-12-01T09:30)"
        ) from None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if moment > now:
        raise ValueError(f"--since {text!r} is in the future (now is {now:%Y-%m-%dT%H:%M} UTC)")
    return moment
