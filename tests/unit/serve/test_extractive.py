"""The extractive answer (every stage's last fallback)."""

from __future__ import annotations

from cluster.config import SynthesizeConfig
from serve.extractive import best_excerpt, extractive_answer
from serve.types import Passage


def test_extractive_answer_cites_the_passages_it_quotes() -> None:
    passages = [
        Passage("c1", "d1", "t", "# Title\n\nTenants are isolated by partition key. Unrelated sentence here."),
        Passage("c2", "d2", "t", "Another passage about caching."),
    ]
    result = extractive_answer("how are tenants isolated", passages, SynthesizeConfig(extractive_passages=2))
    assert result.cited == [1, 2] and result.grounded
    assert result.answer.startswith("Tenants are isolated by partition key.")
    assert "[1]" in result.answer and "# Title" not in result.answer
    assert best_excerpt("x", "", 100) == ""


def test_a_title_line_and_an_excerpt_quoted_already_are_not_quoted_again() -> None:
    """A BEIR passage begins with its title line; with no full stop it used to open the first sentence, and
    three chunks of one section repeated it three times (the answer check calls that degenerate)."""
    text = "Kosher foods / Animals\n\nThe Torah permits land animals that chew their cud."
    passages = [
        Passage("c1", "d1", "t", text, title="Kosher foods / Animals"),
        Passage("c2", "d1", "t", text, title="Kosher foods / Animals"),  # an overlapping chunk: the same sentence
        Passage("c3", "d2", "t", "Fish need fins and scales.", title="Kosher foods / Fish"),
    ]
    result = extractive_answer("which animals does the torah permit", passages, SynthesizeConfig())
    assert result.answer == "The Torah permits land animals that chew their cud. [1]\n\nFish need fins and scales. [3]"
    assert result.cited == [1, 3]


def test_a_sources_own_reference_markers_are_not_quoted_as_citations() -> None:
    """A SciFact abstract's "[14]" quoted as it was read as a citation of a 14th passage (of five)."""
    text = "Patients had heart failure [14]. Survival was poor [3, 5] and fell with age [2-4]. Unrelated."
    result = extractive_answer("heart failure survival", [Passage("c1", "d1", "t", text)], SynthesizeConfig())
    assert result.answer == "Patients had heart failure. Survival was poor and fell with age. Unrelated. [1]"
    assert result.cited == [1]
