"""The advice dataset: identity hashes, keys, chunk files and their failures."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm.config import load_llm_config
from hybrid_trader.run.advice_dataset import (
    AdviceRows,
    mask_bits,
    masks_from_bits,
    part_files,
    read_split,
    visited_key,
    write_chunk,
)
from hybrid_trader.run.advice_identity import advice_identity, check_same_advice


def rows(n: int = 5, d: int = 228, t0: int = 0) -> AdviceRows:
    rng = np.random.default_rng(t0)
    p = rng.random((n, 6)).astype(np.float32)
    p /= p.sum(axis=1, keepdims=True)
    return AdviceRows(
        t=np.arange(t0, t0 + n, dtype=np.int64), time=np.array(["2024-01-02T10:00:00-05:00"] * n, dtype=object),
        session=np.zeros(n, np.int32), position=np.zeros(n, np.int8), unrealized_pnl=np.zeros(n, np.float32),
        mask=np.full(n, 0b111, np.int16), obs=rng.normal(size=(n, d)).astype(np.float32), probs=p,
        confidence=p.max(axis=1), abstained=np.zeros(n, bool), abstain_reason=np.array([""] * n, dtype=object),
        context=np.array(["ctx"] * n, dtype=object), rollout=np.zeros(n, np.int8))


META = {"advice": advice_identity(load_llm_config(overrides={"backend": "mock"})), "layout_hash": "abc", "obs_dim": 228}


def test_chunks_round_trip_when_written_and_read(tmp_path):
    a, b = rows(5), rows(3, t0=10)
    write_chunk(tmp_path, "train", a, META)
    write_chunk(tmp_path, "train", b, META)
    got, meta = read_split(tmp_path, "train")
    names = [p.name for p in part_files(tmp_path, "train")]
    assert [n[:12] for n in names] == ["part-000001-", "part-000002-"] and all(n.endswith(".parquet") for n in names)
    assert np.array_equal(got.obs, np.concatenate([a.obs, b.obs])) and np.array_equal(got.probs[5:], b.probs)
    assert meta["advice"] == META["advice"] and meta["created_by"].startswith("hybrid-trader")


def test_read_names_the_file_when_a_chunk_is_truncated(tmp_path):
    path = write_chunk(tmp_path, "train", rows(), META)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(UserError) as err:
        read_split(tmp_path, "train")
    assert str(path) in str(err.value) and "damaged" in str(err.value) and "advise check" in str(err.value)
    (path.parent / "manifest.json").unlink()  # a dataset from before manifests: the reader still names it
    with pytest.raises(UserError) as err:
        read_split(tmp_path, "train")
    assert str(path) in str(err.value) and "truncated" in str(err.value) and "collect" in str(err.value)


def test_read_names_the_file_when_a_chunk_is_empty(tmp_path):
    path = write_chunk(tmp_path, "train", rows(), META)
    path.write_bytes(b"")
    (path.parent / "manifest.json").unlink()
    with pytest.raises(UserError, match="empty or truncated") as err:
        read_split(tmp_path, "train")
    assert str(path) in str(err.value)


def test_read_names_the_folder_when_nothing_was_collected(tmp_path):
    with pytest.raises(UserError, match="no advice collected for the val split") as err:
        read_split(tmp_path, "val")
    assert "advise collect" in str(err.value)
    assert read_split(tmp_path, "val", required=False) == (None, None)


def test_read_refuses_when_chunks_were_built_with_different_models(tmp_path):
    write_chunk(tmp_path, "train", rows(), META)
    other_llm = load_llm_config(overrides={"backend": "mock", "mock": {"coverage": 0.5}})
    other = {**META, "advice": advice_identity(other_llm)}
    write_chunk(tmp_path, "train", rows(t0=9), other)
    with pytest.raises(UserError) as err:
        read_split(tmp_path, "train")
    text = str(err.value)
    assert META["advice"]["hash"] in text and other["advice"]["hash"] in text and "model" in text


def test_identity_changes_when_model_or_prompt_changes_but_not_with_the_server_address():
    base = advice_identity(load_llm_config(overrides={"backend": "openai", "openai": {"model": "gemma"}}))
    moved = advice_identity(load_llm_config(overrides={"backend": "openai", "openai": {"model": "gemma",
                                                                                      "base_url": "http://h:1/v1"}}))
    other_model = advice_identity(load_llm_config(overrides={"backend": "openai", "openai": {"model": "qwen"}}))
    other_system = advice_identity(load_llm_config(overrides={"backend": "openai", "openai": {"model": "gemma"},
                                                              "prompt": {"system": "Be brief."}}))
    assert base == moved
    assert other_model["hash"] != base["hash"] and other_model["prompt"] == base["prompt"]
    assert other_system["hash"] != base["hash"] and other_system["model"] == base["model"]
    check_same_advice(base, moved, file="x", fix="y")
    with pytest.raises(UserError, match="prompt"):
        check_same_advice(base, other_system, file="x", fix="y")


def test_mask_bits_round_trip_when_converted():
    masks = np.array([[1, 1, 1, 0, 0, 0], [1, 0, 0, 1, 1, 0], [1, 0, 0, 0, 0, 1]], bool)
    assert mask_bits(masks).tolist() == [7, 25, 33]
    assert np.array_equal(masks_from_bits(mask_bits(masks)), masks)


def test_visited_key_when_given_one_state_has_the_bits_of_mask_bits_and_the_position_sign():
    assert visited_key(12, 1, (True, True, True, False, False, False)) == (12, 1, 7)
    assert visited_key(12, -2, np.array([1, 0, 0, 1, 1, 0], bool)) == (12, -1, 25)
    assert visited_key(5, 0, [True, True, True]) == (5, 0, 7)  # a phase 1 mask: the same bits as padded
