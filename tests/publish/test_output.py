"""Atomic writes: a new file gets the mode a plain write would give it, a replaced file keeps its
mode, and a link is replaced unless the caller asks to write through it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.grading.record import Record
from grader.publish.output import (
    OutputPathError,
    atomic_target,
    check_file_target,
    check_folder_target,
    write_atomic,
    write_record,
)


@pytest.fixture
def umask() -> Iterator[int]:
    old = os.umask(0o027)
    try:
        yield 0o027
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_gets_the_umask_mode_like_a_plain_write(tmp_path: Path, umask: int) -> None:
    write_atomic(tmp_path / "sub" / "new.txt", "x")
    assert _mode(tmp_path / "sub" / "new.txt") == 0o666 & ~umask == 0o640
    with atomic_target(tmp_path / "new.zip") as tmp:
        tmp.write_bytes(b"zip")
    assert _mode(tmp_path / "new.zip") == 0o640


def test_results_in_the_out_dir_get_the_umask_mode(tmp_path: Path, umask: int) -> None:
    rec = Record(assignment="a", student="s1", submission_sha256="0" * 64, status="graded", score=1, max_score=1)
    path = write_record(tmp_path / "out", rec)
    assert _mode(path) == 0o640


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o664, 0o604])
def test_a_replaced_file_keeps_its_mode(tmp_path: Path, umask: int, mode: int) -> None:
    path = tmp_path / "grading.yaml"
    path.write_text("old")
    path.chmod(mode)
    write_atomic(path, "new")
    assert path.read_text() == "new" and _mode(path) == mode


def test_the_new_text_of_a_private_file_is_never_readable_by_others(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "private.txt"
    path.write_text("old")
    path.chmod(0o600)
    with atomic_target(path) as tmp:
        tmp.write_text("secret")
        assert _mode(tmp) & 0o077 == 0
    assert _mode(path) == 0o600


def test_a_link_is_replaced_by_default_and_its_target_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("old")
    link = tmp_path / "out.txt"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert not link.is_symlink() and link.read_text() == "new"
    assert target.read_text() == "old"


def test_follow_links_writes_through_the_link_and_keeps_the_target_mode(tmp_path: Path, umask: int) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "grading.yaml"
    target.write_text("old")
    target.chmod(0o644)
    link = tmp_path / "grading.yaml"
    link.symlink_to(Path("real") / "grading.yaml")  # relative, as a course's link usually is
    write_atomic(link, "new", follow_links=True)
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "grading.yaml")
    assert target.read_text() == "new" and _mode(target) == 0o644
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["grading.yaml"]  # no temporary left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grading.yaml", "real"]


def test_follow_links_through_a_chain_of_links(tmp_path: Path) -> None:
    target = tmp_path / "target.yaml"
    target.write_text("old")
    (tmp_path / "b.yaml").symlink_to(target)
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    write_atomic(tmp_path / "a.yaml", "new", follow_links=True)
    assert (tmp_path / "a.yaml").is_symlink() and (tmp_path / "b.yaml").is_symlink()
    assert target.read_text() == "new"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_target(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_keep_if_same_keeps_the_file_and_its_mtime(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"same")
    os.utime(path, (1_000_000, 1_000_000))
    with atomic_target(path, keep_if_same=True) as tmp:
        tmp.write_bytes(b"same")
    assert path.stat().st_mtime == 1_000_000 and [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_an_output_path_that_cannot_be_written_is_refused_before_anything_is(tmp_path: Path) -> None:
    afile = tmp_path / "f.txt"
    afile.write_text("mine")
    check_file_target(tmp_path / "new" / "deeper" / "g.csv")  # missing folders are made on the way
    check_file_target(afile)  # replaced
    check_folder_target(tmp_path / "new" / "deeper")
    check_folder_target(tmp_path)
    with pytest.raises(OutputPathError, match=f"^{tmp_path}: is a folder, not a file$"):
        check_file_target(tmp_path)
    with pytest.raises(OutputPathError, match=f"^{afile}: exists and is not a folder$"):
        check_folder_target(afile)
    for inside in (afile / "g.csv", afile / "sub" / "g.csv"):
        with pytest.raises(OutputPathError, match=f"^{inside}: {afile} is not a folder$"):
            check_file_target(inside)
        with pytest.raises(OutputPathError, match=f"^{inside}: {afile} is not a folder$"):
            check_folder_target(inside)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputPathError, match="exists and is not a folder"):
        check_folder_target(dangling)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "f.txt"] and afile.read_text() == "mine"
