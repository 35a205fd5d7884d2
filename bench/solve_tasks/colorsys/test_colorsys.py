import pytest

from lib import colorsys


def test_hls_hue_of_a_green_colour():
    h, l, s = colorsys.rgb_to_hls(0.2, 0.8, 0.4)
    assert h == pytest.approx(0.3888888888888889)
    assert l == pytest.approx(0.5)
    assert s == pytest.approx(0.6)


def test_hls_round_trip():
    for rgb in [(0.2, 0.8, 0.4), (0.1, 0.6, 0.9), (0.9, 0.3, 0.1)]:
        assert colorsys.hls_to_rgb(*colorsys.rgb_to_hls(*rgb)) == pytest.approx(rgb)


def test_hsv_round_trip():
    for rgb in [(0.2, 0.8, 0.4), (0.1, 0.6, 0.9)]:
        assert colorsys.hsv_to_rgb(*colorsys.rgb_to_hsv(*rgb)) == pytest.approx(rgb)
