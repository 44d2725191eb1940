"""The supervisor's settings (server/settings.py, config/server.yaml): the shipped file, the values refused
with the setting named, the structured output setting."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from cosmos_reasoner_ros.package_files import config_file
from cosmos_reasoner_ros.server import errors, settings
from cosmos_reasoner_ros.server.settings import ServerSettings


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"api_server_count": -1}, "api_server_count: 0 (vLLM's default) to 64, got -1"),
        ({"api_server_count": 65}, "api_server_count: 0 (vLLM's default) to 64, got 65"),
        (
            {"api_server_count": 2, "headless": True, "data_parallel_size": 2, "data_parallel_size_local": 1},
            "api_server_count: a headless host runs no API server",
        ),
    ],
)
def test_api_server_count_is_checked(changes: dict[str, object], problem: str) -> None:
    with pytest.raises(errors.ConfigError, match=re.escape(problem)):
        settings.settings_from_mapping({"mode": "qwen3vl", **changes})


def test_shipped_config_loads_and_documents_every_setting() -> None:
    assert settings.load_settings() == ServerSettings()  # the YAML states the defaults, nothing else
    text = config_file("server.yaml").read_text()
    keys = set(yaml.safe_load(text))
    names = {f.name for f in dataclasses.fields(ServerSettings)}
    assert keys == names
    for name in names:  # each setting's line carries a comment
        line = next(line for line in text.splitlines() if line.startswith(f"{name}:"))
        assert "#" in line, name


@pytest.mark.parametrize(
    "overrides",
    [
        {"mode": "turbo"},
        {"port": "0"},
        {"gpus": "0,x"},
        {"tensor_parallel_size": "0"},
        {"data_parallel_size": "0"},
        {"mode": "external"},  # needs server_url
        {"no_such_setting": "1"},
        {"async_scheduling": "maybe"},
        {"media_io_kwargs": "[1, 2]"},
        {"scheduling_policy": "lifo"},
        {"prefix_caching": "maybe"},
        {"mm_processor_cache_gb": "-3"},
        {"gpu_memory_utilization": "1.5"},
        {"executable": '["/venv/bin/python", "-m'},  # JSON that does not parse
        {"max_num_seqs": "2.5"},
        # Supervision numbers: a NaN spun the supervisor at 85 % CPU deaf to SIGTERM, an infinity raised an
        # OverflowError traceback, a NaN start_timeout_s exited 6 at once; NaN or negative backoffs passed.
        {"health_period_s": ".nan"},
        {"health_period_s": "inf"},
        {"health_period_s": "0"},
        {"start_timeout_s": "nan"},
        {"start_timeout_s": "-1"},
        {"restart_backoff_s": "nan"},
        {"restart_backoff_s": "-1"},
        {"restart_backoff_max_s": "inf"},
        {"restart_reset_s": "nan"},
        {"stop_grace_s": "inf"},
        {"health_grace_s": "nan"},
        {"health_grace_s": "-5"},
        {"max_restarts": "-1"},
        {"max_restarts": "1e12"},
        {"gpu_memory_utilization": "nan"},
    ],
)
def test_invalid_settings_are_rejected_with_the_setting_named(overrides: dict[str, str]) -> None:
    with pytest.raises(errors.SupervisorError) as info:
        settings.load_settings(None, overrides)
    assert info.value.exit_code == errors.EXIT_CONFIG
    assert next(iter(overrides)) in str(info.value)


def test_yaml_values_of_other_types_are_accepted() -> None:
    assert settings.settings_from_mapping({"gpus": [0, 1]}).gpus == "0,1"
    assert settings.settings_from_mapping({"gpus": 3}).gpus == "3"
    assert settings.settings_from_mapping({"vllm_version": 0.26}).vllm_version == "0.26"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"structured_outputs": '{"backend": "auto", "disable_any_whitespace": true}'}, "backend xgrammar"),
        ({"structured_outputs": '{"disable_any_whitespace": true}'}, "needs backend xgrammar or guidance"),
        ({"structured_outputs": '{"backend": "xgrammar", "whitespace": false}'}, "unknown key 'whitespace'"),
        ({"structured_outputs": '{"backend": "fast"}'}, "structured_outputs.backend: one of"),
        ({"structured_outputs": '{"enable_in_reasoning": "yes"}'}, "enable_in_reasoning: expected bool"),
        ({"extra_args": '["--structured-outputs-config", "{}"]'}, "is the setting structured_outputs"),
    ],
)
def test_structured_output_settings_vllm_would_refuse_are_refused_first(
    overrides: dict[str, str], named: str
) -> None:
    with pytest.raises(errors.ConfigError) as info:
        settings.load_settings(None, overrides)
    assert named in str(info.value)


def test_launch_gives_the_supervisor_more_than_its_own_stop_budget() -> None:
    """After SIGINT the supervisor stops vLLM within stop_grace_s (SIGTERM, then SIGKILL) and then only
    reaps and closes (no request or /health check it waits for); ros2 launch must not escalate before."""
    from cosmos_reasoner_ros import launch_config

    assert ServerSettings().stop_grace_s + 5.0 <= launch_config.SUPERVISOR_SIGTERM_TIMEOUT_S
