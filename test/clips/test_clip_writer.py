"""Clip writing: both codecs (and OpenCV's mp4v writer, the fallback without PyAV) decoded back by OpenCV and
PyAV (count, size, fps, duration, pixels), images, data: URLs, tiling, retention, and real full / read-only
file systems."""

from __future__ import annotations

import base64
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from cosmos_reasoner_ros.clips import clip_writer
from cosmos_reasoner_ros.clips.clip_buffer import Clip, ClipBuffer
from cosmos_reasoner_ros.clips.clip_writer import (
    ClipWriter,
    clip_frame_rate,
    h264_available,
    tile_clips,
)
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.media_store import MediaStore, RetentionPolicy
from cosmos_reasoner_ros.clips.pre_encoder import PreEncoder
from cosmos_reasoner_ros.errors import ClipError

NS = 1_000_000_000
HZ15 = NS // 15
CODECS = ["h264", "mp4v", "mp4v-opencv"]  # mp4v-opencv: OpenCV's writer, as on a machine without PyAV
Images = list[np.ndarray]
WriterFactory = Callable[..., ClipWriter]


@pytest.fixture
def store(tmp_path: Path) -> MediaStore:
    return MediaStore(tmp_path / "media")


@pytest.fixture
def new_writer() -> WriterFactory:
    """ClipWriter(store, codec, ...) where codec mp4v-opencv is OpenCV's writer."""

    def make(store: MediaStore, codec: str, **kwargs: object) -> ClipWriter:
        backend = "opencv" if codec.endswith("-opencv") else "pyav"
        writer = ClipWriter(store, codec=codec.removesuffix("-opencv"), backend=backend, **kwargs)  # type: ignore[arg-type]
        assert writer.backend == backend
        return writer

    return make


def make_clip(images: list[np.ndarray], stamps: list[int], camera: str = "front", fps: float = 4.0) -> Clip:
    frames = tuple(Frame(camera, s, img) for s, img in zip(stamps, images, strict=True))
    height, width = images[-1].shape[:2]
    return Clip(camera, frames, stamps[0], stamps[-1], fps, width, height)


def decode_opencv(path: Path) -> tuple[float, int, int, int, list[np.ndarray]]:
    cap = cv2.VideoCapture(str(path))
    fps, count = cap.get(cv2.CAP_PROP_FPS), int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    frames = []
    while True:
        ok, bgr = cap.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    cap.release()
    assert len(frames) == count
    return fps, count, width, height, frames


def decode_pyav(path: Path) -> tuple[float, float, str, list[np.ndarray], list[float]]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames, times = [], []
        for frame in container.decode(stream):
            frames.append(frame.to_ndarray(format="rgb24"))
            times.append(float(frame.pts * stream.time_base))
        duration = container.duration / 1e6 if container.duration else 0.0
        return float(stream.average_rate), duration, stream.codec_context.name, frames, times


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse)


@pytest.mark.parametrize("codec", CODECS)
def test_real_clip_decodes_in_opencv_and_pyav(
    codec: str, real_frames: Images, store: MediaStore, new_writer: WriterFactory
) -> None:
    if codec == "h264" and not h264_available():
        pytest.skip("needs PyAV with libx264")
    images = real_frames[:26]
    stamps = [5 * NS + i * 250_000_000 + (i % 3) * 4_000_000 for i in range(len(images))]  # 4 fps with jitter
    ref = new_writer(store, codec).write_clip(make_clip(images, stamps))
    assert ref.kind == "video" and ref.mime == "video/mp4" and ref.path is not None
    assert ref.url == ref.path.as_uri() and ref.path.parent == store.directory
    assert ref.size_bytes == ref.path.stat().st_size > 1000 and ref.encode_s > 0
    assert (ref.width, ref.height) == (644, 476) and ref.frames == 26 and ref.fps == 4.0
    assert ref.duration_s == pytest.approx(6.5) and ref.camera == "front"
    assert oct(ref.path.stat().st_mode & 0o777) == "0o600"

    fps, count, width, height, cv_frames = decode_opencv(ref.path)
    assert (fps, count, width, height) == (4.0, 26, 644, 476)
    rate, duration, codec_name, av_frames, times = decode_pyav(ref.path)
    assert rate == 4.0 and duration == pytest.approx(6.5, abs=0.01) and len(av_frames) == 26
    assert codec_name == {"h264": "h264", "mp4v": "mpeg4", "mp4v-opencv": "mpeg4"}[codec]
    assert times == pytest.approx([i / 4 for i in range(26)])
    for source, opencv_frame, pyav_frame in zip(images, cv_frames, av_frames, strict=True):
        assert psnr(source, opencv_frame) > 30.0 and psnr(source, pyav_frame) > 30.0
    print(f"{codec}: 26 frames 644x476, {ref.size_bytes} bytes, {ref.encode_s * 1000:.1f} ms")


@pytest.mark.parametrize("codec", CODECS)
def test_frame_rate_follows_the_true_stamps(
    codec: str, real_frames: Images, store: MediaStore, new_writer: WriterFactory
) -> None:
    # A 2 Hz camera in a 4 fps buffer: the video must say 2 fps, or the model's time line is twice too fast.
    stamps = [i * 500_000_000 for i in range(8)]
    clip = make_clip(real_frames[:8], stamps, fps=4.0)
    assert clip_frame_rate(clip) == 2.0
    ref = new_writer(store, codec).write_clip(clip)
    assert ref.fps == 2.0 and ref.duration_s == 4.0
    fps, count, *_ = decode_opencv(ref.path)  # type: ignore[arg-type]
    assert (fps, count) == (2.0, 8)
    rate, duration, *_ = decode_pyav(ref.path)  # type: ignore[arg-type]
    assert rate == 2.0 and duration == pytest.approx(4.0, abs=0.01)


def test_clip_frame_rate_rules() -> None:
    image = np.zeros((4, 4, 3), np.uint8)
    assert clip_frame_rate(make_clip([image], [0])) == 4.0  # one frame: the sampling rate
    assert clip_frame_rate(make_clip([image] * 2, [0, 0])) == 4.0
    jittered = [ms * 1_000_000 for ms in (0, 260, 510, 770, 1030)]
    assert clip_frame_rate(make_clip([image] * 5, jittered)) == 4.0  # 3.88 fps is within 5 % of 4
    stamps = [round(i * NS / 3.3) for i in range(10)]
    assert clip_frame_rate(make_clip([image] * 10, stamps)) == 3.3


def test_buffered_30hz_stream_writes_4fps(real_frames: Images, store: MediaStore) -> None:
    buffer = ClipBuffer("front", sample_fps=4, max_seconds=30, max_bytes=10**9, max_long_side=320)
    for i in range(30 * 8 + 1):
        stamp = 100 * NS + i * (NS // 30)
        if buffer.wants(stamp):
            buffer.add(Frame("front", stamp, real_frames[i % len(real_frames)]))
    clip = buffer.clip(8.0)
    ref = ClipWriter(store).write_clip(clip)
    fps, count, width, height, _ = decode_opencv(ref.path)  # type: ignore[arg-type]
    assert fps == 4.0 and count == len(clip.frames) in (32, 33) and max(width, height) == 320


@pytest.mark.parametrize("codec", CODECS)
def test_odd_sizes_are_padded_to_even(
    codec: str, real_frames: Images, store: MediaStore, new_writer: WriterFactory
) -> None:
    images = [img[:301, :401] for img in real_frames[:4]]
    ref = new_writer(store, codec).write_clip(make_clip(images, [i * 250_000_000 for i in range(4)]))
    assert (ref.width, ref.height) == (402, 302)
    _, count, width, height, frames = decode_opencv(ref.path)  # type: ignore[arg-type]
    assert (count, width, height) == (4, 402, 302)
    assert psnr(images[0], frames[0][:301, :401]) > 30.0


@pytest.mark.parametrize("codec", CODECS)
def test_inline_data_url(
    codec: str, real_frames: Images, store: MediaStore, tmp_path: Path, new_writer: WriterFactory
) -> None:
    ref = new_writer(store, codec, inline=True).write_clip(
        make_clip(real_frames[:6], [i * 250_000_000 for i in range(6)])
    )
    assert ref.path is None and ref.url.startswith("data:video/mp4;base64,")
    data = base64.b64decode(ref.url.split(",", 1)[1])
    assert len(data) == ref.size_bytes
    assert os.listdir(store.directory) == []  # nothing left behind
    copy = tmp_path / "inline.mp4"
    copy.write_bytes(data)
    fps, count, *_ = decode_opencv(copy)
    assert (fps, count) == (4.0, 6)


@pytest.mark.parametrize(("image_format", "mime"), [("jpeg", "image/jpeg"), ("png", "image/png")])
def test_single_images(image_format: str, mime: str, real_frames: Images, store: MediaStore) -> None:
    frame = Frame("front", 7, real_frames[3])
    ref = ClipWriter(store, image_format=image_format).write_image(frame)
    assert ref.kind == "image" and ref.mime == mime and ref.path is not None and ref.frames == 1
    decoded = cv2.cvtColor(cv2.imread(str(ref.path)), cv2.COLOR_BGR2RGB)
    assert decoded.shape == real_frames[3].shape and (ref.width, ref.height) == (644, 476)
    assert psnr(decoded, real_frames[3]) >= (99 if image_format == "png" else 32)  # png: lossless
    inline = ClipWriter(store, image_format=image_format, inline=True).write_image(frame)
    assert inline.url.startswith(f"data:{mime};base64,") and inline.path is None
    raw = np.frombuffer(base64.b64decode(inline.url.split(",", 1)[1]), np.uint8)
    assert cv2.imdecode(raw, cv2.IMREAD_COLOR).shape == real_frames[3].shape


def test_depth_frames_are_written_as_grey(store: MediaStore) -> None:
    depth = np.tile(np.arange(64, dtype=np.uint16) * 50, (48, 1))
    metres = depth.astype(np.float32) / 1000
    metres[0, 0] = np.nan
    writer = ClipWriter(store)
    ref = writer.write_image(Frame("depth", 0, depth))
    grey = cv2.imread(str(ref.path))
    assert grey.shape == (48, 64, 3) and grey[0, -1, 0] > 240 and grey[0, 0, 0] < 10
    ref = writer.write_clip(make_clip([metres, metres], [0, 250_000_000], camera="depth"))
    assert decode_opencv(ref.path)[1] == 2  # type: ignore[arg-type]


def test_per_camera_and_tiled(real_frames: Images, store: MediaStore) -> None:
    red = np.zeros((60, 80, 3), np.uint8)
    red[..., 0] = 255
    blue = np.zeros((60, 80, 3), np.uint8)
    blue[..., 2] = 255
    # Camera a: 8 frames at 4 fps, red at even indices. Camera b: 4 frames at 2 fps, offset by 20 ms.
    a = make_clip([red if i % 2 == 0 else blue for i in range(8)], [i * 250_000_000 for i in range(8)], "a")
    b_images = [cv2.resize(real_frames[i], (80, 60)) for i in range(4)]
    b = make_clip(b_images, [i * 500_000_000 + 20_000_000 for i in range(4)], "b", fps=4.0)
    writer = ClipWriter(store)
    refs = writer.write_clips([a, b], tiled=False)
    assert [r.camera for r in refs] == ["a", "b"] and [r.fps for r in refs] == [4.0, 2.0]
    (tiled,) = writer.write_clips([a, b], tiled=True)
    assert tiled.camera == "a+b" and (tiled.width, tiled.height) == (160, 60) and tiled.frames == 8
    fps, count, width, height, frames = decode_opencv(tiled.path)  # type: ignore[arg-type]
    assert (fps, count, width, height) == (4.0, 8, 160, 60)
    for i, frame in enumerate(frames):
        left = frame[10:50, 10:70].mean(axis=(0, 1))
        assert (left[0] > 200) == (i % 2 == 0) and (left[2] > 200) == (i % 2 == 1)
        nearest = b_images[min(range(4), key=lambda j: abs(j * 500 + 20 - i * 250))]
        assert psnr(frame[:, 80:], nearest) > 25.0
    assert writer.write_clips([a], tiled=True)[0].camera == "a"


def test_tile_grid_letterboxes_smaller_cameras() -> None:
    big = make_clip([np.full((100, 200, 3), 50, np.uint8)], [0], "big")
    small = make_clip([np.full((50, 50, 3), 200, np.uint8)], [0], "small")
    third = make_clip([np.full((100, 200, 3), 100, np.uint8)], [0], "third")
    tiled = tile_clips([big, small, third])
    assert (tiled.width, tiled.height) == (400, 200) and tiled.camera == "big+small+third"
    image = tiled.frames[0].image
    assert image[50, 300, 0] == 200 and image[50, 210, 0] == 0  # centred square, black bars
    assert image[150, 100, 0] == 100 and image[150, 300, 0] == 0  # empty fourth cell
    with pytest.raises(ClipError):
        tile_clips([])


def test_retention_holds_with_each_write(real_frames: Images, tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media", RetentionPolicy(max_files=3, max_bytes=0, max_age_s=0))
    writer = ClipWriter(store)
    refs = [writer.write_image(Frame("c", i, real_frames[i])) for i in range(5)]
    remaining = sorted(os.listdir(store.directory))
    assert len(remaining) == 3 and refs[-1].path is not None and refs[-1].path.name in remaining


def test_codec_choice(monkeypatch: pytest.MonkeyPatch, store: MediaStore) -> None:
    assert ClipWriter(store).codec == ("h264" if h264_available() else "mp4v")
    assert ClipWriter(store, codec="mp4v").codec == "mp4v"
    with pytest.raises(ValueError, match="codec"):
        ClipWriter(store, codec="vp9")
    with pytest.raises(ValueError, match="image_format"):
        ClipWriter(store, image_format="gif")
    with pytest.raises(ValueError, match="backend"):
        ClipWriter(store, backend="ffmpeg")
    assert (ClipWriter(store, backend="opencv").codec, ClipWriter(store, backend="opencv").backend) == (
        "mp4v",
        "opencv",
    )
    with pytest.raises(ClipError, match="PyAV"):
        ClipWriter(store, codec="h264", backend="opencv")
    monkeypatch.setattr(clip_writer, "h264_available", lambda: False)
    assert ClipWriter(store).codec == "mp4v" and ClipWriter(store).backend == "pyav"
    with pytest.raises(ClipError, match="PyAV"):
        ClipWriter(store, codec="h264")
    monkeypatch.setattr(clip_writer, "encoder_available", lambda _codec: False)  # no PyAV at all
    assert ClipWriter(store).backend == "opencv"
    with pytest.raises(ClipError, match="backend pyav"):
        ClipWriter(store, backend="pyav")
    with pytest.raises(ClipError, match="no frames"):
        ClipWriter(store).write_clip(Clip("c", (), 0, 0, 4.0, 0, 0))


_CHILD = textwrap.dedent(
    """
    import json, subprocess, sys
    import numpy as np
    from pathlib import Path
    from cosmos_reasoner_ros.clips.clip_buffer import Clip
    from cosmos_reasoner_ros.clips.clip_writer import ClipWriter
    from cosmos_reasoner_ros.errors import ClipError
    from cosmos_reasoner_ros.clips.image_conversion import Frame
    from cosmos_reasoner_ros.clips.media_store import MediaStore

    mount = Path(sys.argv[1])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mount)], check=True)
    rng = np.random.default_rng(0)
    noise = [rng.integers(0, 255, (240, 320, 3), dtype=np.uint8) for _ in range(12)]
    frames = tuple(Frame("c", i * 250_000_000, im) for i, im in enumerate(noise))
    clip = Clip("c", frames, 0, 0, 4.0, 320, 240)
    store = MediaStore(mount / "media")
    results = {}

    def attempt(name, write):
        try:
            write()
            results[name] = "written"
        except ClipError as exc:
            results[name] = str(exc)
        except Exception as exc:
            results[name] = "WRONG " + type(exc).__name__ + ": " + str(exc)

    def writer(codec, **kwargs):
        if codec == "opencv":  # OpenCV's mp4v writer, as without PyAV: it needs a file even for data: URLs
            return ClipWriter(store, codec="mp4v", backend="opencv", **kwargs)
        return ClipWriter(store, codec=codec, **kwargs)

    for codec in ("h264", "mp4v", "opencv"):
        attempt("full_" + codec, lambda: writer(codec).write_clip(clip))
        attempt("full_inline_" + codec, lambda: writer(codec, inline=True).write_clip(clip))
    attempt("full_bytes", lambda: store.write_bytes(bytes(300_000), ".png"))
    results["left_after_full"] = sorted(p.name for p in (mount / "media").iterdir())
    attempt("small_image", lambda: ClipWriter(store).write_image(Frame("c", 0, noise[0][:8, :8])))
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    attempt("ro_image", lambda: ClipWriter(store).write_image(Frame("c", 0, noise[0])))
    for codec in ("h264", "mp4v", "opencv"):
        attempt("ro_" + codec, lambda: writer(codec).write_clip(clip))
    print(json.dumps(results))
    """
)


def test_full_and_read_only_file_systems(tmp_path: Path) -> None:
    """A real 256 KiB tmpfs, filled and then remounted read-only, in a private mount namespace."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root (a private mount namespace with a tiny tmpfs)")
    probe = subprocess.run([unshare, "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not permitted here: {probe.stderr.decode().strip()}")
    mount = tmp_path / "mnt"
    mount.mkdir()
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", sys.executable, str(script), str(mount)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("full_h264", "full_mp4v", "full_opencv", "full_inline_opencv", "full_bytes"):
        assert "is full" in results[name], (name, results[name])
    for name in ("full_inline_h264", "full_inline_mp4v"):
        assert results[name] == "written"  # encoded in memory: a data: URL needs no disk
    assert results["left_after_full"] == []  # no temporaries or partial clips remain
    assert results["small_image"] == "written"
    for name in ("ro_image", "ro_h264", "ro_mp4v", "ro_opencv"):
        assert "is not writable" in results[name], (name, results[name])


@pytest.mark.parametrize("codec", ["h264", "mp4v"])
def test_overlapping_clips_encode_each_frame_once(
    codec: str, real_frames: Images, store: MediaStore, new_writer: WriterFactory
) -> None:
    """A trigger every 2 s with 4 s clips: half of each clip was encoded for the one before."""
    buffer = ClipBuffer("front", sample_fps=4, max_seconds=30, max_bytes=10**9, max_long_side=0)
    writer = new_writer(store, codec)
    refs, clips = [], []
    for i in range(24):
        buffer.add(Frame("front", 100 * NS + i * 250_000_000, real_frames[i]))
        if i in (15, 23):
            clips.append(buffer.clip(4.0))
            refs.append(writer.write_clip(clips[-1]))
    assert [r.frames for r in refs] == [16, 17] and [r.reused_frames for r in refs] == [0, 9]
    fps, count, _, _, frames = decode_opencv(refs[1].path)  # type: ignore[arg-type]
    assert (fps, count) == (4.0, 17)
    for source, frame in zip(real_frames[7:24], frames, strict=True):
        assert psnr(source, frame) > 30.0
    # Frames are recognised by identity, not by stamp: a looping bag repeats stamps with other pixels.
    looped = tuple(dataclasses.replace(f, image=real_frames[25 - k]) for k, f in enumerate(clips[1].frames))
    again = writer.write_clip(dataclasses.replace(clips[1], frames=looped))
    assert again.reused_frames == 0
    frames = decode_opencv(again.path)[4]  # type: ignore[arg-type]
    assert psnr(real_frames[25], frames[0]) > 30.0 and psnr(real_frames[7], frames[0]) < 25.0
    # A new size for the newest frame: the older frames are letterboxed into it, not reused at the old size.
    bigger = np.zeros((480, 648, 3), np.uint8)
    grown = (*clips[1].frames[-3:], Frame("front", 200 * NS, bigger))
    ref = writer.write_clip(dataclasses.replace(clips[1], frames=grown))
    assert ref.reused_frames == 0 and (ref.width, ref.height) == (648, 480)
    assert writer.cached_frames > 0
    del buffer, clips, looped, grown, frames
    gc.collect()
    assert writer.cached_frames == 0  # kept only while the frames live
    writer.close()


def test_pre_encoder_encodes_on_arrival_and_never_blocks(
    real_frames: Images, store: MediaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = ClipWriter(store, codec="h264")
    buffer = ClipBuffer("front", sample_fps=4, max_seconds=30, max_bytes=10**9, max_long_side=320)
    pre = PreEncoder(writer)
    for i in range(12):
        kept = buffer.add(Frame("front", 100 * NS + i * 250_000_000, real_frames[i]))
        assert kept is not None and kept.image.shape[1] == 320  # the buffer's own (downscaled) frame
        assert pre.submit(kept)
    pre.close()
    assert (pre.encoded, pre.skipped, pre.failed) == (12, 0, 0)
    ref = writer.write_clip(buffer.clip(2.75))
    assert ref.frames == ref.reused_frames == 12  # the clip only muxed
    _, count, width, _, frames = decode_opencv(ref.path)  # type: ignore[arg-type]
    assert (count, width) == (12, 320) and psnr(cv2.resize(real_frames[11], (320, 236)), frames[-1]) > 30.0

    # A thread that falls behind: submit still returns at once, and the frame is left to its clip.
    release = threading.Event()
    slow = PreEncoder(writer, queue_size=1)
    monkeypatch.setattr(writer, "prepare", lambda frame: release.wait(10) and False)
    results = [slow.submit(Frame("front", i, real_frames[i])) for i in range(5)]
    assert results[0] and not results[-1] and slow.skipped >= 3
    release.set()
    slow.close()
    monkeypatch.setattr(writer, "prepare", lambda frame: 1 / 0)
    failing = PreEncoder(writer)
    held = Frame("front", 0, real_frames[0])  # as the buffer holds it (the queue alone would let it go)
    failing.submit(held)
    failing.close()
    assert failing.failed == 1 and "ZeroDivisionError" in failing.last_error
    writer.close()
    assert not ClipWriter(store, backend="opencv").prepare(Frame("front", 0, real_frames[0]))


# -- nothing holds frames or packets beyond the buffer (issue 11, item 1) ------------------------------------


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_frames_the_buffer_let_go_are_freed_with_their_packets(
    real_frames: Images, store: MediaStore
) -> None:
    """The pre-encoding thread kept the last frame it encoded (and so its packet) until the next one came."""
    writer = ClipWriter(store, codec="h264")
    buffer = ClipBuffer("front", sample_fps=4, max_seconds=2, max_bytes=10**9, max_long_side=160)
    pre = PreEncoder(writer)
    frames: list[weakref.ref[Frame]] = []
    images: list[weakref.ref[np.ndarray]] = []
    for i in range(12):
        kept = buffer.add(Frame("front", 100 * NS + i * 250_000_000, real_frames[i]))
        assert kept is not None and pre.submit(kept)
        frames.append(weakref.ref(kept))
        images.append(weakref.ref(kept.image))
        del kept
    # Frames the buffer evicted before their turn are not encoded at all (expired).
    wait_until(lambda: pre.encoded + getattr(pre, "expired", 0) == 12)
    clip = buffer.clip(2.0)
    assert writer.write_clip(clip).reused_frames == len(clip.frames)  # the packets were there while needed
    del clip
    # Then pre-encoding pauses (no trigger expected) while the stream goes on: the buffer lets go of all 12.
    for i in range(12):
        buffer.add(Frame("front", 110 * NS + i * 250_000_000, real_frames[i]))
    assert buffer.stats().frames == 9
    # No gc.collect(): nothing may need more than reference counting to be freed.
    assert [i for i, ref in enumerate(frames) if ref() is not None] == []
    assert [i for i, ref in enumerate(images) if ref() is not None] == []
    assert writer.cached_frames == 0  # the new frames were not encoded; the old packets are gone
    pre.close()
    writer.close()


def test_pre_encoder_queue_is_bounded_in_frames_and_bytes_and_holds_nothing(
    real_frames: Images, store: MediaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = ClipWriter(store, codec="h264")
    started, release = threading.Event(), threading.Event()

    def blocked(frame: Frame) -> bool:
        started.set()
        release.wait(10)
        return True

    monkeypatch.setattr(writer, "prepare", blocked)
    size = real_frames[0].nbytes
    pre = PreEncoder(writer, queue_size=8, max_queue_bytes=3 * size)
    first = Frame("front", 0, real_frames[0])
    assert pre.submit(first) and started.wait(10)  # the thread holds it while encoding
    queued = [Frame("front", i, real_frames[i]) for i in range(1, 6)]
    accepted = [pre.submit(frame) for frame in queued]
    assert accepted == [True, True, False, False, False]  # 3 frames' bytes in all, the one in flight included
    assert pre.queued == (3, 3 * size) and pre.skipped == 3
    small = [Frame("front", 10 + i, real_frames[i][:8, :8]) for i in range(10)]
    assert [pre.submit(frame) for frame in small] == [False] * 10  # the byte bound is reached: small ones too
    # Frames waiting in the queue are referenced weakly: once nothing else holds them, they are freed.
    waiting = [weakref.ref(frame) for frame in queued[:2]]
    del queued, accepted
    assert [ref() for ref in waiting] == [None, None]
    release.set()
    assert pre.wait_idle(10)
    assert (pre.encoded, pre.expired, pre.queued) == (1, 2, (0, 0))
    # Frame-count bound: small frames fill queue_size, not the bytes.
    release.clear()
    started.clear()
    keep = [Frame("front", 100 + i, real_frames[i][:8, :8]) for i in range(12)]
    results = [pre.submit(frame) for frame in keep]
    assert results == [True] * 8 + [False] * 4
    release.set()
    assert pre.wait_idle(10) and pre.encoded == 9
    # One frame larger than the byte bound is still taken when nothing else is queued.
    big = Frame("front", 200, np.zeros((4 * real_frames[0].shape[0], *real_frames[0].shape[1:]), np.uint8))
    assert pre.submit(big) and pre.wait_idle(10)
    pre.close()
    assert not pre.submit(keep[0])  # closed
    with pytest.raises(ValueError, match="queue_size"):
        PreEncoder(writer, queue_size=0)
    with pytest.raises(ValueError, match="max_queue_bytes"):
        PreEncoder(writer, max_queue_bytes=0)


def test_cached_packets_never_exceed_the_buffered_frames(real_frames: Images, store: MediaStore) -> None:
    """A stream with triggers, a bag that loops and a pause: after every step, the encoded packets kept are
    those of frames still buffered (plus the clip being written), never more."""
    writer = ClipWriter(store, codec="h264")
    buffer = ClipBuffer("front", sample_fps=4, max_seconds=2, max_bytes=10**9, max_long_side=96)
    pre = PreEncoder(writer)
    worst = 0
    stamps = [100 * NS + i * HZ15 for i in range(150)]  # 10 s at 15 Hz
    stamps += [100 * NS + i * HZ15 for i in range(90)]  # the bag loops
    stamps += [200 * NS + i * HZ15 for i in range(60)]  # a pause, then more
    for step, stamp in enumerate(stamps):
        if buffer.wants(stamp):
            kept = buffer.add(Frame("front", stamp, real_frames[step % len(real_frames)]))
            if kept is not None and step < 200:  # pre-encoding stops for the last part (no trigger)
                pre.submit(kept)
            del kept
        if step % 20 == 19:
            clip = buffer.clip(1.5)
            writer.write_clip(clip)
            assert writer.cached_frames <= buffer.stats().frames + len(clip.frames)
            del clip
        assert pre.wait_idle(20)
        worst = max(worst, writer.cached_frames - buffer.stats().frames)
        assert writer.cached_frames <= buffer.stats().frames, (step, writer.cached_frames, buffer.stats())
    assert buffer.stats().resets == 1 and worst <= 0
    pre.close()
    writer.close()
