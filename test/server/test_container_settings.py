"""The `container` section (server/container_settings.py) and the `run` argv it gives (server/container.py):
generated settings are refused with every bad setting named (exit 2), or give an argv whose mounts and labels
match an oracle computed here; the Jetson profiles load and carry NVIDIA's recipes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.paths import CONFIG, ROOT

from cosmos_reasoner_ros.server import container
from cosmos_reasoner_ros.server.errors import EXIT_CONFIG, ConfigError
from cosmos_reasoner_ros.server.settings import load_settings, settings_from_mapping

SECRET = "s3cret-value-never-on-a-command-line"
OWNER = "4242:99@robot"
# Roots that are real directories (no symbolic link) here, so that a path's resolved form is its own.
SAFE_ROOTS = ("/data", "/mnt", "/opt", "/srv", "/home/robot")
SYSTEM_ROOTS = ("/etc", "/proc", "/sys", "/dev", "/usr", "/boot", "/run", "/var/run", "/bin", "/sbin")
SEGMENT = st.from_regex(r"[a-z0-9_][a-z0-9_.-]{0,7}", fullmatch=True).filter(lambda s: s not in (".", ".."))


@contextlib.contextmanager
def api_key(value: str) -> Iterator[None]:
    before = os.environ.get("COSMOS_REASONER_API_KEY")
    os.environ["COSMOS_REASONER_API_KEY"] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ["COSMOS_REASONER_API_KEY"]
        else:
            os.environ["COSMOS_REASONER_API_KEY"] = before


def good(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, bool]]:
    return strategy.map(lambda v: (v, True))


def bad(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, bool]]:
    return strategy.map(lambda v: (v, False))


GOOD_IMAGES = good(
    st.from_regex(
        r"(ghcr\.io/|nvcr\.io:5000/)?[a-z0-9]{1,8}(/[a-z0-9]{1,8})?(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,8})?",
        fullmatch=True,
    )
)
IMAGES = st.one_of(
    GOOD_IMAGES,
    bad(st.sampled_from(["", "--privileged", "-v/etc:/x", "Vllm/Image", "vllm openai", "vllm/vllm-openai:"])),
    bad(st.from_regex(r"-[a-z-]{1,10}", fullmatch=True)),
)
GOOD_MOUNTS = good(st.tuples(st.sampled_from(SAFE_ROOTS), SEGMENT).map("/".join))
MOUNTS = st.one_of(
    GOOD_MOUNTS,
    bad(
        st.tuples(st.sampled_from(SYSTEM_ROOTS), st.one_of(st.just(""), SEGMENT)).map(
            lambda t: "/".join(t).rstrip("/")
        )
    ),
    bad(st.sampled_from(["data/x", "/", "/data/../etc", "/data/a:b", "/data/a,b", "/data/x:/etc", "./here"])),
)
GOOD_LABEL_KEYS = good(st.from_regex(r"[a-z][a-z0-9.-]{0,8}[a-z0-9]", fullmatch=True))
LABEL_KEYS = st.one_of(
    GOOD_LABEL_KEYS,
    bad(st.sampled_from(["Upper", "cosmos_reasoner_ros.owner", "cosmos_reasoner_ros.port", "-x", "", "a b"])),
)
GOOD_LABEL_VALUES = good(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12))
LABEL_VALUES = st.one_of(GOOD_LABEL_VALUES, bad(st.sampled_from(["line\nbreak", "tab\there"])))
GOOD_PORTS = good(st.integers(1, 65535))
PORTS = st.one_of(GOOD_PORTS, bad(st.sampled_from([0, 65536, 70000])))
GOOD_NETWORKS = good(st.sampled_from(["host", "bridge"]))
NETWORKS = st.one_of(GOOD_NETWORKS, bad(st.sampled_from(["none", "HOST"])))
GOOD_GPUS = st.sampled_from(
    [
        *[("docker", gpu, True) for gpu in ("", "nvidia-runtime", "gpus-all", "cdi", "none")],
        *[("podman", gpu, True) for gpu in ("", "cdi", "none")],
    ]
)
GPUS = st.one_of(GOOD_GPUS, st.sampled_from([("podman", "nvidia-runtime", False), ("docker", "amd", False)]))


def expected_problems(case: dict[str, Any]) -> set[str]:
    """The settings the oracle finds bad: each must be named by the error."""
    wrong = set()
    if not case["image"][1]:
        wrong.add("container.image")
    if not all(ok for _, ok in case["mounts"]):
        wrong.add("container.mounts")
    if not all(k_ok and v_ok for (_, k_ok), (_, v_ok) in case["labels"]):
        wrong.add("container.labels")
    if not case["port"][1]:
        wrong.add("port")
    if not case["network"][1]:
        wrong.add("container.network")
    if not case["gpu"][2]:
        wrong.add("container.gpu")
    return wrong


def mapping_of(case: dict[str, Any]) -> dict[str, Any]:
    runtime, gpu, _ = case["gpu"]
    section: dict[str, Any] = {
        "runtime": runtime,
        "image": case["image"][0],
        "network": case["network"][0],
        "mounts": [path for path, _ in case["mounts"]],
        "labels": {key: value for (key, _), (value, _) in case["labels"]},
        "pass_env": ["HF_TOKEN"],
    }
    if gpu:
        section["gpu"] = gpu
    return {
        "mode": "native",
        "model": "nvidia/Cosmos3-Nano",
        "vllm_version": "0.26.0",
        "port": case["port"][0],
        "media_dir": "/data/media",
        "cache_dir": "/srv/cache",
        "container": section,
    }


def pairs(argv: tuple[str, ...], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


CASES = st.fixed_dictionaries(
    {
        "image": IMAGES,
        "mounts": st.lists(MOUNTS, max_size=4),
        "labels": st.lists(st.tuples(LABEL_KEYS, LABEL_VALUES), max_size=3, unique_by=lambda kv: kv[0][0]),
        "port": PORTS,
        "network": NETWORKS,
        "gpu": GPUS,
    }
)


# The same settings, every one valid: most generated cases above have a bad setting somewhere.
VALID_CASES = st.fixed_dictionaries(
    {
        "image": GOOD_IMAGES,
        "mounts": st.lists(GOOD_MOUNTS, max_size=4),
        "labels": st.lists(
            st.tuples(GOOD_LABEL_KEYS, GOOD_LABEL_VALUES), max_size=3, unique_by=lambda kv: kv[0][0]
        ),
        "port": GOOD_PORTS,
        "network": GOOD_NETWORKS,
        "gpu": GOOD_GPUS,
    }
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALID_CASES)
def test_generated_valid_container_settings_match_the_oracle(case: dict[str, Any]) -> None:
    assert not expected_problems(case)
    test_generated_container_settings_are_refused_by_name_or_match_the_oracle.hypothesis.inner_test(case)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASES)
@example(  # found: a bad label value was named container.labels.<key>, not container.labels
    {"image": ("-a", False), "mounts": [], "labels": [(("a0", True), ("line\nbreak", False))],
     "port": (1, True), "network": ("host", True), "gpu": ("docker", "", True)}
)  # fmt: skip
@example(  # an option where the image goes: it would have been an option of `docker run`
    {"image": ("--privileged", False), "mounts": [], "labels": [], "port": (8000, True),
     "network": ("host", True), "gpu": ("docker", "", True)}
)  # fmt: skip
@example(  # the runtime's socket: a container holding it owns the host
    {"image": ("vllm/vllm-openai:cosmos3", True), "mounts": [("/var/run/docker.sock", False)], "labels": [],
     "port": (8000, True), "network": ("bridge", True), "gpu": ("docker", "", True)}
)  # fmt: skip
@example(  # a mount equal to the media directory: mounted once, read-only
    {"image": ("vllm/vllm-openai:cosmos3", True), "mounts": [("/data/media", True)],
     "labels": [(("site", True), ("lab=2", True))], "port": (8000, True), "network": ("host", True),
     "gpu": ("podman", "", True)}
)  # fmt: skip
def test_generated_container_settings_are_refused_by_name_or_match_the_oracle(case: dict[str, Any]) -> None:
    wrong = expected_problems(case)
    if wrong:
        with pytest.raises(ConfigError) as refused:
            container.server_command(settings_from_mapping(mapping_of(case)), "0.26.0", OWNER)
        assert refused.value.exit_code == EXIT_CONFIG
        for name in wrong:
            assert f"{name}:" in str(refused.value), (name, str(refused.value))
        return
    with api_key(SECRET):
        command = container.server_command(settings_from_mapping(mapping_of(case)), "0.26.0", OWNER)
    argv = command.argv
    runtime, gpu, _ = case["gpu"]
    port = case["port"][0]
    assert all(isinstance(arg, str) for arg in argv) and argv[:2] == (runtime, "run")
    assert not [arg for arg in argv if SECRET in arg] and "--api-key" not in argv
    # Mounts: the media directory and `mounts` read-only, the cache read-write, each once, same path inside.
    wanted = {"/data/media": "ro", "/srv/cache": "rw"}
    for path, _ in case["mounts"]:
        wanted.setdefault(os.path.normpath(path), "ro")
    shown = [f"{p}:{p}" + (":ro" if mode == "ro" else "") for p, mode in wanted.items()]
    assert sorted(pairs(argv, "--volume")) == sorted(shown)
    labels = dict(item.partition("=")[::2] for item in pairs(argv, "--label"))
    user = {key: value for (key, _), (value, _) in case["labels"]}
    assert labels == {**user, "cosmos_reasoner_ros.owner": OWNER, "cosmos_reasoner_ros.port": str(port)}
    # Variables by name only: the API key's and the passed ones, never a value.
    assert set(pairs(argv, "--env")) >= {"VLLM_API_KEY", "HF_TOKEN"}
    assert all("=" not in name for name in pairs(argv, "--env"))
    assert command.env["VLLM_API_KEY"] == SECRET  # the client's environment carries it
    flags = {"nvidia-runtime": ["--runtime", "nvidia"], "gpus-all": ["--gpus", "all"],
             "cdi": ["--device", "nvidia.com/gpu=all"], "none": []}  # fmt: skip
    expected_gpu = flags[gpu or {"docker": "nvidia-runtime", "podman": "cdi"}[runtime]]
    assert " ".join(expected_gpu) in " ".join(argv) if expected_gpu else "--gpus" not in argv
    inner = argv[argv.index(case["image"][0], argv.index("--entrypoint") + 2) :]
    assert argv[argv.index("--entrypoint") + 1] == "vllm" and inner[1:3] == ("serve", "nvidia/Cosmos3-Nano")
    host = inner[inner.index("--host") + 1]
    if case["network"][0] == "bridge":
        assert pairs(argv, "--publish") == [f"127.0.0.1:{port}:{port}"] and host == "0.0.0.0"
    else:
        assert pairs(argv, "--network") == ["host"] and host == "127.0.0.1" and "--publish" not in argv


def test_secrets_stay_off_the_command_line_and_out_of_the_log() -> None:
    base = mapping_of(
        {"image": ("vllm/vllm-openai:cosmos3", True), "mounts": [], "labels": [], "port": (8000, True),
         "network": ("host", True), "gpu": ("docker", "", True)}
    )  # fmt: skip
    base["env"] = {"VLLM_NO_USAGE_STATS": "1", "HF_TOKEN": "hf_also_secret"}
    base["cache_dir"] = ""
    with api_key(SECRET):
        command = container.server_command(settings_from_mapping(base), "0.26.0", OWNER)
    assert not [arg for arg in command.argv if SECRET in arg or "hf_also_secret" in arg]
    shown = str(command.shown())
    assert SECRET not in shown and "hf_also_secret" not in shown
    assert container.environment_names(command) == ["VLLM_NO_USAGE_STATS", "HF_TOKEN", "VLLM_API_KEY"]


def test_a_bad_container_setting_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "server.yaml"
    config.write_text("vllm_version: 0.26.0\ncontainer: {image: --privileged, mounts: [/etc]}\n")
    done = subprocess.run(
        [sys.executable, "-m", "cosmos_reasoner_ros.server", "--config", str(config), "--print-command"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 2
    assert "container.image:" in done.stderr and "container.mounts:" in done.stderr


@pytest.mark.parametrize(
    ("profile", "flags"),
    [
        ("server_thor_edge.yaml", ["--gpu-memory-utilization 0.3", "--max-model-len 16384"]),
        ("server_orin_edge.yaml", ["--gpu-memory-utilization 0.3", "--max-model-len 16384"]),
        (
            "server_thor_nano_nvfp4.yaml",
            ['--limit-mm-per-prompt {"image":1,"video":0}', "--max-model-len 8192"],
        ),
    ],
)
def test_jetson_profiles_load_and_carry_nvidias_recipes(profile: str, flags: list[str]) -> None:
    loaded = load_settings(CONFIG / profile)
    command = container.server_command(loaded, loaded.vllm_version, OWNER)
    line = " ".join(command.argv)
    for flag in flags:
        assert flag in line, (flag, line)
    assert "--runtime nvidia --network host" in line and "--ipc host" in line
    assert " --entrypoint vllm vllm/vllm-openai:cosmos3 serve " in line
    assert "--env HF_TOKEN" in line and command.env["HF_HOME"] == str(
        Path("~/.cache/huggingface").expanduser()
    )
    if "edge" in profile:
        assert "Cosmos3EdgeForConditionalGeneration" in line and "nvidia/Cosmos3-Edge" in line
