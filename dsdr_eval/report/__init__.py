"""Reports over evaluation runs (``dsdr-eval report``).

* `runs`      - load a run (metrics.json + config.json) and its protocol; protocol comparison
* `tables`    - the paper's Table 1 layout (Markdown / LaTeX booktabs / CSV) and the other tables
* `plots`     - Pass@k curves, diversity, judge-vs-Pass@32, training dynamics (matplotlib Agg)
* `compare`   - paired bootstrap comparison of two runs on the same problems
* `reference` - the published DSDR Table 1 (package data ``dsdr_eval/data/paper_table1.json``)
* `build`     - assembles the report directory; `cli` is the ``report`` subcommand
"""
