"""LLM-as-judge diversity (docs/ALGORITHMS.md §5) and a pairwise equivalence hook for DARLING (§4).

Light imports only: the heavy work happens in ``dsdr_eval.llm_judge.run`` (which imports ``openai``
lazily through ``dsdr_eval.openai_api.client``)."""
