"""The shuffled placebo: the teacher's answers permuted across states, no information, distilled like any dataset."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybrid_trader.advise.distill import DistillConfig, distill, load_run_student
from hybrid_trader.advise.placebo import placebo_path, shuffle_advice, shuffle_answers
from hybrid_trader.cli.main import main
from hybrid_trader.errors import UserError
from hybrid_trader.llm.config import load_llm_config
from hybrid_trader.run.advice_dataset import AdviceRows, read_split, write_chunk
from hybrid_trader.run.advice_identity import advice_identity

FLAT = 0b000111  # HOLD, BUY, SELL
LONG = 0b011001  # HOLD, MOVE_SL_TO_BE, ENABLE_TRAIL
META = {"advice": advice_identity(load_llm_config(overrides={"backend": "mock"})), "layout_hash": "abc",
        "obs_dim": 228, "calibration": ""}


def teacher_rows(n: int, seed: int, days: int = 8) -> AdviceRows:
    """An informative teacher: its top action is a function of the state (the first feature's sign and size)."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 228)).astype(np.float32)
    bits = np.where(rng.random(n) < 0.6, FLAT, LONG).astype(np.int16)
    legal = ((bits[:, None].astype(np.int64) >> np.arange(6)) & 1).astype(bool)
    logits = rng.normal(scale=0.3, size=(n, 6))
    cut = np.digitize(obs[:, 0], [-0.4, 0.4])  # 0, 1, 2: which legal action the state calls for
    legal_ids = np.argsort(~legal, axis=1, kind="stable")[:, :3]
    logits[np.arange(n), legal_ids[np.arange(n), cut]] += 3.0
    p = np.where(legal, np.exp(logits), 0.0)
    p = (p / p.sum(axis=1, keepdims=True)).astype(np.float32)
    abstained = rng.random(n) < 0.05
    return AdviceRows(
        t=np.arange(n, dtype=np.int64) * 10 + seed, time=np.array(["2024-01-02T10:00:00-05:00"] * n, dtype=object),
        session=np.sort(rng.integers(0, days, n)).astype(np.int32),
        position=np.where(bits == FLAT, 0, 1).astype(np.int8),
        unrealized_pnl=np.zeros(n, np.float32), mask=bits, obs=obs, probs=p, confidence=p.max(axis=1),
        abstained=abstained, abstain_reason=np.where(abstained, "low_coverage", "").astype(object),
        context=np.array([f"ctx {i}" for i in range(n)], dtype=object), rollout=np.zeros(n, np.int8))


def top(rows: AdviceRows) -> np.ndarray:
    return np.argmax(np.where(rows.masks(), rows.probs, -1.0), axis=1)


@pytest.fixture
def teacher(tmp_path):
    run = tmp_path / "teacher"
    write_chunk(run, "train", teacher_rows(1500, 1), META)
    write_chunk(run, "train", teacher_rows(1500, 2), META)
    write_chunk(run, "val", teacher_rows(600, 3), META)
    return run


def answers_by_mask(rows: AdviceRows) -> dict:
    """Each mask's answers as a sorted multiset (probabilities, confidence, abstention)."""
    out = {}
    for bits in np.unique(rows.mask):
        sel = rows.mask == bits
        a = np.column_stack([rows.probs[sel], rows.confidence[sel], rows.abstained[sel]])
        out[int(bits)] = a[np.lexsort(a.T[::-1])]
    return out


def test_placebo_keeps_the_teachers_answers_and_states_when_shuffled(teacher, tmp_path):
    out = tmp_path / "shuffled"
    shuffle_advice(teacher, out, seed=7, say=lambda s: None)
    for split in ("train", "val"):
        t, _ = read_split(teacher, split)
        s, _ = read_split(out, split)
        # the states are the teacher's, in its order; the answers are the same multiset within each mask
        for col in ("t", "mask", "position", "session", "context"):
            assert np.array_equal(getattr(s, col), getattr(t, col))
        assert np.array_equal(s.obs, t.obs)
        want, got = answers_by_mask(t), answers_by_mask(s)
        assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)
        assert (s.probs[~s.masks()] == 0).all()  # every answer stays legal where it lands
        assert s.abstained.sum() == t.abstained.sum()
        assert not np.array_equal(s.probs, t.probs)


def test_placebo_agrees_with_its_teacher_at_chance_when_the_teacher_is_informative(teacher, tmp_path):
    out = tmp_path / "shuffled"
    shuffle_advice(teacher, out, seed=0, say=lambda s: None)
    t, _ = read_split(teacher, "train")
    s, _ = read_split(out, "train")
    agree = (top(s) == top(t)).mean()
    # chance: two independent draws from the teacher's top-action distribution within each mask
    chance = sum((t.mask == b).mean() * (np.bincount(top(t)[t.mask == b], minlength=6) / (t.mask == b).sum()) @
                 (np.bincount(top(t)[t.mask == b], minlength=6) / (t.mask == b).sum()) for b in np.unique(t.mask))
    assert abs(agree - chance) < 3 * np.sqrt(chance * (1 - chance) / len(t)) + 0.01
    assert agree < 0.5  # the teacher itself: 100%; its rule (the state's first feature) is lost
    rule = np.digitize(t.obs[:, 0], [-0.4, 0.4])
    follows = lambda rows: (np.argsort(~rows.masks(), axis=1, kind="stable")[np.arange(len(rows)), rule]  # noqa: E731
                            == top(rows)).mean()
    assert follows(t) > 0.9 and abs(follows(s) - 1 / 3) < 0.05


def test_placebo_identity_names_teacher_and_seed_and_the_record_replays_it(teacher, tmp_path):
    a = shuffle_advice(teacher, tmp_path / "a", seed=3, say=lambda s: None)
    shuffle_advice(teacher, tmp_path / "b", seed=3, say=lambda s: None)
    c = shuffle_advice(teacher, tmp_path / "c", seed=4, say=lambda s: None)
    _, meta = read_split(tmp_path / "a", "train")
    ident = meta["advice"]
    assert ident["teacher"] == META["advice"]["hash"] and ident["seed"] == "3"
    assert ident["model"] == f"shuffled:{META['advice']['model']}" and ident["hash"] != META["advice"]["hash"]
    assert meta["placebo"] == {"kind": "shuffled", "seed": 3, "teacher": META["advice"]["hash"]}
    assert c["advice"]["hash"] != ident["hash"] and c["advice"]["seed"] == "4"
    # the same seed gives the same dataset; the record's permutation rebuilds it from the teacher
    sa, _ = read_split(tmp_path / "a", "val")
    sb, _ = read_split(tmp_path / "b", "val")
    assert np.array_equal(sa.probs, sb.probs)
    record = json.loads(placebo_path(tmp_path / "a").read_text())
    t, _ = read_split(teacher, "val")
    assert np.array_equal(sa.probs, t.probs[np.array(record["permutation"]["val"])])
    assert record["seed"] == 3 and record["teacher_advice"] == META["advice"] and record["rows"] == a["rows"]
    assert set(record["teacher_sha256"]) == {"train", "val"}


def test_placebo_is_distilled_like_any_dataset_and_its_student_names_the_teacher(teacher, tmp_path):
    out = tmp_path / "shuffled"
    shuffle_advice(teacher, out, seed=0, say=lambda s: None)
    m = distill(out, DistillConfig(epochs=2, hidden=(16,)), say=lambda s: None)["metrics"]
    student = load_run_student(out)
    assert student.advice_parts["teacher"] == META["advice"]["hash"] and student.advice_parts["seed"] == "0"
    assert m["val"]["Rows"] == 600 - int(read_split(out, "val")[0].abstained.sum())


def test_shuffle_refuses_when_the_teacher_has_no_advice(tmp_path):
    with pytest.raises(UserError, match="needs its teacher's advice") as err:
        shuffle_advice(tmp_path / "nothing", tmp_path / "out", say=lambda s: None)
    assert "advise collect" in err.value.fix


def test_shuffle_refuses_the_teachers_folder_and_an_output_with_advice(teacher, tmp_path):
    with pytest.raises(UserError, match="its teacher's folder"):
        shuffle_advice(teacher, teacher, say=lambda s: None)
    shuffle_advice(teacher, tmp_path / "out", say=lambda s: None)
    with pytest.raises(UserError, match="already holds advice"):
        shuffle_advice(teacher, tmp_path / "out", seed=1, say=lambda s: None)


def test_shuffle_answers_permutes_only_within_each_mask():
    rows = teacher_rows(400, 5)
    shuffled, perm = shuffle_answers(rows, np.random.default_rng(0))
    assert np.array_equal(rows.mask[perm], rows.mask) and sorted(perm.tolist()) == list(range(400))
    assert np.array_equal(shuffled.probs, rows.probs[perm]) and np.array_equal(shuffled.obs, rows.obs)


def test_cli_shuffle_prints_the_identity_when_run(teacher, tmp_path, capsys):
    assert main(["advise", "shuffle", str(teacher), "--out", str(tmp_path / "p"), "--seed", "2"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["advice"]["seed"] == "2" and last["teacher_advice"]["hash"] == META["advice"]["hash"]
    assert "permutation" not in last and last["rows"] == {"train": 3000, "val": 600}
