"""One check of a gold answer (issue 32): an importer's record and a samples.jsonl line take and refuse the
same golds, with the same message, because both go through ``rundir.samples.identity_text``."""

from __future__ import annotations

import pytest

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import GoldError, gold_text, numbered_rows
from dsdr_eval.rundir.samples import parse_sample

# gold values as JSON text, decoded as both readers decode them (a number keeps its literal)
GOLDS = ['"42"', '"x"', "7", "-3", "0.00001", "1e400", "1" * 5000, '""', '"   "', '"\\ud800"', '"a\\udfff"',
         "NaN", "Infinity", "-Infinity", "true", "false", "[]", '["1"]', "{}", '{"a": 1}']
ACCEPTED = {'"42"': "42", '"x"': "x", "7": "7", "-3": "-3", "0.00001": "0.00001", "1e400": "1e400",
            "1" * 5000: "1" * 5000}


def _decoded(text: str) -> object:
    (_, row), = numbered_rows(('{"gold": ' + text + "}\n").encode(), "f", gold_fields=("gold",))
    return row["gold"]


def _sample_gold(value: object) -> str:
    sample, _ = parse_sample({"problem_id": "p", "gold": value, "completion": "c"}, "f:1")
    return sample.gold


def _import_gold(value: object) -> str:
    return gold_text(value, "f:1", "gold")


@pytest.mark.parametrize("text", GOLDS, ids=lambda t: t[:12])
def test_an_import_and_a_samples_line_take_and_refuse_the_same_golds(text):
    value = _decoded(text)
    if text in ACCEPTED:
        assert _sample_gold(value) == _import_gold(value) == ACCEPTED[text]  # the literal, never a float's repr
        return
    with pytest.raises(DsdrError) as in_samples:
        _sample_gold(value)
    with pytest.raises(GoldError) as in_import:  # an import skips the record (--strict: stops)
        _import_gold(value)
    assert str(in_samples.value) == str(in_import.value)
    assert str(in_import.value).startswith("f:1:gold: ")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_float_built_in_code_is_no_gold_anywhere(value):
    """A float made by code (an API caller's problem list) has no literal: ``nan`` is not an answer."""
    with pytest.raises(DsdrError, match="f:1:gold: must be a string or a number"):
        _sample_gold(value)
    with pytest.raises(GoldError, match="f:1:gold: must be a string or a number"):
        _import_gold(value)


def test_a_missing_gold_and_an_importers_own_field_name():
    with pytest.raises(GoldError, match="^f:1:gt: missing gold answer$"):
        gold_text(None, "f:1", "gt")
    with pytest.raises(GoldError, match=r"^f:1:doc\.choices\.0: empty gold answer \(got ''\)$"):
        gold_text("", "f:1", "doc.choices.0")
