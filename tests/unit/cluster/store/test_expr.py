from cluster.store.expr import all_of, eq, is_in, quote


def test_quote_escapes_quotes_and_backslashes() -> None:
    assert quote('a"b') == '"a\\"b"'
    assert quote("a\\b") == '"a\\\\b"'
    assert quote('" or 1==1 or "') == '"\\" or 1==1 or \\""'


def test_builders() -> None:
    assert eq("tenant_id", "t1") == 'tenant_id == "t1"'
    assert eq("year", 2020) == "year == 2020"
    assert is_in("id", ["a", "b"]) == 'id in ["a", "b"]'
    assert all_of("a == 1", "", "b == 2") == "(a == 1) and (b == 2)"
    assert all_of("a == 1") == "a == 1"


def test_a_label_clause_matches_fixed_length_terms_between_separators() -> None:
    """Labels may hold what a LIKE pattern reads specially (`%`, `_`) and the separator; their terms never do,
    and one label's term is never part of another's (tests/integration/test_label_terms.py: against the store)."""
    import re

    from cluster.labels import LABEL_MAX, LABELS_MAX, TERM_CHARS, TERMS_MAX, label_term, label_terms
    from cluster.store.expr import holds_any_label

    odd = ["*", "hr", "50%_off", "a|b", "a,b", "ünïcode", "x" * LABEL_MAX]
    terms = [label_term(label) for label in odd]
    assert all(re.fullmatch(f"[0-9a-f]{{{TERM_CHARS}}}", t) for t in terms) and len(set(terms)) == len(odd)
    assert label_terms(odd) == "," + ",".join(terms) + ","
    assert len(label_terms(f"{n:0{LABEL_MAX}d}" for n in range(LABELS_MAX))) == TERMS_MAX
    clause = holds_any_label("access_terms", ["*", "50%_off"])
    assert clause == f'access_terms like "%,{terms[0]},%" or access_terms like "%,{terms[2]},%"'
    assert all_of("tenant_id == 1", clause) == f"(tenant_id == 1) and ({clause})"
