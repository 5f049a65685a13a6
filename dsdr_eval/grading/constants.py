"""Rule arbitrary_constants (issue 43): a general solution is the same answer whatever its arbitrary
constants are called. ``C_1\\cos 2t + C_2\\sin 2t - \\frac15\\sin 3t`` answers the gold
``-\\sin(3t)/5 + C_1\\sin 2t + C_2\\cos 2t``: the two families of functions are equal once the
constants are renamed (here swapped).

Sound only where the letters are arbitrary constants, so the rule applies when

* the gold writes constant-shaped names (``C``, ``K``, ``A``, ``B``, ``D`` or ``c``, ``k``, ``a``,
  ``b``, ``d``, each optionally with a numeric subscript: ``C_1``, ``c_{2}``), and
* the question asks for a general solution or says constants may arise (``GENERAL_SOLUTION_RE``), or,
  without a question text, the gold's constants are all subscripted ``C_n`` / ``K_n`` and it is a
  function (``\\sin``, ``\\cos``, ``e^``, ``\\ln`` ...: a general solution, not ``C_1 - C_2`` of two
  capacitors), and
* the question's own math does not name the letter (``R C``, ``$K$``: a given quantity is never
  renamed), and the answer uses as many constants as the gold.

Then the answer is correct iff, after renaming its constants by one bijection onto the gold's, it
equals the gold (math-verify). A renaming never changes a wrong family into a right one: a bijection
of free parameters maps a family of functions onto itself, so a renamed answer equals the gold only if
the answer's family is the gold's. Candidate bijections: constants whose coefficients (the expanded
expression's ``coeff``) are equal are paired first; at most ``MAX_RENAMINGS`` are tried, under the
answer's grading budget.

``constant_names`` runs in the parent (answer_norm), ``renamings`` in the grading worker (sympy).
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Iterator

# latex2sympy writes every letter in lower case (C_1 and c_1 are one symbol, c_1): names compared so
_CONSTANT_NAME_RE = re.compile(r"[abcdk](?:_\d{1,2})?")
_LATEX_CONSTANT_RE = re.compile(r"(?<![A-Za-z\\])([ABCDKabcdk])(?:\s*_\s*(?:\{\s*(\d{1,2})\s*\}|(\d)))?(?![A-Za-z])")
_SUBSCRIPTED_CK_RE = re.compile(r"(?<![A-Za-z\\])[CKck]\s*_\s*(?:\{\s*\d{1,2}\s*\}|\d)(?![A-Za-z])")
GENERAL_SOLUTION_RE = re.compile(
    r"(?i)general\s+solution|arbitrary\s+constants?|constants?\s+(?:of\s+integration|(?:which|that)\s+(?:may|might)"
    r"\s+arise)|indefinite\s+integral|antiderivative|family\s+of\s+solutions")
_FUNCTION_RE = re.compile(r"\\(?:sin|cos|tan|exp|ln|sinh|cosh)(?![A-Za-z])|(?<![A-Za-z\\])e\s*\^")
_MATH_SPAN_RE = re.compile(r"\$\$?([^$]{1,2000})\$\$?|\\\((.{1,2000}?)\\\)|\\\[(.{1,2000}?)\\\]", re.S)
MAX_CONSTANTS = 4
MAX_RENAMINGS = 24  # 4! bijections at most


def _names_in(latex: str) -> set[str]:
    """Constant-shaped names written in ``latex``, as latex2sympy names them (lower case, ``c_1``)."""
    return {m.group(1).lower() + (f"_{m.group(2) or m.group(3)}" if (m.group(2) or m.group(3)) else "")
            for m in _LATEX_CONSTANT_RE.finditer(latex)}


def constant_names(gold: str, problem: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """-> (the gold's arbitrary constants, names the question gives) as latex2sympy names them, or
    ((), ()) when the rule does not apply (see the module docstring). Linear regexes, bounded text."""
    if len(gold) > 2000:
        return (), ()
    names = _names_in(gold)
    if not names or len(names) > MAX_CONSTANTS:
        return (), ()
    if problem:
        if not GENERAL_SOLUTION_RE.search(problem[:20000]):
            return (), ()
        given = set()
        for match in _MATH_SPAN_RE.finditer(problem[:20000]):
            given |= _names_in(next(g for g in match.groups() if g is not None))
    elif len(_SUBSCRIPTED_CK_RE.findall(gold)) == len(names) and _FUNCTION_RE.search(gold):
        given = set()
    else:
        return (), ()
    constants = tuple(sorted(names - given))
    return (constants, tuple(sorted(given))) if constants else ((), ())


def renamed_equal(verifier: Any, gold: list, pred: list, constants: tuple[str, ...], given: tuple[str, ...],
                  rel_tol: float, imaginary_unit: bool) -> tuple[bool, bool]:
    """-> (equal, timed_out): the parsed answer ``pred`` equals the parsed gold ``gold`` once its constants
    are renamed (worker side; ``verifier`` a ``Verifier``: its budget bounds every step)."""
    if not (gold and pred) or not all(hasattr(x[0], "free_symbols") for x in (gold, pred)):
        return False, False
    timed_out = False
    for substitution in renamings(gold[0], pred[0], constants, given, lambda a, b: _same(verifier, a, b)):
        if verifier.budget.spent():
            return False, True
        equal, call_timed_out = verifier.verify(gold, [x.xreplace(substitution) if hasattr(x, "xreplace") else x
                                                       for x in pred], rel_tol, imaginary_unit)
        timed_out = timed_out or call_timed_out
        if equal:
            return True, timed_out
    return False, timed_out


def _same(verifier: Any, a: Any, b: Any) -> bool:
    """Two coefficients are the same expression (simplify, under the answer's budget; a failure: not)."""
    import sympy
    from math_verify.errors import TimeoutException  # a BaseException

    try:
        with verifier.budget.limit():
            return a != 0 and sympy.simplify(a - b) == 0
    except (TimeoutException, Exception):  # noqa: BLE001 -- out of budget or sympy failed: not the same
        return False


def renamings(gold: Any, pred: Any, constants: tuple[str, ...], given: tuple[str, ...],
              equal: Any) -> Iterator[dict]:
    """Substitutions (answer symbol -> gold symbol) to try on the parsed answer ``pred`` against the parsed
    gold ``gold`` (sympy expressions), each a bijection of the answer's constants onto the gold's
    ``constants``, the identity left out (already compared), those pairing constants of equal
    coefficients first; ``equal(a, b)`` compares two coefficients. Nothing when the answer's constants
    are not as many as the gold's."""
    gold_symbols = {s.name: s for s in gold.free_symbols if hasattr(s, "name")}
    ours = [gold_symbols[name] for name in constants if name in gold_symbols]
    others = set(gold_symbols) - set(constants)
    theirs = sorted((s for s in pred.free_symbols if hasattr(s, "name") and _CONSTANT_NAME_RE.fullmatch(s.name)
                     and s.name not in others and s.name not in given), key=lambda s: s.name)
    if not ours or len(ours) != len(theirs):
        return
    gold_expanded, pred_expanded = gold.expand(), pred.expand()
    fits = [[equal(gold_expanded.coeff(g), pred_expanded.coeff(p)) for p in theirs] for g in ours]
    bijections = sorted(itertools.permutations(range(len(theirs))),
                        key=lambda perm: -sum(fits[i][j] for i, j in enumerate(perm)))
    for perm in bijections[:MAX_RENAMINGS]:
        if all(theirs[j].name == ours[i].name for i, j in enumerate(perm)):
            continue
        yield {theirs[j]: ours[i] for i, j in enumerate(perm)}  # xreplace substitutes all at once: a swap stays one
