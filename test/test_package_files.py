"""package_files: one precedence for every shipped file (source checkout, ament share, pip data files)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from support.paths import ROOT

from cosmos_reasoner_ros import package_files
from cosmos_reasoner_ros.package_files import config_file, package_file, share_dirs
from cosmos_reasoner_ros.parameters.node_clips import DEFAULT_MEDIA_DIR


def _share(tmp_path: Path, name: str) -> Path:
    share = tmp_path / name / "share" / "cosmos_reasoner_ros"
    (share / "config").mkdir(parents=True)
    for f in ("server.yaml", "reasoner.yaml", "tasks.yaml"):
        (share / "config" / f).write_text(f"# {name}\n")
    return share


def _fake_ament(monkeypatch: pytest.MonkeyPatch, share: Path | None) -> None:
    fake = types.ModuleType("ament_index_python.packages")

    def get_package_share_directory(name: str) -> str:
        if share is None or name != "cosmos_reasoner_ros":
            raise LookupError(name)
        return str(share)

    fake.get_package_share_directory = get_package_share_directory  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ament_index_python.packages", fake)


def test_the_source_checkout_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_ament(monkeypatch, _share(tmp_path, "ament"))
    assert share_dirs()[0] == ROOT
    for name in ("server.yaml", "reasoner.yaml", "tasks.yaml", "fastdds_shm.xml"):
        assert config_file(name) == ROOT / "config" / name


def test_an_install_uses_the_ament_share_then_pip_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # As installed: the modules live in site-packages, with no package.xml beside them.
    monkeypatch.setattr(package_files, "_SOURCE_ROOT", tmp_path / "site-packages")
    ament, pip = _share(tmp_path, "ament"), _share(tmp_path, "prefix")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    _fake_ament(monkeypatch, ament)
    assert config_file("server.yaml") == ament / "config" / "server.yaml"
    _fake_ament(monkeypatch, None)  # not in the ament index: a pip install's data files
    assert config_file("server.yaml") == pip / "config" / "server.yaml"
    assert package_file("config", "nothing.yaml") is None


def test_a_missing_file_names_every_place_looked_at(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(package_files, "_SOURCE_ROOT", tmp_path / "site-packages")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    ament = _share(tmp_path, "ament")
    _fake_ament(monkeypatch, ament)
    with pytest.raises(FileNotFoundError, match=r"config/absent\.yaml.*ament"):
        config_file("absent.yaml")


def test_the_media_default_is_the_one_in_both_config_files() -> None:
    import yaml

    node = yaml.safe_load((ROOT / "config" / "reasoner.yaml").read_text())["reasoner_node"]["ros__parameters"]
    server = yaml.safe_load((ROOT / "config" / "server.yaml").read_text())
    assert node["media_dir"] == server["media_dir"] == DEFAULT_MEDIA_DIR
