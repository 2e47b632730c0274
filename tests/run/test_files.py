"""Atomic writes and the checksum manifest (hybrid_trader.run.files)."""

from __future__ import annotations

import json
import os

import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.run.files import Manifest, atomic_write_bytes, sha256_bytes


def test_atomic_write_leaves_no_temporary_file_when_done(tmp_path):
    path = atomic_write_bytes(tmp_path / "a.bin", b"abc")
    assert path.read_bytes() == b"abc"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "model.zip"
    target.write_bytes(b"old")

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"new and longer")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.zip"]


def test_manifest_records_size_and_sha256_when_written(tmp_path):
    m = Manifest(tmp_path)
    m.write(tmp_path / "sub" / "x.txt", b"hello")
    entry = json.loads((tmp_path / "manifest.json").read_text())["files"]["sub/x.txt"]
    assert entry == {"sha256": sha256_bytes(b"hello"), "size": 5}
    assert m.problem(tmp_path / "sub" / "x.txt") is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_manifest_names_the_file_when_it_is_damaged(tmp_path, damage):
    m = Manifest(tmp_path)
    path = m.write(tmp_path / "model.zip", b"0123456789")
    if damage == "truncate":
        path.write_bytes(b"01234")
    elif damage == "flip":
        path.write_bytes(b"0123456780")
    else:
        path.unlink()
    with pytest.raises(UserError) as err:
        m.verify(path, fix="restore it")
    text = err.value.render()
    assert str(path) in text and "restore it" in text
    assert ("missing" if damage == "delete" else "damaged") in text


def test_manifest_accepts_files_it_never_recorded_when_checking(tmp_path):
    (tmp_path / "old.zip").write_bytes(b"from before manifests")
    assert Manifest(tmp_path).problem(tmp_path / "old.zip") is None


def test_broken_manifest_is_a_user_error_with_the_fix_when_read(tmp_path):
    m = Manifest(tmp_path)
    m.write(tmp_path / "a", b"a")
    (tmp_path / "manifest.json").write_text('{"files": {')
    with pytest.raises(UserError) as err:
        m.entries()
    assert "manifest.json" in err.value.render() and "delete" in err.value.render()


def test_forget_drops_entries_when_files_are_rotated(tmp_path):
    m = Manifest(tmp_path)
    m.write(tmp_path / "a", b"a")
    m.write(tmp_path / "b", b"b")
    m.forget(tmp_path / "a")
    assert set(m.entries()) == {"b"}
