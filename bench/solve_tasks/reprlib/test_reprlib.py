from lib import reprlib


def test_list_that_fits_has_no_ellipsis():
    assert reprlib.repr(list(range(6))) == "[0, 1, 2, 3, 4, 5]"
    assert reprlib.repr((1, 2, 3, 4, 5, 6)) == "(1, 2, 3, 4, 5, 6)"


def test_longer_list_is_cut():
    assert reprlib.repr(list(range(7))) == "[0, 1, 2, 3, 4, 5, ...]"


def test_long_string_is_cut():
    assert len(reprlib.repr("x" * 100)) <= 30
