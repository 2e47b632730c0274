"""Issue 24, case 1 and 7: two writers on one advice dataset, duplicate keys, lost rows, a flipped bit.

Each test fails on the code before the advice folder had a lock, a manifest and page checksums.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from hybrid_trader.advise.collect import collect_split
from hybrid_trader.advise.distill import distill
from hybrid_trader.cli.main import main
from hybrid_trader.errors import UserError
from hybrid_trader.run.advice_dataset import (
    AdviceRows,
    advice_lock,
    check_split,
    part_files,
    read_split,
    repair_split,
    split_dir,
    write_chunk,
)
from hybrid_trader.run.files import Manifest

META = {"advice": {"hash": "abc", "model": "mock:coverage=1"}, "obs_dim": 4, "layout_hash": "l0"}


def rows(ts: range, seed: int = 0) -> AdviceRows:
    n = len(ts)
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(6), n).astype(np.float32)
    return AdviceRows(
        t=np.array(list(ts), dtype=np.int64), time=np.array([f"2024-01-02T10:{i % 60:02d}" for i in ts]),
        session=np.zeros(n, np.int32), position=np.zeros(n, np.int8), unrealized_pnl=np.zeros(n, np.float32),
        mask=np.full(n, 0b111, np.int16), obs=rng.normal(size=(n, 4)).astype(np.float32), probs=probs,
        confidence=probs.max(1), abstained=np.zeros(n, bool), abstain_reason=np.array([""] * n, dtype=object),
        context=np.array(["ctx"] * n, dtype=object), rollout=np.zeros(n, np.int8))


def test_second_writer_is_refused_naming_the_first_when_the_advice_folder_is_locked(tmp_path, capsys):
    with advice_lock(tmp_path, "advise collect val"):
        with pytest.raises(UserError, match="by this process, through another handle .*advise collect val"):
            collect_split(tmp_path, "val", None)  # type: ignore[arg-type]
        with pytest.raises(UserError, match="being written by this process, through another handle"):
            distill(tmp_path)
        assert main(["advise", "check", str(tmp_path)]) == 2
    assert "being written by this process, through another handle" in capsys.readouterr().err


def test_chunk_names_never_collide_when_two_writers_write_the_same_sequence_number(tmp_path):
    a = write_chunk(tmp_path, "val", rows(range(0, 4)), META)
    b_path = split_dir(tmp_path, "val") / a.name.replace(a.name.split("-")[2], "ffffffff.parquet")
    b = write_chunk(tmp_path, "val", rows(range(4, 8)), META)
    assert a != b and a.exists() and b.exists() and not b_path.exists()
    assert len(read_split(tmp_path, "val")[0]) == 8


def test_a_key_stored_twice_is_refused_then_repaired_keeping_one_row_per_state(tmp_path, capsys):
    write_chunk(tmp_path, "train", rows(range(0, 6)), META)
    write_chunk(tmp_path, "train", rows(range(3, 9), seed=1), META)  # states 3-5 twice
    with pytest.raises(UserError, match="3 rows whose state is there already"):
        read_split(tmp_path, "train")
    assert main(["advise", "check", str(tmp_path)]) == 1
    assert "3 stored twice" in capsys.readouterr().out
    assert main(["advise", "check", str(tmp_path), "--repair"]) == 0
    fixed, _ = read_split(tmp_path, "train")
    assert sorted(fixed.t.tolist()) == list(range(9))
    np.testing.assert_array_equal(fixed.probs[3], rows(range(0, 6)).probs[3])  # the first answer kept
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["check"][0]["ok"] and report["check"][0]["rows"] == 9


def test_lost_rows_are_named_when_a_recorded_chunk_is_gone(tmp_path):
    write_chunk(tmp_path, "val", rows(range(0, 4)), META)
    gone = write_chunk(tmp_path, "val", rows(range(4, 8)), META)
    gone.unlink()
    with pytest.raises(UserError, match="missing: its rows are lost"):
        read_split(tmp_path, "val")
    check = check_split(tmp_path, "val")
    assert check.rows == 4 and not check.ok


def test_a_chunk_of_a_second_writer_is_refused_when_it_was_never_recorded(tmp_path):
    write_chunk(tmp_path, "val", rows(range(0, 4)), META)
    stray = write_chunk(tmp_path, "val", rows(range(4, 8)), META)
    Manifest(split_dir(tmp_path, "val")).forget(stray)  # the other writer's manifest update was lost in a race
    with pytest.raises(UserError, match="never recorded"):
        read_split(tmp_path, "val")
    after = repair_split(tmp_path, "val")
    assert after.ok and after.rows == 4  # only what the manifest vouches for is kept


def test_a_flipped_bit_inside_a_page_is_detected_when_the_chunk_is_read(tmp_path):
    data = rows(range(0, 64))
    path = write_chunk(tmp_path, "val", data, META)
    raw = bytearray(path.read_bytes())
    needle = struct.pack("<f", float(data.probs[10, 2]))
    at = raw.find(needle)
    assert at > 0, "the float is stored as is in the page"
    raw[at] ^= 0x01  # the lowest bit of one probability: still a plausible number
    path.write_bytes(bytes(raw))
    with pytest.raises(UserError, match="damaged"):
        read_split(tmp_path, "val")
    Manifest(split_dir(tmp_path, "val")).path.unlink()  # without the manifest, the page's CRC still catches it
    with pytest.raises(UserError, match="empty or truncated|checksum|CRC"):
        read_split(tmp_path, "val")
    assert part_files(tmp_path, "val") == [path]
