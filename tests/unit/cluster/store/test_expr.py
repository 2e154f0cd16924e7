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
