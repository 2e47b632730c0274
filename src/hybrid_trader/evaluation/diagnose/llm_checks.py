"""Checks on the LLM advisor: server health, query rate, confidence, agreement, advice age, hybrid vs RL-only,
student fidelity, a constant student.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_trader.evaluation.diagnose.findings import (
    Finding,
    RunView,
    Skip,
    Thresholds,
    _mean,
    _number,
    _values,
)
from hybrid_trader.llm.backends.base import ERROR_KINDS, ERROR_PARSE
from hybrid_trader.run.advice_dataset import FLAT_TOP_SHARE, student_metrics_path


# ---------------------------------------------------------------------------------------
# Checks: the LLM advisor
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LLMHealth:
    """Failure counts of the advisor in one part of the run (training, or an evaluation split)."""

    source: str
    """Where they were logged: 'training' or 'evaluation (<split>)'."""
    queries: float
    """Model queries sent (the denominator of the error rate)."""
    errors: dict[str, float]
    """Failed queries by kind (``llm/errors_<kind>``)."""
    error_rate_pct: float
    circuit_opened: float

    @property
    def failed(self) -> float:
        return sum(v for k, v in self.errors.items() if k != ERROR_PARSE)

    @property
    def dominant(self) -> str | None:
        kinds = {k: v for k, v in self.errors.items() if v > 0}
        return max(kinds, key=kinds.__getitem__) if kinds else None


def _health_from(stats: Mapping[str, Any], source: str) -> LLMHealth | None:
    errors = {k: _number(stats.get(f"llm/errors_{k}")) for k in ERROR_KINDS}
    if all(v is None for v in errors.values()):
        return None
    errs = {k: v or 0.0 for k, v in errors.items()}
    queries = _number(stats.get("llm/total_queries"))
    rate = _number(stats.get("llm/error_rate_pct"))
    if queries is None or queries < sum(errs.values()):
        queries = sum(errs.values()) if rate in (None, 0.0) else 100.0 * sum(errs.values()) / rate
    if rate is None:
        rate = 100.0 * sum(errs.values()) / queries if queries else 0.0
    return LLMHealth(source, queries, errs, rate, _number(stats.get("llm/circuit_opened")) or 0.0)


def llm_health(run: RunView) -> list[LLMHealth]:
    """The advisor's failure counts: training (last logged update: the counts are run totals) and evaluations."""
    out = []
    logged = [r for r in run.progress if any(k.startswith("llm/errors_") for k in r)]
    if logged:
        h = _health_from(logged[-1], "training")
        if h is not None:
            out.append(h)
    for split, llm in run.eval_llm.items():
        h = _health_from(llm, f"evaluation ({split})")
        if h is not None:
            out.append(h)
    return out


def _server(run: RunView) -> tuple[str, str | None]:
    """The back end in use and, for a server, its URL."""
    llm = run.llm
    if llm is None:
        return "unknown", None
    return llm.backend, (llm.openai.base_url if llm.backend == "openai" else None)


def _unreachable(run: RunView, th: Thresholds) -> list[LLMHealth]:
    return [h for h in llm_health(run) if h.queries and h.errors.get("connection", 0.0) > 0
            and 100.0 * h.errors["connection"] / h.queries >= th.unreachable_min_share_pct]


def _auth_failed(run: RunView, th: Thresholds) -> list[LLMHealth]:
    return [h for h in llm_health(run) if h.errors.get("auth", 0.0) >= th.min_auth_errors]


def check_llm_server(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    """LLM_AUTH_FAILED, LLM_UNREACHABLE and LLM_ERROR_RATE_HIGH from the advisor's error counts."""
    health = llm_health(run)
    if not health:
        phase = (run.status or {}).get("phase")
        return Skip("llm/errors_<kind> not logged" if phase == 3 or run.eval_llm else None)
    backend, url = _server(run)
    where = f"the LLM server at {url}" if url else f"the {backend} back end"
    out: list[Finding] = []
    auth = _auth_failed(run, th)
    if auth:
        llm = run.llm
        var = (llm.openai.api_key_env if llm is not None else "") or "OPENAI_API_KEY"
        ev: dict[str, Any] = {}
        for h in auth:
            ev[f"queries refused for credentials ({h.source})"] = int(h.errors["auth"])
            ev[f"model queries ({h.source})"] = int(h.queries)
        ev["key variable (llm.openai.api_key_env)"] = var
        out.append(Finding(
            "LLM_AUTH_FAILED", "error", f"{where} refused the API key (HTTP 401/403): no advice was given", ev,
            f"export {var}=<a valid key> in the shell that trains and evaluates (the key is read from the "
            f"environment variable named in llm.openai.api_key_env, never from a file), then re-run",
        ))
    down = [h for h in _unreachable(run, th) if h not in auth]
    if down:
        ev = {}
        for h in down:
            ev[f"connection errors ({h.source})"] = int(h.errors["connection"])
            ev[f"model queries ({h.source})"] = int(h.queries)
            if h.circuit_opened:
                ev[f"circuit opened ({h.source})"] = int(h.circuit_opened)
        ev["threshold [% of queries]"] = th.unreachable_min_share_pct
        if url:
            ev["server"] = url
        out.append(Finding(
            "LLM_UNREACHABLE", "error",
            f"{where} could not be reached for the whole run: it was down, so every decision was RL-only", ev,
            (f"start the server at {url} (e.g. python -m llama_cpp.server --model M.gguf --port PORT) or correct "
             "llm.openai.base_url, check it with `hybrid-trader llm ask`, then re-run" if url else
             f"check that the {backend} back end can start (`hybrid-trader llm ask`), then re-run"),
        ))
    if auth or down:
        return out
    high = [h for h in health
            if h.queries >= th.min_llm_queries_for_rate and h.error_rate_pct > th.max_llm_error_rate_pct]
    if high:
        worst = max(high, key=lambda h: h.error_rate_pct)
        kind = worst.dominant or "other"
        ev = {}
        for h in high:
            ev[f"error rate [%] ({h.source})"] = h.error_rate_pct
            ev[f"model queries ({h.source})"] = int(h.queries)
        ev["threshold [%]"] = th.max_llm_error_rate_pct
        ev["dominant error kind"] = kind
        ev.update({f"errors: {k}": int(v) for k, v in worst.errors.items() if v})
        out.append(Finding(
            "LLM_ERROR_RATE_HIGH", "error" if worst.error_rate_pct >= 50 else "warning",
            f"{worst.error_rate_pct:.0f} % of the LLM queries failed ({worst.source}), mostly {kind}: those "
            "decisions had no advice", ev, ERROR_KIND_FIXES.get(kind, ERROR_KIND_FIXES["other"]).format(where=where),
        ))
    return out


ERROR_KIND_FIXES: dict[str, str] = {
    "timeout": "{where} answers too slowly: raise llm.openai.request_timeout_s / llm.batching.timeout_s, use a "
               "smaller or faster model (a GPU), or fewer environments",
    "http_5xx": "{where} fails internally (HTTP 5xx): read the server's log (out of memory, context too long), "
                "restart it, or lower llm.openai.parallel_requests",
    "http_4xx": "{where} rejects the requests (HTTP 4xx): check llm.openai.model against its /v1/models list and "
                "llm.openai.scoring_endpoint (completions needs logprobs support)",
    "garbage": "{where} does not answer OpenAI JSON: llm.openai.base_url must end with /v1 and point at the "
               "server itself, not a proxy's error page",
    "parse": "the model's written answers name no action: use scoring mode (llm.mode: score), or a larger model",
    "connection": "{where} dropped connections during the run: check that it stays up (memory, restarts) and "
                  "its address llm.openai.base_url",
    "auth": "{where} refused the API key: export the variable named in llm.openai.api_key_env",
    "other": "{where} raised errors: run `hybrid-trader llm ask` to see the message, and read the training log",
}
"""The fix of LLM_ERROR_RATE_HIGH for each dominant error kind."""


def _llm_logged(run: RunView) -> bool:
    return any(k.startswith(("llm/", "confidence/llm", "fusion/")) for r in run.recent for k in r)


def _query_rate(run: RunView, th: Thresholds) -> tuple[bool, dict[str, Any]]:
    """Whether the query rate is low, and its evidence."""
    q = _values(run.recent, "llm/query_rate_pct")
    qc = _values(run.recent, "llm/configured_query_rate_pct")
    ev: dict[str, Any] = {"query rate [%]": _mean(q)}
    if qc:
        ev["configured query rate [%]"] = _mean(qc)
        ev["min ratio"] = th.min_query_rate_ratio
        return _mean(q) < th.min_query_rate_ratio * _mean(qc), ev
    ev["threshold [%]"] = th.min_query_rate_pct
    return _mean(q) < th.min_query_rate_pct, ev


def _confidence_low(run: RunView, th: Thresholds) -> bool:
    conf = _values(run.recent, "confidence/llm_avg")
    return bool(conf) and _mean(conf) < th.min_llm_confidence


def check_llm_query_rate(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if not _llm_logged(run):
        phase = (run.status or {}).get("phase")
        return Skip("phase 3 but no llm/, confidence/ or fusion/ keys logged" if phase == 3 else None)
    recent = run.recent
    if not _values(recent, "llm/query_rate_pct"):
        return Skip("llm/query_rate_pct not logged")
    low, ev = _query_rate(run, th)
    if not low or _unreachable(run, th) or _auth_failed(run, th):
        return []  # a dead server or a refused key explains the rate: LLM_UNREACHABLE / LLM_AUTH_FAILED say so
    lag = _values(recent, "llm/answer_lag_steps")
    max_age = _values(recent, "llm/max_advice_age_steps")
    slow_model = bool(lag) and _mean(lag) > (_mean(max_age) if max_age else th.max_advice_age_steps)
    if slow_model:
        ev["model answer lag (mean) [steps]"] = _mean(lag)
    backend, _ = _server(run)
    if not slow_model:
        fix = ("lower the query interval and cooldown, lower the RL-confidence threshold that triggers a query, and "
               "check that queries are not dropped (timeouts, a full queue)")
    elif backend == "openai":  # never suggest the back end already in use
        fix = ("the model is the bottleneck: the server answers a batch while training takes hundreds of steps; "
               "serve a smaller model or use a GPU server, raise llm.openai.parallel_requests, or use fewer "
               "environments")
    else:
        fix = ("the model is the bottleneck: it answers a batch while training takes hundreds of steps; use a GPU "
               "(llm.transformers.device: cuda), a served model (--llm openai), or fewer environments")
    return [Finding("LLM_QUERY_RATE_LOW", "error", "the LLM is asked far less often than intended, so it cannot help",
                    ev, fix)]


def check_llm_confidence(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if not _llm_logged(run):
        return Skip(None)
    conf = _values(run.recent, "confidence/llm_avg")
    if not conf:
        return Skip("confidence/llm_avg not logged")
    if not _confidence_low(run, th):
        return []
    abstain = _values(run.recent, "llm/abstain_rate_pct")
    return [Finding(
        "LLM_CONFIDENCE_NEAR_ZERO", "error", "the LLM's confidence is near zero: it is effectively abstaining",
        {"LLM confidence (mean)": _mean(conf), "threshold": th.min_llm_confidence,
         **({"abstain rate [%]": _mean(abstain)} if abstain else {})},
        "use scoring mode (log-probabilities of the action names) rather than parsed generations, shorten the "
        "prompt, check the answers in the LLM log (e.g. 'HOLD | 0.0'), or try another model",
    )]


def check_llm_agreement(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if not _llm_logged(run):
        return Skip(None)
    recent = run.recent
    agree = _values(recent, "fusion/agreement_pct")
    if not agree:
        return Skip("fusion/agreement_pct not logged")
    abstain = _values(recent, "llm/abstain_rate_pct")
    conf = _values(recent, "confidence/llm_avg")
    q = _values(recent, "llm/query_rate_pct")
    query_low = bool(q) and _query_rate(run, th)[0]
    abstaining = (abstain and _mean(abstain) >= th.high_abstain_pct) or _confidence_low(run, th) or query_low
    if not (_mean(agree) >= th.high_agreement_pct and abstaining):
        return []
    ev: dict[str, Any] = {"agreement [%]": _mean(agree), "high agreement threshold [%]": th.high_agreement_pct}
    if abstain:
        ev["abstain rate [%]"] = _mean(abstain)
    if conf:
        ev["LLM confidence (mean)"] = _mean(conf)
    if q:
        ev["query rate [%]"] = _mean(q)
    return [Finding(
        "LLM_AGREEMENT_FROM_ABSTENTION", "warning",
        "RL and LLM agree almost always, but only because the LLM abstains or is rarely asked",
        ev,
        "do not read the agreement as the LLM endorsing the policy: fix the abstentions (timeouts, parse "
        "failures, confidence) and compare against the RL-only ablation",
    )]


def check_llm_advice_age(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if not _llm_logged(run):
        return Skip(None)
    recent = run.recent
    age = _values(recent, "llm/advice_age_mean_steps")
    lag = _values(recent, "llm/answer_lag_steps")
    max_age = _values(recent, "llm/max_advice_age_steps")
    if not (age or lag):
        return Skip("llm/advice_age_mean_steps not logged")
    ev: dict[str, Any] = {"advice age (mean) [steps]": _mean(age)} if age else {}
    if max_age and _mean(max_age) > 0:
        limit = th.max_advice_age_ratio * _mean(max_age)
        ev["configured max age [steps]"] = _mean(max_age)
    else:
        limit = th.max_advice_age_steps
    ev["threshold [steps]"] = limit
    # a model slower than the maximum age: its answers expire before they are read
    too_slow = bool(lag) and _mean(lag) > (_mean(max_age) if max_age and _mean(max_age) > 0 else limit)
    if lag:
        ev["model answer lag (mean) [steps]"] = _mean(lag)
    if not ((age and _mean(age) > limit) or too_slow):
        return []
    return [Finding(
        "LLM_ADVICE_STALE", "warning",
        "LLM advice arrives many steps after it was asked for" + (
            ": the model answers more slowly than the maximum age, so most answers expire unread"
            if too_slow else ""),
        ev,
        "make answers faster: batch more queries, use scoring mode or fewer max_new_tokens, a smaller model, "
        "a GPU or a faster server; or fewer environments; or allow older advice (llm.batching.max_age_steps)",
    )]


# ---------------------------------------------------------------------------------------
# Checks: evaluation
# ---------------------------------------------------------------------------------------
HYBRID_COLUMN = "hybrid"
"""eval/ablation.json column of the hybrid agent: the first whose name starts with this (case-insensitive)."""
RL_ONLY_COLUMN = "rl only"
"""eval/ablation.json column of the RL-only ablation: the first whose name starts with this."""


def _column(table: Mapping[str, Any], prefix: str) -> tuple[str, Mapping[str, Any]] | None:
    for name, metrics in table.items():
        if str(name).lower().startswith(prefix) and isinstance(metrics, Mapping):
            return str(name), metrics
    return None


def _same(a: Any, b: Any, rel_tol: float) -> bool | None:
    """Equal figures (None: not comparable)."""
    if isinstance(a, dict) and isinstance(b, dict):  # aggregated over seeds
        a, b = a.get("mean"), b.get("mean")
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        return math.isclose(x, y, rel_tol=rel_tol, abs_tol=rel_tol)
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return None


def _no_effect_reason(run: RunView) -> tuple[str, str, dict[str, Any]]:
    """Why the advice changed nothing: (reason, fix, evidence), from the evaluation's LLM figures and the logs."""
    ev: dict[str, Any] = {}
    weights = [_number(llm.get("LLM weight")) for llm in run.eval_llm.values()]
    weights = [w for w in weights if w is not None]
    if not weights and run.config is not None and run.config.fusion.strategy == "prior":
        weights = [float(run.config.fusion.llm_weight)]
    opened = [h for h in llm_health(run) if h.circuit_opened or (h.queries and h.failed >= h.queries)]
    advised = [_number(llm.get("Advised decisions [%]")) for llm in run.eval_llm.values()]
    advised = [a for a in advised if a is not None]
    if opened:
        h = opened[0]
        ev.update({f"failed queries ({h.source})": int(h.failed), f"model queries ({h.source})": int(h.queries),
                   f"circuit opened ({h.source})": int(h.circuit_opened), "dominant error kind": h.dominant})
        return ("the LLM server failed and the circuit opened, so the hybrid agent decided RL-only",
                "fix the LLM server (see LLM_UNREACHABLE / LLM_AUTH_FAILED / LLM_ERROR_RATE_HIGH), then evaluate "
                "again: these figures are RL-only", ev)
    if weights and all(w == 0 for w in weights):
        ev["LLM weight"] = weights[0]
        return ("the LLM weight is 0, so the advice cannot change a decision",
                "set fusion.llm_weight above 0 (or use fusion.strategy: rules) and evaluate again", ev)
    if advised and all(a == 0 for a in advised):
        ev["advised decisions [%]"] = advised[0]
        return ("no advice arrived: every decision was taken without an answer from the LLM",
                "check the LLM server and its log (`hybrid-trader llm ask`), the query policy (llm.query) and "
                "timeouts (llm.batching.timeout_s); then evaluate again", ev)
    return ("the advice arrived but never changed a decision",
            "the prior is too weak against the RL logits: raise fusion.llm_weight, try fusion.strategy: rules, or "
            "accept that the LLM adds nothing for this policy", ev)


def check_hybrid_vs_rl_only(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if run.ablation is None:
        return Skip(None)
    hybrid, rl_only = _column(run.ablation, HYBRID_COLUMN), _column(run.ablation, RL_ONLY_COLUMN)
    if hybrid is None or rl_only is None:
        return Skip("eval/ablation.json has no hybrid and RL-only columns")
    (h_name, h), (r_name, r) = hybrid, rl_only
    compared = [(k, _same(h[k], r[k], th.hybrid_equal_rel_tol)) for k in h if k in r]
    compared = [(k, same) for k, same in compared if same is not None]
    if not compared or not all(same for _, same in compared):
        return []
    reason, fix, ev = _no_effect_reason(run)
    evidence: dict[str, Any] = {"figures compared": len(compared), "columns": f"{h_name} vs {r_name}"}
    for key in ("Net PnL [$]", "Trades", "Sharpe (ann.)"):
        if key in h:
            evidence[f"{key} (both)"] = h[key]
    evidence.update(ev)
    return [Finding("HYBRID_EQUALS_RL_ONLY", "error",
                    f"the hybrid agent's evaluation equals the RL-only ablation in every figure: {reason}",
                    evidence, fix)]


STUDENT_AGREEMENT = "Top-1 agreement [%]"
"""The fidelity figure of ``student_metrics.json`` (written by ``hybrid-trader advise distill``) that is checked."""


def check_student_fidelity(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    """A run advised by the distilled student: its top-1 agreement with the LLM on held-out days."""
    llm = run.llm
    if llm is None or llm.backend != "student":
        return Skip(None)
    if not llm.student.path:
        return Skip("llm.student.path is empty")
    path = Path(llm.student.path).with_name("student_metrics.json")
    if not path.is_file():
        return Skip(f"{path} not found (written by hybrid-trader advise distill)")
    try:
        metrics = json.loads(path.read_text()).get("metrics", {})
    except (OSError, ValueError, AttributeError) as err:
        return Skip(f"{path} is not readable JSON ({type(err).__name__})")
    # test days when collected (never used while distilling), else the validation days
    split = next((s for s in ("test", "val") if isinstance(metrics.get(s), dict) and STUDENT_AGREEMENT in metrics[s]),
                 None)
    if split is None:
        return Skip(f"{path} has no held-out {STUDENT_AGREEMENT!r}")
    agree = float(metrics[split][STUDENT_AGREEMENT])
    if agree >= th.min_student_agreement_pct:
        return []
    ev: dict[str, Any] = {f"top-1 agreement on {split} days [%]": agree, "threshold [%]": th.min_student_agreement_pct,
                          "student": str(llm.student.path)}
    for key in ("Majority baseline [%]", "Mean KL [nats]", "Rows"):
        if key in metrics[split]:
            ev[key] = metrics[split][key]
    run_dir = Path(llm.student.path).parent.parent
    return [Finding(
        "STUDENT_FIDELITY_LOW", "error",
        "the distilled student often advises otherwise than the LLM it stands for, so its advice is not the LLM's",
        ev, f"collect more advice (hybrid-trader advise collect {run_dir} --sampled 2, and the val split) and "
            f"distil longer or wider (hybrid-trader advise distill {run_dir} --epochs N); check with "
            f"hybrid-trader advise compare {run_dir}",
    )]




def _student_metrics(run: RunView) -> Path | None:
    """The metrics of the student that advises this run (``llm.student.path``), else of the one distilled in it."""
    llm = run.llm
    if llm is not None and llm.backend == "student" and llm.student.path:
        return Path(llm.student.path).with_name("student_metrics.json")
    own = student_metrics_path(run.run_dir)
    return own if own.is_file() else None


def check_student_constant(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    """A distilled student whose top action is the same in more than ``max_student_flat_top_pct`` of the flat
    states of held-out days: it copies a constant (often a model's raw lean) into every phase 3 decision."""
    path = _student_metrics(run)
    if path is None:
        return Skip(None)
    if not path.is_file():
        return Skip(f"{path} not found (written by hybrid-trader advise distill)")
    try:
        data = json.loads(path.read_text())
        metrics, info = data.get("metrics", {}), data.get("info", {})
    except (OSError, ValueError, AttributeError) as err:
        return Skip(f"{path} is not readable JSON ({type(err).__name__})")
    split = next((s for s in ("test", "val") if isinstance(metrics.get(s), dict)
                  and isinstance(metrics[s].get(FLAT_TOP_SHARE), (int, float))
                  and not math.isnan(metrics[s][FLAT_TOP_SHARE])), None)
    if split is None:
        return Skip(f"{path} has no {FLAT_TOP_SHARE!r} (distilled before it was measured: advise distill again)")
    share = float(metrics[split][FLAT_TOP_SHARE])
    if share <= th.max_student_flat_top_pct:
        return []
    run_dir = path.parent.parent
    top = (info.get("flat_top_action") or {}).get(split)
    raw = info.get("raw_advice")
    ev: dict[str, Any] = {f"top action share in flat states of {split} days [%]": share,
                          "top action": top, "flat states": metrics[split].get("Flat states"),
                          "threshold [%]": th.max_student_flat_top_pct, "student": str(path.with_name("student.pt"))}
    if raw:
        ev["advice"] = f"raw ({raw})"
    fix = (f"collect the advice calibrated and distil again: move {run_dir / 'advice'} away, then "
           f"hybrid-trader advise collect {run_dir} --split all (it fits the batch calibration first) and "
           f"hybrid-trader advise distill {run_dir}") if raw else (
        f"look at what the LLM advised in those states (hybrid-trader advise compare {run_dir}; "
        f"hybrid-trader advise calibrate {run_dir} --force shows the lean by trend); a student that says "
        f"{top or 'one action'} everywhere adds a constant to every decision")
    return [Finding(
        "STUDENT_CONSTANT", "error",
        f"the distilled student advises {top or 'the same action'} in {share:.0f}% of the flat states: its advice "
        "is a constant, not a reading of the market", ev, fix)]
