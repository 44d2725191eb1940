"""The grammar check at start (server/grammar_check.py): the structured tasks, their schemas compiled by
vLLM's own backend before READY, and the probe process that does it."""

from __future__ import annotations

import contextlib
import re
import signal
import textwrap
from pathlib import Path

import pytest
import yaml
from support import vllm_tier
from support.fake_vllm import FAKE_VLLM, fake_dist
from support.processes import free_port
from support.supervisor_process import (
    StartSupervisor,
    alive,
    fake_env,
    records,
    wait_for,
    write_config,
)
from support.task_values import STRUCTURED_TASKS

from cosmos_reasoner_ros.server import errors, settings
from cosmos_reasoner_ros.server.settings import ServerSettings


def test_structured_tasks_come_from_the_catalog_and_the_tasks_file(tmp_path: Path) -> None:
    from cosmos_reasoner_ros.server.grammar_check import structured_tasks

    shipped = structured_tasks(ServerSettings())
    assert set(shipped) == STRUCTURED_TASKS
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
