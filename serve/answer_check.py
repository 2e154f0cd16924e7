"""The check a generated answer passes before it is served as grounded: it is not degenerate, every claim
carries a citation, and each cited passage supports its claim.

Support is the embedding model's cosine between the claim and the cited passage's best sentence. On
SciFact TRAIN claims (`python -m training.support`) it separates a claim's own abstract from the most
similar other abstract better than content-word overlap does (AUC 0.69 vs 0.64; the two combined, 0.69),
and its threshold is chosen there. Against a passage on the same subject it is a weak judge (it accepts
most of them); what it reliably catches is a small model's usual failure: a sentence that came from
nowhere in the passage it cites."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cluster.models import Embedder
from serve.text_terms import WORD, terms
from serve.types import Passage

CITATION = re.compile(r"\[(\d+)\]")
CLAIM_END = re.compile(r"(?<=[.!?])\s+|\n+")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
REPEATED_NGRAM = 5  # words
MIN_CLAIM_TERMS = 2  # shorter fragments ("See [2].") carry no claim of their own
MIN_ANSWER_TERMS = 3


class SupportScorer(Protocol):
    def score(self, pairs: Sequence[tuple[str, Passage]]) -> list[float]:
        """How well each passage supports its claim, in [-1, 1]; higher is better."""


class EmbeddingSupport:
    """Best-sentence cosine: the claim and every sentence of the cited passages embedded in one call."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    def score(self, pairs: Sequence[tuple[str, Passage]]) -> list[float]:
        if not pairs:
            return []
        sentences = {p.chunk_id: passage_sentences(p) for _, p in pairs}
        texts = list(dict.fromkeys([c for c, _ in pairs] + [s for ss in sentences.values() for s in ss]))
        vectors = dict(zip(texts, self._embedder.embed(texts), strict=True))
        return [
            max(sum(a * b for a, b in zip(vectors[claim], vectors[s], strict=True)) for s in sentences[p.chunk_id])
            for claim, p in pairs
        ]


def passage_sentences(passage: Passage) -> list[str]:
    found = [s.strip() for s in SENTENCE_END.split(" ".join(passage.text.split())) if len(terms(s)) >= 2]
    return found or [passage.title + " " + passage.text]


@dataclass(frozen=True)
class ClaimCheck:
    text: str
    cited: tuple[int, ...]
    support: float  # best support among its cited passages; 0 when uncited


@dataclass
class AnswerCheck:
    reason: str | None  # None: the answer passed
    claims: list[ClaimCheck] = field(default_factory=list)
    support: dict[int, float] = field(default_factory=dict)  # passage n -> the best support it gave a claim

    @property
    def passed(self) -> bool:
        return self.reason is None

    @property
    def outcome(self) -> str:
        """For metrics: passed, degenerate, uncited or unsupported."""
        return "passed" if self.reason is None else self.reason.split(" ")[0].rstrip(":")


def _lines(text: str) -> list[str]:
    return [CITATION.sub("", LIST_MARK.sub("", " ".join(line.split()).lower())).strip() for line in text.splitlines()]


def _ngrams(words: list[str]) -> Counter[tuple[str, ...]]:
    return Counter(tuple(words[i : i + REPEATED_NGRAM]) for i in range(len(words) - REPEATED_NGRAM + 1))


def repetition(text: str, partial: bool = False, source: str = "") -> str | None:
    """A repeated line or phrase, or None. `partial`: the text is still being generated, so its last line
    and word may be unfinished and are left out (a repetition found then stays one however it goes on).
    `source`: the passages' text; a phrase repeated no more often than there is quoted, not a loop (a
    filmography lists "(TV movie) (producer)" on every line)."""
    lines = _lines(text)
    if partial and not text.endswith("\n"):
        lines = lines[:-1]
    quoted_lines = Counter(_lines(source))
    if any(count > max(1, quoted_lines[line]) for line, count in Counter(lines).items() if len(line) > 3):
        return "degenerate: a repeated line"
    words = WORD.findall(CITATION.sub(" ", text).lower())
    if partial and text and not text[-1].isspace():
        words = words[:-1]
    quoted = _ngrams(WORD.findall(source.lower())) if source else Counter()
    if any(count > max(2, quoted[gram]) for gram, count in _ngrams(words).items()):
        return "degenerate: a repeated phrase"
    return None


def degenerate(answer: str, question: str, passages: list[Passage]) -> str | None:
    """Why the text is not an answer at all, or None."""
    repeated = repetition(answer, source="\n".join(p.text for p in passages))
    if repeated:
        return repeated
    titles = set().union(*(terms(p.title) for p in passages))
    content = terms(CITATION.sub(" ", answer))
    if len(content - titles) < MIN_ANSWER_TERMS:
        return "degenerate: mostly citations or titles"
    context = terms(question).union(*(terms(p.title + " " + p.text) for p in passages))
    if not content & context:
        return "degenerate: shares nothing with the question and passages"
    return None


def claims(answer: str) -> list[tuple[str, tuple[int, ...]]]:
    """Sentences (and list items) with the citations they carry; an uncited one inherits the next one's,
    and a citation standing alone ("See [2].") goes to the claim before it."""
    pieces = [p.strip() for p in CLAIM_END.split(answer) if p.strip()]
    out: list[tuple[str, tuple[int, ...]]] = []
    pending: list[str] = []
    for piece in pieces:
        cited = tuple(sorted({int(n) for n in CITATION.findall(piece)}))
        text = LIST_MARK.sub("", CITATION.sub("", piece)).strip()
        if len(terms(text)) < MIN_CLAIM_TERMS:
            if cited and pending:
                out += [(p, cited) for p in pending]
                pending = []
            elif cited and out and not out[-1][1]:
                out[-1] = (out[-1][0], cited)
            continue
        if cited:
            out += [(p, cited) for p in pending] + [(text, cited)]
            pending = []
        else:
            pending.append(text)
    return out + [(p, ()) for p in pending]


def check_answer(
    answer: str, question: str, passages: list[Passage], support: SupportScorer, min_support: float
) -> AnswerCheck:
    """`answer` should cite only passages that were sent (serve.stages.synthesize removes the rest); a number
    that no passage has supports nothing."""
    why = degenerate(answer, question, passages)
    if why:
        return AnswerCheck(why)
    found = claims(answer)
    if not found:
        return AnswerCheck("degenerate: no claim")
    pairs = [(text, n) for text, cited in found for n in cited if 1 <= n <= len(passages)]
    scores = support.score([(text, passages[n - 1]) for text, n in pairs])
    best: dict[tuple[str, int], float] = dict(zip(pairs, scores, strict=True))
    per_passage: dict[int, float] = {}
    for (_, n), score in best.items():
        per_passage[n] = max(per_passage.get(n, -1.0), score)
    # a number no passage has (text that bypassed `validate_citations`) supports nothing
    checked = [
        ClaimCheck(text, cited, max((best.get((text, n), 0.0) for n in cited), default=0.0)) for text, cited in found
    ]
    uncited = next((c for c in checked if not c.cited), None)
    if uncited is not None:
        return AnswerCheck(f"uncited claim: {uncited.text[:80]!r}", checked, per_passage)
    weak = next((c for c in checked if c.support < min_support), None)
    if weak is not None:
        return AnswerCheck(
            f"unsupported claim: {weak.text[:80]!r} (support {weak.support:.2f} < {min_support:.2f})",
            checked,
            per_passage,
        )
    return AnswerCheck(None, checked, per_passage)


@dataclass(frozen=True)
class Attribution:
    answer: str  # the answer with the added markers
    cited: list[int]
    added: dict[int, float]  # passage n -> the best support it gave a claim it was added to


MARKERS_AND_END = re.compile(r"((?:\s*\[\d+\])*)([.!?]*)(\s*)$")


def attribute(answer: str, passages: list[Passage], support: SupportScorer, min_support: float) -> Attribution:
    """Post-hoc attribution for an answer that passed its check: each claim also cites every other returned
    passage (one cut from the prompt by its budget, or one the model left uncited) that supports it by at
    least `min_support`, the marker placed beside the claim's own. The model reads only the passages that fit
    its prompt, so it cannot cite the others; this finds the ones that back what it wrote."""
    pieces = re.split(f"({CLAIM_END.pattern})", answer)
    wanted: list[tuple[int, int]] = []  # (piece index, passage n)
    claim_of: dict[int, str] = {}
    for i in range(0, len(pieces), 2):
        text = LIST_MARK.sub("", CITATION.sub("", pieces[i])).strip()
        if len(terms(text)) < MIN_CLAIM_TERMS:
            continue
        claim_of[i] = text
        own = {int(n) for n in CITATION.findall(pieces[i])}
        wanted += [(i, n) for n in range(1, len(passages) + 1) if n not in own]
    scores = support.score([(claim_of[i], passages[n - 1]) for i, n in wanted])
    added: dict[int, float] = {}
    per_piece: dict[int, list[int]] = {}
    for (i, n), score in zip(wanted, scores, strict=True):
        if score >= min_support:
            per_piece.setdefault(i, []).append(n)
            added[n] = max(score, added.get(n, score))
    for i, numbers in per_piece.items():
        end = MARKERS_AND_END.search(pieces[i])
        assert end is not None  # the pattern matches the empty end of any string
        markers = "".join(f" [{n}]" for n in numbers)
        pieces[i] = pieces[i][: end.start()] + end.group(1) + markers + end.group(2) + end.group(3)
    text = "".join(pieces)
    cited = sorted({int(n) for n in CITATION.findall(text)})
    return Attribution(text, cited, added)
