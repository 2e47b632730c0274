"""Does a study's verdict survive? The same trials with fresh seeds (``study --replicate``), judged again.

:func:`verdicts` reads the claims a study's summary makes: its declared hypotheses when it has them (each
``supported`` or ``not supported``), else, for every variant paired with the baseline and every paired figure,
the sign of the paired difference's 95% CI (``greater``, ``less``, or ``no difference`` when it holds 0).
:func:`compare_verdicts` takes two summaries (the study and its replica, or the study and its confirmation on
later data) and says for each claim whether it survives: a claim that holds in the first and not in the second
is **not supported**; so is an effect that appears only in the second.

:func:`replicate_study` runs (or continues) the study, then the same study with fresh seeds (the study's seeds
shifted by :data:`SEED_OFFSET`) in the sibling folder ``OUT-replicate``, and writes ``OUT-replicate/replication.json``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.metrics import jsonable
from hybrid_trader.evaluation.report import _esc
from hybrid_trader.run.files import atomic_write_text
from hybrid_trader.study.engine import TABLE, run_study
from hybrid_trader.study.hypotheses import PENDING
from hybrid_trader.study.reuse import reuse_into
from hybrid_trader.study.spec import StudySpec, load_study
from hybrid_trader.study.summary import PAIRED_FIGURES

SEED_OFFSET = 10_000
"""A replica's seeds are the study's plus this (a multiple of it above the largest): never one of the study's."""
REPLICA_SUFFIX = "-replicate"
"""The replica's folder: the study's folder's name with this suffix, beside it."""
REPLICATION = "replication.json"
NO_EFFECT = ("no difference", "not supported")
"""Verdicts that claim nothing."""


def replica_seeds(seeds: list[int]) -> list[int]:
    """Fresh seeds, as many as the study's and disjoint from them, the same every time (a replica resumes)."""
    offset = SEED_OFFSET * (1 + max(seeds) // SEED_OFFSET)
    return [int(s) + offset for s in seeds]


def replica_folder(out: str | Path) -> Path:
    """``OUT-replicate`` beside the study's folder."""
    out = Path(out).resolve()
    return out.with_name(out.name + REPLICA_SUFFIX)


def _ci_sign(d: dict[str, Any]) -> str:
    lo, hi = d.get("ci_low"), d.get("ci_high")
    if lo is None or hi is None or lo != lo or hi != hi:  # NaN: too few pairs for an interval
        return "no difference"
    return "greater" if lo > 0 else "less" if hi < 0 else "no difference"


def verdicts(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The claims of a study's summary, by name: its hypotheses' verdicts when it declares some (a list of
    ``{name, verdict, ...}`` or a mapping name -> ``{verdict, ...}``), else each paired difference's CI sign."""
    hypotheses = summary.get("hypotheses")
    if hypotheses:
        items = hypotheses.items() if isinstance(hypotheses, dict) else ((h["name"], h) for h in hypotheses)
        return {name: {"kind": "hypothesis", "verdict": h["verdict"],
                       **{k: h[k] for k in ("p_value", "p-value", "ci_low", "ci_high") if k in h}}
                for name, h in items}
    out: dict[str, dict[str, Any]] = {}
    for variant, paired in summary.get("paired vs baseline", {}).items():
        for figure in PAIRED_FIGURES:
            if figure in paired:
                d = paired[figure]
                out[f"{variant} - {summary.get('baseline')}: {figure}"] = {
                    "kind": "paired CI", "verdict": _ci_sign(d), "mean difference": d.get("mean difference"),
                    "ci_low": d.get("ci_low"), "ci_high": d.get("ci_high")}
    return out


def compare_verdicts(first: dict[str, Any], second: dict[str, Any], *, label: str = "replication"
                     ) -> list[dict[str, Any]]:
    """Each claim of ``first`` judged again in ``second`` (``label`` names it): its two verdicts, whether it
    survives, and the result: ``supported`` (an effect found both times), ``not supported`` (an effect that
    flipped or vanished, or that appears only in the second), ``no difference`` (none either time), ``pending``
    (not judged yet on one side: trials not run)."""
    a, b = verdicts(first), verdicts(second)
    rows = []
    for name in list(a) + [n for n in b if n not in a]:
        va = a.get(name, {}).get("verdict", "missing")
        vb = b.get(name, {}).get("verdict", "missing")
        claimed = va not in NO_EFFECT and va not in ("missing", PENDING)
        if PENDING in (va, vb):
            result, why = PENDING, f"{va} in the study, {vb} in the {label}: judged once both have run"
        elif claimed and va == vb:
            result, why = "supported", f"the same verdict ({va}) in the {label}"
        elif claimed:
            result, why = "not supported", f"{va} in the study, {vb} in the {label}"
        elif vb in NO_EFFECT or vb == "missing":
            result, why = "no difference", f"no effect in the study nor in the {label}"
        else:
            result, why = "not supported", f"{vb} only in the {label} ({va} in the study)"
        rows.append({"claim": name, "kind": a.get(name, b.get(name, {})).get("kind"), "study": va, label: vb,
                     "survives": va == vb and va != PENDING, "result": result, "why": why,
                     **{f"{label} {k}": b.get(name, {}).get(k) for k in ("mean difference", "ci_low", "ci_high")
                        if k in b.get(name, {})}})
    return rows


def verdicts_section(rows: list[dict[str, Any]], label: str) -> str:
    """The comparison as an HTML section of the study's report."""
    body = "".join(f'<tr><td class="l">{_esc(r["claim"])}</td><td>{_esc(r["study"])}</td><td>{_esc(r[label])}</td>'
                   f'<td class="l"><b>{_esc(r["result"])}</b>: {_esc(r["why"])}</td></tr>' for r in rows)
    return (f"<h2>Verdicts: study vs {_esc(label)}</h2>"
            '<p class="small">Each claim of the study judged again; a claim that does not hold in both is not '
            "supported.</p>"
            f'<table><thead><tr><th class="l">claim</th><th>study</th><th>{_esc(label)}</th><th class="l">result'
            f"</th></tr></thead><tbody>{body}</tbody></table>")


def replica_spec(spec: StudySpec) -> StudySpec:
    """The study with fresh seeds (everything else the same)."""
    return dataclasses.replace(spec, name=f"{spec.name}{REPLICA_SUFFIX}" if spec.name else "",
                               seeds=replica_seeds(spec.seeds))


def replicate_study(spec_path: str | Path, out: str | Path, *, workers: int | None = None,
                    address: str | None = None, progress: bool = True, reuse: str | Path | None = None,
                    say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or continue) the study in ``out``, then its replica with fresh seeds in ``OUT-replicate``; compare
    their verdicts. Returns the replication record (also ``OUT-replicate/replication.json``). ``reuse``: another
    study's folder whose trials the study shares (``study.reuse``); the replica reuses ``REUSE-replicate``'s."""
    from hybrid_trader.study.report import write_study_report  # matplotlib only when a report is written

    spec = load_study(spec_path)
    out = Path(out).resolve()
    if spec.space:
        raise UserError(f"{spec_path} is a search: it declares no hypotheses and no paired differences, so a "
                        "replica would have no verdict to judge again", file=str(spec_path),
                        fix="replicate a search by running it again with another sample_seed (and ppo.seed in its "
                            "space or base) into another --out, and compare the folds' selections and test figures")
    if reuse is not None:
        reuse_into(spec, out, reuse, say=say)
    original = run_study(spec, out, workers=workers, address=address, progress=progress, say=say)
    replica = replica_spec(load_study(spec_path))
    if not replica.name:
        replica.name = out.name + REPLICA_SUFFIX
    rout = replica_folder(out)
    say(f"replication: the same trials with seeds {replica.seeds} (the study's: {spec.seeds}) in {rout}")
    if reuse is not None:
        if replica_folder(reuse).is_dir():
            reuse_into(replica, rout, replica_folder(reuse), say=say)
        else:
            say(f"note: {replica_folder(reuse)} does not exist: the replica's trials are all run here")
    again = run_study(replica, rout, workers=workers, address=address, progress=progress, say=say)
    rows = compare_verdicts(original, again, label="replication")
    fps = {"study": sorted(original["fingerprints"]["by id"]), "replication": sorted(again["fingerprints"]["by id"])}
    record = {"study": str(out), "replication": str(rout), "seeds": {"study": spec.seeds, "replication": replica.seeds},
              "finished": {"study": [original["finished"], original["trials"]],
                           "replication": [again["finished"], again["trials"]]},
              "verdicts": rows, "fingerprints": {**fps, "same": fps["study"] == fps["replication"]},
              "not supported": [r["claim"] for r in rows if r["result"] == "not supported"]}
    atomic_write_text(rout / REPLICATION, json.dumps(jsonable(record), indent=1))
    again["report"] = str(write_study_report(rout, replica, again, pd.read_parquet(rout / TABLE),
                                             extra=[verdicts_section(rows, "replication")]))
    record["summary"] = again
    return record
