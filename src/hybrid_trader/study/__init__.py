"""Studies: seeds x walk-forward folds x variants, each trial train -> evaluate, run on Ray.

``hybrid-trader study STUDY.yaml`` (docs/STUDY.md). :mod:`spec` reads the study file,
:mod:`trials` runs one trial in-process, :mod:`engine` schedules them on Ray and gathers the
table, :mod:`stats` gives confidence intervals, paired comparisons and the Deflated Sharpe
Ratio, :mod:`report` writes the HTML page.
"""
