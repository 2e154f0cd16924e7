"""`ragc bench prefix`'s prompt sets share the starts the prefix cache can reuse."""

from itertools import takewhile

from bench.prefix import QUESTIONS, corpus_passages, prompt_sets
from local.cluster import DEMO_CORPUS


def shared_start(texts: list[str]) -> str:
    return "".join(chars[0] for chars in takewhile(lambda chars: len(set(chars)) == 1, zip(*texts, strict=False)))


def rendered(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def test_prompts_over_the_same_passages_differ_only_after_the_passages() -> None:
    sets = prompt_sets(corpus_passages(DEMO_CORPUS), 900)
    assert all(len(prompts) == len(QUESTIONS) for name, prompts in sets.items() if name != "warm_up")
    warm_up_passages = {m[-1]["content"].split("Question:")[0] for m in sets["warm_up"]}
    assert len(warm_up_passages) == 1 and not warm_up_passages & {
        m[-1]["content"].split("Question:")[0] for name in ("repeated", "overlapping") for m in sets[name]
    }, "the warm-up primes no prefix a measured set uses"
    repeated = {rendered(m) for m in sets["repeated"]}
    assert len(repeated) == 1
    shared = [rendered(m) for m in sets["shared_passages"]]
    common = shared_start(shared)
    assert len(set(shared)) == len(QUESTIONS) and common.endswith("Question: ")  # the question comes last
    overlapping = [rendered(m) for m in sets["overlapping"]]
    common = shared_start(overlapping)
    assert "[2]" in common and common.endswith("[3] (")  # the first two passages are the shared start
