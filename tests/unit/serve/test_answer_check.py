from __future__ import annotations

from serve.answer_check import EmbeddingSupport, attribute, check_answer, claims, degenerate, repetition
from serve.types import Passage
from tests.fakes import HashEmbedder

PASSAGES = [
    Passage(
        "c1", "d1", "t", "Reindexing builds a new collection. The alias moves when it is complete.", title="Reindex"
    ),
    Passage("c2", "d2", "t", "Every search carries the tenant filter.", title="Tenants"),
]
SUPPORT = EmbeddingSupport(HashEmbedder(dim=512))


def test_what_the_demo_served_is_degenerate() -> None:
    """Two answers the packaged 135M model gave to the demo's questions (issue #15)."""
    listed = "\n".join(f"{n}. How tenants are kept apart" for n in range(1, 6))
    assert degenerate(listed, "How are tenants kept apart?", PASSAGES) == "degenerate: a repeated line"
    echoed = "The answer is: [1] (Reindex) The answer is: [2] (Tenants)"
    assert degenerate(echoed, "How does the reindex job avoid downtime?", PASSAGES) == (
        "degenerate: mostly citations or titles"
    )


def test_an_uncited_sentence_takes_the_next_citation_and_a_lone_citation_goes_back() -> None:
    found = claims("A new collection is built. The alias moves when complete [1]. Searches filter by tenant. See [2].")
    assert found == [
        ("A new collection is built.", (1,)),
        ("The alias moves when complete .", (1,)),
        ("Searches filter by tenant.", (2,)),
    ]


def test_support_is_the_best_sentence_of_the_cited_passage() -> None:
    claim = "The alias moves when it is complete."
    copied, elsewhere = SUPPORT.score([(claim, PASSAGES[0]), (claim, PASSAGES[1])])
    assert copied > 0.99 and elsewhere < 0.5


def test_a_faithful_answer_passes_and_reports_each_passages_support() -> None:
    verdict = check_answer(
        "Reindexing builds a new collection [1]. Every search carries the tenant filter [2].",
        "How does reindexing work?",
        PASSAGES,
        SUPPORT,
        0.4,
    )
    assert verdict.passed and verdict.outcome == "passed" and set(verdict.support) == {1, 2}
    swapped = check_answer(
        "Reindexing builds a new collection [2]. Every search carries the tenant filter [1].",
        "How does reindexing work?",
        PASSAGES,
        SUPPORT,
        0.4,
    )
    assert not swapped.passed and swapped.outcome == "unsupported"


def test_a_number_no_passage_has_supports_nothing() -> None:
    """A quote carrying its source's own "[14]" once reached the check in `ragc eval-answers` and raised KeyError."""
    verdict = check_answer(
        "Reindexing builds a new collection [14].", "How does reindexing work?", PASSAGES, SUPPORT, 0.4
    )
    assert not verdict.passed and verdict.outcome == "unsupported"


def test_a_stream_repeats_only_once_a_finished_line_or_phrase_comes_again() -> None:
    assert repetition("Tenants are kept apart.\nTenants are kept apart", partial=True) is None
    assert (
        repetition("Tenants are kept apart.\nTenants are kept apart.\n", partial=True) == "degenerate: a repeated line"
    )
    phrase = "the store keeps them apart " * 2 + "the store keeps them apa"
    assert repetition(phrase, partial=True) is None
    assert repetition(phrase + "rt ", partial=True) == "degenerate: a repeated phrase"


def test_a_phrase_repeated_as_often_as_in_the_passages_is_quoted_not_a_loop() -> None:
    listing = "1997 Before Women Had Wings (TV movie) (executive producer) for HBO. 1998 The Wedding (TV movie) "
    listing += "(executive producer) for HBO. 1999 Tuesdays with Morrie (TV movie) (executive producer) for HBO."
    assert repetition(listing) == "degenerate: a repeated phrase"  # alone it reads as a loop
    assert repetition(listing, source="Filmography: " + listing) is None  # quoted from the passage
    looped = listing + " (TV movie) (executive producer) for HBO."
    assert repetition(looped, source=listing) == "degenerate: a repeated phrase"  # more often than quoted


def test_attribution_adds_the_returned_passages_that_support_a_claim_beside_its_own_marker() -> None:
    returned = [
        *PASSAGES,
        Passage("c3", "d3", "t", "Reindexing builds a new collection in the background.", title="Jobs"),
    ]
    answer = "Reindexing builds a new collection [1].\n- The alias moves when it is complete [1]"
    assert check_answer(answer, "How does reindexing work?", returned, SUPPORT, 0.4).passed
    found = attribute(answer, returned, SUPPORT, 0.68)
    assert found.answer == "Reindexing builds a new collection [1] [3].\n- The alias moves when it is complete [1]"
    assert found.cited == [1, 3] and list(found.added) == [3] and found.added[3] >= 0.68, "not the tenant passage"
    assert check_answer(found.answer, "How does reindexing work?", returned, SUPPORT, 0.4).passed
    assert attribute(answer, returned, SUPPORT, 1.01).answer == answer, "nothing clears the bar: the text as written"
