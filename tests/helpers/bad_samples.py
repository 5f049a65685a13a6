"""One-bad-line samples files: the table behind tests/eval/test_score_bad_input.py and
benchmarks/bad_input_campaign.py.

Every case is three good sample lines plus one odd line (inserted as line 2, or appended as the last
line for cases about the end of the file). ``expect`` says what `dsdr-eval score` must do:

- ``"error"``: exit 2 with one line ``error: FILE:LINE:FIELD: message`` (``FILE:LINE: message`` when the
  line as a whole is bad: ``field=""``) and nothing graded or written;
- ``"warn"``: accepted, with a ``warning: FILE:LINE:FIELD: ...`` line on stderr (the oddity changes what
  is graded or counted);
- ``"ok"``: accepted silently (the oddity changes no number: blank lines, CRLF, a byte-order mark,
  a JSON-number gold kept as its exact text).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

GOOD = [
    {"benchmark": "math500", "problem_id": "p1", "sample_idx": i, "phase": "sampling", "gold": "3",
     "completion": f"so the answer is \\boxed{{{3 if i else 4}}}", "n_completion_tokens": 10 + i,
     "finish_reason": "stop"}
    for i in range(3)
]
BASE = GOOD[0] | {"sample_idx": 3}  # the odd line is a fourth sample of the same problem


@dataclass(frozen=True)
class Case:
    name: str
    bad_line: bytes          # the odd line (without its newline)
    expect: str              # "error" | "warn" | "ok"
    field: str | None = None  # the FIELD the error/warning names ("": the whole line)
    at_end: bool = False      # append as the last line instead of inserting as line 2
    newline: bool = True      # end the odd line with a newline
    crlf: bool = False        # write every line with CRLF endings
    prefix: bytes = b""       # bytes before the first line (a byte-order mark)
    graded: tuple[tuple[str, object], ...] = ()  # (field, value) the odd line's graded row must have

    @property
    def line(self) -> int:
        return 4 if self.at_end else 2

    @property
    def record_index(self) -> int:
        """Position of the odd line's record among the file's records (graded.jsonl keeps the order)."""
        return 3 if self.at_end else 1

    def content(self) -> bytes:
        good = [json.dumps(row).encode() for row in GOOD]
        lines = good + [self.bad_line] if self.at_end else good[:1] + [self.bad_line] + good[1:]
        eol = b"\r\n" if self.crlf else b"\n"
        body = eol.join(lines)
        return self.prefix + (body + eol if self.newline else body)


def _row(**changes) -> bytes:
    row = dict(BASE)
    for key, value in changes.items():
        if value is _DROP:
            row.pop(key, None)
        else:
            row[key] = value
    return json.dumps(row).encode()


def _raw(text: str) -> bytes:
    """A JSON line given as text (for what json.dumps would not write: NaN, duplicate keys...)."""
    return text.encode("utf-8", "surrogatepass")


_DROP = object()
_HEAD = '"benchmark": "math500", "problem_id": "p1", "sample_idx": 3'
HUGE = "9" * 5000

CASES: list[Case] = [
    # --- the line as a whole
    Case("truncated_json_middle", b'{"problem_id": "p1", "go', "error", ""),
    Case("truncated_tail_prefix", b'{"benchmark": "math500", "problem_id": "p1", "comp', "warn", "",
         at_end=True, newline=False),
    Case("truncated_tail_mid_utf8", '{"problem_id": "p1", "completion": "é'.encode()[:-1], "warn", "",
         at_end=True, newline=False),
    Case("garbage_tail_no_newline", b"hello world", "error", "", at_end=True, newline=False),
    Case("garbage_tail_brace_no_newline", b"{garbage}", "error", "", at_end=True, newline=False),
    Case("garbage_middle", b"not json at all", "error", ""),
    Case("trailing_data_after_object", _row() + b" xyz", "error", ""),
    Case("two_objects_one_line", _row() + _row(sample_idx=4), "error", ""),
    Case("non_object_array", b"[1, 2, 3]", "error", ""),
    Case("non_object_string", b'"just a string"', "error", ""),
    Case("non_object_number", b"42", "error", ""),
    Case("non_object_null", b"null", "error", ""),
    Case("deep_nesting", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "meta": ' + "[" * 100_000
                              + "]" * 100_000 + "}"), "error", ""),
    Case("invalid_utf8_completion", _raw("{" + _HEAD + ', "gold": "3", "completion": "ab') + b"\xff\xfe" + b'"}',
         "error", "completion"),
    Case("invalid_utf8_gold", _raw("{" + _HEAD + ', "completion": "x", "gold": "') + b"\xc3(" + b'"}',
         "error", "gold"),
    Case("invalid_utf8_outside_string", _raw("{" + _HEAD + ', ') + b"\xff" + b'"gold": "3", "completion": "x"}',
         "error", ""),
    Case("blank_lines", b"\n\n   \t", "ok"),
    Case("bom_first_line", _row(), "ok", prefix=b"\xef\xbb\xbf"),
    Case("bom_middle_line", b"\xef\xbb\xbf" + _row(), "ok"),
    Case("crlf_line_endings", _row(), "ok", crlf=True),
    # --- lone surrogates: identity fields are refused, free text is replaced (U+FFFD) with a warning
    Case("surrogate_completion", _raw("{" + _HEAD + ', "gold": "3", "completion": "\\\\boxed{3} \\ud800"}'),
         "warn", "completion", graded=(("completion", "\\boxed{3} \ufffd"), ("correct", True))),
    Case("surrogate_low_completion", _raw("{" + _HEAD + ', "gold": "3", "completion": "\\udc00\\\\boxed{3}"}'),
         "warn", "completion"),
    Case("surrogate_problem", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "problem": "a\\ud800"}'),
         "warn", "problem"),
    Case("surrogate_prompt", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "prompt": "\\udfff"}'),
         "warn", "prompt"),
    Case("surrogate_metadata", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "note": "\\ud800"}'),
         "warn", "note"),
    Case("surrogate_gold", _raw('{"problem_id": "p9", "completion": "x", "gold": "3\\ud800"}'), "error", "gold"),
    Case("surrogate_problem_id", _raw('{"problem_id": "p\\ud800", "completion": "x", "gold": "3"}'),
         "error", "problem_id"),
    Case("surrogate_benchmark", _raw('{"benchmark": "m\\ud800", "problem_id": "p1", "completion": "x", "gold": "3"}'),
         "error", "benchmark"),
    Case("surrogate_key", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "\\ud800": 1}'),
         "error", "\\ud800"),
    # --- numbers the json module cannot represent, and non-finite constants
    Case("huge_int_sample_idx", _raw('{"problem_id": "p1", "gold": "3", "completion": "x", "sample_idx": '
                                     + HUGE + "}"), "error", "sample_idx"),
    Case("huge_int_tokens", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "n_completion_tokens": '
                                 + HUGE + "}"), "error", "n_completion_tokens"),
    Case("huge_int_metadata", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "meta": {"n": ' + HUGE + "}}"),
         "error", "meta.n"),
    Case("huge_int_problem_id", _raw('{"problem_id": ' + HUGE + ', "gold": "3", "completion": "x"}'),
         "error", "problem_id"),
    Case("gold_nan", _raw('{"problem_id": "p9", "completion": "x", "gold": NaN}'), "error", "gold"),
    Case("gold_infinity", _raw('{"problem_id": "p9", "completion": "x", "gold": Infinity}'), "error", "gold"),
    Case("gold_minus_infinity", _raw('{"problem_id": "p9", "completion": "x", "gold": -Infinity}'), "error", "gold"),
    Case("gold_1e309", _raw('{"problem_id": "p9", "completion": "\\\\boxed{\\\\infty}", "gold": 1e309}'), "ok",
         graded=(("gold", "1e309"), ("correct", False))),
    Case("gold_1e400", _raw('{"problem_id": "p9", "completion": "\\\\boxed{\\\\infty}", "gold": 1e400}'), "ok",
         graded=(("gold", "1e400"), ("correct", False))),
    Case("gold_small_float", _raw('{"problem_id": "p9", "completion": "\\\\boxed{0.00001}", "gold": 0.00001}'), "ok",
         graded=(("gold", "0.00001"), ("correct", True))),
    Case("gold_int", _raw('{"problem_id": "p9", "completion": "\\\\boxed{12}", "gold": 12}'), "ok",
         graded=(("gold", "12"), ("correct", True))),
    Case("gold_exponent_int", _raw('{"problem_id": "p9", "completion": "\\\\boxed{1000}", "gold": 1E3}'), "ok",
         graded=(("gold", "1E3"),)),
    Case("gold_huge_int", _raw('{"problem_id": "p9", "completion": "x", "gold": ' + HUGE + "}"), "ok",
         graded=(("gold", HUGE), ("correct", False))),
    Case("temperature_nan", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "temperature": NaN}'),
         "error", "temperature"),
    Case("tokens_infinity", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "n_completion_tokens": Infinity}'),
         "error", "n_completion_tokens"),
    # --- duplicate keys
    Case("duplicate_key_gold", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "gold": "4"}'), "error", "gold"),
    Case("duplicate_key_completion", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "completion": "\\\\boxed{3}"}'),
         "error", "completion"),
    Case("duplicate_key_nested", _raw("{" + _HEAD + ', "gold": "3", "completion": "x", "meta": {"a": 1, "a": 2}}'),
         "error", "meta.a"),
    # --- missing required fields
    Case("missing_problem_id", _row(problem_id=_DROP), "error", "problem_id"),
    Case("missing_gold", _row(gold=_DROP), "error", "gold"),
    Case("missing_completion", _row(completion=_DROP), "error", "completion"),
    Case("null_completion", _row(completion=None), "error", "completion"),
    Case("null_gold", _row(gold=None), "error", "gold"),
    # --- wrong types / values per field
    Case("problem_id_list", _row(problem_id=["p1"]), "error", "problem_id"),
    Case("problem_id_bool", _row(problem_id=True), "error", "problem_id"),
    Case("problem_id_float", _row(problem_id=1.5), "error", "problem_id"),
    Case("problem_id_empty", _row(problem_id=""), "error", "problem_id"),
    Case("gold_bool", _row(gold=True), "error", "gold"),
    Case("gold_list", _row(gold=["3"]), "error", "gold"),
    Case("gold_object", _row(gold={"value": "3"}), "error", "gold"),
    Case("gold_blank", _row(gold="   "), "error", "gold"),
    Case("gold_conflict", _row(gold="4"), "error", "gold"),
    Case("completion_int", _row(completion=3), "error", "completion"),
    Case("completion_list", _row(completion=["\\boxed{3}"]), "error", "completion"),
    Case("benchmark_empty", _row(benchmark=""), "error", "benchmark"),
    Case("benchmark_int", _row(benchmark=5), "error", "benchmark"),
    Case("benchmark_list", _row(benchmark=["math500"]), "error", "benchmark"),
    Case("phase_unknown", _row(phase="greedy"), "error", "phase"),
    Case("phase_int", _row(phase=1), "error", "phase"),
    Case("sample_idx_negative", _row(sample_idx=-1), "error", "sample_idx"),
    Case("sample_idx_float", _row(sample_idx=1.5), "error", "sample_idx"),
    Case("sample_idx_string", _row(sample_idx="3"), "error", "sample_idx"),
    Case("sample_idx_bool", _row(sample_idx=True), "error", "sample_idx"),
    Case("sample_idx_duplicate", _row(sample_idx=0), "error", "sample_idx"),
    Case("tokens_negative", _row(n_completion_tokens=-5), "error", "n_completion_tokens"),
    Case("tokens_string", _row(n_completion_tokens="many"), "error", "n_completion_tokens"),
    Case("tokens_float", _row(n_completion_tokens=3.5), "error", "n_completion_tokens"),
    Case("tokens_bool", _row(n_completion_tokens=True), "error", "n_completion_tokens"),
    Case("prompt_tokens_negative", _row(n_prompt_tokens=-1), "error", "n_prompt_tokens"),
    Case("finish_reason_int", _row(finish_reason=5), "error", "finish_reason"),
    Case("temperature_string", _row(temperature="hot"), "error", "temperature"),
    Case("temperature_negative", _row(temperature=-1.0), "error", "temperature"),
    Case("top_p_above_one", _row(top_p=2), "error", "top_p"),
    Case("max_tokens_zero", _row(max_tokens=0), "error", "max_tokens"),
    Case("seed_string", _row(seed="x"), "error", "seed"),
    Case("problem_int", _row(problem=5), "error", "problem"),
    Case("prompt_list", _row(prompt=["a"]), "error", "prompt"),
    # --- hostile but valid text: graded, never a crash
    Case("nul_and_control_chars", _row(completion="\x00\x01\u202e\\boxed{3}\x1b[2J"), "ok"),
]

assert len({c.name for c in CASES}) == len(CASES)
