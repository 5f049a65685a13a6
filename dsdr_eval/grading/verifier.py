"""math-verify inside a grading worker: parse and verify with timeouts detected by exception.

Imported only in worker processes (and tests): it imports sympy and math-verify at once, which
the parent must never pay for. math-verify's own ``signal.alarm`` timeout (wall time) is switched off
(``parsing_timeout=None``, ``timeout_seconds=None``): every call runs under the worker's CPU-time
budget (``grading.budget``; the worker is a main thread) with ``raise_on_error=True``, so a timeout
arrives as math-verify's ``TimeoutException`` (a BaseException) and any other failure as an ordinary
exception -- what math-verify happens to log is never read.
"""

from __future__ import annotations

import itertools
import logging
import math

import math_verify
import sympy
from latex2sympy2_extended import NormalizationConfig
from math_verify.errors import TimeoutException
from sympy.core.function import AppliedUndef

from dsdr_eval.grading.answer_norm import DEFAULT_NUMERIC_REL_TOL
from dsdr_eval.grading.budget import CallBudget

_PARSE_CACHE_LIMIT = 20000
_IMAGINARY_SYMBOL_NAME = "i"


def _wrap(answer: str) -> str:
    # math-verify extracts nothing from bare LaTeX: every answer and gold is parsed as a box
    return "\\boxed{" + answer + "}"


def _parse_config() -> list:
    # math-verify's own unit stripping drops variables such as m, h, s, t, c from golds (6m -> 6);
    # units are handled by answer_norm's "units" rule, which only applies to numeric golds.
    return [math_verify.LatexExtractionConfig(normalization_config=NormalizationConfig(
        basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all", equations=False)),
        math_verify.ExprExtractionConfig()]


def _silence_math_verify_logs() -> None:
    # With raise_on_error=True math-verify reports through exceptions; anything it still logs
    # (it repeats the whole, possibly huge, input) is not the grader's business.
    logger = logging.getLogger("math_verify")
    logger.addHandler(logging.NullHandler())
    logger.setLevel(logging.WARNING)
    logger.propagate = False


class Verifier:
    """``parse`` / ``verify`` / ``clearly_different`` as ``run_task`` calls them (one per worker)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.budget = CallBudget(timeout_s)  # per answer, not per call (issue 24): see grading.budget
        self._config = _parse_config()
        self._cache: dict[str, tuple[list, bool]] = {}
        self.verdicts: dict[tuple, str] = {}  # (gold, rel_tol, answer, items) -> status (task._verdict)
        _silence_math_verify_logs()

    def remember(self, key: tuple, status: str) -> None:
        """Keep a verdict (``task._verdict``), bounded like the parse cache."""
        if len(self.verdicts) > _PARSE_CACHE_LIMIT:
            self.verdicts.clear()
        self.verdicts[key] = status

    def warm_up(self) -> None:
        """Lazy ANTLR/latex2sympy imports happen here, so a short deadline never kills a fresh worker."""
        self.verify(self.parse("\\frac{1}{2}")[0], self.parse("0.5")[0])
        self._cache.clear()

    def parse(self, answer: str) -> tuple[list, bool]:
        """-> (parsed, timed_out); cached per process. A parse error is ``([], False)``, as
        math-verify itself would return it."""
        if answer in self._cache:
            return self._cache[answer]
        try:
            with self.budget.limit():
                result = (math_verify.parse(_wrap(answer), extraction_config=self._config,
                                            parsing_timeout=None, raise_on_error=True), False)
        except TimeoutException:
            return [], True  # not cached: a later answer's budget may be larger
        except Exception:  # noqa: BLE001 -- any parse failure of hostile text: nothing parsed
            result = ([], False)
        if len(self._cache) > _PARSE_CACHE_LIMIT:
            self._cache.clear()
        self._cache[answer] = result
        return result

    def verify(self, gold: list, pred: list, rel_tol: float | None = None,
               imaginary_unit: bool = False) -> tuple[bool, bool]:
        """-> (equal, timed_out). Two plain numbers: relative tolerance ``rel_tol`` (rule
        numeric_rel_tol) instead of math-verify's rounding to 6 decimals."""
        try:
            if imaginary_unit:  # rule imaginary_unit: every symbol named i is sympy's I
                gold, pred = ([_with_imaginary_unit(x) for x in side] for side in (gold, pred))
            pred = _same_named_symbols(gold, pred)
            if rel_tol is not None and not any(isinstance(x, sympy.core.relational.Relational) for x in gold):
                pred = _numeric_equalities(pred, rel_tol)
                if not pred:
                    return False, False
            equal = _same_number(gold[0] if gold else None, pred[0], rel_tol) if rel_tol is not None else None
        except Exception:  # noqa: BLE001 -- sympy failed on the rewrite: not comparable
            return False, False
        if equal is not None:
            return equal, False
        if self._proportional_equations(gold, pred):
            return True, False
        equal, timed_out = self._verify_pairs(gold, pred)
        if not equal and not timed_out and self._hyperbolic_equal(gold, pred):
            return True, False
        return equal, timed_out

    def _hyperbolic_equal(self, gold: list, pred: list) -> bool:
        """Rule hyperbolic: \\frac{1}{a}\\sinh(at) is \\frac{1}{2a}(e^{at} - e^{-at}); sympy's simplify does
        not rewrite sinh / cosh / tanh into exponentials, so both sides are, when either has one. Under the
        answer's budget; an error or a timeout leaves them unequal."""
        if not (gold and pred and all(isinstance(x[0], sympy.Expr) for x in (gold, pred))):
            return False
        if not any(x[0].has(sympy.sinh, sympy.cosh, sympy.tanh, sympy.coth) for x in (gold, pred)):
            return False
        try:
            with self.budget.limit():
                difference = sympy.simplify(gold[0].rewrite(sympy.exp) - pred[0].rewrite(sympy.exp))
                return difference == 0
        except TimeoutException:
            return False
        except Exception:  # noqa: BLE001 -- sympy failed on the rewrite: unequal
            return False

    def _proportional_equations(self, gold: list, pred: list) -> bool:
        """Rule equations: two equations are the same when lhs - rhs of one is a nonzero real number
        times that of the other (terms moved, both sides scaled: m\\dot{v} + bv = f and
        2m\\dot{v} = 2f - 2bv); math-verify's own comparison of such equations can take seconds
        (simplify on sin, cos). Under the answer's budget; an error or a timeout leaves the decision
        to math-verify."""
        if not (gold and pred and isinstance(gold[0], sympy.Equality) and isinstance(pred[0], sympy.Equality)):
            return False
        if any(_is_value_equation(x[0]) for x in (gold, pred)):
            return False  # "x = 5" is a value: "2x = 10" does not give it
        try:
            with self.budget.limit():
                a, b = (sympy.expand(x.lhs - x.rhs) for x in (gold[0], pred[0]))
                if not (a.free_symbols and b.free_symbols):
                    return False
                ratio = sympy.cancel(a / b)
                return not ratio.free_symbols and bool(ratio.is_real) and ratio.is_finite and ratio != 0
        except TimeoutException:
            return False
        except Exception:  # noqa: BLE001 -- sympy failed on the rewrite: math-verify decides
            return False

    def _verify_pairs(self, gold: list, pred: list) -> tuple[bool, bool]:
        # math-verify's verify(gold, pred) is any() over the pairs, each under its own alarm, a
        # failed or timed-out pair counting as unequal. It is called pair by pair here so that
        # raise_on_error=True reports each pair's timeout without ending the comparison early.
        timed_out = False
        for g, p in itertools.product(gold, pred):
            if _relates_quantities(g) and not isinstance(p, (sympy.core.relational.Relational, sympy.And)):
                continue  # rule equation_gold: one side of m\dot{v} + bv = f (f) is not the equation
            try:
                with self.budget.limit():
                    equal = math_verify.verify(g, p, timeout_seconds=None, raise_on_error=True)
                if equal:
                    return True, timed_out
            except TimeoutException:
                timed_out = True
            except Exception:  # noqa: BLE001 -- a comparison error: this pair is unequal
                pass
        return False, timed_out

    @staticmethod
    def clearly_different(a: list, b: list) -> bool:
        # Two plain numbers that differ by far more than math-verify's rounding (6 decimals) are
        # never verify-equal (numeric comparison fails, and so does the string comparison of
        # their different spellings), so skip the call: numeric classes are then almost free.
        if not (a and b and isinstance(a[0], sympy.Number) and isinstance(b[0], sympy.Number)):
            return False
        if isinstance(a[0], sympy.Integer) and isinstance(b[0], sympy.Integer):
            return a[0] != b[0]
        try:
            x, y = float(a[0]), float(b[0])
        except (TypeError, ValueError, OverflowError):
            return False
        return abs(x - y) > 1e-4 * max(1.0, abs(x), abs(y))


def _relates_quantities(gold) -> bool:
    """Rule equation_gold: a gold equation whose left side is not one name (m\\dot{v} + bv = f, MR = SRMC,
    \\dot{x} = kx - a) states a relation, not a value. math-verify reads any left side made of symbols
    alone as an assignment and compares an answer that is no equation with the right side, which
    grades a bare ``f`` or ``SRMC`` correct. ``x = 5``, ``f(x) = x^2``, ``m_{max} = n^2 - n - 1`` name a value."""
    relations = gold.args if isinstance(gold, sympy.And) else (gold,)
    return any(isinstance(r, sympy.Equality) for r in relations) and not all(
        isinstance(r, sympy.Equality) and _one_name(r.lhs) for r in relations)


def _one_name(expr) -> bool:
    # a derivative (the symbol \\dot{x} of notation's derivatives rule, or sympy's Derivative) is not a
    # name: "write down a differential equation" is not answered by its right side
    if isinstance(expr, sympy.Symbol):
        return not expr.name.startswith(("dot{", "ddot{"))
    return isinstance(expr, (AppliedUndef, sympy.Indexed))


def _is_value_equation(eq) -> bool:
    """``x = 5`` / ``5 = x``: a symbol on one side, a plain number on the other."""
    return any(isinstance(one, sympy.Symbol) and _plain_number(other)
               for one, other in ((eq.lhs, eq.rhs), (eq.rhs, eq.lhs)))


def _same_named_symbols(gold: list, pred: list) -> list:
    # Rule symbol_names: latex2sympy gives a symbol different assumptions depending on the
    # context ("5 i" vs "5i"), and sympy then calls identical expressions unequal.
    by_name = {s.name: s for x in gold if isinstance(x, sympy.Basic) for s in x.free_symbols
               if isinstance(s, sympy.Symbol)}
    out = []
    for x in pred:
        if isinstance(x, sympy.Basic):
            subs = {s: by_name[s.name] for s in x.free_symbols
                    if isinstance(s, sympy.Symbol) and s.name in by_name and by_name[s.name] != s}
            x = x.xreplace(subs) if subs else x
        out.append(x)
    return out


def _with_imaginary_unit(expr):
    if not isinstance(expr, sympy.Basic):
        return expr
    subs = {s: sympy.I for s in expr.free_symbols if getattr(s, "name", None) == _IMAGINARY_SYMBOL_NAME}
    return expr.xreplace(subs) if subs else expr


def _numeric_equalities(pred: list, rel_tol: float) -> list:
    """Rule relations, worker side: an equality of two numbers (``\\frac{410}{2} = 204``, which
    math-verify reads as its right side) is its value only when both sides are the same number;
    otherwise it is dropped. ``x = 204`` (a name on the left) is left to math-verify."""
    out = []
    for x in pred:
        if isinstance(x, sympy.Eq) and _plain_number(x.lhs) and _plain_number(x.rhs):
            if not _same_number(x.lhs, x.rhs, rel_tol):
                continue
            x = x.rhs
        out.append(x)
    return out


def _plain_number(expr) -> bool:
    return isinstance(expr, sympy.Expr) and not expr.free_symbols and bool(expr.is_number)


def _same_number(a, b, rel_tol: float) -> bool | None:
    """Rule numeric_rel_tol for two plain numbers, else None. Two exact rationals (integers,
    written decimals, fractions, powers of ten) are equal only when equal -- ``204.000002`` is not
    ``204`` -- unless the tolerance is looser than the default (the rounded-fraction option);
    otherwise ``|a-b| <= rel_tol * max(|a|, |b|)``."""
    if not (_plain_number(a) and _plain_number(b)):
        return None
    if any(not (p.exp.is_Number and abs(p.exp) <= 400) for expr in (a, b) for p in expr.atoms(sympy.Pow)):
        return None  # 9^{9^{9^9}}: never evaluate outside math-verify's own timeout
    if rel_tol <= DEFAULT_NUMERIC_REL_TOL:
        exact = [_as_rational(expr) for expr in (a, b)]
        if exact[0] is not None and exact[1] is not None:
            return exact[0] == exact[1]
    values = []
    for expr in (a, b):
        try:
            value = complex(expr.evalf(30))
        except (TypeError, ValueError, OverflowError):
            return None
        if value.imag != 0 or not math.isfinite(value.real):
            return None
        values.append(value.real)
    x, y = values
    return abs(x - y) <= rel_tol * max(abs(x), abs(y))


def _as_rational(expr):
    """The exact rational an expression of integers, written decimals and integer powers denotes
    (a Float is the decimal it was written as), else None."""
    if any(p.base.atoms(sympy.Pow) or p.exp.atoms(sympy.Pow) for p in expr.atoms(sympy.Pow)):
        return None  # nested powers: their exact value can have millions of digits
    floats = expr.atoms(sympy.Float)
    if floats:
        expr = expr.xreplace({f: sympy.Rational(str(f)) for f in floats})
    if not all(isinstance(atom, sympy.Rational) for atom in expr.atoms(sympy.Number)) or expr.atoms(sympy.Function):
        return None
    expr = expr.doit()  # math-verify keeps 204 + 10^{-8} unevaluated
    return expr if isinstance(expr, sympy.Rational) else None
