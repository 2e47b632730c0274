"""Studies: seeds x walk-forward folds x variants, each trial train -> evaluate, run on Ray.

``hybrid-trader study STUDY.yaml`` (docs/STUDY.md). :mod:`spec` reads the study file,
:mod:`trials` runs one trial in-process, :mod:`engine` schedules them on Ray and gathers the
table, :mod:`stats` gives confidence intervals, paired comparisons and the Deflated Sharpe
Ratio, :mod:`report` writes the HTML page; :mod:`fingerprint` records the machine and libraries of each trial,
:mod:`replicate` reruns a study with fresh seeds and judges its verdicts again, :mod:`confirm` evaluates its
finished trials on later data.
"""
