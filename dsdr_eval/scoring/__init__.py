"""Scoring a run: grading its samples (``score``: graded.jsonl, metrics.json), the metrics of one pass
(``metrics``: avg@n, pass@k, maj@k, bootstrap CIs; ``budget_curve``: accuracy against token budget), the
checks of a samples file before grading (``checks``), the LLM judge's second opinion (``judge_grading``)
and the listing of audit-flagged samples (``audit_listing``)."""
