"""package.xml stays honest: every module the package imports at run time (the installed package, its launch
file and executables; imports inside functions too) is declared, as a ROS package or rosdep key in package.xml
or, where no key exists on every distribution, pinned in requirements-robot.txt; and nothing is declared that
nothing imports, unless it is listed below with the reason it is needed anyway.

On a robot `rosdep install --from-paths src` reads package.xml and `pip install -r requirements-robot.txt` the
rest (README): an import missing from both fails only there, at run time.
"""

from __future__ import annotations

import ast
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from support.paths import ROOT

PACKAGE = "cosmos_reasoner_ros"
# Python modules whose rosdep key is not the module's own name.
ROSDEP_KEYS = {
    "numpy": "python3-numpy",
    "cv2": "python3-opencv",
    "yaml": "python3-yaml",
    "matplotlib": "python3-matplotlib",
    "tqdm": "python3-tqdm",
    "tf2_ros": "tf2_ros_py",  # the Python tf2_ros is its own package since Humble
}
# Modules from requirements-robot.txt: the distribution that provides each.
PIP = {name: name for name in ("openai", "httpx2", "av", "rosbags", "mcap", "zstandard", "apsw")}
# Declared without an import of their own, and why.
NEEDED_ANYWAY = {
    "rosidl_default_runtime": "the generated messages' runtime",
    "action_msgs": "the Reason action's generated code",
    "lifecycle_msgs": "rclpy.lifecycle (the managed node)",
}


def run_time_sources() -> list[Path]:
    return [
        *sorted((ROOT / PACKAGE).rglob("*.py")),
        *sorted((ROOT / "launch").glob("*.py")),
        *sorted((ROOT / "scripts").iterdir()),
    ]


def imported_modules(sources: list[Path]) -> dict[str, set[str]]:
    """Top-level third-party modules imported anywhere in `sources` (module level, functions, TYPE_CHECKING
    blocks excluded), with the files that import each."""
    found: dict[str, set[str]] = {}
    for path in sources:
        tree = ast.parse(path.read_text(), str(path))
        checking = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for stmt in block.body
            for node in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in checking:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != PACKAGE:
                    found.setdefault(top, set()).add(
                        str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
                    )
    return found


def declared_keys() -> set[str]:
    root = ET.parse(ROOT / "package.xml").getroot()
    return {e.text.strip() for e in root if e.tag in ("depend", "exec_depend") and e.text}


def robot_requirements() -> set[str]:
    lines = (ROOT / "requirements-robot.txt").read_text().splitlines()
    return {
        re.split(r"[=<>~! ]", line.strip())[0].lower() for line in lines if line.strip() and line[0] != "#"
    }


def undeclared(imports: dict[str, set[str]], keys: set[str], pip: set[str]) -> dict[str, set[str]]:
    def declared(module: str) -> bool:
        return ROSDEP_KEYS.get(module, module) in keys or PIP.get(module, "\0") in pip

    return {module: files for module, files in imports.items() if not declared(module)}


def test_every_run_time_import_is_declared() -> None:
    missing = undeclared(imported_modules(run_time_sources()), declared_keys(), robot_requirements())
    assert not missing, "imported but neither in package.xml nor requirements-robot.txt: " + "; ".join(
        f"{module} ({', '.join(sorted(files))})" for module, files in sorted(missing.items())
    )


def test_every_declaration_is_imported_or_needed() -> None:
    imports = imported_modules(run_time_sources())
    keys_used = {ROSDEP_KEYS.get(module, module) for module in imports}
    unused = declared_keys() - keys_used - set(NEEDED_ANYWAY)
    assert not unused, f"declared in package.xml, imported nowhere: {sorted(unused)}"
    pip_used = {PIP[module] for module in imports if module in PIP}
    extra = robot_requirements() - pip_used
    assert not extra, f"in requirements-robot.txt, imported nowhere: {sorted(extra)}"


def test_the_check_catches_an_undeclared_import(tmp_path: Path) -> None:
    """The scan sees an import inside a function, and a module declared nowhere is reported."""
    source = tmp_path / "late.py"
    source.write_text("def f():\n    import shapely.geometry\n    from rcl_interfaces.msg import Log\n")
    found = imported_modules([source])
    assert set(found) == {"shapely", "rcl_interfaces"}
    assert set(undeclared(found, {"rcl_interfaces"}, set())) == {"shapely"}
    assert set(undeclared(found, set(), {"shapely"})) == {"shapely", "rcl_interfaces"}  # no pip name for it
