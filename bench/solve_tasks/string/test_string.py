from lib import string


def test_capwords_capitalizes_only_the_first_letter_of_each_word():
    assert string.capwords("hello-world foo") == "Hello-world Foo"
    assert string.capwords("it's ok") == "It's Ok"


def test_capwords_lowercases_the_rest():
    assert string.capwords("hELLO wORLD") == "Hello World"


def test_capwords_with_a_separator():
    assert string.capwords("a,b,c", ",") == "A,B,C"
