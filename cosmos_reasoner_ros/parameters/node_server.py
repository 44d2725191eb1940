"""reasoner_node's parameters on the server and its requests, in the order the node declares them: where the
server is and which model it serves, the timeouts and retries of a request, and what a request asks for
(streaming, structured output, answer length, video sampling)."""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.record import Parameter, seconds
from cosmos_reasoner_ros.parameters.server_url import DEFAULT_SERVER_URL, server_url_problem

__all__ = ["AUTO_FAMILY", "FAMILY_NAMES", "SERVER_RECORDS"]

# The Reasoner families model_family.py describes, by the names model_family takes; auto: detected.
FAMILY_NAMES = ("nano", "super", "edge", "qwen3_vl")
AUTO_FAMILY = "auto"

SERVER_RECORDS: tuple[Parameter, ...] = (
    Parameter(
        "server_url",
        str,
        DEFAULT_SERVER_URL,
        rule=server_url_problem,
        description="OpenAI-compatible base URL of the vLLM server",
    ),
    Parameter(
        "model",
        str,
        "",
        description="served model name; empty: the first model the server lists",
    ),
    Parameter(
        "model_family",
        str,
        AUTO_FAMILY,
        choices=(AUTO_FAMILY, *FAMILY_NAMES),
        description=(
            "how reasoning is asked for: auto (from model when it is a local checkpoint directory, else "
            "nano), nano, super, edge (the chat template's enable_thinking on or off, no suffix) or "
            "qwen3_vl"
        ),
    ),
    Parameter(
        "api_key_env",
        str,
        "COSMOS_REASONER_API_KEY",
        description="name of the environment variable holding the API key",
    ),
    seconds("connect_timeout_s", 5.0, (0.01, 3600.0), "TCP connect timeout"),
    seconds(
        "request_timeout_s", 120.0, (0.01, 86400.0), "read timeout of one request: longest silence (no byte)"
    ),
    seconds(
        "first_token_timeout_s",
        30.0,
        (0.0, 86400.0),
        (
            "longest wait for an answer's first token (reasoning or content; keep-alives and headers are no"
            " token), then too_slow; never longer than request_timeout_s (then timeout); an unstreamed body"
            " within this of its headers; 0: request_timeout_s"
        ),
    ),
    Parameter(
        "min_tokens_per_s",
        float,
        1.0,
        unit="tokens/s",
        range=(0.0, 100000.0),
        description=(
            "progress floor after the first token, over progress_window_s, then too_slow; also bounds a "
            "whole answer by first_token_timeout_s + max_tokens / this; 0: off"
        ),
    ),
    seconds("progress_window_s", 10.0, (0.1, 3600.0), "the window over which min_tokens_per_s is averaged"),
    seconds(
        "request_total_timeout_s",
        0.0,
        (0.0, 86400.0),
        "longest whole request (retries included) from sending, then timeout; 0: no limit",
    ),
    Parameter(
        "max_retries",
        int,
        2,
        range=(0, 100),
        description="retries on connection errors and 5xx",
    ),
    Parameter(
        "stream",
        bool,
        True,
        description="stream answers (time to first token, partial text in action feedback)",
    ),
    Parameter(
        "structured_output",
        bool,
        True,
        description=(
            "send the task's JSON schema as structured output; the answer must then be one JSON value it "
            "accepts"
        ),
    ),
    Parameter(
        "max_tokens",
        int,
        0,
        unit="tokens",
        range=(0, 1_000_000),
        description="longest answer; 0: each task's own max_tokens (config/tasks.yaml)",
    ),
    Parameter(
        "video_kwargs_mode",
        str,
        "auto",
        choices=("auto", "media_io_kwargs", "mm_processor_kwargs", "none"),
        description=(
            "per-request video sampling: auto (from the server's vLLM version), media_io_kwargs, "
            "mm_processor_kwargs, none"
        ),
    ),
)
