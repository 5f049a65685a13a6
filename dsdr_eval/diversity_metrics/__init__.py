"""Diversity metrics: DSDR's d = (D_emb + D_eq)/2 (arXiv 2602.19895; docs/ALGORITHMS.md §3.1), DARLING partitions
(arXiv 2509.02534), Vendi scores, Coverage@N, distinct-n, self-BLEU and answer diversity.

An equivalence for the partition metrics is built by name with
``dsdr_eval.diversity_metrics.partition_methods.make_equivalence`` (it sits above this package and ``dsdr_eval.llm_judge``).

Group-level functions (imported by the trainer) load no heavy library at import time;
torch / sentence-transformers / transformers are imported inside the functions that need them.
"""

from dsdr_eval.diversity_metrics.combined import dsdr_diversity, dsdr_diversity_batch
from dsdr_eval.diversity_metrics.formula import EXTRACTION_RULES, formula_set
from dsdr_eval.diversity_metrics.partition import darling_div, darling_partition
from dsdr_eval.diversity_metrics.semantic import embed_texts, load_encoder, semantic_diversity
from dsdr_eval.equivalence import Equivalence, GroupView

# what other packages import from here (the trainer, the judge, the CLI); everything else is imported
# from its module
__all__ = [
    "EXTRACTION_RULES", "Equivalence", "GroupView", "darling_div", "darling_partition", "dsdr_diversity",
    "dsdr_diversity_batch", "embed_texts", "formula_set", "load_encoder", "semantic_diversity",
]
