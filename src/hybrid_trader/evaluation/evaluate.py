"""``evaluate_run``: the trained agent and its baselines on the same later, unseen days.

Strategies, all through the same environment, costs and rules:

* ``agent``: the deterministic masked policy of the run;
* ``flat``: never trades (the zero line every other result is read against);
* ``random[k]``: random legal actions at the agent's own entry rate, one per seed;
* ``momentum``: enter in the direction of the last 20 bars' move beyond 1 ATR.

Results go to ``RUN_DIR/eval/<split>/`` (``save_results``) with ``metrics.json``; an
evaluation on other bars (``data_overrides``) goes to ``RUN_DIR/eval/<stem>-<hash8>/<split>/``
and never over the run's own. ``results.json`` records the model's and the data's sha256
and the loading options (:func:`hybrid_trader.run.data_identity`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hybrid_trader.config import merge_overrides
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.metrics import compute_metrics, jsonable
from hybrid_trader.evaluation.policies import AgentPolicy, FlatPolicy, HybridAgentPolicy, MomentumPolicy, RandomPolicy
from hybrid_trader.evaluation.results import StrategyResult, metrics_table, save_results
from hybrid_trader.evaluation.runner import ALL_DECISIONS, entry_rate, evaluation_env, run_policy, trade_fresh_days
from hybrid_trader.evaluation.verdict import VerdictConfig, prop_verdict, small_sample_warning
from hybrid_trader.llm.health import HEALTH_STAT_NAMES
from hybrid_trader.markets import get_contract
from hybrid_trader.run import FolderLock, RunDir, data_identity, same_data, sha256_file
from hybrid_trader.run.advisor import run_advisor
from hybrid_trader.run.config import RunConfig, run_market, with_absolute_data
from hybrid_trader.run.files import atomic_write_text, check_writable
from hybrid_trader.run.market import load_market, make_veto, priced_market
from hybrid_trader.run.models import final_model, load_model, load_normalizer
from hybrid_trader.run.pins import check_pins


@dataclass
class EvaluationOutput:
    """What ``evaluate_run`` produced."""

    split: str
    out_dir: Path
    metrics: dict[str, dict]
    """Metrics per strategy name (``random`` holds the mean over seeds)."""
    random_seeds: dict[str, dict] = field(default_factory=dict)
    """Mean and standard deviation of each metric over the random baseline's seeds."""
    dates: tuple[str, str] | None = None
    per_seed: dict[str, dict] = field(default_factory=dict)
    """Metrics of each random-baseline seed, by strategy name (``random (seed k)``)."""
    extra: dict = field(default_factory=dict)


def warn_loudly(text: str) -> None:
    """Print ``text`` to stderr between rule lines, so that it is not read past."""
    rule = "!" * 78
    print(f"{rule}\nWARNING: {text}\n{rule}", file=sys.stderr, flush=True)


def load_policy(run_dir: Path, device: str = "cpu", normalize: bool | None = None):
    """The run's final model (else newest checkpoint) and its normalisation statistics, both checked."""
    run = RunDir(run_dir)
    if normalize is None:
        normalize = run.load_config(RunConfig).ppo.normalize_observations
    model_path, vec_path = final_model(run, normalize)
    model = load_model(run, model_path, device=device)
    vec = None
    if vec_path is not None:
        vec = load_normalizer(run, vec_path)
        vec.training = False
    return model, vec, model_path


def sessions_for(market: Any, split: str) -> range:
    if split == "all":
        return range(market.bars.n_sessions)
    return market.sessions(split)


@dataclass(frozen=True)
class EvaluationRequest:
    """What ``evaluate_run`` evaluates and how: one object from the command line, studies, ablation and tests."""

    split: str = "test"
    """The split evaluated (``train``, ``validation``, ``test`` or ``all``)."""
    seeds: int = 3
    """Seeds of the random baseline (at least 1)."""
    data_overrides: dict | None = None
    """``data`` keys for other bars (``path``, ``tz``, ``time_shift``): results go beside, never over the run's own."""
    symbol: str | None = None
    """``--market``: the contract the bars are priced with (:func:`~hybrid_trader.run.market.priced_market`)."""
    market: Any = None
    """An already loaded market (tests, the demo, studies); None: loaded from the run's data."""
    quiet: bool = False
    """No progress lines."""
    llm_overrides: dict | None = None
    """The advisor's settings changed for this evaluation only (e.g. ``{"backend": "transformers"}``)."""
    strategy: Literal["prior", "rules"] | None = None
    """The fusion strategy instead of the run's (phase 3)."""
    ablation: bool = True
    """Phase 3: also the RL-only agent (llm_weight 0) on the same bars."""
    out_dir: Path | None = None
    """Where results go; None: ``RUN_DIR/eval/<split>`` (or a folder named after other data or advisor)."""
    explain: int = 0
    """The first ``explain`` sample decisions of a phase 3 agent get the LLM's chain of thought."""
    explain_llm: str | None = None
    """The back end that explains (``evaluation.explain``); None: the run's."""
    fresh_days: bool = False
    """The agent also trades each day from a fresh account: ``extra["fresh_days"]`` its figures,
    ``extra["fresh_day_pnl"]`` each day's net P&L beside momentum's, traded alike (``dates``, ``agent``,
    ``momentum``)."""
    verdict: Literal["rolling", "sequential"] | None = None
    """The prop-firm verdict, attempts started every day or one after another (``extra["prop_verdict"]``)."""
    verdict_config: VerdictConfig | None = None
    """Fees, pass value and days of the verdict; None: the defaults."""


def evaluate_run(run_dir: Path, request: EvaluationRequest = EvaluationRequest()) -> EvaluationOutput:
    """Evaluate a run as ``request`` says (:class:`EvaluationRequest`); results in ``request.out_dir`` (default
    ``RUN_DIR/eval/<split>``, or a folder named after other data or another advisor: an evaluation with
    ``llm_overrides`` never replaces the run's own). results.json records the contract the trades were priced with."""
    run_dir = Path(run_dir)
    split, seeds, explain, verdict = request.split, request.seeds, request.explain, request.verdict
    llm_overrides, data_overrides, out_dir = request.llm_overrides, request.data_overrides, request.out_dir
    run = RunDir(run_dir).require()
    if seeds < 1:
        raise UserError(f"--seeds {seeds}: need at least 1 seed for the random baseline")
    config = run.load_config(RunConfig)
    if explain and config.env.phase != 3:
        raise UserError(f"--explain needs a phase 3 run (the hybrid agent's sample decisions); {run_dir} is phase "
                        f"{config.env.phase}", fix="drop --explain, or evaluate a phase 3 run")
    if explain < 0:
        raise UserError(f"--explain {explain}: give a number of decisions (0 or more)")
    if verdict and not verdict_measurable(config, llm_overrides):
        backend = (llm_overrides or {}).get("backend", config.llm.backend)
        raise UserError(f"--verdict of a phase 3 agent asks its advisor on every bar of every attempt, which "
                        f"is measured with the distilled student only; this advisor is the {backend} back end",
                        fix="evaluate with the run's student (llm.backend: student; hybrid-trader advise "
                            "distill), the phase 2 run it started from, or drop --verdict")
    if config.env.phase == 3 and not llm_overrides:  # the run's own advisor: the student or adapter it pinned
        check_pins(run_dir, doing="evaluate")
    own_data = data_identity(config.data)
    priced_as, contract_note = priced_market(run_dir, config, (data_overrides or {}).get("path"),
                                            request.symbol)
    pricing = {"run_market": run_market(config)[0], **({"contract_note": contract_note} if contract_note else {})}
    if priced_as is not None:  # env.market too where the run set it: it wins over the bars' market
        data_overrides = {**(data_overrides or {}), "market": priced_as}
    if data_overrides:
        keys = {f"data.{k}": v for k, v in data_overrides.items() if v is not None}
        if config.env.market and priced_as is not None:
            keys["env.market"] = priced_as
        config = merge_overrides(config, keys)
        config = with_absolute_data(config)
    data = data_identity(config.data)
    final_model(run, config.ppo.normalize_observations)  # a damaged or missing model file fails before any output
    advisor = None  # another advisor than the run's own never replaces the run's own evaluation
    if llm_overrides:
        backend = llm_overrides.get("backend")
        advisor = f"llm-{backend}" if backend and len(llm_overrides) == 1 else \
            "llm-" + hashlib.sha256(json.dumps(llm_overrides, sort_keys=True, default=str).encode()).hexdigest()[:8]
    if out_dir is None:
        out_dir = run.eval_dir(split, None if same_data(data, own_data) else data, advisor)
        if contract_note is not None and priced_as is not None:  # the file priced as another market: beside it
            out_dir = out_dir.with_name(f"{out_dir.name}-as-{priced_as}")
    out_dir = Path(out_dir)
    if contract_note is not None:
        warn_loudly(contract_note)
    check_writable(out_dir, what="evaluate")
    out_dir.mkdir(parents=True, exist_ok=True)
    with FolderLock(out_dir, f"evaluate {split}"):  # one writer per output folder; training may go on
        return _evaluate(run, config, data, out_dir, request, pricing)


def contract_record(symbol: str) -> dict[str, Any]:
    """What results.json records of the contract the trades were priced with."""
    c = get_contract(symbol)
    return {"symbol": c.symbol, "name": c.name, "point_value": c.point_value, "tick_size": c.tick_size,
            "tick_value": c.tick_value}


def _evaluate(run: RunDir, config: RunConfig, data: dict, out_dir: Path, request: EvaluationRequest,
              pricing: dict) -> EvaluationOutput:
    run_dir = run.path
    split, seeds, verdict, llm_overrides = request.split, request.seeds, request.verdict, request.llm_overrides
    market = request.market or load_market(config.data, None if split == "all" else config.split)  # all: no folds
    sessions = sessions_for(market, split)
    if len(sessions) == 0:
        raise UserError(f"split '{split}' has no trading days in {market.bars.source}")
    model, vec, model_path = load_policy(run_dir, config.ppo.device, config.ppo.normalize_observations)
    say = (lambda *a: None) if request.quiet else (lambda *a: print(*a, flush=True))
    say(f"evaluating {model_path} on {split}: {len(sessions)} days "
        f"({market.bars.session_dates[sessions.start]} to {market.bars.session_dates[sessions.stop - 1]})")

    def env():
        return evaluation_env(market, config.env, sessions)

    phase3 = config.env.phase == 3
    ablation_metrics = None
    llm_info: dict[str, str] = {}
    vcfg = request.verdict_config or VerdictConfig()
    agent_verdict: dict[str, float] | None = None
    if phase3:
        agent, agent_env, ablation_metrics, llm_info, agent_verdict = _phase3_agent(
            (model, vec), config, market, sessions, dataclasses.replace(request, verdict_config=vcfg), say, run_dir)
    else:
        agent_env = env()
        agent = run_policy(AgentPolicy(model, vec), agent_env, record_decisions=ALL_DECISIONS)
        if request.fresh_days:
            _fresh_days_into(agent, lambda: AgentPolicy(model, vec), market, config.env, sessions)
    rate = entry_rate(agent, agent_env)
    results = [agent, run_policy(FlatPolicy(), env())]
    randoms = [run_policy(RandomPolicy(rate, seed=s), env()) for s in range(seeds)]
    results += randoms
    results.append(run_policy(MomentumPolicy(), env()))

    prop = None
    if verdict:
        makers: list[tuple[str, Callable[[], Any]]] = [
            ("flat", FlatPolicy), ("random (seed 0)", lambda: RandomPolicy(rate, seed=0)), ("momentum", MomentumPolicy)]
        if agent_verdict is None:  # phase 3's was measured with its advisor, above
            makers.insert(0, (agent.name, lambda: AgentPolicy(model, vec)))
        say(f"prop-firm verdict ({verdict} attempts, at most {vcfg.max_days} days each) of the agent and baselines")
        figures = {} if agent_verdict is None else {agent.name: agent_verdict}
        figures.update({name: prop_verdict(make, market, config.env, sessions, vcfg, mode=verdict)
                        for name, make in makers})
        warning = small_sample_warning(figures[agent.name], len(sessions))
        prop = {"mode": verdict, "config": dataclasses.asdict(vcfg), "figures": figures,
                **({"warning": warning} if warning else {})}
    table = metrics_table(results)
    random_stats = table["random"]
    metrics = {name: m for name, m in table.items() if name != "random"}
    metrics["random"] = {k: (v["mean"] if "mean" in v else _mode(v)) if isinstance(v, dict) else v
                         for k, v in random_stats.items()}

    contract = contract_record(config.env.market or market.bars.market)  # as the environment prices trades
    bars = market.bars.frame.iloc[
        int(market.bars.session_bounds[sessions.start, 0]): int(market.bars.session_bounds[sessions.stop - 1, 1]) + 1]
    prices = bars["close"]
    if ablation_metrics is not None:
        own = out_dir == run.eval_dir(split)
        ablation_path = run.ablation_path if own else out_dir.parent / run.ablation_path.name
        atomic_write_text(ablation_path, json.dumps(jsonable(ablation_metrics), indent=2))
    save_results(results, prices, out_dir, metrics=table, ohlc=bars,
                 info={"split": split, "run_dir": str(run_dir), "model": str(model_path),
                       "model_sha256": sha256_file(model_path), "data": data, "seeds": seeds, "entry_rate": rate,
                       "contract": contract, **(pricing or {}),
                       **llm_info, **({"advisor_override": llm_overrides} if llm_overrides else {}),
                       **({"prop_verdict": prop} if prop else {})})
    (out_dir / "STALE.json").unlink(missing_ok=True)
    dates = (str(market.bars.session_dates[sessions.start]), str(market.bars.session_dates[sessions.stop - 1]))
    per_seed = {r.name: compute_metrics(r) for r in randoms}
    extra = {"entry_rate": rate, "agent_actions": agent.extra.get("actions"), "contract": contract,
             **{k: v for k, v in (pricing or {}).items() if k == "contract_note"}}
    if phase3:
        extra["llm"] = agent.extra.get("llm")
        extra["ablation"] = ablation_metrics
    extra.update({k: agent.extra[k] for k in ("trust", "llm_warning", "explained", "fresh_days", "fresh_day_pnl")
                  if agent.extra.get(k)})
    if prop:
        extra["prop_verdict"] = prop
    return EvaluationOutput(split, out_dir, metrics, random_stats, dates, per_seed, extra)


def _fresh_days_into(agent: StrategyResult, make_policy: Callable[[], Any], market: Any, env_config: Any,
                    sessions: Any, **env_kwargs: Any) -> None:
    """The agent's days each traded from a fresh account (``runner.trade_fresh_days``) and momentum's alike, into
    ``agent.extra`` (saved with it): ``fresh_days`` the figures, ``fresh_day_pnl`` the days (``dates``, ``agent``,
    ``momentum``)."""
    fresh = trade_fresh_days(make_policy, market, env_config, sessions, **env_kwargs)
    momentum = trade_fresh_days(MomentumPolicy, market, env_config, sessions)
    agent.extra["fresh_days"] = fresh.figures()
    agent.extra["fresh_day_pnl"] = {"dates": list(fresh.dates), "agent": list(fresh.pnl),
                                    "momentum": list(momentum.pnl)}


def verdict_measurable(config: RunConfig, llm_overrides: dict | None = None) -> bool:
    """Whether ``evaluate --verdict`` measures this run's agent: phases 1 and 2 always; phase 3 with the distilled
    student only (its advisor is asked on every bar of every attempt)."""
    return config.env.phase != 3 or (llm_overrides or {}).get("backend", config.llm.backend) == "student"


def _phase3_agent(policy: tuple[Any, Any], config: RunConfig, market: Any, sessions: Any,
                  request: EvaluationRequest, say: Any, run_dir: Path,
                  ) -> tuple[StrategyResult, Any, dict | None, dict[str, str], dict[str, float] | None]:
    """The hybrid agent (``policy``: the model and its normaliser) with its advisor over the split: ``(result,
    its env, RL-only ablation, llm info, its prop-firm verdict or None)``; the verdict's attempts each start a
    fresh agent (and advisor history), with the risk veto, while the advisor is open."""
    model, vec = policy
    strategy, llm_overrides, verdict = request.strategy, request.llm_overrides, request.verdict
    fusion = dataclasses.replace(config.fusion, strategy=strategy) if strategy else config.fusion
    made = run_advisor(config, llm_overrides, homes=[run_dir])
    advisor, llm_config = made.advisor, made.llm
    llm_info = {"llm_backend": llm_config.backend, "llm": advisor.backend.describe(),
                # a leaning model undivided: its constant lean is in every answer (say so where the figures are)
                "llm_calibration": made.calibration_record}
    say(f"LLM advisor: {llm_config.backend} ({llm_config.mode} mode), fusion {fusion.strategy} "
        f"({fusion.mode}), llm_weight {fusion.llm_weight}")
    agent_env = evaluation_env(market, config.env, sessions, risk_veto=make_veto(config.risk))
    ablation_metrics = None
    try:
        hybrid = HybridAgentPolicy(model, vec, advisor, market, fusion)
        agent = run_policy(hybrid, agent_env, record_decisions=ALL_DECISIONS)
        hybrid.finish()  # learned fusion: the trust by trend and volatility (into the llm figures)
        if request.explain:
            from hybrid_trader.evaluation.explain import explain_decisions, explainer_config  # --explain only

            agent.extra["explained"] = explain_decisions(hybrid.samples, hybrid.sample_contexts,
                                                         explainer_config(llm_config, request.explain_llm),
                                                         request.explain, say=say)
        def hybrid_policy() -> HybridAgentPolicy:
            advisor.reset()  # a fresh account (a day, an attempt): the query history starts again too
            return HybridAgentPolicy(model, vec, advisor, market, fusion)

        if request.fresh_days:
            _fresh_days_into(agent, hybrid_policy, market, config.env, sessions, risk_veto=make_veto(config.risk))
        agent_verdict = None
        if verdict:
            agent_verdict = prop_verdict(hybrid_policy, market, config.env, sessions, request.verdict_config,
                                         mode=verdict, risk_veto=make_veto(config.risk))
        if "trust" in hybrid.result_extra:
            agent.extra["trust"] = hybrid.result_extra["trust"]
        kept = ("llm/avg_latency_ms", "llm/p95_latency_ms", "llm/error_rate", "llm/label_coverage",
                "llm/cache_hits", *HEALTH_STAT_NAMES)
        agent.extra.setdefault("llm", {}).update({k: v for k, v in advisor.stats().items() if k in kept})
        notice = advisor.health.rl_only_notice()
        if notice:  # a failing back end: the "hybrid" figures are RL-only, and must not be read otherwise
            agent.extra["llm_warning"] = notice
            warn_loudly(notice)
        if request.ablation:
            rl_only = run_policy(HybridAgentPolicy(model, vec, advisor, market, fusion, use_llm=False, name="RL only"),
                                 evaluation_env(market, config.env, sessions, risk_veto=make_veto(config.risk)))
            ablation_metrics = {"hybrid (RL + LLM)": compute_metrics(agent),
                                "RL only (llm_weight 0)": compute_metrics(rl_only)}
    finally:
        advisor.close()
    return agent, agent_env, ablation_metrics, llm_info, agent_verdict


def _mode(aggregated: dict) -> Any:
    """Most frequent value of an aggregated text metric ({"counts": {...}})."""
    counts = aggregated.get("counts") or {}
    return max(counts, key=lambda k: counts[k]) if counts else None


HEADLINE = ["Net PnL [$]", "Return [%]", "Sharpe (ann.)", "Max drawdown [$]", "Win rate [%]", "Profit factor",
            "Trades", "Avg trade [$]", "Exposure [%]", "PSR [%]", "Apex verdict"]


def format_table(metrics: dict[str, dict], rows: list[str] | None = None, columns: list[str] | None = None) -> str:
    """Metrics as a text table: labelled rows, one column per strategy."""
    columns = columns or [c for c in ("agent", "flat", "random", "momentum") if c in metrics]
    rows = rows or list(next(iter(metrics.values())).keys())
    width = max(len(r) for r in rows) + 2
    cw = max([14] + [len(c) + 2 for c in columns])
    lines = [" " * width + "".join(f"{c:>{cw}}" for c in columns)]
    for r in rows:
        cells = []
        for c in columns:
            v = metrics[c].get(r)
            if isinstance(v, float):
                cells.append(f"{v:>{cw},.2f}" if np.isfinite(v) else f"{str(v):>{cw}}")
            elif v is None:
                cells.append(f"{'-':>{cw}}")
            else:
                cells.append(f"{str(v):>{cw}}")
        lines.append(f"{r:<{width}}" + "".join(cells))
    return "\n".join(lines)
