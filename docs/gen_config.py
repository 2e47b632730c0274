"""Regenerate the Sections table of docs/CONFIG.md from the dataclasses: ``python docs/gen_config.py``.

tests/test_docs.py fails while the table is out of date.
"""

from __future__ import annotations

import re
from pathlib import Path

from hybrid_trader.config import markdown_table
from hybrid_trader.run.config import RunConfig

DOC = Path(__file__).resolve().parent / "CONFIG.md"
MARKER = "<!-- Generated from the dataclasses: tests/test_docs.py fails when this table is out of date. -->"


def main() -> None:
    text = DOC.read_text(encoding="utf-8")
    head, sep, rest = text.partition(MARKER + "\n")
    if not sep:
        raise SystemExit(f"{DOC}: marker line not found")
    table_end = re.search(r"^(?!\|).*$", rest, flags=re.M)
    tail = rest[table_end.start():] if table_end else ""
    DOC.write_text(head + sep + markdown_table(RunConfig) + "\n" + tail, encoding="utf-8")
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
