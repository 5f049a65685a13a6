"""Diversity metrics: DSDR's d = (D_emb + D_eq)/2 (arXiv 2602.19895; docs/ALGORITHMS.md §3.1), DARLING partitions
(arXiv 2509.02534), Vendi scores, Coverage@N, distinct-n, self-BLEU and answer diversity.

An equivalence for the partition metrics is built by name with
``dsdr_eval.partition_methods.make_equivalence`` (it sits above this package and ``dsdr_eval.judge``).

Group-level functions (imported by the trainer) load no heavy library at import time;
torch / sentence-transformers / transformers are imported inside the functions that need them.
"""

from dsdr_eval.diversity.combined import (
    DsdrDiversity,
    dsdr_diversity,
    dsdr_diversity_batch,
    dsdr_from_parts,
)
from dsdr_eval.diversity.formula import (
    EXTRACTION_RULE,
    EXTRACTION_RULES,
    FORMULA_RULES,
    extract_formulas,
    formula_set,
    formula_uniqueness,
    normalize_formula,
)
from dsdr_eval.diversity.partition import (
    DEFAULT_COSINE_THRESHOLD,
    AnswerFormulaEquivalence,
    EmbeddingThresholdEquivalence,
    PairClassifierEquivalence,
    coverage_at_n,
    darling_div,
    darling_partition,
    gini_simpson,
)
from dsdr_eval.diversity.run import compute_run_diversity
from dsdr_eval.diversity.semantic import (
    DEFAULT_ENCODER,
    Encoder,
    embed_texts,
    load_encoder,
    semantic_diversity,
)
from dsdr_eval.equivalence import Equivalence, GroupView

__all__ = [
    "DEFAULT_COSINE_THRESHOLD", "DEFAULT_ENCODER", "EXTRACTION_RULE", "EXTRACTION_RULES", "FORMULA_RULES",
    "AnswerFormulaEquivalence", "DsdrDiversity", "EmbeddingThresholdEquivalence", "Encoder",
    "Equivalence", "GroupView", "PairClassifierEquivalence", "compute_run_diversity", "coverage_at_n",
    "darling_div", "darling_partition", "dsdr_diversity", "dsdr_diversity_batch", "dsdr_from_parts",
    "embed_texts", "extract_formulas", "formula_set", "formula_uniqueness", "gini_simpson",
    "load_encoder", "normalize_formula",
    "semantic_diversity",
]
