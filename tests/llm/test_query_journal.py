"""The SQLite journal: chain-of-thought steps stored with each answer; old journals gain the column."""

from __future__ import annotations

import json
import sqlite3

import numpy as np

from hybrid_trader.llm.advice import advice_from_choice
from hybrid_trader.llm.query_journal import QueryJournal
from tests.llm import make_context

COT = "up, RSI 60.\n2. Options: HOLD BUY SELL.\n3. Risks: chase.\n4. Decision: BUY | 0.7 | trend"
LEGAL = np.array([True, True, True, False, False, False])


def record(path, raw: str) -> None:
    journal = QueryJournal(path, backend="fake", model="m", mode="generate", config={})
    advice = advice_from_choice(1, 0.7, LEGAL, backend="fake", reason="trend", latency_ms=5.0, raw=raw)
    journal.record(0, 1, make_context(), "ctx\n1. Market:", "prefix", advice)
    journal.close()


def test_journal_stores_the_reasoning_steps_when_the_answer_is_a_chain_of_thought(tmp_path):
    path = tmp_path / "j.sqlite"
    record(path, COT)
    record(path, " BUY | 0.7 | trend")
    rows = sqlite3.connect(path).execute("SELECT answer, reasoning_json FROM llm_queries ORDER BY id").fetchall()
    assert json.loads(rows[0][1]) == {"market": "up, RSI 60.", "options": "HOLD BUY SELL.", "risks": "chase.",
                                      "decision": "BUY | 0.7 | trend"}
    assert rows[0][0] == COT and rows[1][1] is None


def test_journal_written_before_reasoning_was_stored_gains_the_column_when_opened(tmp_path):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE llm_queries (id INTEGER PRIMARY KEY, run_id INTEGER, wall_time_utc TEXT, "
                "env_index INTEGER, step INTEGER, market TEXT, bar_time TEXT, prompt TEXT, answer TEXT, "
                "probs_json TEXT, action INTEGER, action_name TEXT, confidence REAL, coverage REAL, "
                "abstained INTEGER, abstain_reason TEXT, reason TEXT, latency_ms REAL, backend TEXT, "
                "from_cache INTEGER)")
    con.execute("INSERT INTO llm_queries (id, answer) VALUES (1, 'old row')")
    con.commit()
    con.close()
    record(path, COT)
    rows = sqlite3.connect(path).execute("SELECT answer, reasoning_json FROM llm_queries ORDER BY id").fetchall()
    assert rows[0] == ("old row", None) and json.loads(rows[1][1])["risks"] == "chase."
