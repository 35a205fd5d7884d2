from lib import shlex


def test_quote_leaves_safe_strings_alone():
    assert shlex.quote("abc") == "abc"
    assert shlex.quote("a/b-c.txt") == "a/b-c.txt"


def test_quote_quotes_unsafe_strings():
    assert shlex.quote("a b") == "'a b'"
    assert shlex.quote("it's") == "'it'\"'\"'s'"
    assert shlex.quote("") == "''"


def test_split_undoes_quote():
    assert shlex.split(shlex.quote("a b; rm -rf x")) == ["a b; rm -rf x"]
