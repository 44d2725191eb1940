"""Encoding buffered frames ahead of their clip, on a background thread, so that a clip at trigger time only
muxes packets (the writer's packet cache keeps what this thread encoded)."""

from __future__ import annotations

import queue
import threading
import weakref

from cosmos_reasoner_ros.clips.clip_writer import ClipWriter
from cosmos_reasoner_ros.clips.image_conversion import Frame

__all__ = ["PreEncoder"]


class PreEncoder:
    """Encodes buffered frames on a background thread as they arrive, so that a clip at trigger time only
    muxes packets. `submit` never blocks: when the thread falls behind, the frame is left to its clip.

    Memory: the queue holds weak references only, so a frame the buffer lets go before its turn is freed at
    once and skipped (`expired`), and no frame outlives its turn in the thread. The queue is bounded in
    frames (queue_size) and in the bytes of the frames it refers to (max_queue_bytes; one frame larger than
    that is still taken when the queue is empty), which bounds the encoding work behind.
    """

    def __init__(self, writer: ClipWriter, queue_size: int = 16, max_queue_bytes: int = 64 * 1024**2) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        if max_queue_bytes < 1:
            raise ValueError(f"max_queue_bytes must be >= 1, got {max_queue_bytes}")
        self.writer = writer
        self.queue_size = queue_size
        self.max_queue_bytes = max_queue_bytes
        self.encoded = 0
        self.skipped = 0  # queue full: encoded with its clip instead
        self.expired = 0  # let go by the buffer (and everything else) before its turn: nothing to encode
        self.failed = 0
        self.last_error = ""
        self._queue: queue.SimpleQueue[tuple[weakref.ref[Frame], int] | None] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._queued_frames = 0  # submitted and not finished (the one being encoded included)
        self._queued_bytes = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="pre-encode", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> tuple[int, int]:
        """(frames, bytes) submitted and not finished yet."""
        with self._lock:
            return self._queued_frames, self._queued_bytes

    def submit(self, frame: Frame) -> bool:
        nbytes = int(frame.image.nbytes)
        with self._lock:
            full = self._queued_frames >= self.queue_size or (
                self._queued_frames > 0 and self._queued_bytes + nbytes > self.max_queue_bytes
            )
            if full or self._closed:
                self.skipped += 1
                return False
            self._queued_frames += 1
            self._queued_bytes += nbytes
            self._queue.put((weakref.ref(frame), nbytes))
        return True

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every submitted frame is encoded (or expired); False at the timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._queued_frames == 0, timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop after the frames already queued; idempotent."""
        with self._lock:
            self._closed = True
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            ref, nbytes = item
            del item
            self._encode(ref)
            with self._lock:
                self._queued_frames -= 1
                self._queued_bytes -= nbytes
                self._lock.notify_all()

    def _encode(self, ref: weakref.ref[Frame]) -> None:
        # The only strong reference this thread takes lives in this call's frame: it is gone on return, so the
        # thread never keeps a frame (and through the packet cache, its packet) after the buffer let it go.
        frame = ref()
        if frame is None:
            self.expired += 1
            return
        try:
            self.writer.prepare(frame)
            self.encoded += 1
        except Exception as exc:  # the clip encodes the frame again and reports a real failure
            self.failed += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
