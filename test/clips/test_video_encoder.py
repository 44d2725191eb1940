"""Intra-only encoding on threads: every packet a keyframe with its own parameter sets, runs encoded by
separate contexts joined into one decodable stream, contexts reused, concurrent clips kept apart."""

from __future__ import annotations

import io
import threading
from fractions import Fraction

import av
import numpy as np
import pytest

from cosmos_reasoner_ros.clips.video_encoder import ENCODERS, IntraEncoder, encoder_available

pytestmark = pytest.mark.skipif(
    not all(encoder_available(c) for c in ENCODERS), reason="needs PyAV with the libx264 and mpeg4 encoders"
)
Images = list[np.ndarray]


def demux(data: bytes) -> tuple[str, float, list[av.Packet], list[np.ndarray]]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        name, rate = stream.codec_context.name, float(stream.average_rate or 0)
        packets = [p for p in container.demux(stream) if p.size]
    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    return name, rate, packets, frames


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse)


def nal_units(payload: bytes) -> list[bytes]:
    """MP4 stores H.264 as length-prefixed NAL units."""
    units, offset = [], 0
    while offset + 4 <= len(payload):
        size = int.from_bytes(payload[offset : offset + 4], "big")
        units.append(payload[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return units


def standalone(codec: str, payload: bytes) -> bytes:
    """The packet as a decoder without the MP4 header sees it (H.264: Annex B start codes)."""
    if codec == "h264":
        return b"".join(b"\x00\x00\x00\x01" + unit for unit in nal_units(payload))
    return payload


def carries_parameter_sets(codec: str, payload: bytes) -> bool:
    if codec == "h264":
        types = {unit[0] & 0x1F for unit in nal_units(payload)}
        return {5, 7, 8} <= types  # an IDR slice with its sequence and picture parameter sets
    return any(payload.find(bytes([0, 0, 1, code])) >= 0 for code in range(0x20, 0x30))  # a VOL header


@pytest.mark.parametrize("codec", list(ENCODERS))
def test_every_frame_is_a_keyframe_that_decodes_alone(codec: str, real_frames: Images) -> None:
    images = [img[:240, :320].copy() for img in real_frames[:7]]
    encoder = IntraEncoder(codec, threads=3)  # runs of 2, 2 and 3 frames from three contexts
    try:
        data = encoder.encode(images, Fraction(4))
    finally:
        encoder.close()
    name, rate, packets, frames = demux(data)
    assert name == ENCODERS[codec].codec and rate == 4.0 and len(packets) == len(frames) == 7
    assert [float(p.pts * p.time_base) for p in packets] == [i / 4 for i in range(7)]
    for packet, source in zip(packets, images, strict=True):
        assert packet.is_keyframe and carries_parameter_sets(codec, bytes(packet))
        decoder = av.CodecContext.create(
            name, "r"
        )  # a fresh decoder without the MP4 header or earlier frames
        alone = decoder.decode(av.Packet(standalone(codec, bytes(packet)))) + decoder.decode(None)
        assert len(alone) == 1 and psnr(source, alone[0].to_ndarray(format="rgb24")) > 30.0
    for source, frame in zip(images, frames, strict=True):
        assert psnr(source, frame) > 30.0


def test_contexts_are_reused_per_size_and_bounded(
    real_frames: Images, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoder = IntraEncoder("h264", threads=2)
    opened: list[tuple[int, int]] = []
    original = encoder._open
    monkeypatch.setattr(encoder, "_open", lambda w, h: opened.append((w, h)) or original(w, h))
    try:
        for _ in range(3):
            encoder.encode([img[:240, :320] for img in real_frames[:4]], Fraction(4))
        # Six runs of frames over three clips: at most one context per thread was ever opened (one, when a
        # run finished before the other started and handed its context on).
        assert 1 <= len(opened) <= 2 and set(opened) == {(320, 240)}
        for side in (64, 96, 128, 160, 192):
            data = encoder.encode([img[:side, :side] for img in real_frames[:2]], Fraction(2))
            assert demux(data)[3][0].shape == (side, side, 3)
        assert len(encoder._idle) == 4 and (320, 240) not in encoder._idle  # the oldest size was closed
    finally:
        encoder.close()


def test_height_not_divisible_by_four_and_odd_rates(real_frames: Images) -> None:
    images = [img[:242, :322] for img in real_frames[:5]]  # even, but 242 % 4 == 2: the rgb24 input path
    encoder = IntraEncoder("h264", threads=2)
    try:
        data = encoder.encode(images, Fraction(33, 10))
    finally:
        encoder.close()
    _, rate, packets, frames = demux(data)
    assert rate == pytest.approx(3.3) and len(frames) == 5 and frames[0].shape == (242, 322, 3)
    assert float(packets[-1].pts * packets[-1].time_base) == pytest.approx(4 / 3.3)
    assert min(psnr(a, b) for a, b in zip(images, frames, strict=True)) > 30.0


def test_concurrent_clips_do_not_mix(real_frames: Images) -> None:
    """Request workers of several cameras share one writer: each clip gets its own frames back."""
    encoder = IntraEncoder("mp4v", threads=2)
    clips = {
        "robot": [img[:240, :320] for img in real_frames[:6]],
        "black": [np.zeros((240, 320, 3), np.uint8)] * 6,
        "white": [np.full((240, 320, 3), 255, np.uint8)] * 6,
    }
    results: dict[str, bytes] = {}
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            for _ in range(3):
                results[name] = encoder.encode(clips[name], Fraction(4))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in clips]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    encoder.close()
    assert errors == []
    for name, images in clips.items():
        frames = demux(results[name])[3]
        assert len(frames) == 6 and min(psnr(a, b) for a, b in zip(images, frames, strict=True)) > 30.0


def test_unknown_codec() -> None:
    with pytest.raises(ValueError, match="h264, mp4v"):
        IntraEncoder("vp9")
    assert not encoder_available("vp9")
