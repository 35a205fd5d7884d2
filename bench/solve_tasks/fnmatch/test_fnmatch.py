from lib import fnmatch


def test_question_mark_matches_exactly_one_character():
    assert fnmatch.fnmatchcase("a", "?")
    assert not fnmatch.fnmatchcase("ab", "?")
    assert fnmatch.fnmatchcase("file1.txt", "file?.txt")
    assert not fnmatch.fnmatchcase("file12.txt", "file?.txt")


def test_star_matches_anything():
    assert fnmatch.fnmatchcase("file12.txt", "file*.txt")
    assert fnmatch.fnmatchcase("", "*")


def test_filter():
    assert fnmatch.filter(["a.py", "b.txt", "cc.py"], "?.py") == ["a.py"]
