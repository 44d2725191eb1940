"""The clip buffer: decimation before decoding, bounds, clip timing, disordered stamps, threads, windows."""

from __future__ import annotations

import dataclasses
import itertools
import re
import threading

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.clips.clip_buffer import BufferStats, Clip, ClipBuffer, fit_long_side
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.multi_camera import MultiCameraBuffer
from cosmos_reasoner_ros.errors import NoFramesError

NS = 1_000_000_000
HZ30 = NS // 30  # 33_333_333 ns


def small(value: int = 0) -> np.ndarray:
    return np.full((4, 6, 3), value % 256, dtype=np.uint8)


def feed(buffer: ClipBuffer, stamps: list[int], image: np.ndarray | None = None) -> list[int]:
    """The node's ingest path: wants() first, decode only when wanted, then add(). Returns the kept stamps."""
    kept = []
    for stamp in stamps:
        if buffer.wants(stamp) and buffer.add(Frame("cam", stamp, small(stamp) if image is None else image)):
            kept.append(stamp)
    return kept


def test_30hz_sampled_at_4fps_keeps_4_per_second() -> None:
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=60, max_bytes=10**9, max_long_side=0)
    start = 1_700_000_000 * NS
    stamps = [start + i * HZ30 for i in range(30 * 20)]  # 20 s
    kept = feed(buffer, stamps)
    assert len(kept) in (80, 81)
    gaps = np.diff(kept)
    # Each kept frame is within one input interval of the 250 ms grid: no drift, no missing sample.
    assert gaps.min() >= 250_000_000 - HZ30 and gaps.max() <= 250_000_000 + HZ30
    stats = buffer.stats()
    assert stats.received == 600 and stats.decimated == 600 - len(kept) and stats.added == len(kept)
    assert stats.dropped == 0


@pytest.mark.parametrize("rate_hz", [4.0, 2.0, 3.3])
def test_input_at_or_below_the_sampling_rate_keeps_every_frame_despite_jitter(rate_hz: float) -> None:
    rng = np.random.default_rng(1)
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=60, max_bytes=10**9, max_long_side=0)
    stamps = [int(i * NS / rate_hz + rng.integers(-30_000_000, 30_000_000)) + 10 * NS for i in range(200)]
    assert feed(buffer, stamps) == stamps


def test_gap_restarts_the_grid() -> None:
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=600, max_bytes=10**9, max_long_side=0)
    stamps = [i * HZ30 for i in range(90)] + [100 * NS + i * HZ30 for i in range(90)]
    kept = feed(buffer, stamps)
    after = [s for s in kept if s >= 100 * NS]
    assert after[0] == 100 * NS
    assert len(after) in (12, 13)
    assert np.diff(after).min() >= 250_000_000 - HZ30


def test_duplicates_and_out_of_order_are_dropped_without_corruption() -> None:
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=60, max_bytes=10**9, max_long_side=0)
    assert buffer.add(Frame("cam", 10 * NS, small(1)))
    assert not buffer.wants(10 * NS)  # duplicate stamp
    assert not buffer.add(Frame("cam", 10 * NS, small(2)))
    assert not buffer.add(Frame("cam", 10 * NS - 300_000_000, small(3)))  # late, within the jump tolerance
    assert buffer.add(Frame("cam", 10 * NS + 250_000_000, small(4)))
    clip = buffer.clip(5)
    assert [f.stamp_ns for f in clip.frames] == [10 * NS, 10 * NS + 250_000_000]
    assert [int(f.image[0, 0, 0]) for f in clip.frames] == [1, 4]
    stats = buffer.stats()
    assert stats.dropped == 2 and stats.resets == 0 and stats.decimated == 1


def test_looping_bag_clears_the_buffer() -> None:
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=60, max_bytes=10**9, max_long_side=0)
    loop = [50 * NS + i * HZ30 for i in range(300)]  # 10 s of a bag recorded at t=50 s
    feed(buffer, loop)
    first_pass = buffer.clip(60)
    assert first_pass.end_ns >= loop[-1] - 250_000_000
    feed(buffer, loop[:60])  # the bag starts again
    stats = buffer.stats()
    assert stats.resets == 1
    clip = buffer.clip(60)
    stamps = [f.stamp_ns for f in clip.frames]
    assert stamps == sorted(stamps) and stamps[0] == loop[0] and stamps[-1] <= loop[59]
    assert len(stamps) in (8, 9)


def test_small_backward_step_is_not_a_reset() -> None:
    buffer = ClipBuffer(
        "cam", sample_fps=4, max_seconds=60, max_bytes=10**9, max_long_side=0, jump_back_s=1.0
    )
    feed(buffer, [i * HZ30 for i in range(60)])
    before = buffer.stats().frames
    assert not buffer.wants(59 * HZ30 - 500_000_000)
    assert buffer.stats().resets == 0 and buffer.stats().frames == before


def test_duration_bound_over_a_long_stream() -> None:
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=10, max_bytes=10**9, max_long_side=0)
    feed(buffer, [i * HZ30 for i in range(30 * 120)])  # 2 minutes
    stats = buffer.stats()
    assert stats.fill_seconds <= 10.0
    assert 39 <= stats.frames <= 41
    clip = buffer.clip(1000)
    assert clip.duration_s <= 10.0


def test_byte_bound_keeps_the_newest_frames() -> None:
    image = np.zeros((100, 100, 3), dtype=np.uint8)
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=600, max_bytes=5 * image.nbytes, max_long_side=0)
    stamps = [i * 250_000_000 for i in range(50)]
    feed(buffer, stamps, image)
    stats = buffer.stats()
    assert stats.frames == 5 and stats.fill_bytes == 5 * image.nbytes <= stats.max_bytes
    assert [f.stamp_ns for f in buffer.clip(600).frames] == stamps[-5:]
    huge = np.zeros((300, 300, 3), dtype=np.uint8)  # alone larger than the bound
    assert not buffer.add(Frame("cam", 100 * NS, huge))
    assert buffer.stats().dropped == 1 and buffer.stats().frames == 5


def test_resize_to_long_side(real_frames: list[np.ndarray]) -> None:
    big = cv2.resize(real_frames[0], (1920, 1080))
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=10, max_bytes=10**9, max_long_side=640)
    assert buffer.add(Frame("cam", NS, big, frame_id="optical"))
    frame = buffer.latest()
    assert frame.image.shape == (360, 640, 3) and frame.frame_id == "optical"
    # Halving by area then linear: close to a direct INTER_AREA, at a fraction of its cost.
    expected = cv2.resize(big, (640, 360), interpolation=cv2.INTER_AREA)
    assert np.mean(np.abs(frame.image.astype(float) - expected)) < 2.0
    assert buffer.stats().fill_bytes == 640 * 360 * 3
    # The camera's own size travels with the frame and the clip: answers are reported in its pixels.
    assert frame.source_size == (1920, 1080)
    clip = buffer.clip(1.0, end_ns=NS)
    assert (clip.width, clip.height, clip.source_size) == (640, 360, (1920, 1080))
    # Smaller images are kept as they are.
    assert fit_long_side(real_frames[0], 1000) is real_frames[0]


def test_resize_keeps_even_sizes_and_depth_values() -> None:
    odd = np.zeros((333, 1001, 3), dtype=np.uint8)
    assert fit_long_side(odd, 500).shape[:2] == (166, 500)
    depth = np.array([[500, 0], [0, 4000]], dtype=np.uint16).repeat(200, axis=0).repeat(200, axis=1)
    small_depth = fit_long_side(depth, 100)
    assert small_depth.dtype == np.uint16 and small_depth.shape == (100, 100)
    assert set(np.unique(small_depth)) <= {0, 500, 4000}  # no averaged depth across edges


def test_clip_window_with_true_stamps(real_frames: list[np.ndarray]) -> None:
    buffer = ClipBuffer("front", sample_fps=4, max_seconds=30, max_bytes=10**9, max_long_side=0)
    base = 1_000 * NS
    jitter = [0, 3, -7, 11, 0, -2, 5, 9, -4, 1, 0, 6, -8, 2, 4, 0, -1, 3, 7, -5]
    stamps = [base + i * 250_000_000 + j * 1_000_000 for i, j in enumerate(jitter)]
    for stamp, image in zip(stamps, real_frames, strict=False):
        assert buffer.wants(stamp)
        assert buffer.add(Frame("front", stamp, image))
    clip = buffer.clip(2.0)
    expected = [s for s in stamps if stamps[-1] - 2 * NS <= s <= stamps[-1]]
    assert [f.stamp_ns for f in clip.frames] == expected
    assert (clip.start_ns, clip.end_ns) == (expected[0], expected[-1])
    assert clip.fps == 4.0 and (clip.width, clip.height) == (real_frames[0].shape[1], real_frames[0].shape[0])
    np.testing.assert_array_equal(clip.frames[-1].image, real_frames[len(stamps) - 1])
    # An explicit end in the past, and the inclusive bounds.
    end = stamps[10]
    clip = buffer.clip(1.0, end_ns=end)
    assert [f.stamp_ns for f in clip.frames] == [s for s in stamps if end - NS <= s <= end]
    assert buffer.clip(0, end_ns=stamps[5]).frames[0].stamp_ns == stamps[5]
    assert buffer.latest(end_ns=stamps[5] + 1).stamp_ns == stamps[5]
    with pytest.raises(NoFramesError, match="no frames in"):
        buffer.clip(1.0, end_ns=base - 2 * NS)
    with pytest.raises(NoFramesError, match="no frame at or before"):
        buffer.latest(end_ns=base - 1)


def test_empty_buffer_raises_no_frames() -> None:
    buffer = ClipBuffer("rear", sample_fps=4, max_seconds=10, max_bytes=10**6, max_long_side=0)
    with pytest.raises(NoFramesError, match="'rear': no frames buffered yet"):
        buffer.clip(4)
    with pytest.raises(NoFramesError):
        buffer.latest()
    assert buffer.stats().latest_stamp_ns is None


def test_resolution_change_inside_a_window_gives_one_size() -> None:
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=10, max_bytes=10**9, max_long_side=0)
    buffer.add(Frame("cam", 0, np.zeros((40, 60, 3), np.uint8)))
    buffer.add(Frame("cam", 250_000_000, np.zeros((80, 120, 3), np.uint8)))
    clip = buffer.clip(10)
    assert {f.image.shape for f in clip.frames} == {(80, 120, 3)} and (clip.width, clip.height) == (120, 80)


def test_invalid_configuration() -> None:
    for kwargs in ({"sample_fps": 0}, {"max_seconds": 0}, {"max_bytes": 0}, {"sample_fps": float("nan")}):
        args = {"sample_fps": 4.0, "max_seconds": 10.0, "max_bytes": 100, "max_long_side": 0} | kwargs
        with pytest.raises(ValueError, match="must be > 0"):
            ClipBuffer("cam", **args)  # type: ignore[arg-type]


def test_stats_are_a_frozen_snapshot() -> None:
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=10, max_bytes=10**6, max_long_side=0)
    stats = buffer.stats()
    assert isinstance(stats, BufferStats)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.frames = 3  # type: ignore[misc]
    buffer.add(Frame("cam", 5, small()))
    assert stats.frames == 0 and buffer.stats().frames == 1


def test_concurrent_ingest_and_clips_stay_consistent() -> None:
    buffer = ClipBuffer("cam", sample_fps=10, max_seconds=2, max_bytes=40 * 12 * 16 * 3, max_long_side=0)
    image = np.zeros((12, 16, 3), dtype=np.uint8)
    stop = threading.Event()
    errors: list[BaseException] = []
    clips: list[Clip] = []

    def ingest(offset: int) -> None:
        try:
            for i in range(3000):
                stamp = i * 10_000_000 + offset
                if buffer.wants(stamp):
                    buffer.add(Frame("cam", stamp, image))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    def request() -> None:
        while not stop.is_set():
            try:
                clips.append(buffer.clip(1.0))
            except NoFramesError:
                pass
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=ingest, args=(o,)) for o in (0, 1, 2)]
    readers = [threading.Thread(target=request) for _ in range(2)]
    for t in readers + threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert not errors
    assert clips
    for clip in clips:
        stamps = [f.stamp_ns for f in clip.frames]
        assert stamps == sorted(set(stamps))
        assert stamps[-1] - stamps[0] <= NS
    stats = buffer.stats()
    assert stats.fill_bytes <= stats.max_bytes and stats.fill_seconds <= 2.0
    assert stats.received == 9000 and stats.added + stats.dropped + stats.decimated == 9000


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(st.integers(-3 * NS, NS), min_size=1, max_size=120),
    sample_fps=st.sampled_from([1.0, 4.0, 10.0]),
    max_frames=st.integers(1, 20),
)
def test_invariants_under_arbitrary_stamps(steps: list[int], sample_fps: float, max_frames: int) -> None:
    image = small()
    buffer = ClipBuffer(
        "cam", sample_fps, max_seconds=5, max_bytes=max_frames * image.nbytes, max_long_side=0
    )
    stamp = 100 * NS
    for step in steps:
        stamp += step
        if buffer.wants(stamp):
            buffer.add(Frame("cam", stamp, image))
        stats = buffer.stats()
        assert stats.fill_bytes <= stats.max_bytes and stats.frames <= max_frames
        assert stats.fill_seconds <= 5.0
        if stats.frames:
            clip = buffer.clip(10)
            stamps = [f.stamp_ns for f in clip.frames]
            assert stamps == sorted(stamps)
            assert min(np.diff(stamps), default=NS) >= NS / sample_fps / 2
            assert len(clip.frames) == stats.frames


# -- several cameras -----------------------------------------------------------------------------------------


def test_window_ends_at_the_newest_common_stamp(real_frames: list[np.ndarray]) -> None:
    multi = MultiCameraBuffer.create(
        ["front", "wrist"], sample_fps=4, max_seconds=30, max_bytes_per_camera=10**9, max_long_side=320
    )
    assert multi.cameras == ("front", "wrist")
    for i in range(20):
        stamp = i * 250_000_000
        multi["front"].add(Frame("front", stamp, real_frames[i]))
        if i < 16:  # the wrist camera lags one second behind
            multi["wrist"].add(Frame("wrist", stamp + 10_000_000, real_frames[i]))
    front, wrist = multi.window(2.0)
    # The window ends at the wrist camera's newest stamp (3.76 s) and starts 2 s before it.
    assert (front.start_ns, front.end_ns) == (8 * 250_000_000, 15 * 250_000_000)
    assert (wrist.start_ns, wrist.end_ns) == (7 * 250_000_000 + 10_000_000, 15 * 250_000_000 + 10_000_000)
    assert max(front.width, front.height) == 320 == max(wrist.width, wrist.height)
    (only,) = multi.window(1.0, cameras=["front"])
    assert only.end_ns == 19 * 250_000_000
    clips = multi.window(1.0, end_ns=2 * NS)
    assert [c.end_ns for c in clips] == [2 * NS, 2 * NS - 240_000_000]
    stats = multi.stats()
    assert stats["front"].frames == 20 and stats["wrist"].frames == 16


def test_window_errors_name_the_camera() -> None:
    multi = MultiCameraBuffer.create(["a", "b"], 4, 10, 10**6, 0)
    multi["a"].add(Frame("a", NS, small()))
    with pytest.raises(NoFramesError, match="camera"):
        multi.window(2.0)
    with pytest.raises(NoFramesError, match="no camera named 'c'"):
        multi.window(2.0, cameras=["a", "c"])
    with pytest.raises(ValueError, match="twice"):
        MultiCameraBuffer([ClipBuffer("a", 4, 10, 100, 0), ClipBuffer("a", 4, 10, 100, 0)])


# -- wild stamps (issue 11, item 9) --------------------------------------------------------------------------

YEAR = 365 * 24 * 3600 * NS


def stream(start: int, seconds: float, period: int = HZ30) -> list[int]:
    return [start + i * period for i in range(round(seconds * NS / period))]


def kept_stamps(buffer: ClipBuffer) -> list[int]:
    return [f.stamp_ns for f in buffer.clip(10**6).frames]


def reference(stamps: list[int]) -> list[int]:
    """What a buffer keeps of the same stream without the wild stamps."""
    clean = ClipBuffer("cam", sample_fps=4, max_seconds=10, max_bytes=10**9, max_long_side=0)
    feed(clean, stamps)
    return kept_stamps(clean)


def survivors(kept: list[int], wild: list[int], newest: list[int]) -> list[int]:
    """`kept` without what a wild frame less than max_seconds (10 s) ahead pushed out of the window."""
    cutoff = max((w - 10 * NS for w, n in zip(wild, newest, strict=True) if 0 < w - n <= 10 * NS), default=0)
    return [s for s in kept if s >= cutoff]


@pytest.mark.parametrize("offset", [YEAR, -YEAR, 30 * NS, 5 * NS, -5 * NS, -2 * NS])
def test_a_lone_wild_stamp_is_dropped_and_the_buffer_kept(offset: int) -> None:
    """One frame stamped a year ahead evicted the whole buffer: every later frame looked like a jump back."""
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=10, max_bytes=10**9, max_long_side=0)
    before, after = stream(1_000 * NS, 12), stream(1_012 * NS, 3)
    feed(buffer, before)
    newest = buffer.latest().stamp_ns
    wild = before[-1] + HZ30 // 2 + offset
    feed(buffer, [wild, *after])
    stats = buffer.stats()
    assert wild not in kept_stamps(buffer)
    # As if the wild frame had never come; one less than max_seconds ahead cut the window once, though.
    expected = survivors(reference(before + after), [wild], [newest])
    assert kept_stamps(buffer) == expected and len(expected) >= 20
    assert (stats.resets, stats.outliers) == (0, 1)
    assert stats.fill_seconds <= 10.0 and buffer.clip(10).duration_s > (4.5 if offset == 5 * NS else 9.5)
    assert stats.received == stats.added + stats.dropped + stats.decimated


def test_wild_stamps_in_a_row_that_do_not_agree_are_outliers() -> None:
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=10, max_bytes=10**9, max_long_side=0)
    before, after = stream(1_000 * NS, 12), stream(1_012 * NS, 3)
    wild = [before[-1] - 3600 * NS, before[-1] - 7200 * NS, before[-1] - 60 * NS, 0]
    feed(buffer, [*before, *wild, *after])
    assert (buffer.stats().resets, buffer.stats().outliers) == (0, 4)
    assert kept_stamps(buffer) == reference(before + after)


def test_a_restarted_driver_clock_clears_once_and_keeps_the_new_timeline_from_its_start() -> None:
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=10, max_bytes=10**9, max_long_side=0)
    old, new = stream(1_700_000_000 * NS, 8), stream(2 * NS, 4)  # the driver restarts its clock at 2 s
    feed(buffer, old + new)
    stats = buffer.stats()
    assert (stats.resets, stats.outliers) == (1, 0)
    assert kept_stamps(buffer) == reference(new) and kept_stamps(buffer)[0] == new[0]
    assert stats.received == stats.added + stats.dropped + stats.decimated


def test_a_camera_resuming_after_a_long_pause_starts_a_new_window() -> None:
    """A jump ahead beyond max_seconds is real when the frames after it continue from it."""
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=10, max_bytes=10**9, max_long_side=0)
    old, resumed = stream(1_000 * NS, 8), stream(1_100 * NS, 2)
    feed(buffer, old + resumed[:1])
    assert buffer.stats().frames == len(reference(old)) + 1  # held until the next frame confirms the jump
    assert buffer.clip(5).frames[-1].stamp_ns == resumed[0]  # the newest frame is visible at once
    feed(buffer, resumed[1:])
    stats = buffer.stats()
    assert (stats.resets, stats.outliers) == (0, 0)
    assert kept_stamps(buffer) == reference(resumed) and stats.fill_seconds <= 10.0


def test_sparse_camera_is_buffered() -> None:
    """A camera publishing every 30 s into a 10 s buffer: every frame jumps ahead, each one is kept."""
    buffer = ClipBuffer("cam", sample_fps=4, max_seconds=10, max_bytes=10**9, max_long_side=0)
    stamps = [1_000 * NS + i * 30 * NS for i in range(5)]
    assert feed(buffer, stamps) == stamps
    assert buffer.latest().stamp_ns == stamps[-1] and buffer.stats().outliers == 0
    assert buffer.stats().frames <= 2  # the newest, and the one before it until a frame confirms the jump


@settings(max_examples=150, deadline=None)
@given(
    wild=st.lists(
        st.tuples(
            st.integers(0, 295), st.sampled_from([YEAR, -YEAR, 3600 * NS, -3600 * NS, 4 * NS, -3 * NS])
        ),
        max_size=4,
        unique_by=lambda w: w[0],
    ),
    sample_fps=st.sampled_from([2.0, 4.0, 10.0]),
)
def test_isolated_wild_stamps_never_change_what_is_kept(
    wild: list[tuple[int, int]], sample_fps: float
) -> None:
    """Wild stamps at least jump_confirm frames apart (and before the stream's last jump_confirm frames, which
    decide about them), in any direction: dropped, counted, nothing else."""
    wild = sorted(wild)
    if any(b - a < 4 for (a, _), (b, _) in itertools.pairwise(wild)):
        return  # wild stamps in a row can look like a new timeline: the cases above cover those
    regular = stream(1_000 * NS, 10)
    stamps = list(regular)
    for index, offset in reversed(wild):
        stamps.insert(index + 1, regular[index] + HZ30 // 2 + offset)
    buffer = ClipBuffer("cam", sample_fps, max_seconds=10, max_bytes=10**9, max_long_side=0)
    clean = ClipBuffer("cam", sample_fps, max_seconds=10, max_bytes=10**9, max_long_side=0)
    wild_stamps, newest = [], []
    for stamp in stamps:
        if stamp not in regular:
            wild_stamps.append(stamp)
            newest.append(clean.latest().stamp_ns)
        else:
            feed(clean, [stamp])
        feed(buffer, [stamp])
    stats = buffer.stats()
    assert (stats.resets, stats.outliers) == (0, len(wild))
    assert kept_stamps(buffer) == survivors(kept_stamps(clean), wild_stamps, newest)
    assert stats.received == stats.added + stats.dropped + stats.decimated


def test_jump_confirm_is_validated() -> None:
    with pytest.raises(ValueError, match="jump_confirm"):
        ClipBuffer("cam", 4, 10, 100, 0, jump_confirm=0)
    # jump_confirm=1: every jump back clears at once (the behaviour before outliers were recognised).
    buffer = ClipBuffer("cam", 4, 10, 10**9, 0, jump_confirm=1)
    feed(buffer, [*stream(1_000 * NS, 3), 500 * NS])
    assert buffer.stats().resets == 1 and kept_stamps(buffer) == [500 * NS]


# -- one stale camera (issue 11, item 5) ---------------------------------------------------------------------


def two_cameras(wrist_stops_after: int, max_seconds: float = 5) -> MultiCameraBuffer:
    """front and wrist at 4 fps for 10 s; wrist stops publishing after `wrist_stops_after` frames."""
    multi = MultiCameraBuffer.create(["front", "wrist"], 4, max_seconds, 10**9, 0)
    for i in range(40):
        stamp = 100 * NS + i * 250_000_000
        multi["front"].add(Frame("front", stamp, small(i)))
        if i < wrist_stops_after:
            multi["wrist"].add(Frame("wrist", stamp + 20_000_000, small(i)))
    return multi


def test_a_stale_camera_is_left_out_and_named_instead_of_failing_the_window() -> None:
    """With one camera stopped, every request failed with "camera 'front': no frames in [...]"."""
    multi = two_cameras(wrist_stops_after=8)  # wrist stopped 8 s ago
    with pytest.raises(NoFramesError, match="camera 'front': no frames in"):
        multi.window(4.0)  # the old window, pinned to the stalest camera (kept for its callers)
    window = multi.fresh_window(4.0)
    assert window.cameras == ("front",) and window.end_ns == 100 * NS + 39 * 250_000_000
    (front,) = window.clips
    assert (front.start_ns, front.end_ns) == (100 * NS + 23 * 250_000_000, window.end_ns)
    assert list(window.stale) == ["wrist"]
    assert re.fullmatch(
        r"newest frame 7\.98 s older than the window's end \(stale after 1 s\)", window.stale["wrist"]
    )
    with pytest.raises(TypeError):
        window.stale["front"] = "x"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        window.end_ns = 0  # type: ignore[misc]
    # An end in the past, when both cameras published: both clips (the front buffer holds only 5 s).
    past = two_cameras(wrist_stops_after=8, max_seconds=30).fresh_window(1.0, end_ns=101 * NS)
    assert past.cameras == ("front", "wrist") and not past.stale and past.end_ns == 101 * NS


def test_fresh_cameras_share_the_window_and_lag_is_tolerated_up_to_the_limit() -> None:
    multi = two_cameras(wrist_stops_after=37)  # wrist's newest frame is 0.73 s behind front's
    window = multi.fresh_window(2.0)
    assert window.cameras == ("front", "wrist") and not window.stale
    front, wrist = window.clips
    assert front.end_ns == window.end_ns and wrist.end_ns == window.end_ns - 730_000_000
    assert wrist.start_ns >= window.end_ns - 2 * NS
    assert multi.fresh_window(2.0, stale_after_s=0.5).cameras == ("front",)
    # Two sampling periods at least: a 0.5 fps buffer tolerates 4 s.
    slow = MultiCameraBuffer.create(["a", "b"], 0.5, 60, 10**9, 0)
    slow["a"].add(Frame("a", 10 * NS, small()))
    slow["b"].add(Frame("b", 13 * NS, small()))
    assert slow.fresh_window(10.0).cameras == ("a", "b")
    slow["b"].add(Frame("b", 15 * NS, small()))
    assert slow.fresh_window(10.0).cameras == ("b",)


def test_fresh_window_fails_only_when_no_camera_has_frames() -> None:
    multi = MultiCameraBuffer.create(["a", "b", "c"], 4, 10, 10**6, 0)
    with pytest.raises(NoFramesError, match="no frames buffered yet from camera"):
        multi.fresh_window(2.0)
    multi["b"].add(Frame("b", 5 * NS, small()))
    window = multi.fresh_window(2.0)
    assert window.cameras == ("b",) and dict(window.stale) == {
        "a": "no frames buffered yet",
        "c": "no frames buffered yet",
    }
    assert multi.fresh_window(2.0, cameras=["b"]).cameras == ("b",)
    with pytest.raises(
        NoFramesError, match=r"no camera has frames in the window .*camera 'b': .*no frame at or before"
    ):
        multi.fresh_window(2.0, end_ns=NS)
    with pytest.raises(NoFramesError, match="no camera named 'z'"):
        multi.fresh_window(2.0, cameras=["b", "z"])
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="stale_after_s"):
            multi.fresh_window(2.0, stale_after_s=bad)
