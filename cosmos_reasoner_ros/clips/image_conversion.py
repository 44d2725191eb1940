"""Camera messages to numpy: sensor_msgs/Image and CompressedImage, duck-typed on their fields.

Works with rclpy and rosbags messages. cv_bridge is used when importable (robots); otherwise a
numpy/OpenCV path gives the same pixels.

Hostile or broken input gets a FrameError (of a subclass the node counts apart) before it costs memory:
- size: a frame declaring more than `max_pixels` (default 8K UHD) raises FrameTooLarge. For a
  CompressedImage the size comes from the JPEG SOF or PNG IHDR header, read before anything is decoded (an
  875 kB PNG can declare 30000x30000: 2.7 GB decoded); only JPEG and PNG data are decoded at all, whatever
  the `format` string says, so none of the other decoders OpenCV carries (TIFF, WebP, JPEG 2000, ...) is
  reachable from a topic. For an Image the header's width x height is checked before the data is touched.
- kind: `colour_only=True` (a camera topic) accepts what looks like a picture, RGB(A)/BGR(A) 8 and 16 bit,
  Bayer, YUV 4:2:2, mono8, JPEG and PNG, and refuses depth (16UC1, 32FC1, compressedDepth) and mono16 with
  NonColourImage: mono16 is what depth drivers (OpenNI, Astra), IR and thermal cameras publish, millimetres
  or raw counts that scale to a black picture. The depth path keeps accepting depth.
- time: `max_ahead_s` refuses a header stamp that far ahead of the receive time (ImplausibleStamp). Stamps in
  the past are never refused here: a replayed bag republishes its recorded stamps.
"""

from __future__ import annotations

import array
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypedDict

import cv2
import numpy as np
import numpy.typing as npt

from cosmos_reasoner_ros.errors import FrameError, FrameTooLarge, ImplausibleStamp, NonColourImage

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11

__all__ = [
    "COLOUR_ENCODINGS",
    "COLOUR_TOPIC_ENCODINGS",
    "DEFAULT_MAX_PIXELS",
    "DEPTH_ENCODINGS",
    "Frame",
    "FrameLimits",
    "check_stamp",
    "compressed_image_size",
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
COLOUR_ENCODINGS: Final = frozenset(_LAYOUTS) - DEPTH_ENCODINGS  # converted to RGB
# What a colour camera topic accepts (see the module docstring for mono16).
COLOUR_TOPIC_ENCODINGS: Final = COLOUR_ENCODINGS - {"mono16"}
_YUV: Final = frozenset({"yuv422", "uyvy", "yuv422_yuy2", "yuyv"})

# 8K UHD (7680x4320, 33.2 MP): above every camera a robot streams today, yet one RGB frame of it is 100 MB,
# about 200 MB at the decoder's peak (BGR plus the RGB copy), a bound a robot computer survives.
DEFAULT_MAX_PIXELS: Final = 7680 * 4320


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


def message_stamp_ns(
    msg: Any, receive_ns: int, use_receive_time_when_zero: bool = True, max_ahead_s: float | None = None
) -> int:
    """header.stamp in nanoseconds; the receive time when the stamp is zero (drivers that do not stamp).

    max_ahead_s: refuse a stamp further ahead of receive_ns than this (ImplausibleStamp); None: no check.
    """
    try:
        stamp = msg.header.stamp
        ns = int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)
    except (AttributeError, TypeError, ValueError, OverflowError):
        raise FrameError("message has no usable header.stamp") from None
    if ns == 0 and use_receive_time_when_zero:
        return receive_ns
    return ns if max_ahead_s is None else check_stamp(ns, receive_ns, max_ahead_s)


def check_stamp(stamp_ns: int, receive_ns: int, max_ahead_s: float) -> int:
    """stamp_ns, unless it is more than max_ahead_s ahead of receive_ns (ImplausibleStamp).

    Only the future is implausible: a camera cannot have taken a frame after it arrived, beyond the clock
    offset between two machines. The past is not checked: a replayed bag republishes its recorded stamps.
    """
    if not max_ahead_s >= 0:
        raise ValueError(f"max_ahead_s must be >= 0, got {max_ahead_s}")
    ahead_ns = stamp_ns - receive_ns
    if ahead_ns > max_ahead_s * 1e9:
        ahead_s = ahead_ns / 1e9
        raise ImplausibleStamp(
            f"stamp {stamp_ns} ns is {ahead_s:.3f} s ahead of the receive time (more than max_stamp_ahead_s "
            f"= {max_ahead_s:g} s): are the clocks of the camera's and this node's computers synchronised?",
            ahead_s=ahead_s,
        )
    return stamp_ns


def _check_pixels(width: int, height: int, max_pixels: int, what: str) -> None:
    if not max_pixels > 0:
        raise ValueError(f"max_pixels must be > 0, got {max_pixels}")
    if width * height > max_pixels:
        raise FrameTooLarge(
            f"{what} declares {width}x{height} = {width * height / 1e6:.1f} MP, more than max_pixels "
            f"= {max_pixels} ({max_pixels / 1e6:.1f} MP); refused before decoding",
            width=width,
            height=height,
            max_pixels=max_pixels,
        )


def _check_colour_encoding(encoding: str) -> None:
    if encoding not in COLOUR_TOPIC_ENCODINGS:
        kind = "depth" if encoding in DEPTH_ENCODINGS else "not a colour or grey picture"
        raise NonColourImage(
            f"encoding {encoding!r} ({kind}) on a colour camera topic; accepted there: "
            f"{', '.join(sorted(COLOUR_TOPIC_ENCODINGS))} (depth goes to the camera's depth_topic)",
            encoding=encoding,
        )


def _unpack_image(
    msg: Any, max_pixels: int = DEFAULT_MAX_PIXELS, colour_only: bool = False
) -> tuple[str, _Layout, np.ndarray]:
    """Validate an Image message and view its pixels (step padding removed, native byte order).

    Size and encoding are checked before the data field is looked at.
    """
    encoding = str(_field(msg, "encoding"))
    height, width, step = (_int_field(msg, n) for n in ("height", "width", "step"))
    layout = _LAYOUTS.get(encoding)
    if layout is None:
        raise FrameError(f"unsupported image encoding {encoding!r}; supported: {', '.join(sorted(_LAYOUTS))}")
    if colour_only:
        _check_colour_encoding(encoding)
    if height <= 0 or width <= 0:
        raise FrameError(f"image has zero size ({width}x{height})")
    _check_pixels(width, height, max_pixels, f"{encoding} image")
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


def image_msg_to_array(
    msg: Any,
    backend: str = "auto",
    copy: bool = True,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    colour_only: bool = False,
) -> np.ndarray:
    """sensor_msgs/Image to HxWx3 uint8 RGB, or HxW uint16 (16UC1, mm) / float32 (32FC1, m) for depth.

    backend: "auto" (cv_bridge when importable), "cv_bridge" or "numpy". The message is validated first, so a
    malformed one raises FrameError on every backend. Encodings cv_bridge does not know take the numpy path.
    copy=False may return a read-only view of the message's data (rgb8 and depth without row padding), for
    callers that resize or copy anyway: ClipBuffer.add does, saving a full-frame copy per kept frame.
    max_pixels: FrameTooLarge above width x height; colour_only: NonColourImage for depth and mono16.
    """
    if backend not in ("auto", "cv_bridge", "numpy"):
        raise ValueError(f"backend must be auto, cv_bridge or numpy, not {backend!r}")
    encoding, layout, pixels = _unpack_image(msg, max_pixels, colour_only)
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
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_IHDR = struct.Struct(">I4sII")  # chunk length, chunk type, width, height
_PNG_MAX_SIDE = 2**31 - 1  # the PNG specification's limit
# JPEG start-of-frame markers (SOF0-SOF15 except DHT C4, JPG C8 and DAC CC): their segment holds the size.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length field: TEM and RST0-RST7 (SOI and EOI are handled apart).
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})


def compressed_image_size(data: Any) -> tuple[str, int, int]:
    """("jpeg" | "png", width, height) as the data's own header declares them, without decoding anything.

    Reads the PNG IHDR chunk, or walks the JPEG segments (skipping APPn, DQT, DHT, ... by their lengths) to
    the first SOF marker. Anything else, or a truncated or inconsistent header, raises FrameError; the walk
    only moves forward, so it ends after at most len(data) steps.
    """
    view = _bytes_of(data).data  # a memoryview of the bytes, no copy: indexing gives ints
    start = bytes(view[:8])
    if start == _PNG_SIGNATURE:
        return ("png", *_png_size(view))
    if start[:2] == b"\xff\xd8":
        return ("jpeg", *_jpeg_size(view))
    start_hex = start.hex(" ") or "nothing"
    raise FrameError(
        f"compressed data is neither JPEG nor PNG (starts with {start_hex}); only those are decoded"
    )


def _png_size(view: memoryview) -> tuple[int, int]:
    end = len(_PNG_SIGNATURE) + _PNG_IHDR.size
    if len(view) < end:
        raise FrameError(f"PNG is truncated before its IHDR header ({len(view)} bytes)")
    length, chunk, width, height = _PNG_IHDR.unpack(view[len(_PNG_SIGNATURE) : end])
    if chunk != b"IHDR" or length != 13:
        raise FrameError(f"PNG does not start with a valid IHDR chunk (found {chunk!r}, length {length})")
    if not (0 < width <= _PNG_MAX_SIDE and 0 < height <= _PNG_MAX_SIDE):
        raise FrameError(f"PNG declares an invalid size {width}x{height}")
    return width, height


def _jpeg_size(view: memoryview) -> tuple[int, int]:
    size, i = len(view), 2
    while True:
        if i >= size:
            raise FrameError("JPEG is truncated before its frame header (SOF)")
        if view[i] != 0xFF:
            raise FrameError(f"JPEG has no marker where one must be (byte {i}): corrupt header")
        while i < size and view[i] == 0xFF:  # a marker may be preceded by any number of fill bytes
            i += 1
        if i >= size:
            raise FrameError("JPEG is truncated before its frame header (SOF)")
        marker = view[i]
        i += 1
        if marker in _JPEG_STANDALONE:
            continue
        if marker in (0xD8, 0xD9, 0xDA):  # SOI again, EOI or the scan data before any SOF
            raise FrameError(f"JPEG has no frame header (SOF) before marker 0xFF{marker:02X}")
        if i + 2 > size:
            raise FrameError("JPEG is truncated inside a segment header")
        length = (view[i] << 8) | view[i + 1]
        if length < 2:
            raise FrameError(f"JPEG segment 0xFF{marker:02X} has an invalid length {length}")
        if marker in _JPEG_SOF:
            if length < 8 or i + 7 > size:
                raise FrameError("JPEG frame header (SOF) is truncated")
            height = (view[i + 3] << 8) | view[i + 4]
            width = (view[i + 5] << 8) | view[i + 6]
            if width == 0 or height == 0:
                # Height 0 defers it to a DNL marker after the first scan: rare, and unknowable up front.
                raise FrameError(f"JPEG declares a size of {width}x{height} (a DNL height is not supported)")
            return width, height
        i += length


def compressed_msg_to_array(
    msg: Any, *, max_pixels: int = DEFAULT_MAX_PIXELS, colour_only: bool = False
) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg, png) to HxWx3 uint8 RGB.

    compressedDepth (image_transport's depth plugin, PNG) gives HxW uint16 for 16UC1 and float32 for 32FC1;
    colour_only refuses it (NonColourImage). The size in the data's header is checked against max_pixels
    (FrameTooLarge) before decoding; data that is not JPEG or PNG is refused whatever `format` says.
    """
    fmt = str(_field(msg, "format")).lower()
    buf = _bytes_of(_field(msg, "data"))
    if buf.size == 0:
        raise FrameError("compressed image has no data")
    if "compresseddepth" in fmt:
        if colour_only:
            raise NonColourImage(
                f"compressed depth ({fmt!r}) on a colour camera topic (depth goes to a depth_topic)",
                encoding=fmt,
            )
        return _compressed_depth(fmt, buf, max_pixels)
    if fmt and not any(name in fmt for name in ("jpeg", "jpg", "png")):
        raise FrameError(f"unsupported compressed format {fmt!r}; supported: jpeg, png, compressedDepth")
    kind, width, height = compressed_image_size(buf)
    _check_pixels(width, height, max_pixels, f"{kind} image")
    try:
        image = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error as exc:
        raise FrameError(f"cannot decode compressed image ({fmt or 'no format'}): {exc}") from None
    if image is None or image.size == 0:
        raise FrameError(f"cannot decode compressed image ({fmt or 'no format'}, {buf.size} bytes)")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def _compressed_depth(fmt: str, buf: np.ndarray, max_pixels: int) -> np.ndarray:
    header = _COMPRESSED_DEPTH_HEADER.size
    if buf.size <= header:
        raise FrameError("compressedDepth image is shorter than its header")
    quant_a, quant_b = _COMPRESSED_DEPTH_HEADER.unpack(buf[:header].tobytes())[1:]
    try:
        kind, width, height = compressed_image_size(buf[header:])
    except FrameError as exc:
        raise FrameError(f"compressedDepth data: {exc}") from None
    if kind != "png":
        raise FrameError(f"compressedDepth data is {kind}, not a PNG")
    _check_pixels(width, height, max_pixels, "compressedDepth PNG")
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


class FrameLimits(TypedDict, total=False):
    """The refusals both converters apply (their keyword arguments, which message_to_array passes on)."""

    max_pixels: int
    colour_only: bool


def message_to_array(
    msg: Any, backend: str = "auto", copy: bool = True, **limits: Unpack[FrameLimits]
) -> np.ndarray:
    """Either message type: a CompressedImage has a `format` field, an Image has `encoding`.

    copy=False: see image_msg_to_array (decoded compressed images are always new arrays). max_pixels and
    colour_only: see the module docstring; a camera topic passes colour_only=True, the depth path not.
    """
    if hasattr(msg, "format") and not hasattr(msg, "encoding"):
        return compressed_msg_to_array(msg, **limits)
    return image_msg_to_array(msg, backend=backend, copy=copy, **limits)


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
