"""Image and CompressedImage messages built from real frames, in every encoding, to numpy; malformed ones."""

from __future__ import annotations

import contextlib
import struct
import time
import tracemalloc
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.clips.image_conversion import (
    COLOUR_ENCODINGS,
    COLOUR_TOPIC_ENCODINGS,
    DEFAULT_MAX_PIXELS,
    check_stamp,
    compressed_image_size,
    compressed_msg_to_array,
    cv_bridge_available,
    image_msg_to_array,
    message_stamp_ns,
    message_to_array,
    serialized_stamp_ns,
)
from cosmos_reasoner_ros.errors import FrameError, FrameTooLarge, ImplausibleStamp, NonColourImage

NS = 1_000_000_000
BAYER_OFFSETS = {"rggb": "RGGB", "bggr": "BGGR", "gbrg": "GBRG", "grbg": "GRBG"}


@pytest.fixture(scope="module")
def rgb(robot_clip: Path) -> np.ndarray:
    """Frame 10 of the real robot clip, RGB uint8 (644x476)."""
    cap = cv2.VideoCapture(str(robot_clip))
    cap.set(cv2.CAP_PROP_POS_FRAMES, 10)
    ok, bgr = cap.read()
    cap.release()
    assert ok
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def image_msg(array: np.ndarray, encoding: str, pad: int = 0, bigendian: bool = False) -> SimpleNamespace:
    """A duck-typed sensor_msgs/Image holding `array` (rows padded by `pad` junk bytes)."""
    height, width = array.shape[:2]
    if array.dtype.itemsize > 1:
        array = array.astype(array.dtype.newbyteorder(">" if bigendian else "<"))
    rows = array.reshape(height, -1).view(np.uint8)
    if pad:
        junk = np.full((height, pad), 0xAB, dtype=np.uint8)
        rows = np.hstack([rows, junk])
    return SimpleNamespace(
        header=SimpleNamespace(stamp=SimpleNamespace(sec=0, nanosec=0), frame_id="cam"),
        height=height,
        width=width,
        encoding=encoding,
        is_bigendian=int(bigendian),
        step=rows.shape[1],
        data=rows.tobytes(),
    )


def mosaic(rgb: np.ndarray, pattern: str) -> np.ndarray:
    """Sample an RGB image through a Bayer filter of the given 2x2 pattern (e.g. "RGGB")."""
    out = np.zeros(rgb.shape[:2], dtype=rgb.dtype)
    for i, (dy, dx) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
        out[dy::2, dx::2] = rgb[dy::2, dx::2, "RGB".index(pattern[i])]
    return out


def mean_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.abs(a.astype(np.float64) - b.astype(np.float64))))


# -- every encoding from a real frame -----------------------------------------------------------------------


def exact_cases(rgb: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """encoding -> (message pixels, the exact RGB the conversion must give)."""
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    gray_rgb = cv2.cvtColor(gray, cv2.COLOR_GRAY2RGB)
    alpha = np.full((*rgb.shape[:2], 1), 77, dtype=np.uint8)
    return {
        "rgb8": (rgb, rgb),
        "bgr8": (rgb[..., ::-1].copy(), rgb),
        "rgba8": (np.concatenate([rgb, alpha], axis=2), rgb),
        "bgra8": (np.concatenate([rgb[..., ::-1], alpha], axis=2), rgb),
        "mono8": (gray, gray_rgb),
        "8UC1": (gray, gray_rgb),
        # x * 257 scaled by 255/65535 gives x back exactly.
        "mono16": (gray.astype(np.uint16) * 257, gray_rgb),
        "rgb16": (rgb.astype(np.uint16) * 257, rgb),
        "bgr16": (rgb[..., ::-1].astype(np.uint16) * 257, rgb),
    }


@pytest.mark.parametrize(
    "encoding", ["rgb8", "bgr8", "rgba8", "bgra8", "mono8", "8UC1", "mono16", "rgb16", "bgr16"]
)
@pytest.mark.parametrize("pad", [0, 13])
def test_exact_encodings(rgb: np.ndarray, encoding: str, pad: int) -> None:
    pixels, expected = exact_cases(rgb)[encoding]
    out = image_msg_to_array(image_msg(pixels, encoding, pad=pad), backend="numpy")
    assert out.dtype == np.uint8
    assert out.shape == rgb.shape
    assert out.flags.c_contiguous and out.flags.writeable
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    ("encoding", "code"),
    [
        ("yuv422", cv2.COLOR_RGB2YUV_UYVY),
        ("uyvy", cv2.COLOR_RGB2YUV_UYVY),
        ("yuv422_yuy2", cv2.COLOR_RGB2YUV_YUY2),
        ("yuyv", cv2.COLOR_RGB2YUV_YUY2),
    ],
)
def test_yuv422_close_to_source(rgb: np.ndarray, encoding: str, code: int) -> None:
    yuv = cv2.cvtColor(rgb, code)
    assert yuv.shape == (*rgb.shape[:2], 2)
    out = image_msg_to_array(image_msg(yuv, encoding, pad=4), backend="numpy")
    assert out.shape == rgb.shape and out.dtype == np.uint8
    assert mean_abs(out, rgb) < 4.0  # chroma is subsampled 2:1, luma is exact
    # The byte order matters: the same bytes read as the other layout are far off.
    other = "yuv422_yuy2" if encoding in ("yuv422", "uyvy") else "uyvy"
    assert mean_abs(image_msg_to_array(image_msg(yuv, other), backend="numpy"), rgb) > 20.0


@pytest.mark.parametrize("pattern", sorted(BAYER_OFFSETS))
@pytest.mark.parametrize("bits", [8, 16])
def test_bayer_demosaics_to_the_source_colours(rgb: np.ndarray, pattern: str, bits: int) -> None:
    raw = mosaic(rgb, BAYER_OFFSETS[pattern])
    if bits == 16:
        raw = raw.astype(np.uint16) * 257
    out = image_msg_to_array(image_msg(raw, f"bayer_{pattern}{bits}", pad=2 * 3), backend="numpy")
    assert out.shape == rgb.shape and out.dtype == np.uint8
    assert mean_abs(out, rgb) < 6.0
    # Each pattern must be read as itself: the same mosaic read as another pattern is far off in colour.
    for other in BAYER_OFFSETS:
        if other != pattern:
            wrong = image_msg_to_array(image_msg(raw, f"bayer_{other}{bits}"), backend="numpy")
            assert mean_abs(wrong, rgb) > mean_abs(out, rgb) + 5.0


def test_bayer16_matches_bayer8(rgb: np.ndarray) -> None:
    raw = mosaic(rgb, "RGGB")
    out8 = image_msg_to_array(image_msg(raw, "bayer_rggb8"), backend="numpy")
    out16 = image_msg_to_array(image_msg(raw.astype(np.uint16) * 257, "bayer_rggb16"), backend="numpy")
    assert np.max(np.abs(out8.astype(int) - out16.astype(int))) <= 1


@pytest.mark.parametrize("bigendian", [False, True])
@pytest.mark.parametrize("pad", [0, 6])
def test_depth_keeps_values_and_byte_order(rgb: np.ndarray, bigendian: bool, pad: int) -> None:
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    mm = gray.astype(np.uint16) * 37 + 250  # millimetres with high bytes set
    out = image_msg_to_array(image_msg(mm, "16UC1", pad=pad, bigendian=bigendian), backend="numpy")
    assert out.dtype == np.uint16 and out.dtype.isnative and out.shape == mm.shape
    np.testing.assert_array_equal(out, mm)
    metres = mm.astype(np.float32) / 1000.0
    metres[0, :5] = np.nan  # no reading
    out = image_msg_to_array(image_msg(metres, "32FC1", pad=pad, bigendian=bigendian), backend="numpy")
    assert out.dtype == np.float32 and out.dtype.isnative
    np.testing.assert_array_equal(out, metres)  # NaN compares equal here


def test_mono16_bigendian(rgb: np.ndarray) -> None:
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    msg = image_msg(gray.astype(np.uint16) * 257, "mono16", bigendian=True)
    np.testing.assert_array_equal(image_msg_to_array(msg, backend="numpy")[..., 0], gray)


def test_every_colour_encoding_is_covered() -> None:
    tested = {"rgb8", "bgr8", "rgba8", "bgra8", "mono8", "8UC1", "mono16", "rgb16", "bgr16"}
    tested |= {"yuv422", "uyvy", "yuv422_yuy2", "yuyv"}
    tested |= {f"bayer_{p}{b}" for p in BAYER_OFFSETS for b in (8, 16)}
    assert tested == set(COLOUR_ENCODINGS)


def test_output_does_not_alias_the_message(rgb: np.ndarray) -> None:
    buf = bytearray(rgb.tobytes())
    msg = image_msg(rgb, "rgb8")
    msg.data = buf
    out = image_msg_to_array(msg, backend="numpy")
    buf[:3] = b"\x01\x02\x03"  # a driver reusing its buffer must not change a buffered frame
    np.testing.assert_array_equal(out, rgb)


# -- real message classes -----------------------------------------------------------------------------------


def test_rosbags_message(rgb: np.ndarray) -> None:
    from rosbags.typesys import Stores, get_typestore

    types = get_typestore(Stores.ROS2_KILTED).types
    msg_t, header_t, time_t = (
        types["sensor_msgs/msg/Image"],
        types["std_msgs/msg/Header"],
        types["builtin_interfaces/msg/Time"],
    )
    height, width = rgb.shape[:2]
    msg = msg_t(
        header=header_t(stamp=time_t(sec=5, nanosec=7), frame_id="cam"),
        height=height,
        width=width,
        encoding="bgr8",
        is_bigendian=0,
        step=width * 3,
        data=np.frombuffer(rgb[..., ::-1].tobytes(), dtype=np.uint8),
    )
    np.testing.assert_array_equal(image_msg_to_array(msg, backend="numpy"), rgb)
    assert message_stamp_ns(msg, receive_ns=1) == 5_000_000_007


def test_rclpy_message(rgb: np.ndarray) -> None:
    image_mod = pytest.importorskip("sensor_msgs.msg", reason="needs the ROS 2 sensor_msgs package")
    msg = image_mod.Image()
    msg.height, msg.width = rgb.shape[:2]
    msg.encoding = "rgb8"
    msg.step = msg.width * 3 + 4
    padded = np.hstack([rgb.reshape(msg.height, -1), np.zeros((msg.height, 4), np.uint8)])
    msg.data = padded.tobytes()
    np.testing.assert_array_equal(image_msg_to_array(msg), rgb)
    compressed = image_mod.CompressedImage()
    compressed.format = "png"
    compressed.data = cv2.imencode(".png", rgb[..., ::-1])[1].tobytes()
    np.testing.assert_array_equal(message_to_array(compressed), rgb)
    assert message_stamp_ns(msg, receive_ns=42) == 42  # zero stamp: the receive time


# -- compressed ---------------------------------------------------------------------------------------------


def compressed(data: bytes, fmt: str) -> SimpleNamespace:
    return SimpleNamespace(header=None, format=fmt, data=data)


def test_jpeg_from_shared_media(shared_media: Path) -> None:
    path = shared_media / "robot_153.jpg"
    expected = cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
    out = compressed_msg_to_array(compressed(path.read_bytes(), "jpeg"))
    np.testing.assert_array_equal(out, expected)
    out = message_to_array(compressed(path.read_bytes(), "rgb8; jpeg compressed bgr8"))
    np.testing.assert_array_equal(out, expected)


def test_png_from_shared_media(shared_media: Path) -> None:
    path = shared_media / "grounding_2d.png"
    expected = cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    out = compressed_msg_to_array(compressed(path.read_bytes(), "png"))
    assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3
    np.testing.assert_array_equal(out, expected)


def test_grey_png_gives_rgb(rgb: np.ndarray) -> None:
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    data = cv2.imencode(".png", gray)[1].tobytes()
    out = compressed_msg_to_array(compressed(data, "mono8; png compressed"))
    assert out.shape == rgb.shape
    np.testing.assert_array_equal(out[..., 1], gray)


def test_compressed_depth(rgb: np.ndarray) -> None:
    mm = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(np.uint16) * 40
    header = struct.pack("<iff", 0, 0.0, 0.0)
    msg = compressed(header + cv2.imencode(".png", mm)[1].tobytes(), "16UC1; compressedDepth png")
    out = compressed_msg_to_array(msg)
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, mm)
    # 32FC1: stored as inverse depth, quant_a / depth + quant_b.
    quant_a, quant_b = 100.0, 10.0
    depth = np.array([[0.5, 1.0], [2.0, 4.0]], dtype=np.float32)
    stored = np.round(quant_a / depth + quant_b).astype(np.uint16)
    stored[1, 1] = 0
    msg = compressed(
        struct.pack("<iff", 0, quant_a, quant_b) + cv2.imencode(".png", stored)[1].tobytes(),
        "32FC1; compressedDepth png",
    )
    out = compressed_msg_to_array(msg)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[[0, 0, 1], [0, 1, 0]], [0.5, 1.0, 2.0], rtol=1e-6)
    assert np.isnan(out[1, 1])


# -- malformed messages -------------------------------------------------------------------------------------


def malformed_image_cases(rgb: np.ndarray) -> dict[str, tuple[Any, str]]:
    small = rgb[:4, :6]
    ok = image_msg(small, "rgb8")
    cases: dict[str, tuple[Any, str]] = {}

    def variant(name: str, match: str, **fields: Any) -> None:
        msg = SimpleNamespace(**vars(ok))
        vars(msg).update(fields)
        cases[name] = (msg, match)

    variant("unknown encoding", "unsupported image encoding 'xyz16'", encoding="xyz16")
    variant("empty encoding", "unsupported image encoding", encoding="")
    variant("zero width", "zero size", width=0)
    variant("zero height", "zero size", height=0, data=b"")
    variant("negative size", "zero size", width=-6)
    variant("step too small", "step 17 is smaller", step=17)
    variant("data short", "data has 71 bytes", data=ok.data[:-1])
    variant("data long", "data has 73 bytes", data=ok.data + b"\0")
    variant("data empty", "data has 0 bytes", data=b"")
    variant("data not bytes", "not a byte sequence", data=object())
    variant("data out of range", "not a byte sequence", data=[300] * 72)
    variant("height not int", "must be an integer", height="4")
    variant("odd yuv width", "even width", encoding="yuv422", width=5, step=10, data=b"\0" * 40)
    missing = SimpleNamespace(**{k: v for k, v in vars(ok).items() if k != "step"})
    cases["missing step"] = (missing, "no field 'step'")
    cases["not a message"] = (42, "no field")
    return cases


def test_malformed_images_raise_frame_error(rgb: np.ndarray) -> None:
    for name, (msg, match) in malformed_image_cases(rgb).items():
        for backend in ("auto", "numpy"):
            with pytest.raises(FrameError, match=match):
                image_msg_to_array(msg, backend=backend)
            assert name  # the case name shows in the traceback on failure


@pytest.mark.parametrize(
    ("data", "fmt", "match"),
    [
        (b"", "jpeg", "no data"),
        (b"not an image at all", "jpeg", "neither JPEG nor PNG"),
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "png", "valid IHDR"),
        (b"\xff\xd8\xff" * 3, "", "no frame header"),
        (b"abc", "theora", "unsupported compressed format"),
        (b"abc", "16UC1; compressedDepth png", "shorter than its header"),
        (struct.pack("<iff", 0, 0, 0) + b"junk", "16UC1; compressedDepth png", "compressedDepth"),
    ],
)
def test_malformed_compressed_raise_frame_error(data: bytes, fmt: str, match: str) -> None:
    with pytest.raises(FrameError, match=match):
        compressed_msg_to_array(compressed(data, fmt))


def test_truncated_png_raises_frame_error(shared_media: Path) -> None:
    data = (shared_media / "grounding_2d.png").read_bytes()
    with pytest.raises(FrameError, match="cannot decode"):
        compressed_msg_to_array(compressed(data[: len(data) // 3], "png"))


def test_compressed_without_fields() -> None:
    with pytest.raises(FrameError, match="no field 'format'"):
        compressed_msg_to_array(SimpleNamespace(data=b"x"))


def test_stamp() -> None:
    msg = SimpleNamespace(header=SimpleNamespace(stamp=SimpleNamespace(sec=3, nanosec=5)))
    assert message_stamp_ns(msg, receive_ns=9) == 3_000_000_005
    zero = SimpleNamespace(header=SimpleNamespace(stamp=SimpleNamespace(sec=0, nanosec=0)))
    assert message_stamp_ns(zero, receive_ns=9) == 9
    assert message_stamp_ns(zero, receive_ns=9, use_receive_time_when_zero=False) == 0
    with pytest.raises(FrameError, match=r"header\.stamp"):
        message_stamp_ns(SimpleNamespace(), receive_ns=9)


@settings(max_examples=300, deadline=None)
@given(
    encoding=st.sampled_from(sorted(COLOUR_ENCODINGS | {"16UC1", "32FC1", "bogus"})),
    height=st.integers(-2, 6),
    width=st.integers(-2, 6),
    step=st.integers(-4, 40),
    size=st.integers(0, 200),
    bigendian=st.booleans(),
)
def test_fuzzed_images_give_pixels_or_frame_error(
    encoding: str, height: int, width: int, step: int, size: int, bigendian: bool
) -> None:
    msg = SimpleNamespace(
        height=height, width=width, step=step, encoding=encoding, is_bigendian=bigendian, data=bytes(size)
    )
    try:
        out = image_msg_to_array(msg, backend="numpy")
    except FrameError:
        return
    assert out.shape[:2] == (height, width)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), fmt=st.sampled_from(["jpeg", "png", "", "16UC1; compressedDepth png"]))
def test_fuzzed_compressed_give_pixels_or_frame_error(data: bytes, fmt: str) -> None:
    with contextlib.suppress(FrameError):
        compressed_msg_to_array(compressed(data, fmt))


# -- cv_bridge gives the same pixels ------------------------------------------------------------------------


@pytest.mark.skipif(not cv_bridge_available(), reason="needs ROS 2 cv_bridge (absent here; on robots)")
def test_cv_bridge_gives_the_same_pixels(rgb: np.ndarray) -> None:
    cases = {enc: pixels for enc, (pixels, _) in exact_cases(rgb).items()}
    cases["yuv422"] = cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_UYVY)
    cases["yuv422_yuy2"] = cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_YUY2)
    for pattern, name in BAYER_OFFSETS.items():
        cases[f"bayer_{pattern}8"] = mosaic(rgb, name)
        cases[f"bayer_{pattern}16"] = mosaic(rgb, name).astype(np.uint16) * 257
    cases["16UC1"] = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(np.uint16) * 31
    cases["32FC1"] = cases["16UC1"].astype(np.float32) / 1000.0
    for encoding, pixels in cases.items():
        for pad in (0, 8):
            msg = image_msg(pixels, encoding, pad=pad)
            bridged = image_msg_to_array(msg, backend="cv_bridge")
            ours = image_msg_to_array(msg, backend="numpy")
            assert bridged.shape == ours.shape and bridged.dtype == ours.dtype, encoding
            assert np.max(np.abs(bridged.astype(np.float64) - ours.astype(np.float64))) <= 1, encoding


def test_cv_bridge_backend_absent_is_a_frame_error(rgb: np.ndarray) -> None:
    if cv_bridge_available():
        pytest.skip("cv_bridge is importable here; this checks the message when it is not")
    with pytest.raises(FrameError, match="cv_bridge is not importable"):
        image_msg_to_array(image_msg(rgb, "rgb8"), backend="cv_bridge")


def test_serialized_stamp_without_deserializing(rgb: np.ndarray) -> None:
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_KILTED)
    types = store.types
    header = types["std_msgs/msg/Header"](
        stamp=types["builtin_interfaces/msg/Time"](sec=1_700_000_123, nanosec=456_789), frame_id="cam"
    )
    height, width = rgb.shape[:2]
    image = types["sensor_msgs/msg/Image"](
        header=header,
        height=height,
        width=width,
        encoding="rgb8",
        is_bigendian=0,
        step=width * 3,
        data=np.frombuffer(rgb.tobytes(), np.uint8),
    )
    compressed_msg = types["sensor_msgs/msg/CompressedImage"](
        header=header, format="jpeg", data=np.frombuffer(b"\xff\xd8", np.uint8)
    )
    for msg in (image, compressed_msg):
        for little in (True, False):
            raw = bytes(store.serialize_cdr(msg, msg.__msgtype__, little_endian=little))
            assert serialized_stamp_ns(raw) == 1_700_000_123_000_456_789
    for bad in (b"", b"\x00\x01\x00", b"\x00\x07\x00\x00" + bytes(8)):
        with pytest.raises(FrameError, match="CDR"):
            serialized_stamp_ns(bad)


def test_serialized_stamp_of_an_rclpy_message(rgb: np.ndarray) -> None:
    image_mod = pytest.importorskip("sensor_msgs.msg", reason="needs the ROS 2 sensor_msgs package")
    serialization = pytest.importorskip("rclpy.serialization", reason="needs rclpy")
    msg = image_mod.Image()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 42, 999_999_999
    msg.height, msg.width, msg.encoding, msg.step = 2, 2, "rgb8", 6
    msg.data = bytes(12)
    raw = serialization.serialize_message(msg)
    assert serialized_stamp_ns(raw) == 42_999_999_999
    np.testing.assert_array_equal(
        image_msg_to_array(serialization.deserialize_message(raw, image_mod.Image)), np.zeros((2, 2, 3))
    )


def test_copy_false_may_share_the_message_buffer(rgb: np.ndarray) -> None:
    from cosmos_reasoner_ros.clips.clip_buffer import ClipBuffer
    from cosmos_reasoner_ros.clips.image_conversion import Frame

    buf = bytearray(rgb.tobytes())
    msg = image_msg(rgb, "rgb8")
    msg.data = buf
    view = image_msg_to_array(msg, backend="numpy", copy=False)
    assert np.shares_memory(view, np.frombuffer(buf, np.uint8))
    np.testing.assert_array_equal(view, rgb)
    # The buffer copies what it keeps unresized, so a reused message buffer cannot change a stored frame.
    buffer = ClipBuffer("cam", 4, 10, 10**9, max_long_side=0)
    assert buffer.add(Frame("cam", 1, view))
    buf[:3] = b"\x01\x02\x03"
    np.testing.assert_array_equal(buffer.latest().image, rgb)
    assert np.shares_memory(message_to_array(msg, backend="numpy", copy=False), np.frombuffer(buf, np.uint8))
    padded = image_msg(rgb, "rgb8", pad=3)
    assert not np.shares_memory(image_msg_to_array(padded, backend="numpy", copy=False), padded.data)


def test_cv_bridge_dispatch_and_fallback(rgb: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    """The choice between cv_bridge and the numpy path.

    A stand-in bridge knows only rgb8 and 16UC1 (as an older cv_bridge lacks some encodings); the pixels it
    returns come from the real conversion.
    """
    from cosmos_reasoner_ros.clips import image_conversion

    calls: list[tuple[str, str]] = []

    class PartialBridge:
        def imgmsg_to_cv2(self, msg: Any, desired_encoding: str) -> np.ndarray:
            calls.append((msg.encoding, desired_encoding))
            if msg.encoding not in ("rgb8", "16UC1"):
                raise RuntimeError(f"[{msg.encoding}] is not a color format")
            return image_msg_to_array(msg, backend="numpy")

    monkeypatch.setattr(image_conversion, "_cv_bridge", PartialBridge())
    monkeypatch.setattr(image_conversion, "_cv_bridge_checked", True)
    assert cv_bridge_available()
    np.testing.assert_array_equal(image_msg_to_array(image_msg(rgb, "rgb8")), rgb)
    mm = np.full((3, 4), 1234, np.uint16)
    np.testing.assert_array_equal(image_msg_to_array(image_msg(mm, "16UC1")), mm)
    assert calls == [("rgb8", "rgb8"), ("16UC1", "passthrough")]
    # An encoding the bridge lacks falls back to the numpy path under "auto" ...
    np.testing.assert_array_equal(image_msg_to_array(image_msg(rgb[..., ::-1].copy(), "bgr8")), rgb)
    # ... and is a FrameError when cv_bridge is required; "numpy" never asks the bridge.
    with pytest.raises(FrameError, match="cv_bridge cannot convert bgr8"):
        image_msg_to_array(image_msg(rgb[..., ::-1].copy(), "bgr8"), backend="cv_bridge")
    calls.clear()
    image_msg_to_array(image_msg(rgb, "rgb8"), backend="numpy")
    assert calls == []
    # Malformed messages are refused before the bridge sees them.
    with pytest.raises(FrameError, match="data has"):
        image_msg_to_array(SimpleNamespace(**{**vars(image_msg(rgb, "rgb8")), "data": b"\0"}))
    assert calls == []


# -- hostile input: decompression bombs, formats, non-colour encodings, stamps (issue 11) --------------------


def png_bomb(width: int, height: int) -> bytes:
    """A valid 8-bit grey PNG of zeros: (1 + width) * height bytes inflated, under 1 MB deflated.

    Identical deflate blocks after a full flush are independent, so one block is compressed and repeated; the
    zlib trailer's Adler-32 of n zero bytes is ((n mod 65521) << 16) | 1.
    """
    rows = 100
    assert height % rows == 0
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(bytes(rows * (width + 1))) + deflate.flush(zlib.Z_FULL_FLUSH)
    raw = block * (height // rows) + deflate.flush(zlib.Z_FINISH)
    inflated = height * (width + 1)
    idat = b"\x78\xda" + raw + struct.pack(">I", ((inflated % 65521) << 16) | 1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def peak_rss_reset() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS; False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


def test_png_bomb_is_refused_from_its_header_in_milliseconds() -> None:
    """The issue's bomb: 875 kB declaring 30000x30000 drove the node to 5.4 GB and blocked its callback."""
    bomb = png_bomb(30000, 30000)
    assert 800_000 < len(bomb) < 1_000_000
    msg = compressed(bomb, "png")
    measured_rss = peak_rss_reset()
    rss_before = rss_kib("VmRSS")
    tracemalloc.start()
    started = time.thread_time()
    try:
        with pytest.raises(FrameTooLarge, match=r"30000x30000 = 900\.0 MP, more than max_pixels") as err:
            compressed_msg_to_array(msg)
        elapsed = time.thread_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (err.value.width, err.value.height, err.value.max_pixels) == (30000, 30000, DEFAULT_MAX_PIXELS)
    assert err.value.kind == "invalid_frame" and isinstance(err.value, FrameError)
    assert elapsed < 0.5, elapsed  # this thread's CPU time (a stall elsewhere does not count); a decode: s
    assert peak < 1_000_000, peak  # Python and numpy allocations: a few small objects, no pixels
    if measured_rss:  # every allocation, OpenCV's included: nothing near the 2.7 GB a decode would take
        assert rss_kib("VmHWM") - rss_before < 50 * 1024
    print(f"bomb {len(bomb)} bytes refused in {elapsed * 1e3:.2f} ms, traced peak {peak} bytes")
    # Below the limit the same kind of file decodes: the refusal is the limit's, not the file's.
    small = compressed_msg_to_array(compressed(png_bomb(300, 200), "png"))
    assert small.shape == (200, 300, 3) and not small.any()


def jpeg_with_size(rgb: np.ndarray, width: int, height: int, **params: int) -> bytes:
    """A real JPEG of `rgb` whose SOF segment is rewritten to declare width x height."""
    flags = [cv2.IMWRITE_JPEG_QUALITY, 80]
    for key, value in params.items():
        flags += [getattr(cv2, key), value]
    data = bytearray(cv2.imencode(".jpg", rgb[..., ::-1], flags)[1].tobytes())
    _, w, h = compressed_image_size(bytes(data))
    sof = next(i for i in range(2, len(data) - 9) if data[i] == 0xFF and data[i + 1] in (0xC0, 0xC2))
    assert struct.unpack(">HH", data[sof + 5 : sof + 9]) == (h, w)
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def test_jpeg_size_is_read_from_its_frame_header(rgb: np.ndarray) -> None:
    baseline = cv2.imencode(".jpg", rgb)[1].tobytes()
    assert compressed_image_size(baseline) == ("jpeg", 644, 476)
    progressive = cv2.imencode(".jpg", rgb, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()
    assert progressive[:2] == b"\xff\xd8" and compressed_image_size(progressive) == ("jpeg", 644, 476)
    # APPn segments (EXIF, ICC, comments) and fill bytes before the SOF are skipped by their lengths; an
    # APP1 holding bytes that look like a SOF marker must not be taken for one.
    fake_sof = b"\xff\xc0\x00\x11\x08\x00\x10\x00\x10\x03"
    app1 = b"\xff\xe1" + struct.pack(">H", 2 + 6 + len(fake_sof)) + b"Exif\0\0" + fake_sof
    comment = b"\xff\xfe\x00\x07hello"
    padded = baseline[:2] + app1 + comment + b"\xff\xff\xff" + baseline[2:]
    assert compressed_image_size(padded) == ("jpeg", 644, 476)
    np.testing.assert_array_equal(
        compressed_msg_to_array(compressed(padded, "jpeg")),
        compressed_msg_to_array(compressed(baseline, "jpeg")),
    )
    png = cv2.imencode(".png", rgb[:10, :20])[1].tobytes()
    assert compressed_image_size(png) == ("png", 20, 10)


def test_jpeg_size_of_camera_files(shared_media: Path) -> None:
    paths = sorted(shared_media.glob("*.jp*g"))
    assert paths
    for path in paths[:8]:
        height, width = cv2.imread(str(path)).shape[:2]
        assert compressed_image_size(path.read_bytes()) == ("jpeg", width, height), path.name


@pytest.mark.parametrize("progressive", [0, 1])
def test_jpeg_declaring_a_huge_frame_is_refused_before_decoding(rgb: np.ndarray, progressive: int) -> None:
    bomb = jpeg_with_size(rgb, 20000, 20000, IMWRITE_JPEG_PROGRESSIVE=progressive)
    started = time.thread_time()  # this thread's CPU time: a decode of 400 MP takes seconds of it
    with pytest.raises(FrameTooLarge, match="20000x20000") as err:
        compressed_msg_to_array(compressed(bomb, "jpeg"))
    assert time.thread_time() - started < 0.5 and (err.value.width, err.value.height) == (20000, 20000)
    # A limit the node passes: the real 644x476 frame is refused under 0.3 MP, decoded at 0.31 MP.
    real = cv2.imencode(".jpg", rgb)[1].tobytes()
    with pytest.raises(FrameTooLarge, match="644x476"):
        message_to_array(compressed(real, "jpeg"), max_pixels=300_000)
    assert message_to_array(compressed(real, "jpeg"), max_pixels=644 * 476).shape == rgb.shape
    with pytest.raises(ValueError, match="max_pixels"):
        message_to_array(compressed(real, "jpeg"), max_pixels=0)


def test_default_limit_admits_8k_and_nothing_larger() -> None:
    assert DEFAULT_MAX_PIXELS == 7680 * 4320
    for width, height, refused in ((7680, 4320, False), (7681, 4320, True), (4320, 7680, False)):
        msg = SimpleNamespace(height=height, width=width, step=width, encoding="mono8", data=b"")
        # An Image's size is checked before its data: an empty data field is only noticed below the limit.
        with pytest.raises(FrameTooLarge if refused else FrameError) as err:
            image_msg_to_array(msg, backend="numpy")
        assert isinstance(err.value, FrameTooLarge) == refused


def test_raw_image_size_is_checked_before_its_data(rgb: np.ndarray) -> None:
    huge = SimpleNamespace(height=100_000, width=100_000, step=300_000, encoding="rgb8", data=b"\0" * 10)
    with pytest.raises(FrameTooLarge, match="100000x100000") as err:
        message_to_array(huge)
    assert (err.value.width, err.value.height) == (100_000, 100_000)
    msg = image_msg(rgb, "rgb8")
    with pytest.raises(FrameTooLarge, match=r"rgb8 image declares 644x476"):
        image_msg_to_array(msg, max_pixels=644 * 476 - 1)
    np.testing.assert_array_equal(image_msg_to_array(msg, max_pixels=644 * 476), rgb)


@pytest.mark.parametrize(("ext", "fmt"), [(".tiff", "jpeg"), (".webp", ""), (".bmp", "png"), (".ppm", "")])
def test_only_jpeg_and_png_data_are_decoded(rgb: np.ndarray, ext: str, fmt: str) -> None:
    """OpenCV's imdecode sniffs the content: a TIFF labelled jpeg reached libtiff. Now it never decodes."""
    data = cv2.imencode(ext, rgb[..., ::-1])[1].tobytes()
    assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) is not None  # OpenCV would decode it
    with pytest.raises(FrameError, match="neither JPEG nor PNG"):
        compressed_msg_to_array(compressed(data, fmt))


@settings(max_examples=400, deadline=1000)
@given(
    prefix=st.sampled_from(
        [b"", b"\x89PNG\r\n\x1a\n", b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR", b"\xff\xd8"]
    ),
    body=st.binary(max_size=200),
    segments=st.lists(
        st.tuples(st.integers(0, 255), st.integers(0, 70_000), st.binary(max_size=20)), max_size=6
    ),
)
def test_header_parser_gives_a_size_or_frame_error(
    prefix: bytes, body: bytes, segments: list[tuple[int, int, bytes]]
) -> None:
    """Truncated, garbage and lying headers: a size or FrameError, never another exception, never a hang
    (the deadline fails a slow example)."""
    data = prefix
    for marker, length, payload in segments:  # JPEG-like segments with arbitrary markers and lengths
        data += bytes([0xFF, marker]) + struct.pack(">I", length)[2:] + payload
    data += body
    try:
        kind, width, height = compressed_image_size(data)
    except FrameError:
        return
    assert kind in ("jpeg", "png") and width > 0 and height > 0


@settings(max_examples=300, deadline=1000)
@given(
    index=st.integers(0, 700),
    value=st.integers(0, 255),
    cut=st.integers(0, 800),
    width=st.integers(1, 65535),
    height=st.integers(1, 65535),
)
def test_mutated_real_headers_give_a_size_or_frame_error(
    real_jpeg_header: bytes, index: int, value: int, cut: int, width: int, height: int
) -> None:
    data = bytearray(real_jpeg_header)
    data[index % len(data)] = value
    data = data[:cut]
    try:
        kind, w, h = compressed_image_size(bytes(data))
    except FrameError:
        return
    assert kind == "jpeg" and w > 0 and h > 0
    msg = compressed(bytes(data), "jpeg")
    with contextlib.suppress(FrameError):  # decoding a damaged header: pixels or FrameError, nothing else
        compressed_msg_to_array(msg, max_pixels=1_000_000)


@pytest.fixture(scope="module")
def real_jpeg_header(rgb: np.ndarray) -> bytes:
    return cv2.imencode(".jpg", rgb[:64, :64])[1].tobytes()[:800]


def test_colour_topics_refuse_depth_and_mono16(rgb: np.ndarray) -> None:
    """A 32FC1 image on a colour topic was encoded into the clip as if it were a picture."""
    assert COLOUR_ENCODINGS - {"mono16"} == COLOUR_TOPIC_ENCODINGS
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    refused = {
        "32FC1": gray.astype(np.float32) / 100,
        "16UC1": gray.astype(np.uint16) * 20,
        "mono16": gray.astype(np.uint16) * 20,
    }
    for encoding, pixels in refused.items():
        msg = image_msg(pixels, encoding)
        with pytest.raises(NonColourImage, match=f"encoding '{encoding}' .* on a colour camera topic") as err:
            message_to_array(msg, colour_only=True)
        assert err.value.encoding == encoding
        expected = rgb.shape if encoding == "mono16" else gray.shape
        assert image_msg_to_array(msg).shape == expected  # accepted where colour is not required
    # The depth path (colour_only False) keeps its values.
    depth = image_msg(refused["16UC1"], "16UC1")
    np.testing.assert_array_equal(message_to_array(depth), refused["16UC1"])
    compressed_depth = compressed(
        struct.pack("<iff", 0, 0.0, 0.0) + cv2.imencode(".png", refused["16UC1"])[1].tobytes(),
        "16UC1; compressedDepth png",
    )
    with pytest.raises(NonColourImage, match="compressed depth"):
        message_to_array(compressed_depth, colour_only=True)
    np.testing.assert_array_equal(message_to_array(compressed_depth), refused["16UC1"])
    # Every picture encoding passes on a colour topic, as RGB.
    accepted = dict(exact_cases(rgb))
    del accepted["mono16"]
    accepted["yuv422"] = (cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_UYVY), rgb)
    accepted["bayer_rggb8"] = (mosaic(rgb, "RGGB"), rgb)
    for encoding, (pixels, _) in accepted.items():
        out = message_to_array(image_msg(pixels, encoding), backend="numpy", colour_only=True)
        assert out.shape == rgb.shape and out.dtype == np.uint8, encoding
    jpeg = compressed(cv2.imencode(".jpg", gray)[1].tobytes(), "mono8; jpeg compressed")
    assert message_to_array(jpeg, colour_only=True).shape == rgb.shape


def test_stamps_ahead_of_the_receive_time_are_refused() -> None:
    """A single frame stamped a year ahead evicted the whole buffer."""
    now = 1_760_000_000 * NS
    year = 365 * 24 * 3600 * NS

    def stamped(ns: int) -> SimpleNamespace:
        return SimpleNamespace(header=SimpleNamespace(stamp=SimpleNamespace(sec=ns // NS, nanosec=ns % NS)))

    with pytest.raises(ImplausibleStamp, match=r"31536000\.000 s ahead .* max_stamp_ahead_s = 5 s") as err:
        message_stamp_ns(stamped(now + year), now, max_ahead_s=5.0)
    assert err.value.ahead_s == pytest.approx(year / NS) and isinstance(err.value, FrameError)
    assert message_stamp_ns(stamped(now + 4 * NS), now, max_ahead_s=5.0) == now + 4 * NS  # clock offset
    with pytest.raises(ImplausibleStamp):
        message_stamp_ns(stamped(now + 5 * NS + 1), now, max_ahead_s=5.0)
    # The past is never implausible: a replayed bag republishes stamps recorded long ago.
    assert message_stamp_ns(stamped(now - 2 * year), now, max_ahead_s=5.0) == now - 2 * year
    assert message_stamp_ns(stamped(0), now, max_ahead_s=0.0) == now  # unstamped: the receive time
    assert message_stamp_ns(stamped(now + year), now) == now + year  # no limit unless asked for
    assert check_stamp(now, now, 0.0) == now
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="max_ahead_s"):
            check_stamp(now, now, bad)


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(1, 24),
    height=st.integers(1, 24),
    max_pixels=st.integers(1, 700),
    as_png=st.booleans(),
    colour_only=st.sampled_from([None, True, False]),
)
def test_message_to_array_passes_its_limits_to_either_converter(
    width: int, height: int, max_pixels: int, as_png: bool, colour_only: bool | None
) -> None:
    """The limits given reach the converter of the message's type: refused exactly above max_pixels."""
    pixels = np.random.default_rng(width * 31 + height).integers(0, 256, (height, width, 3), dtype=np.uint8)
    png = cv2.imencode(".png", cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR))[1].tobytes()
    msg = compressed(png, "png") if as_png else image_msg(pixels, "rgb8")
    limits: dict[str, Any] = {"max_pixels": max_pixels}
    if colour_only is not None:
        limits["colour_only"] = colour_only
    if width * height > max_pixels:
        with pytest.raises(FrameTooLarge):
            message_to_array(msg, backend="numpy", **limits)
    else:
        np.testing.assert_array_equal(message_to_array(msg, backend="numpy", **limits), pixels)


def test_message_to_array_refuses_a_limit_neither_converter_knows(rgb: np.ndarray) -> None:
    for msg in (image_msg(rgb, "rgb8"), compressed(cv2.imencode(".png", rgb)[1].tobytes(), "png")):
        with pytest.raises(TypeError, match="max_pixel"):
            message_to_array(msg, max_pixel=10)  # type: ignore[call-arg]
