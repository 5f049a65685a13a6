"""The run directory, the one data contract every component reads and writes (docs/run_directory.md).

- ``directory``: the layout, the one-writer lock, atomic commits, config.json and metrics.json writers;
- ``jsonl`` / ``json_values``: line-numbered strict JSONL reading, crash-tolerant appends, exact numbers;
- ``samples``: the typed record of one samples.jsonl / graded.jsonl line;
- ``results`` / ``result_fields``: the one typed reader of a finished run (``load_run``);
- ``checkpoints``: a training run's checkpoint layout, which the trainer writes and the sweep reads.
"""
