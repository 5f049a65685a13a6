"""LLM-as-judge diversity (docs/ALGORITHMS.md §5) and a pairwise equivalence hook for DARLING (§4).

Light imports only: the heavy work happens in ``dsdr_eval.judge.run`` (which imports ``openai``
lazily through ``dsdr_eval.openai_client``)."""

from dsdr_eval.judge.parse import JudgeParseError, JudgeScores, parse_equivalence, parse_judge_response
from dsdr_eval.judge.prompt import PROMPT_VERSION, PromptBudget, build_judge_prompt
from dsdr_eval.judge.run import JudgeSettings, judge_equivalent, run_judge
from dsdr_eval.judge.equivalence import JudgeEquivalence, JudgePairSettings

__all__ = [
    "JudgeEquivalence", "JudgePairSettings", "JudgeParseError", "JudgeScores", "JudgeSettings", "PROMPT_VERSION", "PromptBudget",
    "build_judge_prompt", "judge_equivalent", "parse_equivalence", "parse_judge_response", "run_judge",
]
