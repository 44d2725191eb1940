"""Clips to MP4 (H.264 or MPEG-4 part 2 through PyAV, MPEG-4 part 2 through OpenCV without PyAV), frames to
JPEG/PNG, as files or data: URLs.

The video is constant-rate at the clip's true frame rate (from its stamps), so the server's fps-based frame
sampling sees the real time line: frame i sits at i / fps seconds, duration = frames / fps.
"""

from __future__ import annotations

import base64
import bisect
import errno
import math
import os
import time
import weakref
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

from cosmos_reasoner_ros.clips.clip_buffer import Clip
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.media_store import MediaRef, MediaStore
from cosmos_reasoner_ros.clips.model_frames import VisionProfile
from cosmos_reasoner_ros.clips.video_encoder import IntraEncoder, encoder_available, h264_available
from cosmos_reasoner_ros.errors import ClipError

__all__ = [
    "CODECS",
    "ClipWriter",
    "MediaRef",
    "clip_frame_rate",
    "encoder_available",
    "h264_available",
    "tile_clips",
]

CODECS = ("auto", "h264", "mp4v")
_IMAGE_FORMATS = {"jpeg": (".jpg", "image/jpeg"), "png": (".png", "image/png")}
_NOMINAL_TOLERANCE = 0.05


def clip_frame_rate(clip: Clip) -> float:
    """The clip's true frame rate: (frames - 1) / (last stamp - first stamp).

    Within 5 % of the buffer's sampling rate (grid jitter) the nominal rate is kept: a 4 fps clip says 4 fps.
    A single frame, or frames on one stamp, take the sampling rate.
    """
    count = len(clip.frames)
    span_s = (clip.frames[-1].stamp_ns - clip.frames[0].stamp_ns) / 1e9 if count else 0.0
    if count < 2 or span_s <= 0:
        return clip.fps
    measured = (count - 1) / span_s
    if abs(measured - clip.fps) <= _NOMINAL_TOLERANCE * clip.fps:
        return clip.fps
    return round(measured, 2) or 0.01


def _displayable(image: np.ndarray) -> np.ndarray:
    """RGB uint8 for encoding: depth (HxW uint16/float32) is scaled to grey, NaN and 0 black."""
    if image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8:
        return image
    if image.ndim == 2:
        values = np.nan_to_num(image.astype(np.float32), nan=0.0, posinf=0.0, neginf=0.0)
        top = float(values.max()) if values.size else 0.0
        grey = (values * (255.0 / top)).astype(np.uint8) if top > 0 else np.zeros(values.shape, np.uint8)
        return cv2.cvtColor(grey, cv2.COLOR_GRAY2RGB)
    raise ClipError(f"cannot encode an image of shape {image.shape} and type {image.dtype}")


def _even(images: list[np.ndarray]) -> list[np.ndarray]:
    """yuv420p needs even sizes: repeat the last row/column rather than cropping pixels away."""
    if not images:
        return images
    height, width = images[0].shape[:2]
    bottom, right = height % 2, width % 2
    if not (bottom or right):
        return images
    return [cv2.copyMakeBorder(img, 0, bottom, 0, right, cv2.BORDER_REPLICATE) for img in images]


def _even_size(width: int, height: int) -> tuple[int, int]:
    """The size `_even` pads to."""
    return width + width % 2, height + height % 2


def _images(frames: Sequence[Frame], width: int, height: int, stretch: bool = False) -> list[np.ndarray]:
    """The frames as RGB images of one even size (the encoders' input): letterboxed into width x height, or
    stretched to it (`stretch`: the model's own resize, whose aspect differs by its rounding only)."""
    if stretch:
        return _even([_stretch(_displayable(f.image), width, height) for f in frames])
    return _even([_letterbox(_displayable(f.image), width, height) for f in frames])


def _stretch(image: np.ndarray, width: int, height: int) -> np.ndarray:
    h, w = image.shape[:2]
    if (w, h) == (width, height):
        return image
    shrink = width * height < w * h
    return cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)


class _PacketCache:
    """Encoded frames, kept as long as the frame object lives (keyed weakly on identity, not on stamps: a
    looping bag repeats stamps with other pixels). Clips overlap, so each buffered frame is encoded once."""

    def __init__(self) -> None:
        # Single dict operations are atomic: request workers share the cache without a lock, and the weakref
        # callback (run wherever the frame is freed) cannot deadlock against one.
        self._entries: dict[int, tuple[weakref.ref[Frame], tuple[int, ...], bytes]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, frame: Frame, size: tuple[int, ...]) -> bytes | None:
        entry = self._entries.get(id(frame))
        if entry is None or entry[0]() is not frame or entry[1] != size:
            return None
        return entry[2]

    def put(self, frame: Frame, size: tuple[int, ...], packet: bytes) -> None:
        key, entries = id(frame), self._entries

        def forget(ref: weakref.ref[Frame]) -> None:
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                entries.pop(key, None)

        entries[key] = (weakref.ref(frame, forget), size, packet)


def _letterbox(image: np.ndarray, width: int, height: int) -> np.ndarray:
    h, w = image.shape[:2]
    if (w, h) == (width, height):
        return image
    scale = min(width / w, height / h)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    resized = cv2.resize(image, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    canvas = np.zeros((height, width, 3), dtype=np.uint8)
    top, left = (height - size[1]) // 2, (width - size[0]) // 2
    canvas[top : top + size[1], left : left + size[0]] = resized
    return canvas


def tile_clips(clips: Sequence[Clip]) -> Clip:
    """One grid video of several cameras.

    On the time line of the clip with the most frames, each cell shows that camera's frame nearest in time.
    Cells have the largest camera's size; smaller ones are letterboxed.
    """
    if not clips:
        raise ClipError("no clips to tile")
    if any(not c.frames for c in clips):
        raise ClipError("cannot tile a clip without frames")
    reference = max(clips, key=lambda c: len(c.frames))
    cell_w = max(c.width for c in clips)
    cell_h = max(c.height for c in clips)
    cols = math.ceil(math.sqrt(len(clips)))
    rows = math.ceil(len(clips) / cols)
    stamps = [[f.stamp_ns for f in c.frames] for c in clips]
    frames = []
    for ref in reference.frames:
        canvas = np.zeros((rows * cell_h, cols * cell_w, 3), dtype=np.uint8)
        for index, clip in enumerate(clips):
            nearest = _nearest(stamps[index], ref.stamp_ns)
            image = _letterbox(_displayable(clip.frames[nearest].image), cell_w, cell_h)
            row, col = divmod(index, cols)
            canvas[row * cell_h : (row + 1) * cell_h, col * cell_w : (col + 1) * cell_w] = image
        frames.append(Frame("+".join(c.camera for c in clips), ref.stamp_ns, canvas, ref.frame_id))
    return Clip(
        camera=frames[0].camera,
        frames=tuple(frames),
        start_ns=reference.start_ns,
        end_ns=reference.end_ns,
        fps=reference.fps,
        width=cols * cell_w,
        height=rows * cell_h,
    )


def _nearest(stamps: list[int], stamp: int) -> int:
    index = bisect.bisect_left(stamps, stamp)
    if index == 0:
        return 0
    if index == len(stamps):
        return len(stamps) - 1
    return index if stamps[index] - stamp < stamp - stamps[index - 1] else index - 1


def _encode_mp4v(images: list[np.ndarray], rate: Fraction, path: Path) -> None:
    height, width = images[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), float(rate), (width, height))
    if not writer.isOpened():
        raise ClipError(f"OpenCV cannot open an mp4v writer for {path.name}")
    try:
        for image in images:
            writer.write(cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()


def _check_video(path: Path, frames: int) -> None:
    """OpenCV's writer fails silently (a full disk leaves a truncated file): read the header back."""
    capture = cv2.VideoCapture(str(path))
    try:
        counted = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) if capture.isOpened() else 0
    finally:
        capture.release()
    if counted == frames:
        return
    if _nearly_full(path.parent):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # the store reports it as a full directory
    raise ClipError(f"the mp4v encoder wrote an unreadable video ({counted} of {frames} frames)")


def _nearly_full(directory: Path) -> bool:
    try:
        info = os.statvfs(directory)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < 16 * 1024 * 1024


class ClipWriter:
    """Writes clips and images into a MediaStore, whose retention limits each write keeps (or as data: URLs
    when inline).

    Videos go through PyAV's encoders on `encode_threads` threads (0: up to 4, one per CPU). MPEG-4 part 2
    falls back to OpenCV's writer (one thread, about twice the time) when PyAV is absent, or always with
    backend="opencv". `close` stops the encoding threads.

    With a `vision` profile (the served model's video processor), a clip is written as the model takes it:
    only the frames its processor samples, at the size it resizes them to (model_frames.py), so the server
    neither decodes frames it drops nor resizes the others. Without one, every frame at its own size.
    """

    def __init__(
        self,
        store: MediaStore,
        codec: str = "auto",
        inline: bool = False,
        image_format: str = "jpeg",
        encode_threads: int = 0,
        backend: str = "auto",
        vision: VisionProfile | None = None,
    ) -> None:
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
        if image_format not in _IMAGE_FORMATS:
            raise ValueError(f"image_format must be jpeg or png, got {image_format!r}")
        if backend not in ("auto", "pyav", "opencv"):
            raise ValueError(f"backend must be auto, pyav or opencv, got {backend!r}")
        h264 = backend != "opencv" and h264_available()
        if codec == "h264" and not h264:
            raise ClipError("codec h264 needs PyAV with libx264 (pip install av); use codec auto or mp4v")
        self.store = store
        self.codec = "h264" if codec == "h264" or (codec == "auto" and h264) else "mp4v"
        self.inline = inline
        self.image_format = image_format
        self.vision = vision
        use_pyav = backend != "opencv" and encoder_available(self.codec)
        if backend == "pyav" and not use_pyav:
            raise ClipError(f"backend pyav needs PyAV with the {self.codec} encoder (pip install av)")
        self._packets = _PacketCache()
        # None: OpenCV's mp4v writer
        self._encoder = IntraEncoder(self.codec, encode_threads) if use_pyav else None

    @property
    def backend(self) -> str:
        """Which library encodes the videos: pyav or opencv."""
        return "opencv" if self._encoder is None else "pyav"

    @property
    def cached_frames(self) -> int:
        """Encoded frames kept for reuse (those of frames still buffered or held by a clip)."""
        return len(self._packets)

    def close(self) -> None:
        if self._encoder is not None:
            self._encoder.close()

    def prepare(self, frame: Frame) -> bool:
        """Encode a buffered frame now, in the calling thread, for the clips that will contain it; False when
        this writer keeps no packets (OpenCV's writer encodes whole clips)."""
        if self._encoder is None:
            return False
        height, width = frame.image.shape[:2]
        self._packets_for(self._encoder, [frame], width, height)
        return True

    # -- video ---------------------------------------------------------------------------------------------

    def write_clip(self, clip: Clip) -> MediaRef:
        if not clip.frames:
            raise ClipError(f"clip of camera {clip.camera!r} has no frames")
        started = time.perf_counter()
        height, width = clip.frames[-1].image.shape[:2]  # the newest frame's size; others are letterboxed
        rate = Fraction(clip_frame_rate(clip)).limit_denominator(1000)
        frames: Sequence[Frame] = clip.frames
        stretch = False
        if self.vision is not None:
            native = (width, height)
            frames, rate, (width, height) = self._as_model_takes(clip, rate, width, height)
            stretch = (width, height) != native  # else the packets encoded ahead (prepare) serve as they are
        path: Path | None
        reused = 0
        if self._encoder is not None:
            try:
                packets, reused = self._packets_for(self._encoder, frames, width, height, stretch)
                data = self._encoder.mux(packets, *_even_size(width, height), rate)
            except Exception as exc:
                raise ClipError(f"{self.codec} encoding of camera {clip.camera!r} failed: {exc}") from exc
            path = None if self.inline else self.store.write_bytes(data, ".mp4")
        else:
            images = _images(frames, width, height, stretch)
            if self.inline:
                with self.store.scratch(".mp4") as scratch:
                    self._mp4v_into(images, rate, scratch)
                    data = scratch.read_bytes()
                path = None
            else:
                path = self.store.write_with(".mp4", lambda p: self._mp4v_into(images, rate, p))
                data = b""
        even_width, even_height = _even_size(width, height)
        return self._ref(
            kind="video",
            mime="video/mp4",
            data=data,
            path=path,
            started=started,
            width=even_width,
            height=even_height,
            camera=clip.camera,
            frames=len(frames),
            fps=float(rate),
            reused=reused,
        )

    def _as_model_takes(
        self, clip: Clip, rate: Fraction, width: int, height: int
    ) -> tuple[Sequence[Frame], Fraction, tuple[int, int]]:
        """The frames the model's processor keeps, the rate to write them at, and the size it keeps them at.

        Fewer frames are written at the processor's own rate, so that it keeps each (it samples a file of n
        frames at r fps down to int(n / r * fps)) and vLLM's loader does too (the request asks for the file's
        rate); where float arithmetic could lose one there, every frame is written as it came."""
        assert self.vision is not None
        vision = self.vision
        kept = vision.frame_indices(len(clip.frames), float(rate))
        frames: Sequence[Frame] = clip.frames
        if len(kept) < len(clip.frames):
            model_rate = Fraction(vision.fps).limit_denominator(1000)
            n, r = len(kept), float(model_rate)
            if int(n / r * vision.fps) == n and math.floor(n / r * r) == n:
                frames, rate = [clip.frames[i] for i in kept], model_rate
        return frames, rate, vision.frame_size(len(frames), width, height)

    def _packets_for(
        self,
        encoder: IntraEncoder,
        frames: Sequence[Frame],
        width: int,
        height: int,
        stretch: bool = False,
    ) -> tuple[list[bytes], int]:
        """One packet per frame at the (evened) width x height, and how many were reused: frames encoded
        before are taken from the cache, the others are encoded (in parallel) and kept."""
        size = (*_even_size(width, height), int(stretch))
        cached = [self._packets.get(frame, size) for frame in frames]
        missing = [index for index, packet in enumerate(cached) if packet is None]
        fresh_images = _images([frames[i] for i in missing], width, height, stretch)
        fresh = dict(zip(missing, encoder.encode_frames(fresh_images), strict=True))
        for index, packet in fresh.items():
            self._packets.put(frames[index], size, packet)
        packets = [packet if packet is not None else fresh[index] for index, packet in enumerate(cached)]
        return packets, len(frames) - len(missing)

    def _mp4v_into(self, images: list[np.ndarray], rate: Fraction, path: Path) -> None:
        _encode_mp4v(images, rate, path)
        _check_video(path, len(images))

    def write_clips(self, clips: Sequence[Clip], tiled: bool) -> list[MediaRef]:
        """One video per camera, or one grid video of all of them (frames aligned by nearest stamp)."""
        if tiled and len(clips) > 1:
            return [self.write_clip(tile_clips(clips))]
        return [self.write_clip(clip) for clip in clips]

    # -- images --------------------------------------------------------------------------------------------

    def write_image(self, frame: Frame) -> MediaRef:
        started = time.perf_counter()
        suffix, mime = _IMAGE_FORMATS[self.image_format]
        image = _displayable(frame.image)
        params = [cv2.IMWRITE_JPEG_QUALITY, 90] if suffix == ".jpg" else [cv2.IMWRITE_PNG_COMPRESSION, 3]
        ok, encoded = cv2.imencode(suffix, cv2.cvtColor(image, cv2.COLOR_RGB2BGR), params)
        if not ok:
            raise ClipError(f"cannot encode a {self.image_format} image of camera {frame.camera!r}")
        data = encoded.tobytes()
        path = None if self.inline else self.store.write_bytes(data, suffix)
        height, width = image.shape[:2]
        return self._ref(
            kind="image",
            mime=mime,
            data=data,
            path=path,
            started=started,
            width=width,
            height=height,
            camera=frame.camera,
            frames=1,
            fps=0.0,
        )

    # -- common --------------------------------------------------------------------------------------------

    def _ref(
        self,
        *,
        kind: str,
        mime: str,
        data: bytes,
        path: Path | None,
        started: float,
        width: int,
        height: int,
        camera: str,
        frames: int,
        fps: float,
        reused: int = 0,
    ) -> MediaRef:
        if path is None:
            url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
            size = len(data)
        else:
            url = path.as_uri()
            size = path.stat().st_size
        encode_s = time.perf_counter() - started
        return MediaRef(
            kind=kind,
            url=url,
            path=path,
            mime=mime,
            size_bytes=size,
            encode_s=encode_s,
            width=width,
            height=height,
            camera=camera,
            frames=frames,
            fps=fps,
            duration_s=frames / fps if fps > 0 else 0.0,
            reused_frames=reused,
        )
