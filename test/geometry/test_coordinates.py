"""coordinates: the 0-1000 convention and stamp conversions, the one place both are defined."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cosmos_reasoner_ros.geometry.coordinates import (
    norm_to_pixel,
    ns_from_sec_nanosec,
    ns_to_sec_nanosec,
    pixel_to_norm,
    point_pixels,
    seconds_to_ns,
)
from cosmos_reasoner_ros.geometry.shapes import Point2D


def test_pixels_of_the_image_the_answer_refers_to() -> None:
    assert norm_to_pixel(500, 644) == 322.0 and norm_to_pixel(1000, 476) == 476.0
    assert point_pixels(Point2D("p", 250.0, 1000.0), 640, 480) == (160.0, 480.0)
    assert pixel_to_norm(0, 0) == 0.0


@given(st.integers(min_value=0, max_value=2**62))
def test_stamps_round_trip(ns: int) -> None:
    sec, nanosec = ns_to_sec_nanosec(ns)
    assert 0 <= nanosec < 1_000_000_000 and ns_from_sec_nanosec(sec, nanosec) == ns


def test_negative_stamps_clamp_and_seconds_round() -> None:
    assert ns_to_sec_nanosec(-5) == (0, 0)
    assert seconds_to_ns(1.5) == 1_500_000_000
