"""What a node's `configure` builds and `cleanup` releases, as one object: the core (buffers, writer, client,
pipeline), the per-camera ingest, the request intake, the result outputs and the diagnostics publisher, and
the bookkeeping of the requests they serve. The node holds one `Configured` or none; nothing asks which of its
parts exist."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any

from cosmos_reasoner_ros.node.core import Core
from cosmos_reasoner_ros.node.diagnostics import LastRequest, ProblemLog
from cosmos_reasoner_ros.node.ingest import CameraIngest
from cosmos_reasoner_ros.node.intake import RequestIntake
from cosmos_reasoner_ros.node.outputs import ResultOutputs
from cosmos_reasoner_ros.requests import Outcome

__all__ = ["Configured"]


@dataclass
class Configured:
    core: Core
    problems: ProblemLog
    intake: RequestIntake
    ingest: dict[str, CameraIngest]
    outputs: ResultOutputs
    diagnostics_pub: Any  # the /diagnostics publisher
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards `last`
    last: LastRequest = field(default_factory=LastRequest)
    # (outcome without frames, time.monotonic() when its messages were published): request-path timings for
    # benchmarks and tests; bounded, and nothing in it pins frames or inline media.
    recent: collections.deque[tuple[Outcome, float]] = field(
        default_factory=lambda: collections.deque(maxlen=100)
    )
    core_closed: bool = False

    def close_core(self) -> None:
        """The encoding threads and the client, once (shutdown, then cleanup): the publishers stay, so that a
        late trigger still gets its one result."""
        if not self.core_closed:
            self.core_closed = True
            self.core.close()
