"""The library under the ``dsdr-eval`` CLI: ``options`` (frozen option dataclasses and the CLI's value
checks), ``evaluation`` (run), ``analysis`` (score, import, diversity, judge, report), ``sweeping`` (sweep) and
``public`` (the keyword functions ``dsdr_eval.evaluate`` & co.)."""
