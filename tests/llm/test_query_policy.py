"""Selective querying with a cooldown (seed 001), configurable down to 'always'."""

from __future__ import annotations

import math

from hybrid_trader.account_state import AccountState
from hybrid_trader.llm.config import QueryPolicyConfig
from hybrid_trader.llm.query_policy import QueryPolicy
from tests.llm import LONG_MASK, make_context

IN_POSITION = dict(position=1, position_status="LONG 1", legal=LONG_MASK)


def due_steps(policy, steps, ctx_at=lambda s: make_context(**IN_POSITION), conf=None, env=0):
    out = []
    for s in steps:
        ctx = ctx_at(s)
        if policy.decide(env, s, ctx, conf) is not None:
            policy.mark(env, s, ctx)
            out.append(s)
    return out


def test_first_submit_when_new_env_queries():
    p = QueryPolicy(QueryPolicyConfig())
    assert p.decide(3, 100, make_context(**IN_POSITION)) == "first"


def test_interval_when_nothing_else_fires_queries_every_n_steps():
    p = QueryPolicy(QueryPolicyConfig(triggers=["interval"], interval=5, cooldown=2))
    assert due_steps(p, range(0, 21)) == [0, 5, 10, 15, 20]


def test_flat_position_when_triggered_is_limited_by_cooldown():
    p = QueryPolicy(QueryPolicyConfig(triggers=["flat"], cooldown=3))
    assert due_steps(p, range(0, 10), ctx_at=lambda s: make_context()) == [0, 3, 6, 9]


def test_rl_uncertainty_when_below_threshold_queries():
    p = QueryPolicy(QueryPolicyConfig(triggers=["uncertainty"], uncertainty_threshold=0.6, cooldown=1, interval=100))
    p.mark(0, 0, make_context(**IN_POSITION))
    assert p.decide(0, 1, make_context(**IN_POSITION), rl_confidence=0.9) is None
    assert p.decide(0, 1, make_context(**IN_POSITION), rl_confidence=0.4) == "uncertainty"
    assert p.decide(0, 1, make_context(**IN_POSITION), rl_confidence=None) is None


def test_rl_uncertainty_when_given_a_function_calls_it_only_when_that_trigger_is_checked():
    p = QueryPolicy(QueryPolicyConfig(triggers=["uncertainty"], uncertainty_threshold=0.6, cooldown=2, interval=100))
    calls = []

    def confidence():
        calls.append(1)
        return 0.4

    p.mark(0, 0, make_context(**IN_POSITION))
    assert p.decide(0, 1, make_context(**IN_POSITION), rl_confidence=confidence) is None  # cooldown: not checked
    assert calls == []
    assert p.decide(0, 2, make_context(**IN_POSITION), rl_confidence=confidence) == "uncertainty"
    assert calls == [1]
    assert p.decide(0, 2, make_context(**IN_POSITION), rl_confidence=lambda: None) is None


def test_state_change_when_position_or_balance_moves_queries():
    p = QueryPolicy(QueryPolicyConfig(triggers=["state_change"], cooldown=1, interval=100, balance_change=100))
    base = make_context(**IN_POSITION)
    p.mark(0, 0, base)
    assert p.decide(0, 1, base) is None
    assert p.decide(0, 1, make_context(**IN_POSITION, balance=base.balance + 150)) == "state_change"
    assert p.decide(0, 1, make_context()) == "state_change"  # flat now
    assert p.decide(0, 1, make_context(**IN_POSITION, consecutive_losses=2)) == "state_change"
    assert p.decide(0, 1, make_context(**IN_POSITION, win_rate=math.nan)) == "state_change"


def test_state_change_when_given_account_states_reads_a_missing_win_rate_as_nan():
    def snap(win_rate, balance=50_000.0):
        return AccountState(t=10, position=0, contracts=0, entry_price=math.nan, unrealized_pnl=0.0, balance=balance,
                            win_rate=win_rate, consecutive_losses=0, mask=(True, True, True))

    p = QueryPolicy(QueryPolicyConfig(triggers=["state_change"], cooldown=1, interval=100))
    p.mark(0, 0, snap(math.nan))
    assert p.decide(0, 1, snap(math.nan)) is None  # no trade yet, on both sides: no change
    assert p.decide(0, 1, snap(1.0)) == "state_change"  # first trade closed
    p.mark(0, 1, snap(0.5))
    assert p.decide(0, 2, snap(math.nan)) == "state_change"


def test_cooldown_when_every_trigger_fires_still_spaces_queries():
    p = QueryPolicy(QueryPolicyConfig(cooldown=4, interval=1))
    assert due_steps(p, range(0, 13), ctx_at=lambda s: make_context(), conf=0.1) == [0, 4, 8, 12]


def test_same_step_when_submitted_twice_queries_once():
    p = QueryPolicy(QueryPolicyConfig(cooldown=0, interval=1))
    assert due_steps(p, [5, 5, 5, 6]) == [5, 6]


def test_mode_always_and_never_when_set_override_triggers():
    always = QueryPolicy(QueryPolicyConfig(mode="always", cooldown=10))
    assert due_steps(always, range(5)) == [0, 1, 2, 3, 4]
    never = QueryPolicy(QueryPolicyConfig(mode="never"))
    assert due_steps(never, range(5)) == []


def test_reset_when_called_makes_the_next_submit_query():
    p = QueryPolicy(QueryPolicyConfig(triggers=["interval"], interval=50))
    due_steps(p, [0])
    assert p.decide(0, 1, make_context(**IN_POSITION)) is None
    p.reset(0)
    assert p.decide(0, 1, make_context(**IN_POSITION)) == "first"


def test_default_policy_when_run_over_a_session_queries_far_more_than_seed_002():
    p = QueryPolicy(QueryPolicyConfig())  # interval 5, cooldown 2, all triggers
    n = 400
    steps = due_steps(p, range(n), ctx_at=lambda s: make_context(**IN_POSITION), conf=0.9)
    assert 0.15 <= len(steps) / n <= 0.25  # ~20% in a position with a confident RL policy
    steps = due_steps(QueryPolicy(QueryPolicyConfig()), range(n), ctx_at=lambda s: make_context(), conf=0.9)
    assert len(steps) / n >= 0.45  # flat: every cooldown
