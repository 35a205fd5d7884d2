from lib import genericpath


def test_commonprefix_of_two_paths():
    assert genericpath.commonprefix(["/usr/lib", "/usr/local"]) == "/usr/l"


def test_commonprefix_of_disjoint_strings():
    assert genericpath.commonprefix(["abc", "xyz"]) == ""


def test_commonprefix_when_one_is_a_prefix():
    assert genericpath.commonprefix(["abc", "abcdef"]) == "abc"
    assert genericpath.commonprefix([]) == ""
