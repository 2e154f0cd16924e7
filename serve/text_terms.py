"""Content words of a text: lower-cased alphanumeric words minus filler; used to match a question
with sentences (extractive answers) and a rewrite with its conversation."""

from __future__ import annotations

import re

WORD = re.compile(r"[a-z0-9]+")
_FILLER = (
    "a an and are as at be by can do does did for from how i in is it its of on or the to was were what when where "
    "which who whom why will with you your me my we our they them their this that these those about"
)
FILLER_WORDS = frozenset(_FILLER.split(" "))


def terms(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in FILLER_WORDS and len(w) > 1}
