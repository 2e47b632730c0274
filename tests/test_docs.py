"""The reference tables in docs/ are generated from the code and must stay in step with it."""

from __future__ import annotations

from pathlib import Path

from hybrid_trader.config import markdown_table
from hybrid_trader.run.config import RunConfig

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_config_reference_is_up_to_date_when_config_changes():
    assert markdown_table(RunConfig).strip() in (DOCS / "CONFIG.md").read_text(), (
        "docs/CONFIG.md is out of date: regenerate its Sections table with "
        "hybrid_trader.config.markdown_table(RunConfig)"
    )


def test_every_cli_command_is_documented_in_the_readme():
    from hybrid_trader.cli.main import build_parser

    readme = (DOCS.parent / "README.md").read_text()
    commands = build_parser()._subparsers._group_actions[0].choices
    for name in commands:
        assert f"hybrid-trader {name}" in readme, f"README does not mention 'hybrid-trader {name}'"
