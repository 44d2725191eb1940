"""How a clip goes to the server: as a video, or as its sampled frames (images) for a server that takes no
video, such as vLLM started with `--limit-mm-per-prompt '{"image": 8, "video": 0}'` (NVIDIA's recipe for Nano
on Jetson Thor), which refuses every request with a video with HTTP 400.

`MediaForm` is what the node knows: the `media_form` parameter (auto, video, frames), whether the server has
refused a video (auto then sends frames from that request on, for the node's lifetime or until the server
returns from an outage: `forget`), and how many images one prompt may carry (`max_image_frames`, lowered to
what the server's own refusal says). `media_refusal` reads vLLM's refusal from the server's message.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from cosmos_reasoner_ros.parameters.node import NODE_PARAMETERS
from cosmos_reasoner_ros.parameters.node_clips import MEDIA_FORMS

__all__ = ["MEDIA_FORMS", "MediaForm", "MediaRefusal", "media_refusal"]

_log = logging.getLogger(__name__)

# vLLM (0.19-0.34, multimodal/processing): "At most 0 video(s) may be provided in one prompt." and, when the
# model could take more, " Set `--limit-mm-per-prompt` to increase this limit."; earlier releases said
# "... in one request".
_AT_MOST = re.compile(r"\bat\s+most\s+(\d+)\s+(video|image)s?\b", re.IGNORECASE)
# Other wordings of the same refusal: the flag named beside the modality (vLLM < 0.10: "You set or defaulted
# to '{"video": 0}' in `--limit-mm-per-prompt`, but passed 1 video items"), or a server or model that does not
# take video at all.
_LIMIT_FLAG = re.compile(r"limit[-_ ]mm[-_ ]per[-_ ]prompt", re.IGNORECASE)
# Only the modality itself refused: "Cannot load video: unsupported codec" is a bad file, not such a server.
_NO_VIDEO = re.compile(
    r"\bvideos?(?:\s+(?:input|inputs|modality))?\s+(?:is|are)\s+not\s+(?:supported|allowed|accepted)"
    r"|\bdoes\s+not\s+(?:support|accept)\s+videos?\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class MediaRefusal:
    """The server refused a request for its media: too many items of `modality` (video | image) per prompt;
    `limit` is how many it takes (None: it did not say)."""

    modality: str
    limit: int | None = None


def media_refusal(message: str) -> MediaRefusal | None:
    """The refusal in a server's error message, or None when the message is about something else."""
    found = _AT_MOST.search(message)
    if found is not None:
        return MediaRefusal(found.group(2).lower(), int(found.group(1)))
    lowered = message.lower()
    if "video" in lowered and (_LIMIT_FLAG.search(message) or _NO_VIDEO.search(message)):
        return MediaRefusal("video")
    if "image" in lowered and _LIMIT_FLAG.search(message):
        return MediaRefusal("image")
    return None


class MediaForm:
    """The node's choice between a video and frames, and the most images per prompt; thread-safe.

    auto: video until the server refuses one, frames from then on; video: always a video (a refusal is the
    request's error); frames: always frames, a video is never sent.
    """

    def __init__(
        self, form: str = "auto", max_images: int = 8, log: Callable[[str], object] | None = None
    ) -> None:
        NODE_PARAMETERS["media_form"].check(form)
        if max_images < 1:
            raise ValueError(f"max_image_frames must be >= 1, got {max_images}")
        self.form = form
        self.max_images = max_images
        self._log = log  # the node's logger (a warning); None: Python's logging
        self._lock = threading.Lock()
        self._video_refused = False
        self._server_images: int | None = None  # the images per prompt the server said it takes

    @property
    def frames(self) -> bool:
        """Whether a clip goes as frames now."""
        with self._lock:
            return self.form == "frames" or (self.form == "auto" and self._video_refused)

    @property
    def image_limit(self) -> int:
        """The most images one prompt carries: max_image_frames, or fewer where the server said so."""
        with self._lock:
            return self._limit_locked()

    def learn(self, refusal: MediaRefusal) -> str:
        """Take in a refusal the server answered; the line to log when it is news (once per fact), else "".
        A video refusal changes nothing in mode video (the caller ends the request with it)."""
        with self._lock:
            if refusal.modality == "video":
                if self.form != "auto" or self._video_refused:
                    return ""
                self._video_refused = True
                return (
                    "media_form auto: the server takes no video (it answered: at most "
                    f"{refusal.limit if refusal.limit is not None else 'no'} video per prompt); clips go as "
                    f"up to {self._limit_locked()} sampled frames from now on (media_form frames says so "
                    "at start)"
                )
            if refusal.limit is None or refusal.limit < 1 or refusal.limit >= self._limit_locked():
                return ""
            self._server_images = refusal.limit
            return (
                f"the server takes at most {refusal.limit} image(s) per prompt: clips go as "
                f"{refusal.limit} frame(s) from now on (max_image_frames {self.max_images})"
            )

    def note(self, line: str) -> None:
        """Log what `learn` returned (the node's logger when it passed one); nothing for ""."""
        if not line:
            return
        if self._log is not None:
            self._log(line)
        else:
            _log.warning("%s", line)

    def forget(self) -> None:
        """Forget what the server said (it may have been restarted with other limits); the next refusal
        teaches it again, at the cost of one refused request."""
        with self._lock:
            self._video_refused = False
            self._server_images = None

    def _limit_locked(self) -> int:
        server = self._server_images
        return self.max_images if server is None else min(self.max_images, server)
