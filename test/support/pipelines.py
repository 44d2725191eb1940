"""A request Pipeline as the pipeline tests build it: the shipped catalog, default request settings, 2 s
clips, and a client that does not retry, asking a test server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cosmos_reasoner_ros.clips.clip_writer import ClipWriter
from cosmos_reasoner_ros.clips.media_store import MediaStore
from cosmos_reasoner_ros.clips.multi_camera import MultiCameraBuffer
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.media_form import MediaForm
from cosmos_reasoner_ros.reasoner.request_builder import RequestSettings
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog
from cosmos_reasoner_ros.requests.pipeline import Pipeline, PipelineSettings


def make_pipeline(
    buffer: MultiCameraBuffer,
    media: Path,
    base_url: str,
    read_timeout_s: float = 10.0,
    media_form: MediaForm | None = None,
    **settings: Any,
) -> Pipeline:
    """A Pipeline over `buffer` writing clips to `media` and asking `base_url`; `settings` are
    PipelineSettings'."""
    client = ReasonerClient(
        ClientSettings(base_url=base_url, max_retries=0, read_timeout_s=read_timeout_s, connect_timeout_s=1.0)
    )
    return Pipeline(
        buffer,
        ClipWriter(MediaStore(media)),
        TaskCatalog.load(),
        client,
        RequestSettings(),
        PipelineSettings(clip_seconds=2.0, **settings),
        media_form,
    )
