"""Camera messages to numpy: sensor_msgs/Image and CompressedImage, duck-typed on their fields.

Works with rclpy and rosbags messages. cv_bridge is used when importable (robots); otherwise a
numpy/OpenCV path gives the same pixels.
"""

from __future__ import annotations

import array
import struct
from dataclasses import dataclass
from typing import Any, Final

import cv2
import numpy as np
import numpy.typing as npt

from cosmos_reasoner_ros.errors import FrameError

__all__ = [
    "COLOUR_ENCODINGS",
    "DEPTH_ENCODINGS",
    "Frame",
    "compressed_msg_to_array",
    "cv_bridge_available",
    "image_msg_to_array",
    "message_stamp_ns",
    "message_to_array",
    "serialized_stamp_ns",
]


@dataclass(frozen=True)
class Frame:
    """One decoded camera image with the stamp it was taken at."""

    camera: str
    stamp_ns: int
    image: np.ndarray
    frame_id: str = ""
    # (width, height) of the image as the camera sent it when the buffer has downscaled `image`; None: the
    # image's own size. Answers are given in pixels of the camera's image, whatever size the model saw.
    source_size: tuple[int, int] | None = None


@dataclass(frozen=True)
class _Layout:
    dtype: str  # numpy dtype name of one channel value
    channels: int
    to_rgb: int | None  # cv2 colour conversion to RGB; None: already RGB (or depth)


def _bayer(pattern: str) -> int:
    # OpenCV also names Bayer codes by sensor pattern (BayerRGGB == the older BayerBG that cv_bridge uses).
    return int(getattr(cv2, f"COLOR_Bayer{pattern}2RGB"))


_LAYOUTS: Final[dict[str, _Layout]] = {
    "rgb8": _Layout("uint8", 3, None),
    "bgr8": _Layout("uint8", 3, cv2.COLOR_BGR2RGB),
    "rgba8": _Layout("uint8", 4, cv2.COLOR_RGBA2RGB),
    "bgra8": _Layout("uint8", 4, cv2.COLOR_BGRA2RGB),
    "rgb16": _Layout("uint16", 3, None),
    "bgr16": _Layout("uint16", 3, cv2.COLOR_BGR2RGB),
    "mono8": _Layout("uint8", 1, cv2.COLOR_GRAY2RGB),
    "8UC1": _Layout("uint8", 1, cv2.COLOR_GRAY2RGB),
    "mono16": _Layout("uint16", 1, cv2.COLOR_GRAY2RGB),
    # ROS "yuv422" is UYVY byte order (as in cv_bridge); "yuv422_yuy2" is YUYV.
    "yuv422": _Layout("uint8", 2, cv2.COLOR_YUV2RGB_UYVY),
    "uyvy": _Layout("uint8", 2, cv2.COLOR_YUV2RGB_UYVY),
    "yuv422_yuy2": _Layout("uint8", 2, cv2.COLOR_YUV2RGB_YUY2),
    "yuyv": _Layout("uint8", 2, cv2.COLOR_YUV2RGB_YUY2),
    **{
        f"bayer_{p.lower()}{bits}": _Layout(f"uint{bits}", 1, _bayer(p))
        for p in ("RGGB", "BGGR", "GBRG", "GRBG")
        for bits in (8, 16)
    },
    # Depth keeps its values: uint16 millimetres, float32 metres.
    "16UC1": _Layout("uint16", 1, None),
    "32FC1": _Layout("float32", 1, None),
}
DEPTH_ENCODINGS: Final = frozenset({"16UC1", "32FC1"})
COLOUR_ENCODINGS: Final = frozenset(_LAYOUTS) - DEPTH_ENCODINGS
_YUV: Final = frozenset({"yuv422", "uyvy", "yuv422_yuy2", "yuyv"})


def _field(msg: Any, name: str) -> Any:
    try:
        return getattr(msg, name)
    except AttributeError:
        raise FrameError(f"{type(msg).__name__} has no field {name!r}: not a camera message") from None


def _int_field(msg: Any, name: str) -> int:
    value = _field(msg, name)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise FrameError(f"field {name!r} must be an integer, got {type(value).__name__}")
    return int(value)


def _bytes_of(data: Any) -> npt.NDArray[np.uint8]:
    """The message's data field as a flat uint8 array, without a copy where the type allows it."""
    try:
        if isinstance(data, np.ndarray):
            return np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        if isinstance(data, (bytes, bytearray, memoryview, array.array)):
            return np.frombuffer(data, dtype=np.uint8)
        return np.asarray(data, dtype=np.uint8).reshape(-1)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FrameError(f"data field is not a byte sequence ({type(data).__name__}): {exc}") from None


def message_stamp_ns(msg: Any, receive_ns: int, use_receive_time_when_zero: bool = True) -> int:
    """header.stamp in nanoseconds; the receive time when the stamp is zero (drivers that do not stamp)."""
    try:
        stamp = msg.header.stamp
        ns = int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)
    except (AttributeError, TypeError, ValueError):
        raise FrameError("message has no usable header.stamp") from None
    if ns == 0 and use_receive_time_when_zero:
        return receive_ns
    return ns


def _unpack_image(msg: Any) -> tuple[str, _Layout, np.ndarray]:
    """Validate an Image message and view its pixels (step padding removed, native byte order)."""
    encoding = str(_field(msg, "encoding"))
    height, width, step = (_int_field(msg, n) for n in ("height", "width", "step"))
    layout = _LAYOUTS.get(encoding)
    if layout is None:
        raise FrameError(f"unsupported image encoding {encoding!r}; supported: {', '.join(sorted(_LAYOUTS))}")
    if height <= 0 or width <= 0:
        raise FrameError(f"image has zero size ({width}x{height})")
    if encoding in _YUV and width % 2:
        raise FrameError(f"{encoding} needs an even width, got {width}")
    dtype = np.dtype(layout.dtype)
    row_bytes = width * layout.channels * dtype.itemsize
    if step < row_bytes:
        raise FrameError(f"step {step} is smaller than a {encoding} row of width {width} ({row_bytes} bytes)")
    buf = _bytes_of(_field(msg, "data"))
    if buf.size != step * height:
        raise FrameError(f"data has {buf.size} bytes, expected step*height = {step * height}")
    big_endian = bool(getattr(msg, "is_bigendian", False))
    if dtype.itemsize > 1:
        dtype = dtype.newbyteorder(">" if big_endian else "<")
    rows = buf.reshape(height, step)[:, :row_bytes]
    pixels = rows.view(dtype) if rows.flags.c_contiguous else np.ascontiguousarray(rows).view(dtype)
    shape = (height, width) if layout.channels == 1 else (height, width, layout.channels)
    pixels = pixels.reshape(shape)
    if not pixels.dtype.isnative:
        pixels = pixels.astype(pixels.dtype.newbyteorder("="))
    return encoding, layout, pixels


def _to_uint8(pixels: np.ndarray) -> np.ndarray:
    """16-bit to 8-bit the way cv_bridge does it (scale 255/65535, rounded)."""
    if pixels.dtype == np.uint8:
        return pixels
    return cv2.convertScaleAbs(pixels, alpha=255.0 / 65535.0)


def _numpy_convert(encoding: str, layout: _Layout, pixels: np.ndarray, copy: bool) -> np.ndarray:
    if encoding in DEPTH_ENCODINGS:
        return np.array(pixels, order="C", copy=True) if copy else np.ascontiguousarray(pixels)
    image = np.ascontiguousarray(pixels)
    if layout.to_rgb is not None:
        # Demosaicing and YUV need the sensor's own samples; depth reduction comes after, as in cv_bridge.
        image = cv2.cvtColor(image, layout.to_rgb)
    image = _to_uint8(image)
    return image.copy() if copy and image.base is not None else image


_cv_bridge: Any = None
_cv_bridge_checked = False


def cv_bridge_available() -> bool:
    """True when ROS 2's cv_bridge can be imported (robots); the numpy path is used otherwise."""
    global _cv_bridge, _cv_bridge_checked
    if not _cv_bridge_checked:
        _cv_bridge_checked = True
        try:
            from cv_bridge import CvBridge  # type: ignore[import-not-found,unused-ignore]

            _cv_bridge = CvBridge()
        except Exception:  # ImportError, or a broken binary build: both mean "use the numpy path"
            _cv_bridge = None
    return _cv_bridge is not None


def image_msg_to_array(msg: Any, backend: str = "auto", copy: bool = True) -> np.ndarray:
    """sensor_msgs/Image to HxWx3 uint8 RGB, or HxW uint16 (16UC1, mm) / float32 (32FC1, m) for depth.

    backend: "auto" (cv_bridge when importable), "cv_bridge" or "numpy". The message is validated first, so a
    malformed one raises FrameError on every backend. Encodings cv_bridge does not know take the numpy path.
    copy=False may return a read-only view of the message's data (rgb8 and depth without row padding), for
    callers that resize or copy anyway: ClipBuffer.add does, saving a full-frame copy per kept frame.
    """
    if backend not in ("auto", "cv_bridge", "numpy"):
        raise ValueError(f"backend must be auto, cv_bridge or numpy, not {backend!r}")
    encoding, layout, pixels = _unpack_image(msg)
    if backend != "numpy" and cv_bridge_available():
        try:
            wanted = "passthrough" if encoding in DEPTH_ENCODINGS else "rgb8"
            out = np.asarray(_cv_bridge.imgmsg_to_cv2(msg, desired_encoding=wanted))
            return np.array(out, dtype=out.dtype.newbyteorder("="), order="C", copy=True)
        except Exception as exc:  # an encoding this cv_bridge build lacks: the message itself was valid
            if backend == "cv_bridge":
                raise FrameError(f"cv_bridge cannot convert {encoding}: {exc}") from exc
    elif backend == "cv_bridge":
        raise FrameError("cv_bridge backend requested but cv_bridge is not importable")
    try:
        return _numpy_convert(encoding, layout, pixels, copy)
    except cv2.error as exc:
        raise FrameError(f"cannot convert {encoding} image: {exc}") from None


_COMPRESSED_DEPTH_HEADER = struct.Struct("<iff")  # format enum, depthQuantA, depthQuantB


def compressed_msg_to_array(msg: Any) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg, png) to HxWx3 uint8 RGB.

    compressedDepth (image_transport's depth plugin, PNG) gives HxW uint16 for 16UC1 and float32 for 32FC1.
    """
    fmt = str(_field(msg, "format")).lower()
    buf = _bytes_of(_field(msg, "data"))
    if buf.size == 0:
        raise FrameError("compressed image has no data")
    if "compresseddepth" in fmt:
        return _compressed_depth(fmt, buf)
    if fmt and not any(name in fmt for name in ("jpeg", "jpg", "png")):
        raise FrameError(f"unsupported compressed format {fmt!r}; supported: jpeg, png, compressedDepth")
    try:
        image = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error as exc:
        raise FrameError(f"cannot decode compressed image ({fmt or 'no format'}): {exc}") from None
    if image is None or image.size == 0:
        raise FrameError(f"cannot decode compressed image ({fmt or 'no format'}, {buf.size} bytes)")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def _compressed_depth(fmt: str, buf: np.ndarray) -> np.ndarray:
    header = _COMPRESSED_DEPTH_HEADER.size
    if buf.size <= header:
        raise FrameError("compressedDepth image is shorter than its header")
    quant_a, quant_b = _COMPRESSED_DEPTH_HEADER.unpack(buf[:header].tobytes())[1:]
    try:
        raw = cv2.imdecode(buf[header:], cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:
        raise FrameError(f"cannot decode compressedDepth PNG: {exc}") from None
    if raw is None or raw.dtype != np.uint16 or raw.ndim != 2:
        raise FrameError("compressedDepth data is not a single-channel 16-bit PNG")
    if fmt.startswith("32fc1"):
        # image_transport stores inverse depth quantised as quant_a / (depth) + quant_b; 0 means no reading.
        depth = np.full(raw.shape, np.nan, dtype=np.float32)
        valid = raw != 0
        depth[valid] = quant_a / (raw[valid].astype(np.float32) - quant_b)
        return depth
    return raw


def message_to_array(msg: Any, backend: str = "auto", copy: bool = True) -> np.ndarray:
    """Either message type: a CompressedImage has a `format` field, an Image has `encoding`.

    copy=False: see image_msg_to_array (decoded compressed images are always new arrays).
    """
    if hasattr(msg, "format") and not hasattr(msg, "encoding"):
        return compressed_msg_to_array(msg)
    return image_msg_to_array(msg, backend=backend, copy=copy)


_CDR_STAMP = {b"\x00\x01": struct.Struct("<iI"), b"\x00\x00": struct.Struct(">iI")}


def serialized_stamp_ns(data: bytes | bytearray | memoryview) -> int:
    """header.stamp of a serialized (CDR) Image or CompressedImage, without deserializing the pixels.

    Lets a raw subscription decide decimation first and deserialize only the frames it keeps.
    """
    layout = _CDR_STAMP.get(bytes(data[:2]))
    if layout is None or len(data) < 4 + layout.size:
        raise FrameError("not a plain CDR message with a header (unknown encapsulation or too short)")
    sec, nanosec = layout.unpack_from(data, 4)
    return int(sec) * 1_000_000_000 + int(nanosec)
