"""A clip's frames for the requests about it when the server takes no video, and the decision to send a
refused request again as frames.

The frames of one clip are written once per image limit, whichever of its requests needs them first (the
others, in their own threads, wait for that write and share its files, as they share the video's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from cosmos_reasoner_ros.clips import Clip, ClipWriter, FrameImages, MediaRef, write_frame_images
from cosmos_reasoner_ros.errors import RequestRejected
from cosmos_reasoner_ros.reasoner import ChatRequest, Completion, MediaForm, media_refusal

__all__ = ["MEDIA_RETRIES", "ClipFrames", "complete_with_fallback", "media_uuids", "retry_as_frames"]

# A refused request goes again at most this often: once as frames after a video refusal, once more with
# fewer frames after an image-count refusal (Nano on Thor: {"image": 1, "video": 0}).
MEDIA_RETRIES = 2


class ClipFrames:
    """One clip's (or one window's cameras') sampled frames as images, written on first use per limit."""

    def __init__(self, writer: ClipWriter, clips: Sequence[Clip], tiled: bool = False) -> None:
        self._writer = writer
        self._clips = tuple(clips)
        self._tiled = tiled
        self._lock = threading.Lock()
        self._written: dict[int, FrameImages] = {}

    def images(self, limit: int) -> FrameImages:
        with self._lock:
            images = self._written.get(limit)
            if images is None:
                images = write_frame_images(self._writer, self._clips, limit, self._tiled)
                self._written[limit] = images
            return images


def media_uuids(clip_key: str, media: Sequence[MediaRef], frame_times_s: Sequence[float] = ()) -> list[str]:
    """vLLM media uuids, one per item (request_builder.media_part): a video or still image by its kind and
    camera; a clip's frame (`frame_times_s` given) by its camera and time: the same frame of the same clip is
    the same image (at the clip's one model size), never a video's or a still image task's."""
    if frame_times_s:
        pairs = zip(media, frame_times_s, strict=True)
        return [f"{clip_key}:frame:{ref.camera}:{offset:.6f}" for ref, offset in pairs]
    return [f"{clip_key}:{ref.kind}:{ref.camera or i}" for i, ref in enumerate(media)]


def retry_as_frames(exc: RequestRejected, form: MediaForm, images_sent: int) -> tuple[bool, str]:
    """Whether a request the server refused goes again as frames (`images_sent`: the frames it carried; 0:
    a video), and the line to log when the node learned something (once per fact, else "").

    A video refused: as frames, unless media_form is video, whose request then ends with the refusal and
    what to set. Frames refused for their number, where the server said how many it takes: as that many.
    Any other refusal is the request's error."""
    refusal = media_refusal(str(exc))
    if refusal is None:
        return False, ""
    if refusal.modality == "video":
        if images_sent:
            return False, ""
        if form.form == "video":
            raise RequestRejected(
                f"{exc} (media_form is video: the server takes no video; auto or frames sends the clip's "
                "frames as images)",
                exc.status_code,
            ) from exc
        return True, form.learn(refusal)
    if not images_sent or refusal.limit is None or not 1 <= refusal.limit < images_sent:
        return False, ""
    return True, form.learn(refusal)


def complete_with_fallback(
    send: Callable[[ChatRequest], Completion],
    request: ChatRequest,
    form: MediaForm,
    as_frames: Callable[[], ChatRequest] | None,
    images_sent: Callable[[], int],
) -> Completion:
    """`send(request)`'s answer; a request refused for its media (a video, too many frames) goes again at
    once as `as_frames()` builds it (the clip's frames at the image limit now), at most MEDIA_RETRIES times.
    `as_frames` None: the request has no clip to send as frames (an image task), its refusal is its error."""
    for retry in range(MEDIA_RETRIES + 1):
        try:
            return send(request)
        except RequestRejected as exc:
            if as_frames is None or retry == MEDIA_RETRIES:
                raise
            again, note = retry_as_frames(exc, form, images_sent())
            if not again:
                raise
            form.note(note)  # to the node's log, once per fact: MediaForm.learn says so
        request = as_frames()
    raise AssertionError("unreachable: the last attempt returns or raises")
