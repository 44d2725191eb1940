"""`cosmos-reasoner-server`: builds the `vllm serve` command a given vLLM release accepts and supervises it.

settings.py (config/server.yaml), versions.py (what each vLLM release accepts, derived from its wheel),
detect.py (which vLLM the executable runs), command.py (argv and environment), supervisor.py (the process
group), watchdog.py and reaper.py (the group dies with the supervisor, stale leftovers, frozen servers),
engines.py (each engine core watched on its own: one hung among several, or behind a live API server),
grammar_check.py (the structured tasks' schemas compiled by vLLM's own backend at start), template_check.py
(before READY: the chat template's thinking switch), warmup.py (before READY: warm-up requests), http.py (HTTP
to the server: /health, JSON POSTs a stop does not wait for), container.py and container_settings.py (vLLM in
docker or podman: the run argv, the stop through the runtime, a dead owner's containers removed), cli.py (the
command line), errors.py (failures and exit codes).
Imports nothing of the package but package_files and structured_output: a server host needs neither ROS nor
the node.
"""

from cosmos_reasoner_ros.server.command import ServerCommand, build_command
from cosmos_reasoner_ros.server.detect import DetectedVersion, detect_version
from cosmos_reasoner_ros.server.errors import SupervisorError
from cosmos_reasoner_ros.server.settings import ServerSettings, load_settings
from cosmos_reasoner_ros.server.supervisor import Supervisor
from cosmos_reasoner_ros.server.watchdog import group_members
from cosmos_reasoner_ros.vllm_releases import VIDEO_KWARGS_MODES, video_kwargs_mode, video_kwargs_refusals

__all__ = [
    "VIDEO_KWARGS_MODES",
    "DetectedVersion",
    "ServerCommand",
    "ServerSettings",
    "Supervisor",
    "SupervisorError",
    "build_command",
    "detect_version",
    "group_members",
    "load_settings",
    "video_kwargs_mode",
    "video_kwargs_refusals",
]
