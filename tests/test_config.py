"""The generic YAML <-> dataclass configuration layer (hybrid_trader.config)."""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_trader.config import (
    ConfigError,
    check,
    describe_fields,
    field_docs,
    from_dict,
    load_yaml_config,
    markdown_table,
    merge_overrides,
    parse_overrides,
    read_yaml,
    save_config,
    to_dict,
)
from hybrid_trader.errors import UserError


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@dataclass
class PPOSection:
    """A sample PPO section."""

    learning_rate: float = 3e-4
    """Adam step size."""
    n_steps: int = 2048
    """Rollout length per environment [steps]."""
    clip_range: float = 0.2
    """PPO clip range."""
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes."""

    def __post_init__(self) -> None:
        check(self.learning_rate > 0, "learning_rate", f"must be > 0, got {self.learning_rate}",
              fix="use e.g. 3e-4")


@dataclass
class LLMSection:
    backend: Literal["mock", "transformers", "openai"] = "mock"
    """Which back end answers."""
    model: str | None = None
    """Model directory or name; null: the back end's default."""
    temperature: float = 0.0
    """Sampling temperature."""


@dataclass
class RunSection:
    """A sample top-level run config."""

    seed: int = 0
    """Random seed."""
    phase: Literal[1, 2, 3] = 1
    """Training phase."""
    timesteps: int = 100_000
    """Environment steps to train."""
    freeze_steps: int = 0
    """Steps during which the body is frozen."""
    mode: Mode = Mode.FAST
    """An enum."""
    out: Path | None = None
    """Where to write."""
    window: tuple[int, int] = (9, 16)
    """A fixed pair."""
    tags: tuple[str, ...] = ()
    """Free labels."""
    extra: dict = field(default_factory=dict)
    """Anything."""
    ppo: PPOSection = field(default_factory=PPOSection)
    """PPO hyper-parameters."""
    llm: LLMSection | None = None
    """LLM advisor; null: no LLM."""

    def __post_init__(self) -> None:
        check(self.freeze_steps < self.timesteps, "freeze_steps",
              f"{self.freeze_steps} >= timesteps {self.timesteps}: the body would stay frozen for the whole run",
              fix="make freeze_steps smaller than timesteps")


@dataclass
class Required:
    name: str
    size: int = 1


# ---- from_dict -------------------------------------------------------------------------
def test_from_dict_builds_nested_dataclasses_when_given_partial_mappings():
    cfg = from_dict(RunSection, {"seed": 3, "ppo": {"n_steps": 512}, "llm": {"backend": "openai"}})
    assert cfg.seed == 3
    assert cfg.ppo == PPOSection(n_steps=512)
    assert cfg.llm == LLMSection(backend="openai")
    assert from_dict(RunSection, None) == RunSection()


def test_from_dict_accepts_ints_for_floats_and_whole_floats_for_ints():
    cfg = from_dict(RunSection, {"ppo": {"learning_rate": 1, "n_steps": 4096.0}})
    assert cfg.ppo.learning_rate == 1.0 and isinstance(cfg.ppo.learning_rate, float)
    assert cfg.ppo.n_steps == 4096 and isinstance(cfg.ppo.n_steps, int)


def test_from_dict_converts_lists_tuples_paths_enums_when_types_say_so():
    cfg = from_dict(RunSection, {"window": [10, 15], "tags": ["a", "b"], "out": "runs/x", "mode": "slow",
                                 "ppo": {"net_arch": [32]}})
    assert cfg.window == (10, 15)
    assert cfg.tags == ("a", "b")
    assert cfg.out == Path("runs/x")
    assert cfg.mode is Mode.SLOW
    assert cfg.ppo.net_arch == [32]


def test_from_dict_rejects_unknown_key_with_path_suggestion_and_valid_keys():
    with pytest.raises(ConfigError) as info:
        from_dict(RunSection, {"ppo": {"learning_rat": 1e-4}}, source="my.yaml")
    text = info.value.render()
    assert "my.yaml" in text
    assert "ppo.learning_rat" in text
    assert "Did you mean 'learning_rate'?" in text
    assert "learning_rate, n_steps, clip_range, net_arch" in text
    assert isinstance(info.value, UserError)


def test_from_dict_rejects_string_for_number_without_coercing():
    with pytest.raises(ConfigError) as info:
        from_dict(RunSection, {"ppo": {"n_steps": "2048"}})
    text = info.value.render()
    assert "ppo.n_steps" in text and "expected int" in text and "'2048'" in text


@pytest.mark.parametrize(
    "data, key, expected",
    [
        ({"seed": 1.5}, "seed", "expected int"),
        ({"seed": True}, "seed", "expected int"),
        ({"ppo": {"learning_rate": "fast"}}, "ppo.learning_rate", "expected float"),
        ({"llm": {"temperature": None}}, "llm.temperature", "expected float"),
        ({"llm": {"model": 7}}, "llm.model", "expected str or null"),
        ({"ppo": {"net_arch": [64, "x"]}}, "ppo.net_arch[1]", "expected int"),
        ({"window": [1, 2, 3]}, "window", "list of 2"),
        ({"ppo": 5}, "ppo", "expected a mapping"),
        ({"tags": "a"}, "tags", "expected list of str"),
        ({"extra": [1]}, "extra", "expected mapping"),
    ],
)
def test_from_dict_names_path_and_expected_type_when_type_is_wrong(data, key, expected):
    with pytest.raises(ConfigError) as info:
        from_dict(RunSection, data)
    assert info.value.key == key
    assert expected in info.value.message


def test_from_dict_checks_literal_values_with_suggestion():
    with pytest.raises(ConfigError) as info:
        from_dict(RunSection, {"llm": {"backend": "opnai"}})
    assert info.value.key == "llm.backend"
    assert "Did you mean 'openai'?" in info.value.render()
    assert "'mock', 'transformers', 'openai'" in info.value.render()
    with pytest.raises(ConfigError):
        from_dict(RunSection, {"phase": 4})
    with pytest.raises(ConfigError):
        from_dict(RunSection, {"phase": True})  # True == 1 but is not the literal 1
    assert from_dict(RunSection, {"phase": 3}).phase == 3


def test_from_dict_reports_missing_required_key():
    with pytest.raises(ConfigError, match="missing required key: name"):
        from_dict(Required, {"size": 2})


def test_check_in_post_init_gets_file_and_full_key_path():
    with pytest.raises(ConfigError) as info:
        from_dict(RunSection, {"ppo": {"learning_rate": -1.0}}, source="run.yaml")
    assert info.value.key == "ppo.learning_rate"
    assert info.value.file == "run.yaml"
    assert "must be > 0" in info.value.render() and "fix: use e.g. 3e-4" in info.value.render()


def test_check_rejects_freeze_schedule_longer_than_the_run():
    with pytest.raises(ConfigError) as info:
        from_dict(RunSection, {"timesteps": 81_920, "freeze_steps": 100_000})
    assert info.value.key == "freeze_steps"
    assert "frozen for the whole run" in info.value.message


def test_plain_user_error_in_post_init_gets_the_file_name():
    @dataclass
    class Strict:
        x: int = 0

        def __post_init__(self):
            if self.x < 0:
                raise UserError("strict.x must be >= 0")

    with pytest.raises(UserError) as info:
        from_dict(Strict, {"x": -1}, source="s.yaml")
    assert "s.yaml" in info.value.render() and "strict.x must be >= 0" in info.value.render()


# ---- YAML files ----------------------------------------------------------------------
def test_load_yaml_config_names_file_and_line_of_unknown_key(tmp_path):
    p = tmp_path / "cfg.yaml"
    p.write_text("seed: 1\nppo:\n  n_steps: 64\n  learning_rat: 0.001\n")
    with pytest.raises(ConfigError) as info:
        load_yaml_config(p, RunSection)
    assert info.value.line == 4
    assert f"{p}, line 4: ppo.learning_rat: unknown key. Did you mean 'learning_rate'?" in info.value.render()


def test_load_yaml_config_reads_scientific_notation_as_float(tmp_path):
    p = tmp_path / "cfg.yaml"
    p.write_text("timesteps: 1e6\nppo:\n  learning_rate: 3e-4\n")
    cfg = load_yaml_config(p, RunSection)
    assert cfg.timesteps == 1_000_000
    assert cfg.ppo.learning_rate == pytest.approx(3e-4)


def test_load_yaml_config_reads_only_true_and_false_as_booleans(tmp_path):
    @dataclass
    class Flags:
        on: bool = False
        country: str = "US"

    p = tmp_path / "cfg.yaml"
    p.write_text("on: true\ncountry: NO\n")
    assert load_yaml_config(p, Flags) == Flags(on=True, country="NO")
    p.write_text("on: yes\n")
    with pytest.raises(ConfigError, match="expected bool") as info:
        load_yaml_config(p, Flags)
    assert "write true or false" in info.value.render()


def test_load_yaml_config_gives_defaults_for_empty_file(tmp_path):
    p = tmp_path / "empty.yaml"
    p.write_text("# nothing\n")
    assert load_yaml_config(p, RunSection) == RunSection()


def test_load_yaml_config_reports_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(UserError, match="config file not found"):
        load_yaml_config(tmp_path / "nope.yaml", RunSection)
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 1\nppo:\n  n_steps: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML") as info:
        load_yaml_config(bad, RunSection)
    assert info.value.line is not None
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level"):
        load_yaml_config(top, RunSection)


def test_save_config_round_trips_with_header_and_field_docs(tmp_path):
    cfg = RunSection(
        seed=7,
        mode=Mode.SLOW,
        out=Path("a/b"),
        tags=("x", "1e5", "null", "yes", "3"),
        extra={"k": [1, 2], "m": {"z": 1}},
        ppo=PPOSection(learning_rate=1e-10, net_arch=[8, 8]),
        llm=LLMSection(model="gemma"),
    )
    p = save_config(cfg, tmp_path / "run" / "config.yaml")
    text = p.read_text()
    assert text.startswith("# Resolved RunSection written by hybrid-trader")
    assert "# Adam step size." in text
    assert load_yaml_config(p, RunSection) == cfg


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(-(2**31), 2**31),
    lr=st.floats(min_value=1e-12, max_value=1e3, allow_nan=False),
    arch=st.lists(st.integers(1, 4096), max_size=4),
    model=st.one_of(st.none(), st.text(min_size=0, max_size=12)),
    temp=st.floats(allow_nan=False, allow_infinity=True),
    tags=st.lists(st.text(max_size=6), max_size=3),
)
def test_save_config_round_trips_for_any_values(tmp_path_factory, seed, lr, arch, model, temp, tags):
    cfg = RunSection(seed=seed, tags=tuple(tags), ppo=PPOSection(learning_rate=lr, net_arch=arch),
                     llm=LLMSection(model=model, temperature=temp))
    p = save_config(cfg, tmp_path_factory.mktemp("cfg") / "c.yaml")
    assert load_yaml_config(p, RunSection) == cfg


@pytest.mark.parametrize("tag", ["0[", "a,b", "{x}", "]"])
def test_save_config_round_trips_when_a_list_item_holds_a_flow_indicator(tmp_path, tag):
    # found by hypothesis: "0[" was written unquoted inside a flow list, which YAML cannot read back
    cfg = RunSection(tags=(tag, "plain"), extra={"k": [tag]})
    p = save_config(cfg, tmp_path / "c.yaml")
    assert load_yaml_config(p, RunSection) == cfg


def test_to_dict_is_inverse_of_from_dict():
    cfg = RunSection(window=(1, 2), mode=Mode.SLOW, llm=LLMSection())
    plain = to_dict(cfg)
    assert plain["window"] == [1, 2] and plain["mode"] == "SLOW" and plain["llm"]["backend"] == "mock"
    assert from_dict(RunSection, plain) == cfg


# ---- overrides ----------------------------------------------------------------------
def test_merge_overrides_sets_nested_values_and_keeps_the_rest():
    base = RunSection(seed=1)
    new = merge_overrides(base, {"ppo.learning_rate": 1e-4, "llm.backend": "openai", "seed": 5})
    assert new.ppo.learning_rate == 1e-4 and new.ppo.n_steps == 2048
    assert new.llm == LLMSection(backend="openai")  # None section created from defaults
    assert new.seed == 5
    assert base.seed == 1 and base.ppo.learning_rate == 3e-4  # not mutated


def test_merge_overrides_rejects_unknown_and_invalid_keys():
    with pytest.raises(ConfigError) as info:
        merge_overrides(RunSection(), {"ppo.learning_rat": 1e-4})
    assert info.value.key == "ppo.learning_rat" and "Did you mean 'learning_rate'?" in info.value.message
    assert info.value.file == "command line"
    with pytest.raises(ConfigError, match="not a section"):
        merge_overrides(RunSection(), {"seed.x": 1})
    with pytest.raises(ConfigError) as info:
        merge_overrides(RunSection(), {"ppo.n_steps": "many"})
    assert info.value.key == "ppo.n_steps"


def test_parse_overrides_reads_values_as_yaml():
    got = parse_overrides(["ppo.learning_rate=1e-4", "llm.model=null", "ppo.net_arch=[32, 32]", "x.s=abc"])
    assert got == {"ppo.learning_rate": 1e-4, "llm.model": None, "ppo.net_arch": [32, 32], "x.s": "abc"}
    with pytest.raises(UserError, match="KEY=VALUE"):
        parse_overrides(["novalue"])
    cfg = merge_overrides(RunSection(), parse_overrides(["ppo.learning_rate=1e-4", "ppo.net_arch=[32, 32]"]))
    assert cfg.ppo.learning_rate == 1e-4 and cfg.ppo.net_arch == [32, 32]


# ---- documentation --------------------------------------------------------------------
def test_field_docs_reads_string_literal_under_each_field():
    docs = field_docs(RunSection)
    assert docs["seed"] == "Random seed."
    assert docs["llm"] == "LLM advisor; null: no LLM."
    assert field_docs(PPOSection)["n_steps"] == "Rollout length per environment [steps]."
    assert "size" not in field_docs(Required)


def test_field_docs_includes_inherited_fields():
    @dataclass
    class Child(PPOSection):
        gamma: float = 0.99
        """Discount factor."""

    docs = field_docs(Child)
    assert docs["gamma"] == "Discount factor." and docs["learning_rate"] == "Adam step size."


def test_describe_fields_flattens_nested_sections():
    rows = {r.key: r for r in describe_fields(RunSection)}
    assert rows["ppo.learning_rate"].type == "float"
    assert rows["ppo.learning_rate"].default == 3e-4
    assert rows["ppo.learning_rate"].doc == "Adam step size."
    assert rows["llm"].type == "mapping (LLMSection) or null"
    assert rows["phase"].type == "one of 1, 2, 3"
    assert "| `ppo.n_steps` | int | `2048` | Rollout length per environment [steps]. |" in markdown_table(RunSection)
    assert rows["seed"].default == 0
    assert describe_fields(Required)[0].default is dataclasses.MISSING


def test_save_config_round_trips_when_list_items_hold_yaml_line_breaks(tmp_path):
    # found by hypothesis: PyYAML reads U+0085 (NEL) in a plain flow item back as a space
    cfg = RunSection(tags=("\x85", "a\u2028b", "plain"), llm=LLMSection(model="gemma"))
    p = save_config(cfg, tmp_path / "c.yaml")
    assert load_yaml_config(p, RunSection) == cfg


# ------------------------------------------------------------------ issue 13 rules
@dataclasses.dataclass
class Knobs:
    ratio: float = 0.5
    """A share."""
    maybe: float | None = None
    """Optional."""
    free: float = dataclasses.field(default=0.0, metadata={"allow_nan": True})
    """NaN allowed."""


@dataclasses.dataclass
class Inner:
    a: int = 1
    """A."""
    b: int = 2
    """B."""

@dataclasses.dataclass
class Outer:
    inner: Inner = dataclasses.field(default_factory=lambda: Inner(a=10, b=20))
    """A section whose default differs from the class defaults (a defaults layer)."""

def test_yaml_when_a_key_is_duplicated_is_an_error_naming_file_both_lines_and_key(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("ppo:\n  learning_rate: 1e-3\n  n_steps: 512\n  learning_rate: 3e-4\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(f)
    text = info.value.render()
    assert str(f) in text and "ppo.learning_rate" in text and "line 2" in text and "line 4" in text


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "0", "-1e-4"])
def test_learning_rate_when_not_a_positive_finite_number_is_a_config_error(tmp_path, value):
    from hybrid_trader.run.config import RunConfig

    f = tmp_path / "lr.yaml"
    f.write_text(f"ppo:\n  learning_rate: {value}\n")
    with pytest.raises(ConfigError) as info:
        load_yaml_config(f, RunConfig)
    assert f"{f}, line 2: ppo.learning_rate" in info.value.render()


def test_any_float_when_nan_is_refused_unless_the_field_allows_it():
    for key in ("ratio", "maybe"):
        with pytest.raises(ConfigError, match="NaN") as info:
            from_dict(Knobs, {key: float("nan")})
        assert info.value.key == key
    assert math.isnan(from_dict(Knobs, {"free": float("nan")}).free)
    assert from_dict(Knobs, {"ratio": float("inf")}).ratio == float("inf")  # ranges are each field's check


@pytest.mark.parametrize("key", ["train.checkpoint_every", "train.keep_checkpoints"])
@pytest.mark.parametrize("value", [-1, 0])
def test_checkpoint_settings_when_below_one_are_refused(key, value):
    # 0 is not "off" in the code: checkpoint_every 0 would checkpoint every step, keep 0 keeps none to resume from
    from hybrid_trader.run.config import RunConfig

    with pytest.raises(ConfigError) as info:
        merge_overrides(RunConfig(), {key: value})
    assert info.value.key == key and "must be >= 1" in info.value.render()


def test_section_when_given_in_a_file_is_merged_over_the_fields_default():
    assert from_dict(Outer, {"inner": {"b": 5}}).inner == Inner(a=10, b=5)
    assert from_dict(Outer, {"inner": {"b": 5}}, base=Outer(Inner(7, 8))).inner == Inner(a=7, b=5)
