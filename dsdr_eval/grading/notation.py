"""Notation rules of ``answer_norm``: Unicode math written as LaTeX, derivative notations made one,
and integer parameters of solution families renamed. Pure string functions, each one linear scan.

Models write ``6 × 10⁻³ m/s²``, ``1 + i√3``, ``-τ ln(Δ)``; latex2sympy reads none of ``⁻³ √ τ``, so
these become ``10^{-3}``, ``\\sqrt{3}``, ``\\tau``. A derivative is written ``\\frac{dx}{dt}``, ``x'``,
``x^{\\prime}``, ``\\dot{x}``; latex2sympy reads them as a Derivative, as ``x`` (the prime dropped:
``x' + x = 0`` became ``2x = 0``), as ``x**prime`` and as a symbol: all become the symbol ``\\dot{x}``.
"""

from __future__ import annotations

import re

# --- Unicode math ----------------------------------------------------------------------------------

_SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ", "0123456789+-=()ni"))
_SUBSCRIPTS = dict(zip("₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎", "0123456789+-=()"))
_SYMBOLS = {
    "π": "\\pi", "τ": "\\tau", "θ": "\\theta", "α": "\\alpha", "β": "\\beta", "γ": "\\gamma", "δ": "\\delta",
    "Δ": "\\Delta", "λ": "\\lambda", "σ": "\\sigma", "ω": "\\omega", "φ": "\\phi", "ϕ": "\\phi", "ε": "\\epsilon",
    "ρ": "\\rho", "η": "\\eta", "μ": "\\mu", "Ω": "\\Omega", "Φ": "\\Phi", "Σ": "\\Sigma", "Γ": "\\Gamma",
    "Λ": "\\Lambda", "Θ": "\\Theta", "ψ": "\\psi", "Ψ": "\\Psi", "χ": "\\chi", "ξ": "\\xi", "ζ": "\\zeta",
    "κ": "\\kappa", "ν": "\\nu", "∞": "\\infty", "±": "\\pm", "∓": "\\mp", "⋅": "\\cdot", "∙": "\\cdot",
    "÷": "\\div", "−": "-", "′": "'", "″": "''",
}
_ROOTS = {"√": "\\sqrt", "∛": "\\sqrt[3]", "∜": "\\sqrt[4]"}
_UNICODE_RE = re.compile("[" + "".join(_SUPERSCRIPTS) + "]+|[" + "".join(_SUBSCRIPTS) + "]+|["
                         + "".join(_SYMBOLS) + "]")
# the radicand of √: a braced or parenthesised group without nesting, a LaTeX command, or a run of
# digits / letters (√3, √x, √(x+1), √\pi); anything else keeps the root as a command (√ {..})
_ROOT_RE = re.compile(r"([√∛∜])\s*(?:\{([^{}]{0,200})\}|\(([^()]{0,200})\)|(\\[A-Za-z]+)|(\d+(?:\.\d+)?|[A-Za-z]))?")
# bare function names a model writes without a backslash (ln(Δ), sin x): not after a letter or \
_BARE_FUNCTION_RE = re.compile(r"(?<![A-Za-z\\])(ln|log|sin|cos|tan|exp)(?=\s*[(\\{\d]|\s+[A-Za-z])")
_BARE_HINT_RE = re.compile(r"ln|log|sin|cos|tan|exp")
_HAS_UNICODE_RE = re.compile("[" + "".join(_SUPERSCRIPTS) + "".join(_SUBSCRIPTS) + "".join(_SYMBOLS)
                             + "".join(_ROOTS) + "]")


def unicode_math(text: str) -> str:
    """Rule unicode_math: superscript / subscript characters, Greek letters, √, ∞, ±, ⋅ as LaTeX;
    bare ln / log / sin / cos / tan / exp before an argument as commands."""
    if _HAS_UNICODE_RE.search(text):
        text = _UNICODE_RE.sub(_unicode_token, text)
        text = _ROOT_RE.sub(_root, text)
    return _BARE_FUNCTION_RE.sub(r"\\\1 ", text) if _BARE_HINT_RE.search(text) else text


def _unicode_token(match: re.Match) -> str:
    token = match.group()
    if token[0] in _SUPERSCRIPTS:
        return "^{" + "".join(_SUPERSCRIPTS[c] for c in token) + "}"
    if token[0] in _SUBSCRIPTS:
        return "_{" + "".join(_SUBSCRIPTS[c] for c in token) + "}"
    symbol = _SYMBOLS[token]
    following = match.string[match.end():match.end() + 1]
    return symbol + " " if symbol[-1].isalpha() and following.isalpha() else symbol  # "πr" is "\pi r"


def _root(match: re.Match) -> str:
    radicand = next((g for g in match.groups()[1:] if g is not None), None)
    command = _ROOTS[match.group(1)]
    return command + " " if radicand is None else command + "{" + radicand + "}"


# --- derivatives ---------------------------------------------------------------------------------------

_D = r"(?:\\mathrm\{d\}|\\text\{d\}|\\operatorname\{d\}|d)"
_GREEK = r"\\(?:alpha|beta|gamma|delta|epsilon|varepsilon|eta|theta|vartheta|lambda|mu|nu|xi|rho|sigma|tau|phi|varphi|chi|psi|omega|Theta|Phi|Psi|Omega)(?![A-Za-z])"
# a function: one letter or Greek letter, with an optional one-level subscript (v_o, v_{o}, x_{12})
_FUNC = rf"(?:[A-Za-z]|{_GREEK})(?:\s*_\s*(?:\{{\s*[A-Za-z0-9]{{1,3}}\s*\}}|[A-Za-z0-9]))?"
_SQUARE = r"(?:\^\s*\{?\s*2\s*\}?)"
# \frac{dx}{dt}, \frac{d x}{d t}, \frac{d^{2} v_{o}}{d t^{2}}, \frac{d}{dt} x
_LEIBNIZ_RE = re.compile(
    rf"\\[dt]?frac\s*\{{\s*{_D}\s*(?P<sa>{_SQUARE})?\s*(?P<fa>{_FUNC})\s*\}}\s*\{{\s*{_D}\s*(?P<va>[A-Za-z])\s*{_SQUARE}?\s*\}}"
    rf"|\\[dt]?frac\s*\{{\s*{_D}\s*(?P<sb>{_SQUARE})?\s*\}}\s*\{{\s*{_D}\s*(?P<vb>[A-Za-z])\s*{_SQUARE}?\s*\}}\s*(?P<fb>{_FUNC})")
# x', x'', x^{\prime}, x^\prime, x^{\prime\prime}, x^{''}, \theta', v_{o}' (not after a backslash: \cos)
_PRIME_RE = re.compile(rf"(?<!\\)(?P<f>{_FUNC})\s*(?:(?P<m>'{{1,2}})|\^\s*\{{\s*(?P<b>(?:\\prime\s*){{1,2}}|'{{1,2}})\s*\}}"
                       r"|\^\s*\\prime(?![A-Za-z]))")
_DOT_RE = re.compile(rf"\\(?P<d>dd?ot)\s*(?:\{{\s*(?P<f>{_FUNC})\s*\}}|(?P<g>[A-Za-z])(?![A-Za-z]))(?P<s>\s*_\s*(?:\{{[^{{}}]{{1,5}}\}}|[A-Za-z0-9]))?")
# a cheap test before the three rewrites: most answers have no derivative
_DERIVATIVE_HINT_RE = re.compile(rf"frac\s*\{{\s*{_D}|'|\\prime|\\d?dot")
_SUB_RE = re.compile(r"\s*_\s*\{?\s*([A-Za-z0-9]{1,3})\s*\}?")


def _canonical(function: str, second: bool) -> tuple[str, str]:
    """(``\\dot{v}_{o}``, the function's own canonical name ``v_{o}``) of a derivative of ``function``."""
    match = _SUB_RE.search(function)
    base, subscript = (function[:match.start()], "_{" + match.group(1) + "}") if match else (function, "")
    base = base.strip()
    return ("\\ddot{" if second else "\\dot{") + base + "}" + subscript, base + subscript


def derivative_forms(text: str) -> tuple[str, frozenset[str], frozenset[str]]:
    """Rule derivatives -> (text with every first / second derivative of a function written
    \\dot{x} / \\ddot{x}, the functions differentiated, the variables named in d/dt forms).
    ``x(t)`` of a differentiated function x becomes x (``kx(t)`` beside ``dx/dt`` is ``k x``)."""
    if len(text) > 2000 or not _DERIVATIVE_HINT_RE.search(text):
        return text, frozenset(), frozenset()
    functions: set[str] = set()
    variables: set[str] = set()

    def leibniz(match: re.Match) -> str:
        function = match.group("fa") or match.group("fb")
        variables.add(match.group("va") or match.group("vb"))
        derivative, name = _canonical(function, bool(match.group("sa") or match.group("sb")))
        functions.add(name)
        return derivative + " "

    def prime(match: re.Match) -> str:
        marks = match.group("m") or match.group("b") or "'"
        derivative, name = _canonical(match.group("f"), marks.count("'") == 2 or marks.count("prime") == 2)
        functions.add(name)
        return derivative + " "

    def dot(match: re.Match) -> str:
        derivative, name = _canonical((match.group("f") or match.group("g")) + (match.group("s") or ""),
                                      match.group("d") == "ddot")
        functions.add(name)
        return derivative + " "

    text = _LEIBNIZ_RE.sub(leibniz, text)
    text = _PRIME_RE.sub(prime, text)
    text = _DOT_RE.sub(dot, text)
    if functions:
        # x(t), \dot{x}(t) -- also in kx(t): the function at its variable is the function; any other
        # command (\max(t)) is matched whole so that its last letter is never taken for a function
        names = "|".join(re.escape(name) + ("(?![A-Za-z])" if name[0] == "\\" else "")
                         for name in sorted(functions, key=len, reverse=True))
        at_variable = re.compile(rf"(?P<fn>(?:\\d?dot\{{)?(?:{names})(?:\}}(?:_\{{[A-Za-z0-9]{{1,3}}\}})?)?)"
                                 r"\s*\(\s*[A-Za-z]\s*\)|\\[A-Za-z]+")
        text = at_variable.sub(lambda m: m.group("fn") or m.group(), text)
    return text, frozenset(functions), frozenset(variables)


# --- integer parameters of solution families --------------------------------------------------------

# "\frac{\pi}{6} + n\pi", "2k\pi", "\pi k": a one-letter integer parameter multiplying \pi
_PARAMETER_RE = re.compile(r"(?<![A-Za-z\\])([kmnjl])\s*\\pi(?![A-Za-z])|\\pi\s*([kmnjl])(?![A-Za-z])")
_LETTER_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z](?![A-Za-z])")


def family_parameters(text: str) -> frozenset[str]:
    """The one-letter parameters that multiply \\pi (n in '\\frac{\\pi}{6} + n\\pi')."""
    return frozenset(m.group(1) or m.group(2) for m in _PARAMETER_RE.finditer(text))


def rename_parameter(answer: str, gold: str) -> str:
    """Rule family_parameters: the answer's one integer parameter takes the gold's name when each
    side has exactly one and the answer does not use the gold's name for anything else."""
    if len(answer) > 2000 or "\\pi" not in answer or "\\pi" not in gold:
        return answer
    theirs, ours = family_parameters(answer), family_parameters(gold)
    if len(theirs) != 1 or len(ours) != 1 or theirs == ours:
        return answer
    old, new = next(iter(theirs)), next(iter(ours))
    letters = {m.group() for m in _LETTER_RE.finditer(answer)}
    if new in letters or old in {m.group() for m in _LETTER_RE.finditer(gold)}:
        return answer
    return re.sub(rf"(?<![\\A-Za-z]){old}(?![A-Za-z])", new, answer)
