"""How a server's exit reads (server/exits.py): a refused command line, the signature two alike failed starts
share, the line that says most about a failure."""

from __future__ import annotations

from cosmos_reasoner_ros.server import supervisor


def test_usage_errors_and_repeated_failures_are_recognised() -> None:
    refused = [
        "usage: vllm serve [model_tag] [options]",
        "vllm: error: unrecognized arguments: --trust-request-mm-kwargs",
    ]
    assert supervisor.usage_error(2, refused) == refused[1]
    assert supervisor.usage_error(2, []) is not None  # argparse's code alone
    assert supervisor.usage_error(1, ["RuntimeError: CUDA out of memory"]) is None
    first = [
        "(EngineCore_DP0 pid=4121) ERROR 12-02 10:14:03 [core.py:708] EngineCore failed to start.",
        "RuntimeError: x at 0x7f3a",
    ]
    second = [
        "(EngineCore_DP0 pid=5303) ERROR 12-02 10:16:44 [core.py:708] EngineCore failed to start.",
        "RuntimeError: x at 0x7f9b",
    ]
    assert supervisor.failure_signature(1, first) == supervisor.failure_signature(1, second)
    assert supervisor.failure_signature(1, first) != supervisor.failure_signature(3, first)
    assert supervisor.failure_signature(1, first) != supervisor.failure_signature(
        1, [*first[:1], "OSError: disk"]
    )
    assert supervisor.failure_message(first) == "RuntimeError: x at 0x7f3a"  # the last error line
    assert supervisor.failure_message(first[:1]) == "EngineCore failed to start."  # without the log prefix


def test_the_message_of_a_pydantic_validation_error_is_its_cause_not_its_web_page() -> None:
    """vLLM 0.32 on an empty model directory: the supervisor quoted only pydantic's link to its web page."""
    lines = [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        "  Value error, Invalid repository ID or local directory specified: '/tmp/empty'. Please verify the "
        "following requirements: ... ensure the presence of a 'config.json' file. [type=value_error]",
        "    For further information visit https://errors.pydantic.dev/2.11/v/value_error",
    ]
    message = supervisor.failure_message(lines)
    assert "config.json" in message and "errors.pydantic.dev" not in message
