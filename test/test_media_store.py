"""The media directory: private modes, atomic unique files, path refusal, retention of only our own files."""

from __future__ import annotations

import errno
import os
import re
import stat
import threading
import time
from pathlib import Path

import pytest

from cosmos_reasoner_ros.errors import ClipError, MediaPathError
from cosmos_reasoner_ros.media_store import MediaStore, RetentionPolicy

OWN = re.compile(r"crr-\d{8}T\d{9}Z-[0-9a-f]{12}\.(mp4|jpg|png)")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_directory_is_created_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = MediaStore(tmp_path / "a" / "media")
    finally:
        os.umask(old)
    assert store.directory == (tmp_path / "a" / "media").resolve()
    assert store.directory.is_dir() and mode(store.directory) == 0o700


def test_existing_directory_is_used_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "media").mkdir(mode=0o750)
    (tmp_path / "media").chmod(0o750)
    (tmp_path / "media" / "theirs.txt").write_text("x")
    store = MediaStore(tmp_path / "media")
    assert mode(store.directory) == 0o750  # a shared directory keeps its mode; our files are still 0600
    path = store.write_bytes(b"data", ".jpg")
    assert mode(path) == 0o600 and (tmp_path / "media" / "theirs.txt").exists()


def test_directory_that_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ClipError, match="cannot create media directory"):
        MediaStore(tmp_path / "file" / "media")


def test_write_is_atomic_private_and_unique(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    paths: list[Path] = []
    lock = threading.Lock()

    def write(n: int) -> None:
        for i in range(25):
            path = store.write_bytes(f"{n}-{i}".encode(), ".png")
            with lock:
                paths.append(path)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({p.name for p in paths}) == 200
    assert sorted(os.listdir(store.directory)) == sorted(p.name for p in paths)  # no temporaries left
    for path in paths:
        assert OWN.fullmatch(path.name) and path.parent == store.directory and mode(path) == 0o600
    assert {p.read_bytes() for p in paths} == {f"{n}-{i}".encode() for n in range(8) for i in range(25)}
    assert store.url_for(paths[0]) == f"file://{paths[0]}"


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")

    def half_then_fail(path: Path) -> None:
        path.write_bytes(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(ClipError, match=r"media directory .* is full \(No space left on device\)"):
        store.write_with(".mp4", half_then_fail)
    assert os.listdir(store.directory) == []

    def nothing(path: Path) -> None:
        pass

    with pytest.raises(ClipError, match="wrote nothing"):
        store.write_with(".mp4", nothing)
    assert os.listdir(store.directory) == []


def test_enospc_in_write_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = MediaStore(tmp_path / "media")
    real_open = Path.open

    class FullDisk:
        def __init__(self, handle: object) -> None:
            self.handle = handle

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()  # type: ignore[attr-defined]

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "open", lambda self, *a, **k: FullDisk(real_open(self, *a, **k)))
    with pytest.raises(ClipError, match="is full"):
        store.write_bytes(b"x" * 100, ".jpg")
    monkeypatch.undo()
    assert os.listdir(store.directory) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="running as root: permission bits do not stop root's writes")
def test_read_only_directory_by_mode(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    store.directory.chmod(0o500)
    try:
        with pytest.raises(ClipError, match="is not writable"):
            store.write_bytes(b"x", ".jpg")
    finally:
        store.directory.chmod(0o700)


def test_unwritable_errors_are_described(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    for code, text in (
        (errno.EROFS, "is not writable"),
        (errno.EACCES, "is not writable"),
        (errno.EIO, "cannot"),
    ):

        def fail(path: Path, code: int = code) -> None:
            raise OSError(code, os.strerror(code))

        with pytest.raises(ClipError, match=text):
            store.write_with(".png", fail)


def test_paths_escaping_the_directory_are_refused(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    inside = store.write_bytes(b"x", ".jpg")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (store.directory / "sub").mkdir()
    (store.directory / "link.mp4").symlink_to(outside)
    (store.directory / "inner-link.mp4").symlink_to(inside)
    alias = tmp_path / "alias"
    alias.symlink_to(store.directory)
    assert store.resolve(inside.name) == inside
    assert store.resolve(inside) == inside
    assert store.resolve(alias / inside.name) == inside  # the same directory through a link to it
    refused = {
        "../secret.txt": "contains '..'",
        f"{store.directory}/../secret.txt": "contains '..'",
        str(outside): "not directly inside",
        "/etc/passwd": "not directly inside",
        "sub/x.mp4": "not directly inside",
        "link.mp4": "symbolic link",
        "inner-link.mp4": "symbolic link",
        "": "not directly inside",
    }
    for name, reason in refused.items():
        with pytest.raises(MediaPathError, match=reason):
            store.resolve(name)
    with pytest.raises(MediaPathError):
        store.url_for(outside)
    assert outside.read_text() == "secret"


def _age(path: Path, seconds: float, now: float) -> None:
    os.utime(path, (now - seconds, now - seconds))


def test_retention_by_count_bytes_and_age_only_touches_our_files(tmp_path: Path) -> None:
    now = time.time()
    store = MediaStore(tmp_path / "media", RetentionPolicy(max_files=3, max_bytes=0, max_age_s=0))
    ours = []
    for i in range(6):
        path = store.write_bytes(bytes(100), ".mp4")
        _age(path, 600 - i * 10, now)  # written in order, oldest first
        ours.append(path)
    names = ("notes.txt", "crr-handmade.mp4", "other-20260101T000000000Z-aaaaaaaaaaaa.mp4")
    foreign = [store.directory / n for n in names]
    for path in foreign:
        path.write_bytes(bytes(5000))
        _age(path, 10**6, now)
    outside = tmp_path / "outside.mp4"
    outside.write_bytes(b"keep me")
    (store.directory / "crr-20200101T000000000Z-bbbbbbbbbbbb.mp4").symlink_to(outside)
    (store.directory / "crr-20200101T000000000Z-cccccccccccc.mp4").mkdir()

    deleted = store.prune(now=now)
    assert deleted == ours[:3]
    assert all(p.exists() for p in ours[3:] + foreign)
    assert outside.read_bytes() == b"keep me"
    assert (store.directory / "crr-20200101T000000000Z-bbbbbbbbbbbb.mp4").is_symlink()

    store.retention = RetentionPolicy(max_files=0, max_bytes=250, max_age_s=0)
    assert store.prune(now=now) == [ours[3]]  # 300 bytes -> 200
    assert store.usage() == (2, 200)

    store.retention = RetentionPolicy(max_files=0, max_bytes=0, max_age_s=555)
    assert store.prune(now=now) == [ours[4]]  # 560 s old; the one 550 s old stays
    assert store.prune(keep=[ours[5]], now=now + 10**4) == []  # protected even when too old
    assert store.prune(now=now + 10**4) == [ours[5]]
    assert all(p.exists() for p in foreign)


def test_keep_counts_towards_the_limit(tmp_path: Path) -> None:
    now = time.time()
    store = MediaStore(tmp_path / "media", RetentionPolicy(max_files=2, max_bytes=0, max_age_s=0))
    paths = []
    for i in range(3):
        path = store.write_bytes(bytes(10), ".jpg")
        _age(path, 100 - i, now)
        paths.append(path)
    assert store.prune(keep=[paths[0]], now=now) == [paths[1]]
    assert paths[0].exists() and paths[2].exists()


def test_stale_temporaries_are_removed(tmp_path: Path) -> None:
    now = time.time()
    store = MediaStore(tmp_path / "media")
    stale = store.directory / f".crr-tmp-{'a' * 32}.mp4"
    fresh = store.directory / f".crr-tmp-{'b' * 32}.mp4"
    theirs = store.directory / f".other-tmp-{'c' * 32}.mp4"
    for path in (stale, fresh, theirs):
        path.write_bytes(b"x")
        _age(path, 7200, now)
    _age(fresh, 10, now)
    store.prune(now=now)
    assert not stale.exists() and fresh.exists() and theirs.exists()


def test_invalid_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prefix"):
        MediaStore(tmp_path, prefix="../x")
    with pytest.raises(ValueError, match="suffix"):
        MediaStore(tmp_path).write_bytes(b"#!/bin/sh", ".sh")
