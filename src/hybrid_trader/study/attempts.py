"""Every trial a study folder ever ran: ``OUT/attempts.jsonl``, one line a finished or failed attempt.

A failed trial's record is replaced when the study tries it again, so the records alone
undercount the trials tried; the Deflated Sharpe Ratio needs them all. The driver (the one
process holding the study's lock) appends a line each time a trial returns, and never
rewrites the file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

ATTEMPTS = "attempts.jsonl"


def record_attempt(out: Path, row: dict[str, Any]) -> None:
    """Append one attempt (trial, status, seconds, error, time) to ``OUT/attempts.jsonl``."""
    line = {"trial": row.get("trial"), "status": row.get("status"), "seconds": row.get("seconds"),
            "error": row.get("error"), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if row.get("reused_from"):  # run by another study folder, copied here (study.reuse)
        line["reused_from"] = row["reused_from"]
    with open(Path(out) / ATTEMPTS, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def count_attempts(out: Path, records: list[dict[str, Any]]) -> dict[str, int]:
    """The trials this folder ran: every logged attempt, plus each recorded trial (finished or failed) that ran
    before the log existed (its slug absent from it). ``records``: the trials' current records."""
    logged: list[str] = []
    path = Path(out) / ATTEMPTS
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                logged.append(str(json.loads(line)["trial"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a crash mid-write: that attempt's record still counts below
    seen = set(logged)
    earlier = sum(1 for r in records if r.get("status") in ("finished", "failed") and r.get("trial") not in seen)
    return {"attempts": len(logged) + earlier, "logged": len(logged), "recorded before the log": earlier}
