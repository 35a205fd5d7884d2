from lib import bisect


def test_bisect_left_goes_before_equal_items():
    assert bisect.bisect_left([1, 2, 2, 2, 3], 2) == 1
    assert bisect.bisect_left([1, 2, 3], 0) == 0
    assert bisect.bisect_left([1, 2, 3], 4) == 3


def test_bisect_right_goes_after_equal_items():
    assert bisect.bisect_right([1, 2, 2, 2, 3], 2) == 4


def test_insort_left_keeps_order():
    a = [1, 3, 5]
    bisect.insort_left(a, 4)
    assert a == [1, 3, 4, 5]
