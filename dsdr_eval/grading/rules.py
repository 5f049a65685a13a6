"""The names and descriptions of the grading rules ``answer_norm`` applies, and their version
(recorded in metrics.json -> provenance.grading.grading_rules; docs/evaluate.md "Grading rules")."""

from __future__ import annotations

RULES_VERSION = "7"  # 2: relations, numeric_subscript, ordinals, percent_as_fraction, exact rationals, ASCII bases;
# 3: grouped_number_gold, extremes in order (ordered_list); 4: unicode_math, spacing, derivatives, equations,
# named_values, family_parameters, companion_approximation, ordered questions (of each, systems, extremes re-read);
# 5: equation_gold; 6: text_names, hyperbolic; 7: arbitrary_constants, and_lists (issue 43)

RULES: dict[str, str] = {
    "wrapper": "strip $...$ / \\(...\\) / \\[...\\] / \\displaystyle / \\left / \\right, spaces between a command "
               "and its brace (\\text {red}), and a trailing period, comma or semicolon",
    "e_notation": "a number in e-notation (4.5e33, 1e-5) becomes 4.5\\times10^{33} (math-verify reads e as Euler's e)",
    "exponent_braces": "a power of ten written 10^-24 / 10^24 gets braces: 10^{-24}",
    "times_sign": "the unicode signs × and · become \\times and \\cdot",
    "digit_groups": "digit groups joined by \\, \\! {,} thin spaces (10\\,080, 1{,}000) lose the separator; "
                    "a plain-comma grouped number (1,000) only when the gold is a single number",
    "degrees": "degree marks (° ^\\circ ^{\\circ} \\degree, 'degrees') are dropped on both sides",
    "percent": "a trailing % / \\% is dropped on both sides; with the percent_as_fraction option (default) x% also "
               "equals x/100 (25\\% is \\frac{1}{4} and 25)",
    "ordinals": "when the gold is a plain number, an ordinal suffix after the answer's number (12^{\\text{th}}, 3rd) "
                "is dropped",
    "relations": "a box that relates two values is not a value: between two plain numbers any relation or set "
                 "operator (205 \\in 204, 205 = 204, 204 \\approx 205) is incorrect unless it is an equality of "
                 "equal numbers; '=', ':=', \\approx, \\to ... after a name (x = 204, f(3) \\approx 204) give the "
                 "value on their right, after a non-name it must be that value; for a plain-number gold any other "
                 "relation or set operator the gold does not use (\\cup, \\in, <, \\mid ...) is incorrect",
    "numeric_subscript": "when the gold is a plain number, a subscript on the answer's number (204_{205}, "
                         "204^{+1}_{-0}) is incorrect, except base ten (204_{10})",
    "units": "when the gold is a plain number, trailing units after a number are dropped "
             "(\\text{..}, \\mathrm{..}, bare SI/astro units such as eV, km/s, M_\\odot); never when the gold "
             "has letters (gold 6m keeps its m)",
    "disowning": "a box that negates, disowns or hedges (\\neg, \\text{not}, never, wrong, incorrect, false, "
                 "'3 or 4' for a single-valued gold) is incorrect, unless the gold itself uses the word",
    "base_subscript": "a gold in base b (52_8): the answer must have the same ASCII digits (no Unicode case mapping: "
                      "the ligature \ufb00 is not FF) and no or the same base",
    "ordered_list": "OlympiadBench answer_type Tuple, or a question naming the quantities in order ('values of "
                    "$b$ and $c$'; without metadata when the names are as many as the gold's items), asking 'how "
                    "many of each', asking to solve a system (one solution), or a two-item gold for a question "
                    "asking for two extremes ('the smallest and largest value', the gold read in the question's "
                    "order when it lists them the other way, said in grade_note): items compared in order; a "
                    "parenthesised gold tuple is compared element by element against a parenthesised answer",
    "grouped_number_gold": "a gold written with plain-comma digit groups (58,500) is one number, not a list "
                           "(which would accept 500, 58), unless the metadata (is_multiple_answer) or the question "
                           "('separated by commas', 'all values') asks for several answers",
    "unordered_list": "other multiple answers: items matched as a multiset ('or'/'and'/';' separate items)",
    "and_lists": "the items of a multiple answer may be separated as words and markup separate them: 'and' / 'or', "
                 "\\text{and}, \\text{, and }, \\&, \\quad, ';', rows 1 \\\\ 2 outside a matrix, after an "
                 "opening 'both'; an ordered gold still compares them in order (never accepted swapped)",
    "numeric_rel_tol": "two plain numbers are equal iff |a-b| <= rel_tol * max(|a|,|b|) (default 1e-8: "
                       "the same number; a rounded answer only with the rounded-fraction option, 1e-4), replacing "
                       "math-verify's rounding to 6 decimals (which calls 2.88e-19 and 5e-19 equal); two exact "
                       "rationals (integers, written decimals, fractions: 204.000002, \\frac{204000001}{1000000}, "
                       "204+10^{-8}) are equal only when they are the same number, unless the tolerance is the "
                       "rounded-fraction option's",
    "imaginary_unit": "when the gold uses i as the imaginary unit, the symbol i is sympy's I on both sides",
    "astro_subscripts": "\\odot / \\oplus / \\sun in a subscript (M_\\odot) become the letters sun / earth "
                        "(latex2sympy cannot parse them)",
    "symbol_names": "a symbol of the answer with the name of a gold symbol is that symbol (latex2sympy gives "
                    "'i' in '5 i' and '5i' different assumptions, so sympy called them unequal)",
    "subscripted_constants": "E_{1}, e_0, I_{0} are variables, not Euler's e / the imaginary unit with a "
                             "subscript (latex2sympy fails on E_{1} and reads 1/3 E_{1} as 1/3, I_{0} as i): "
                             "written \\mathcal{E}_{1} on both sides; so is a bare I outside \\text{} "
                             "(I \\frac{d\\omega}{dt} + 2B\\omega = T: a moment of inertia; I(0): a current)",
    "unicode_math": "superscript / subscript digits (10⁻³, x₁), √3 / √(x+1), Greek letters (π τ Δ), ∞ ± ⋅ − "
                    "become LaTeX; bare ln / log / sin / cos / tan / exp before an argument become commands",
    "spacing": "\\, \\; \\: \\! are spaces (the comma of 'a = 1.68, \\, b = 0.45' separates nothing); a "
               "command's space before ^ or _ goes (\\gamma ^{2})",
    "derivatives": "\\frac{dx}{dt}, x', x^{\\prime}, \\dot{x} (and second derivatives) are one symbol \\dot{x}; "
                   "x(t) of a differentiated x is x; a derivative with respect to another named variable is "
                   "incorrect",
    "equations": "two equations are equal when lhs - rhs of one is a nonzero real number times the other's (terms "
                 "moved, both sides scaled), except a value (x = 5 is not 2x = 10)",
    "equation_gold": "a gold equation whose left side is not one name (m \\frac{dv}{dt} + bv = f, MR = SRMC, "
                     "\\frac{dx}{dt} = kx - a) is a relation: an answer that is not an equation (f, SRMC, kx - a) "
                     "is incorrect; x = 5, f(x) = x^2 name a value, answered by 5 and x^2",
    "text_names": "a name of two or more letters the gold writes bare, written in \\text{} / \\mathrm{} ... by the answer "
                  "(\\text{SRMC} = \\text{LRMC} for SRMC = LRMC), is the bare name",
    "hyperbolic": "sinh / cosh / tanh / coth are rewritten as exponentials on both sides when either has one "
                  "(\\frac{1}{a}\\sinh(at) is \\frac{1}{2a}(e^{at} - e^{-at}))",
    "named_values": "'x = 6 - 5i' is its value; named items 'c = 0, b = -3' are put in the question's order by "
                    "their names",
    "family_parameters": "a solution family's one integer parameter (the letter multiplying \\pi) takes the "
                         "gold's name when the answer uses that letter for nothing else",
    "companion_approximation": "an exact number with a decimal that rounds or truncates it (\\frac{5}{12} "
                               "\\approx 0.4167) is the exact number; a decimal that does not makes it incorrect",
    "arbitrary_constants": "a general solution's arbitrary constants (C, C_1, c_2, K, A, B ... that the question's "
                           "math does not name, when it asks for a general solution or says constants may arise; "
                           "without a question, subscripted C_n / K_n) may be renamed: the answer is correct when "
                           "one bijection of its constants onto the gold's makes it equal to the gold (C_1\\cos 2t + "
                           "C_2\\sin 2t for C_1\\sin 2t + C_2\\cos 2t); never with another number of constants",
    "gold_fixes": "golds no parser reads as intended are replaced at load time from dsdr_eval/data/gold_fixes.jsonl",
    "no_mv_units": "math-verify's own unit stripping is off (it drops variables such as m, h, s, t, c from golds)",
}
