"""A real server with data parallelism, looked at from outside: its engine processes, what /metrics says
of each engine, and requests through the node's own request path (requests.Pipeline) that must each end in
one outcome whatever happens to the server. Used by the vLLM tier's data-parallel test and by the two-GPU
driver (tools/dp_gpu_check.py)."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import av

from cosmos_reasoner_ros.clips.clip_buffer import ClipBuffer
from cosmos_reasoner_ros.clips.clip_writer import ClipWriter
from cosmos_reasoner_ros.clips.image_conversion import Frame
from cosmos_reasoner_ros.clips.media_store import MediaStore
from cosmos_reasoner_ros.clips.multi_camera import MultiCameraBuffer
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.request_builder import RequestSettings
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog
from cosmos_reasoner_ros.requests.outcome import Outcome, RequestSpec
from cosmos_reasoner_ros.requests.pipeline import Pipeline, PipelineSettings
from cosmos_reasoner_ros.server import engines, watchdog

NS = 1_000_000_000


def engine_pids(pgid: int) -> dict[int, int]:
    """Per data-parallel rank, the pid of its engine-core process in the server's process group."""
    return {rank: p.pid for rank, p in engines.engine_processes(watchdog.group_processes(pgid)).items()}


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        return str(response.read().decode())


def engine_values(text: str, name: str) -> dict[int, float]:
    """Per engine rank, the sum of the samples of metric `name` (e.g. vllm:generation_tokens_total)."""
    values: dict[int, float] = {}
    for labels, value in re.findall(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", text, re.M):
        rank = re.search(r'engine="(\d+)"', labels)
        if rank:
            values[int(rank.group(1))] = values.get(int(rank.group(1)), 0.0) + float(value)
    return values


def decoding_on_both(url: str, window_s: float = 1.0, min_tokens: float = 5) -> bool:
    """Both engines are decoding now: each one's generated tokens (a counter) rose by `min_tokens` over
    `window_s`. vllm:num_requests_running is no such sign: an engine that went idle keeps the gauge its last
    step reported (a request running), which a test took for requests in flight and SIGKILLed an idle
    engine. The supervisor's one-token probes stay under `min_tokens`."""
    name = "vllm:generation_tokens_total"
    before = engine_values(metrics_text(url), name)
    time.sleep(window_s)
    after = engine_values(metrics_text(url), name)
    rose = {rank: after[rank] - before.get(rank, 0.0) for rank in after}
    return len(rose) >= 2 and all(delta >= min_tokens for delta in rose.values())


def robot_buffer(robot_clip: Path) -> MultiCameraBuffer:
    """The robot clip (644x476, 4 fps) in a camera buffer, as the node holds it."""
    buf = ClipBuffer("front", 4.0, 30.0, 512 * 1024 * 1024, 0)
    with av.open(str(robot_clip)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            stamp = 1_000 * NS + i * NS // 4
            if buf.wants(stamp):
                image = frame.to_ndarray(format="rgb24")
                buf.add(Frame(camera="front", stamp_ns=stamp, image=image, frame_id="front_optical"))
    return MultiCameraBuffer([buf])


def node_pipeline(
    buffer: MultiCameraBuffer, media: Path, base_url: str, tasks_file: Path | None = None
) -> Pipeline:
    """The node's request path to `base_url` (its own client: no retry, a generous read timeout)."""
    client = ReasonerClient(ClientSettings(base_url=base_url, max_retries=0, read_timeout_s=300.0))
    return Pipeline(
        buffer,
        ClipWriter(MediaStore(media)),
        TaskCatalog.load(tasks_file),
        client,
        RequestSettings(structured_output=True),
        PipelineSettings(clip_seconds=2.0),
    )


@dataclass
class InFlight:
    """Requests run on threads of their own through a Pipeline; each request's outcomes as they were
    published (on_outcome) and as run_clip returned them."""

    published: dict[str, list[Outcome]] = field(default_factory=dict)
    returned: dict[str, list[Outcome]] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, pipeline: Pipeline, specs: list[RequestSpec]) -> InFlight:
        for spec in specs:
            self.published[spec.request_id], self.returned[spec.request_id] = [], []
            thread = threading.Thread(target=self._run, args=(pipeline, spec), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def _run(self, pipeline: Pipeline, spec: RequestSpec) -> None:
        def publish(outcome: Outcome) -> None:
            with self._lock:
                self.published[outcome.request_id].append(outcome)

        for outcome in pipeline.run_clip((spec,), on_outcome=publish):
            with self._lock:
                self.returned[outcome.request_id].append(outcome)

    def join(self, timeout_s: float) -> bool:
        """True when every request has ended within timeout_s."""
        deadline = time.monotonic() + timeout_s
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self.threads)

    def each_ended_once(self) -> list[str]:
        """What is wrong: requests without exactly one published and one returned outcome (the same one)."""
        wrong = []
        for request_id, published in self.published.items():
            returned = self.returned[request_id]
            if len(published) != 1 or len(returned) != 1 or published[0] is not returned[0]:
                wrong.append(f"{request_id}: {len(published)} published, {len(returned)} returned")
        return wrong

    def kinds(self) -> dict[str, str]:
        """Per request, 'ok' or its error kind."""
        return {rid: ("ok" if o[0].success else o[0].error_kind) for rid, o in self.returned.items() if o}


def wait_until(predicate: Callable[[], object], timeout_s: float, period_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(period_s)
    return bool(predicate())
