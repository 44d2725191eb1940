"""reasoner_node's parameters on the server and its requests, in the order the node declares them: where the
server is and which model it serves, the timeouts and retries of a request, and what a request asks for
(streaming, structured output, answer length, video sampling)."""

from __future__ import annotations

from cosmos_reasoner_ros.parameters.record import Parameter, flag, integer, number, seconds, text
from cosmos_reasoner_ros.parameters.server_url import DEFAULT_SERVER_URL, server_url_problem

__all__ = ["AUTO_FAMILY", "FAMILY_NAMES", "SERVER_RECORDS"]

# The Reasoner families model_family.py describes, by the names model_family takes; auto: detected.
FAMILY_NAMES = ("nano", "super", "edge", "qwen3_vl")
AUTO_FAMILY = "auto"

SERVER_RECORDS: tuple[Parameter, ...] = (
    text(
        "server_url",
        DEFAULT_SERVER_URL,
        "OpenAI-compatible base URL of the vLLM server",
        rule=server_url_problem,
    ),
    text("model", "", "served model name; empty: the first model the server lists"),
    text(
        "model_family",
        AUTO_FAMILY,
        (
            "how reasoning is asked for: auto (from model when it is a local checkpoint directory, else "
            "nano), nano, super, edge (the chat template's enable_thinking on or off, no suffix) or "
            "qwen3_vl"
        ),
        choices=(AUTO_FAMILY, *FAMILY_NAMES),
    ),
    text("api_key_env", "COSMOS_REASONER_API_KEY", "name of the environment variable holding the API key"),
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
    number(
        "min_tokens_per_s",
        1.0,
        "tokens/s",
        (0.0, 100000.0),
        (
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
    integer("max_retries", 2, (0, 100), "retries on connection errors and 5xx"),
    flag("stream", True, "stream answers (time to first token, partial text in action feedback)"),
    flag(
        "structured_output",
        True,
        (
            "send the task's JSON schema as structured output; the answer must then be one JSON value it "
            "accepts"
        ),
    ),
    integer(
        "max_tokens",
        0,
        (0, 1_000_000),
        "longest answer; 0: each task's own max_tokens (config/tasks.yaml)",
        unit="tokens",
    ),
    text(
        "video_kwargs_mode",
        "auto",
        (
            "per-request video sampling: auto (from the server's vLLM version), media_io_kwargs, "
            "mm_processor_kwargs, none"
        ),
        choices=("auto", "media_io_kwargs", "mm_processor_kwargs", "none"),
    ),
)
