"""The media directory: private modes, atomic unique files, path refusal, retention of only our own files."""

from __future__ import annotations

import errno
import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosmos_reasoner_ros.clips.media_store import MediaStore, RetentionPolicy, secure_media_directory
from cosmos_reasoner_ros.errors import ClipError, MediaPathError, UnsafeMediaDirectory

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
    real_write = os.write
    written: list[int] = []

    def full_disk(fd: int, data: bytes) -> int:
        if written:  # the first chunk fits, the disk fills up on the second
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(real_write(fd, bytes(data)[:10]))
        return written[-1]

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(ClipError, match="is full"):
        store.write_bytes(b"x" * 100, ".jpg")
    monkeypatch.undo()
    assert written == [10] and os.listdir(store.directory) == []


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
    store = MediaStore(tmp_path / "media", RetentionPolicy(max_files=0, max_bytes=0, max_age_s=0))
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

    store.retention = RetentionPolicy(max_files=3, max_bytes=0, max_age_s=0)  # lowered after the writes
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
    store = MediaStore(tmp_path / "media", RetentionPolicy(max_files=0, max_bytes=0, max_age_s=0))
    paths = []
    for i in range(3):
        path = store.write_bytes(bytes(10), ".jpg")
        _age(path, 100 - i, now)
        paths.append(path)
    store.retention = RetentionPolicy(max_files=2, max_bytes=0, max_age_s=0)
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
    # A write removes them too (the node never calls prune itself): a crashed write's, an hour old.
    _age(fresh, 7200, now)
    store.write_bytes(b"clip", ".mp4")
    assert not fresh.exists() and theirs.exists()


def _finished(directory: Path) -> tuple[int, int]:
    """(files, bytes) of our finished files, from one listing (temporaries are hidden and not counted)."""
    files = nbytes = 0
    for entry in os.scandir(directory):
        if OWN.fullmatch(entry.name):
            try:
                nbytes += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
            files += 1
    return files, nbytes


_WRITES = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 400), st.sampled_from([".mp4", ".jpg", ".png"])),
        st.tuples(st.just("limits"), st.integers(0, 6), st.sampled_from([0, 150, 500, 1200])),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(steps=_WRITES)
def test_generated_writes_keep_the_limits_and_delete_only_what_they_must(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, Any]]
) -> None:
    """After every write: at most max_files files and max_bytes bytes (or the new file alone, when it is
    bigger), the new file present, and nothing deleted that the limits did not ask for (with one limit: as
    many files kept as fit). Limits lowered between writes are applied by the next write or prune."""
    store = MediaStore(tmp_path_factory.mktemp("gen") / "media", RetentionPolicy(0, 0, 0))
    for step in steps:
        if step[0] == "limits":
            store.retention = RetentionPolicy(max_files=step[1], max_bytes=step[2], max_age_s=0)
            continue
        size, suffix = step[1], step[2]
        policy = store.retention
        before_files, _ = _finished(store.directory)
        path = store.write_bytes(bytes(size), suffix)
        files, nbytes = _finished(store.directory)
        assert path.exists() and path.stat().st_size == size, step
        if policy.max_files:
            assert files <= policy.max_files, (files, policy)
        if policy.max_bytes:
            assert nbytes <= max(policy.max_bytes, size), (nbytes, size, policy)
        if policy.max_files and not policy.max_bytes:  # minimal: only what the count asks for goes
            assert files == min(before_files + 1, policy.max_files), (before_files, files, policy)
        if not policy.max_files and not policy.max_bytes:
            assert files == before_files + 1


def test_concurrent_writers_never_exceed_the_limits_at_any_instant(tmp_path: Path) -> None:
    """Four writers at once while a watcher lists the directory without pause: no listing shows more than
    max_files finished files or more than max_bytes. Before, each write named its file and pruned after,
    so a listing between the two saw one file per writer too many (a 60 s soak saw 21 of 20)."""
    store = MediaStore(tmp_path / "media", RetentionPolicy(max_files=5, max_bytes=5 * 300, max_age_s=0))
    stop = threading.Event()
    seen: list[tuple[int, int]] = []

    def watch() -> None:
        while not stop.is_set():
            seen.append(_finished(store.directory))

    def write(worker: int) -> None:
        deadline, i = time.monotonic() + 30, 0
        while i < 60 or (len(seen) < 200 and time.monotonic() < deadline):  # until the watcher looked enough
            store.write_bytes(bytes(200 + (worker * 37 + i * 11) % 100), ".jpg")
            i += 1

    watcher = threading.Thread(target=watch)
    watcher.start()
    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(60)
    stop.set()
    watcher.join(10)
    assert len(seen) >= 200, len(seen)  # the watcher looked often, between writes
    assert max(files for files, _ in seen) <= 5, max(seen)
    assert max(nbytes for _, nbytes in seen) <= 5 * 300, max(seen, key=lambda look: look[1])
    assert _finished(store.directory)[0] == 5


def test_invalid_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prefix"):
        MediaStore(tmp_path, prefix="../x")
    with pytest.raises(ValueError, match="suffix"):
        MediaStore(tmp_path).write_bytes(b"#!/bin/sh", ".sh")


# -- confinement of the media directory (issue 11, item 3) ---------------------------------------------------

OTHER_UID = 4321  # a user that is neither root nor us
ROOT = os.geteuid() == 0


def victim_directory(tmp_path: Path) -> Path:
    """Stands in for /etc: a directory the node must never write into."""
    victim = tmp_path / "etc"
    victim.mkdir(mode=0o755)
    (victim / "passwd").write_text("root:x:0:0")
    return victim


def test_media_dir_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    """A `media_dir` linking to /etc was accepted and, as root, a clip landed in /etc."""
    victim = victim_directory(tmp_path)
    link = tmp_path / "media"
    link.symlink_to(victim)
    with pytest.raises(
        UnsafeMediaDirectory, match=r"media_dir .*/media: is a symbolic link \(to .*/etc\); set media_dir"
    ):
        MediaStore(link)
    to_etc = tmp_path / "etc-link"
    to_etc.symlink_to("/etc")
    with pytest.raises(UnsafeMediaDirectory, match="is a symbolic link"):
        MediaStore(to_etc)
    # Also a link to a directory of our own: the operator gives the real path, and no link is ever followed
    # at the last component (a link there is what an attacker would plant).
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    (tmp_path / "own-link").symlink_to(own)
    with pytest.raises(UnsafeMediaDirectory, match="is a symbolic link"):
        MediaStore(tmp_path / "own-link")
    assert sorted(os.listdir(victim)) == ["passwd"] and os.listdir(own) == []


def test_open_directory_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    """An existing 0777 directory stayed 0777 and was used."""
    for mode_bits in (0o777, 0o770, 0o702):
        shared = tmp_path / f"shared-{mode_bits:o}"
        shared.mkdir()
        shared.chmod(mode_bits)
        with pytest.raises(
            UnsafeMediaDirectory, match=rf"writable by group or others \(mode 0{mode_bits:o}\); chmod 700 "
        ):
            MediaStore(shared)
        assert mode(shared) == mode_bits and os.listdir(shared) == []  # refused, not silently changed


@pytest.mark.skipif(not ROOT, reason="giving a directory to another user needs root")
def test_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeMediaDirectory, match=rf"owned by uid {OTHER_UID}, not by this node's user"):
        MediaStore(theirs)


def test_parents_that_others_control_are_refused(tmp_path: Path) -> None:
    """Whoever can write a parent can swap the media directory for a link after the check."""
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)
    with pytest.raises(UnsafeMediaDirectory, match=r"open above it is writable by group or others without"):
        MediaStore(open_parent / "media")
    assert os.listdir(open_parent) == []  # nothing created under it
    # The sticky bit (as /tmp has) keeps others from renaming our entries: allowed.
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    store = MediaStore(sticky / "media")
    assert store.directory == sticky / "media" and mode(store.directory) == 0o700
    if ROOT:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, OTHER_UID, OTHER_UID)
        with pytest.raises(UnsafeMediaDirectory, match=rf"theirs above it is owned by uid {OTHER_UID}"):
            MediaStore(theirs / "media")


def test_links_above_the_directory(tmp_path: Path) -> None:
    """Root's links (/var/run -> /run) are followed; anyone else's are refused, ours included."""
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    link = tmp_path / "link"
    link.symlink_to("real")  # relative target, as /lib -> usr/lib
    if ROOT:  # a link root made: trusted like a system link
        store = MediaStore(link / "media")
        assert store.directory == real / "media" and mode(store.directory) == 0o700
        os.lchown(link, OTHER_UID, OTHER_UID)
    with pytest.raises(
        UnsafeMediaDirectory, match=r"link is a symbolic link that is owned by uid \d+ \(only root"
    ):
        MediaStore(link / "other")
    assert not (real / "other").exists()
    # A component the node would create that appears as a link meanwhile is refused whoever owns it.
    racer = tmp_path / "race"
    original_mkdir = Path.mkdir

    def plant_link(self: Path, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        if self == racer:
            self.symlink_to(real)
        original_mkdir(self, mode, parents, exist_ok)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "mkdir", plant_link)
        with pytest.raises(UnsafeMediaDirectory, match="appeared while it was being created"):
            MediaStore(racer / "raced")
    assert racer.is_symlink() and not (real / "raced").exists()


def test_created_parents_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = MediaStore(tmp_path / "a" / "b" / "media")
        path = store.write_bytes(b"x", ".jpg")
    finally:
        os.umask(old)
    for directory in (tmp_path / "a", tmp_path / "a" / "b", store.directory):
        assert mode(directory) == 0o700, directory
    assert mode(path) == 0o600
    assert secure_media_directory(tmp_path / "a" / "b" / ".." / "b" / "media") == store.directory


def test_directory_swapped_or_opened_after_start_is_refused(tmp_path: Path) -> None:
    victim = victim_directory(tmp_path)
    store = MediaStore(tmp_path / "media")
    store.write_bytes(b"before", ".jpg")
    (tmp_path / "media").rename(tmp_path / "moved")
    (tmp_path / "media").symlink_to(victim)
    with pytest.raises(UnsafeMediaDirectory, match="is a symbolic link"):
        store.write_bytes(b"x", ".jpg")
    with pytest.raises(UnsafeMediaDirectory, match="is a symbolic link"), store.scratch(".mp4"):
        pass
    assert sorted(os.listdir(victim)) == ["passwd"]
    (tmp_path / "media").unlink()
    (tmp_path / "moved").rename(tmp_path / "media")
    store.directory.chmod(0o777)
    with pytest.raises(UnsafeMediaDirectory, match="writable by group or others"):
        store.write_bytes(b"x", ".jpg")
    # Removed altogether (a /tmp cleaner): created again, private, on the next write.
    for entry in store.directory.iterdir():
        entry.unlink()
    store.directory.rmdir()
    path = store.write_bytes(b"after", ".jpg")
    assert path.read_bytes() == b"after" and mode(store.directory) == 0o700


def test_files_are_never_created_through_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = victim_directory(tmp_path)
    store = MediaStore(tmp_path / "media")
    planted = store.directory / ".crr-tmp-planted.jpg"
    planted.symlink_to(victim / "passwd")
    monkeypatch.setattr(store, "_temp_path", lambda suffix: planted)
    with pytest.raises(ClipError):
        store.write_bytes(b"owned", ".jpg")
    assert (victim / "passwd").read_text() == "root:x:0:0"


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(
        st.one_of(
            st.sampled_from(["..", ".", "", "/", "media", "link.mp4", "sub", "etc", "passwd", "~", "\\"]),
            st.text(min_size=1, max_size=8),
        ),
        min_size=1,
        max_size=5,
    ),
    absolute=st.booleans(),
)
def test_resolved_names_never_leave_the_directory(
    fuzz_store: MediaStore, parts: list[str], absolute: bool
) -> None:
    name = "/".join(parts)
    if absolute:
        name = f"{fuzz_store.directory}/{name}"
    try:
        path = fuzz_store.resolve(name)
    except (MediaPathError, ValueError):  # ValueError: a NUL byte, refused by the OS layer itself
        return
    assert path.parent == fuzz_store.directory and ".." not in path.parts and not path.is_symlink()


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory: pytest.TempPathFactory) -> MediaStore:
    root = tmp_path_factory.mktemp("fuzz")
    store = MediaStore(root / "media")
    (root / "etc").mkdir()
    (store.directory / "sub").mkdir()
    (store.directory / "link.mp4").symlink_to(root / "etc")
    return store
