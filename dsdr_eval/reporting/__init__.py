"""Reports over evaluation runs (``dsdr-eval report``).

Each evaluation run is read by ``dsdr_eval.rundir.results.load_run`` (the reader the dashboard uses too).

* `runs`      - benchmark titles, protocol comparison across runs, training runs (``--train``)
* `tables`    - the paper's Table 1 layout (Markdown / LaTeX booktabs / CSV) and the other tables
* `readme`    - the report's README.md, one function per section
* `plots`     - Pass@k curves, diversity, judge-vs-Pass@32, training dynamics (matplotlib Agg)
* `compare`   - paired bootstrap comparison of two runs on the same problems
* `reference` - the published DSDR Table 1 (package data ``dsdr_eval/data/paper_table1.json``)
* `build`     - assembles the report directory; `cli` is the ``report`` subcommand
"""
