"""disk_cache.built_folder: the one "build in a temporary folder, then rename into place", with its rules for a folder already there."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from qa_system.disk_cache import built_folder, remove_leftovers, temporary_owner, temporary_prefix


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def make(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text(text)
    return folder


def test_a_folder_is_built_aside_readable_by_all_and_renamed_into_place(tmp_path):
    target = tmp_path / "cache" / "entry"
    with built_folder(target) as staging:
        assert staging.parent == target.parent and not target.exists()
        owner = temporary_owner(staging.name)
        assert owner is not None and owner.name == "entry" and owner.pid == os.getpid()  # a later run knows whose it is
        (staging / "sub").mkdir()
        (staging / "sub" / "weights.bin").write_bytes(b"w")
        os.chmod(staging / "sub" / "weights.bin", 0o600)
    assert (target / "sub" / "weights.bin").read_bytes() == b"w"
    assert (mode(target), mode(target / "sub"), mode(target / "sub" / "weights.bin")) == (0o755, 0o755, 0o644)
    assert hidden(target.parent) == []


def test_a_failed_build_leaves_the_folder_there_as_it_was(tmp_path):
    target = make(tmp_path / "entry", "old")
    for existing in ("replace", "keep"):
        with pytest.raises(RuntimeError, match="disk full"):
            with built_folder(target, existing=existing) as staging:
                (staging / "data.txt").write_text("half")
                raise RuntimeError("disk full")
        assert (target / "data.txt").read_text() == "old" and hidden(tmp_path) == []


def test_replace_puts_the_new_folder_in_place_of_the_old(tmp_path):
    target = make(tmp_path / "entry", "old")
    with built_folder(target, existing="replace") as staging:
        (staging / "data.txt").write_text("new")
    assert (target / "data.txt").read_text() == "new" and hidden(tmp_path) == []  # the old one moved aside, then removed


def test_keep_keeps_a_complete_folder_and_replaces_an_incomplete_one(tmp_path):
    target = make(tmp_path / "entry", "theirs")
    with built_folder(target, existing="keep") as staging:  # complete by default: it exists
        (staging / "data.txt").write_text("mine")
    assert (target / "data.txt").read_text() == "theirs" and hidden(tmp_path) == []
    with built_folder(target, existing="keep", complete=lambda folder: (folder / "done").exists()) as staging:
        (staging / "data.txt").write_text("mine")
        (staging / "done").touch()
    assert (target / "data.txt").read_text() == "mine" and hidden(tmp_path) == []


@pytest.mark.parametrize("existing", ["replace", "keep"])
def test_a_race_lost_on_the_rename_keeps_the_winners_complete_folder(tmp_path, monkeypatch, existing):
    target = tmp_path / "entry"
    rename = Path.rename

    def another_process_first(self, destination):
        if Path(destination) == target and self.name.startswith(temporary_prefix("entry")) and not self.name.endswith(".old"):
            make(target, "winner")  # renamed in between this process's check and its rename
        return rename(self, destination)

    monkeypatch.setattr(Path, "rename", another_process_first)
    with built_folder(target, existing=existing) as staging:
        (staging / "data.txt").write_text("loser")
    assert (target / "data.txt").read_text() == "winner" and hidden(tmp_path) == []
    monkeypatch.setattr(Path, "rename", rename)
    (target / "data.txt").unlink()
    target.rmdir()
    monkeypatch.setattr(Path, "rename", another_process_first)
    with pytest.raises(OSError):  # the winner's folder is not whole: nothing to keep, and this build could not go in
        with built_folder(target, existing=existing, complete=lambda folder: False) as staging:
            (staging / "data.txt").write_text("loser")
    assert hidden(tmp_path) == []


def test_leftovers_of_a_killed_writer_go_before_the_next_build_and_a_live_ones_stay(tmp_path):
    target = tmp_path / "entry"
    dead = make(tmp_path / f"{temporary_prefix('entry').replace(str(os.getpid()), '999999999')}abcdefgh", "half")
    retired = make(tmp_path / ".entry~999999999~abcd.old", "old")
    live = make(tmp_path / f"{temporary_prefix('entry')}livebuild", "building")
    other = make(tmp_path / ".other~999999999~abcdefgh", "another entry's")
    with built_folder(target) as staging:
        (staging / "data.txt").write_text("new")
    assert not dead.exists() and not retired.exists() and live.exists() and other.exists()
    assert remove_leftovers(tmp_path) == [other]  # no name: every dead writer's


def test_an_unknown_rule_is_refused(tmp_path):
    with pytest.raises(ValueError, match="existing must be one of"):
        with built_folder(tmp_path / "entry", existing="merge"):
            pass
