"""The run directory's files (hybrid_trader.run.rundir)."""

from __future__ import annotations

import json

from hybrid_trader.run import RunDir, data_identity
from hybrid_trader.run.config import DataConfig


def test_truncate_logs_drops_rows_past_the_step_and_cut_lines_when_resuming(tmp_path):
    run = RunDir(tmp_path)
    rows = [{"time/total_timesteps": s, "x": s} for s in (256, 512, 768, 1024)]
    run.progress_path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"time/total_ti')
    run.validation_path.write_text(json.dumps({"time/total_timesteps": 900}) + "\n")
    assert run.truncate_logs(512) == 4
    assert [r["time/total_timesteps"] for r in run.progress_rows()] == [256, 512]
    assert run.validation_rows() == []


def test_eval_dir_of_other_data_is_keyed_by_stem_and_hash_when_given(tmp_path):
    bars = tmp_path / "ES_2025.csv"
    bars.write_text("timestamp,open\n")
    run = RunDir(tmp_path / "run")
    other = data_identity(DataConfig(path=str(bars), tz="America/Chicago"))
    assert run.eval_dir("test") == tmp_path / "run" / "eval" / "test"
    folder = run.eval_dir("all", other)
    assert folder.parent.name == f"ES_2025-{other['sha256'][:8]}" and folder.name == "all"
    assert other["tz"] == "America/Chicago" and len(other["sha256"]) == 64


def test_status_write_merges_fields_when_updated(tmp_path):
    run = RunDir(tmp_path)
    run.write_status(state="running", total_timesteps=0)
    status = run.write_status(total_timesteps=256)
    assert status["state"] == "running" and status["total_timesteps"] == 256
    assert json.loads(run.status_path.read_text())["total_timesteps"] == 256


def test_checkpoints_are_listed_oldest_first_when_present(tmp_path):
    run = RunDir(tmp_path)
    run.checkpoints_dir.mkdir()
    for step in (1024, 256, 512):
        run.checkpoint(step).model.write_bytes(b"z")
    (run.checkpoints_dir / "step_000000256_vecnormalize.pkl").write_bytes(b"v")
    assert [c.step for c in run.checkpoints()] == [256, 512, 1024]
