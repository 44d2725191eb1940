"""Clip frames to MP4 bytes with PyAV: every frame intra-coded on its own, the frames split across threads.

Each frame is a keyframe that carries its own parameter sets (H.264 SPS/PPS, MPEG-4 VOL header), so any
run of frames decodes by itself. A clip is cut into one contiguous run per thread, separate encoder
contexts encode the runs at the same time (libx264 and FFmpeg's mpeg4 release the GIL while they encode),
and their packets are muxed in order into one MP4. Without motion search an intra frame costs about what an
ultrafast P frame costs here; the files are larger, which a local file or a data: URL bears.
"""

from __future__ import annotations

import io
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import cv2
import numpy as np

__all__ = ["ENCODERS", "IntraEncoder", "encoder_available", "h264_available"]


@dataclass(frozen=True)
class _Settings:
    encoder: str  # FFmpeg encoder name
    codec: str  # the codec's name in the container
    options: dict[str, str]
    quality: int = 0  # fixed quantiser (mpeg4's qscale); 0: the encoder's own rate control


ENCODERS = {
    # ultrafast: encode time is request latency (veryfast: 5x slower, half the size). zerolatency: one packet
    # out per frame in, no look-ahead. g=1: every frame an IDR with its SPS/PPS repeated in front of it.
    "h264": _Settings(
        "libx264", "h264", {"preset": "ultrafast", "tune": "zerolatency", "crf": "23", "g": "1"}
    ),
    # qscale 4: PSNR ~37 dB on the robot clip at ~20 KiB per 640x480 frame; FFmpeg's default 200 kb/s
    # rate control starves large frames.
    "mp4v": _Settings("mpeg4", "mpeg4", {"g": "1"}, quality=4),
}
_FF_QP2LAMBDA = 118  # libavutil: global_quality = qscale * FF_QP2LAMBDA
_IDLE_SIZES = 4  # frame sizes whose idle encoder contexts are kept (a camera rarely changes size)


def encoder_available(codec: str) -> bool:
    """PyAV importable and built with the codec's encoder (the pip wheels carry libx264 and mpeg4)."""
    try:
        import av

        av.codec.Codec(ENCODERS[codec].encoder, "w")
    except Exception:  # ImportError, or a PyAV build without the encoder
        return False
    return True


def h264_available() -> bool:
    return encoder_available("h264")


@dataclass
class _Context:
    codec_context: Any
    pts: Iterator[int] = field(default_factory=itertools.count)  # encoders want increasing timestamps


class IntraEncoder:
    """Encodes clips to MP4 bytes; thread-safe. Encoder contexts are opened once per frame size and reused."""

    def __init__(self, codec: str, threads: int = 0) -> None:
        if codec not in ENCODERS:
            raise ValueError(f"codec must be one of {', '.join(ENCODERS)}, got {codec!r}")
        self.codec = codec
        self.threads = threads if threads > 0 else min(4, os.cpu_count() or 1)
        self._settings = ENCODERS[codec]
        self._idle: OrderedDict[tuple[int, int], list[_Context]] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix=f"encode-{codec}")

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._lock:
            self._idle.clear()

    def encode(self, images: Sequence[np.ndarray], rate: Fraction) -> bytes:
        """RGB uint8 images of one even size (at least one) -> an MP4 at `rate` frames per second."""
        height, width = images[0].shape[:2]
        return self.mux(self.encode_frames(images), width, height, rate)

    def encode_frames(self, images: Sequence[np.ndarray]) -> list[bytes]:
        """One self-contained packet per image (RGB uint8, one even size); runs of frames on the threads."""
        if not images:
            return []
        height, width = images[0].shape[:2]
        runs = min(self.threads, len(images))
        if runs == 1:
            return self._encode_run(images, width, height)
        bounds = [len(images) * k // runs for k in range(runs + 1)]
        futures = [
            self._pool.submit(self._encode_run, images[a:b], width, height)
            for a, b in itertools.pairwise(bounds)
        ]
        return [packet for future in futures for packet in future.result()]

    # -- encoding ------------------------------------------------------------------------------------------

    def _encode_run(self, images: Sequence[np.ndarray], width: int, height: int) -> list[bytes]:
        import av

        packets: list[bytes] = []
        with self._context(width, height) as ctx:
            for image in images:
                if height % 4 == 0:
                    # OpenCV's I420 conversion into a zero-copy frame is 3x faster than swscale; PyAV splits
                    # that buffer's chroma planes by whole rows, which needs a height divisible by 4.
                    yuv = np.asarray(cv2.cvtColor(image, cv2.COLOR_RGB2YUV_I420), dtype=np.uint8)
                    frame = av.VideoFrame.from_numpy_buffer(yuv, format="yuv420p")
                else:
                    frame = av.VideoFrame.from_ndarray(image, format="rgb24")
                frame.pts = next(ctx.pts)
                out = ctx.codec_context.encode(frame)
                if len(out) != 1:  # the settings promise one packet per frame; anything else is a bug
                    raise RuntimeError(f"{self._settings.encoder} returned {len(out)} packets for one frame")
                packets.append(bytes(out[0]))
        return packets

    @contextmanager
    def _context(self, width: int, height: int) -> Iterator[_Context]:
        """An idle encoder context for this size, or a new one; a context that failed is not reused."""
        key = (width, height)
        with self._lock:
            idle = self._idle.get(key)
            ctx = idle.pop() if idle else None
        if ctx is None:
            ctx = self._open(width, height)
        yield ctx
        with self._lock:
            self._idle.setdefault(key, []).append(ctx)
            self._idle.move_to_end(key)
            while len(self._idle) > _IDLE_SIZES:
                self._idle.popitem(last=False)

    def _open(self, width: int, height: int) -> _Context:
        import av

        settings = self._settings
        cc: Any = av.CodecContext.create(settings.encoder, "w")
        cc.width, cc.height, cc.pix_fmt = width, height, "yuv420p"
        cc.time_base = Fraction(1, 1000)
        cc.thread_count = 1  # the parallelism is across runs of frames; slice threads would only add overhead
        cc.options = dict(settings.options)
        if settings.quality:
            cc.flags |= av.codec.context.Flags.qscale
            cc.global_quality = settings.quality * _FF_QP2LAMBDA
        cc.open()
        return _Context(cc)

    # -- muxing --------------------------------------------------------------------------------------------

    def mux(self, packets: Sequence[bytes], width: int, height: int, rate: Fraction) -> bytes:
        """Packets of `encode_frames` (any of them, in any order, of one size) -> a constant-rate MP4: frame i
        at i / rate seconds. The MP4 header takes the parameter sets from the first packet."""
        import av

        time_base = 1 / rate
        out = io.BytesIO()
        with av.open(out, mode="w", format="mp4") as container:
            stream: Any = container.add_mux_stream(
                self._settings.codec, rate=rate, width=width, height=height, time_base=time_base
            )
            for index, data in enumerate(packets):
                packet = av.Packet(data)
                packet.stream = stream
                packet.pts = packet.dts = index
                packet.duration = 1
                packet.time_base = time_base
                packet.is_keyframe = True
                container.mux(packet)
        return out.getvalue()
