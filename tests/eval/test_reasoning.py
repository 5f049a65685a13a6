"""Thinking models (issue 33): a completion's reasoning and answer split, grading on the answer part
only, the truncated status under every extraction profile, linear time on hostile traces, and the
figures metrics.json reports."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading import grade_samples
from dsdr_eval.grading.extraction import EXTRACTION_PROFILES, extract_answer_with_method
from dsdr_eval.grading.reasoning import parse_reasoning_format, split_completion
from dsdr_eval.scoring.metrics import compute_metrics

SKY = ("<|begin_of_thought|>\n\nTry 5? no, \\boxed{5} is wrong.\n\n<|end_of_thought|>\n\n"
       "<|begin_of_solution|>\n\nThe answer is \\boxed{7}.\n\n<|end_of_solution|>")


@pytest.mark.parametrize("text, kwargs, answer, state, reasoning", [
    ("<think>r</think>ans", {}, "ans", "closed", "r"),
    ("\n<think>\nr\n</think>\n\nans", {"fmt": "think"}, "\n\nans", "closed", "\nr\n"),
    # the template opened <think> (R1 distills, QwQ): the completion holds only the close
    ("r</think>ans", {}, "ans", "closed", "r"),
    ("no close at all", {"prompt": "<|im_start|>assistant\n<think>\n"}, "", "unclosed", "no close at all"),
    ("no tags", {}, "no tags", "none", ""),
    ("no tags", {"fmt": "think"}, "", "unclosed", "no tags"),  # a named format says every completion reasons
    ("no tags", {"prompt": "Use <think> tags to think, then answer."}, "no tags", "none", ""),  # not at the end
    ("<think>r", {}, "", "unclosed", "r"),
    ("Sure. <think>r", {}, "Sure. ", "unclosed", "r"),
    # nested: the outer close ends the reasoning
    ("<think>a<think>b</think>c</think>d", {}, "d", "closed", "a<think>b</think>c"),
    # re-opened after the first block: the last block's close decides
    ("<think>a</think>b<think>c</think>d", {}, "d", "closed", "a</think>b<think>c"),
    ("<think>a</think>b<think>c", {}, "", "unclosed", "a</think>b<think>c"),
    # a </think> at depth 0 after the reasoning is answer text
    ("<think>a</think>b </think> c", {}, "b </think> c", "closed", "a"),
    (SKY, {}, "\n\nThe answer is \\boxed{7}.\n\n", "closed", "\n\nTry 5? no, \\boxed{5} is wrong.\n\n"),
    ("<|begin_of_thought|>t", {}, "", "unclosed", "t"),
    ("a ### b", {"fmt": "end:###"}, " b", "closed", "a "),
    ("a b", {"fmt": "end:###"}, "", "unclosed", "a b"),
    # a server's reasoning parser: the completion is the answer
    ("ans", {"reasoning": "r"}, "ans", "closed", "r"),
    ("", {"reasoning": "r"}, "", "unclosed", "r"),
    ("<think>r</think>ans", {"fmt": "none"}, "<think>r</think>ans", "none", ""),
])
def test_split(text, kwargs, answer, state, reasoning):
    split = split_completion(text, **kwargs)
    assert (split.answer(text), split.state, split.reasoning) == (answer, state, reasoning)


@pytest.mark.parametrize("spec", ["", "thinking", "end:", "end:  ", None])
def test_bad_reasoning_format_is_one_error(spec):
    with pytest.raises(DsdrError, match="reasoning format"):
        parse_reasoning_format(spec)


def test_format_spec_round_trips():
    for spec in ("auto", "none", "think", "skythought", "end:</reasoning>"):
        assert parse_reasoning_format(spec).spec == spec


@pytest.mark.parametrize("text", [
    "<think>" + "x" * 2_000_000,                          # a 2 MB unclosed trace
    "<think>" * 100_000 + "</think>" * 100_000,           # deep nesting
    "<think></think>" * 100_000,                          # 10^5 repeated blocks
    "</think>" * 200_000,                                 # closes at depth 0
    "<|begin_of_thought|>" * 100_000 + "<|end_of_thought|>",
])
def test_split_is_linear_on_hostile_traces(text):
    started = time.process_time()
    split_completion(text)
    split_completion(text, "think")
    assert time.process_time() - started < 2.0


def _row(completion, gold="70", **fields):
    return {"problem_id": fields.pop("problem_id", "p"), "gold": gold, "completion": completion, **fields}


TRUNCATED_GUESS = "<think>\nLet me try. Maybe \\boxed{70}? Then 5*14 = 70, so the answer is 70 and we need"


@pytest.mark.parametrize("profile", list(EXTRACTION_PROFILES))
def test_unclosed_reasoning_is_truncated_under_every_profile(profile):
    """Mutant 'grade the whole completion' / 'unclosed reasoning graded': \\boxed{70} in an unclosed
    trace would be correct."""
    rows = [_row(TRUNCATED_GUESS, finish_reason="length"), _row(TRUNCATED_GUESS[len("<think>"):], problem_id="q",
                                                                 prompt="<｜Assistant｜><think>\n", finish_reason="stop")]
    graded = grade_samples(rows, workers=1, progress=False, extraction=profile)
    assert [(r["status"], r["correct"], r["reasoning_state"]) for r in graded] == [("truncated", False, "unclosed")] * 2
    assert all(r["extracted"] is None for r in graded)


@pytest.mark.parametrize("profile", list(EXTRACTION_PROFILES))
def test_length_limit_never_guesses_the_last_number(profile):
    """Mutant 'last-number fallback on a truncated response': 12 would be correct under gsm8k/flexible."""
    cut = "We compute step by step. First 3*4 = 12 and then we subtract"
    graded = grade_samples([_row(cut, gold="12", finish_reason="length"),
                            _row(cut + "\n```output\n12\n```", gold="12", problem_id="q", finish_reason="length")],
                           workers=1, progress=False, extraction=profile)
    assert [(r["status"], r["correct"]) for r in graded] == [("truncated", False)] * 2


def test_length_limit_keeps_a_final_answer():
    graded = grade_samples([_row("so \\boxed{12}. Let me double check: 3*4 = 12, yes 12 and", gold="12",
                                 finish_reason="length")], workers=1, progress=False, extraction="flexible")
    assert (graded[0]["status"], graded[0]["extraction"], graded[0]["changed_by"]) == ("correct", "boxed", [])


def test_a_box_in_the_reasoning_is_not_the_answer():
    """Mutant 'grade the whole completion': the reasoning's \\boxed{70} would be correct."""
    rows = [_row("<think>maybe \\boxed{70}</think>I could not finish.", finish_reason="stop"),
            _row("<think>maybe \\boxed{70}</think>The answer is \\boxed{71}.", problem_id="q"),
            _row(SKY.replace("7}", "70}", 1), problem_id="s")]
    graded = grade_samples(rows, workers=1, progress=False)
    assert [(r["status"], r["extracted"]) for r in graded] == [("no_answer", None), ("incorrect", "71"),
                                                              ("correct", "70")]
    assert [r["changed_by"] for r in graded] == [["answer_part"], [], []]


def test_think_close_inside_the_answer():
    text = "<think>guess \\boxed{3}</think>The tag </think> ends thinking; the answer is \\boxed{70}."
    [row] = grade_samples([_row(text)], workers=1, progress=False)
    assert (row["status"], row["extracted"], row["reasoning_state"]) == ("correct", "70", "closed")
    assert text[row["answer_span"][0]:row["answer_span"][1]].startswith("The tag")


def test_reasoning_field_is_kept_apart():
    """A server's reasoning_content: its box is not read, the completion is the answer."""
    rows = [_row("The answer is 7.", reasoning="perhaps \\boxed{70}"),
            _row("", problem_id="q", reasoning="perhaps \\boxed{70}", finish_reason="length")]
    graded = grade_samples(rows, workers=1, progress=False)
    assert [(r["status"], r["extracted"], r["reasoning_state"]) for r in graded] == [
        ("incorrect", "7", "closed"), ("truncated", None, "unclosed")]


@pytest.mark.parametrize("text", ["The answer is within \\boxed{}.", "Final Answer: $\\boxed{ }$",
                                  "The final answer is \\fbox{}. I hope it is correct."])
def test_an_empty_box_in_an_answer_line_is_no_answer(text):
    """Mutant 'no placeholder rule': 'within \\boxed{}' is read as the answer."""
    for profile in EXTRACTION_PROFILES:
        if profile not in ("gsm8k", "program-output"):
            assert extract_answer_with_method(text, profile).answer is None, profile


def test_metrics_report_the_reasoning_figures():
    rows = [_row("<think>r</think>\\boxed{70}", finish_reason="stop", n_completion_tokens=10, n_reasoning_tokens=6),
            _row("<think>\\boxed{70}", problem_id="q", finish_reason="length", n_completion_tokens=20,
                 n_reasoning_tokens=20),
            _row("12 and 70", problem_id="r", finish_reason="length", n_completion_tokens=5),
            _row("\\boxed{70}", problem_id="s", finish_reason="stop", n_completion_tokens=3)]
    graded = grade_samples(rows, workers=1, progress=False, extraction="flexible")
    assert [r["status"] for r in graded] == ["correct", "truncated", "truncated", "correct"]
    entry = compute_metrics(graded, bootstrap=0)["benchmarks"]["default"]
    assert entry["unclosed_reasoning_fraction"] == pytest.approx(1 / 4)
    assert entry["truncated_fraction"] == pytest.approx(2 / 4)
    # reasoning tokens: 6 and 20 recorded; 0 for the two completions without reasoning
    assert entry["mean_reasoning_tokens"] == pytest.approx((6 + 20 + 0 + 0) / 4)
    assert entry["mean_answer_tokens"] == pytest.approx((4 + 0 + 5 + 3) / 4)
    assert entry["answers_changed_by_rule"] == {"answer_part": 0, "reasoning_unclosed": 1,
                                                "length_no_final_answer": 1}
    assert entry["status_counts"]["truncated"] == 2


def test_openai_server_reasoning_content_is_stored_apart_and_not_graded(tmp_path, data_dir):
    """A scripted OpenAI-compatible server answering as vLLM's reasoning parser does: the reasoning
    (holding the only box) in ``reasoning_content``, the answer in ``content``. Mutant 'the reasoning
    joined to the completion': the box would be extracted."""
    from helpers.fault_server import FaultServer

    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.options.commands import RunOptions
    from dsdr_eval.rundir.jsonl import read_jsonl

    def reasoning(body):  # the sample's seed decides: even seeds end their answer, odd ones hit the limit
        return ("so maybe \\boxed{42} but wait", "stop" if body["seed"] % 2 == 0 else "length")

    def reply(body):
        return "I could not decide." if body["seed"] % 2 == 0 else ""

    out = tmp_path / "run"
    with FaultServer(reply=reply, reasoning=reasoning) as server:
        outcome = run_evaluation(RunOptions(model=server.model, backend="openai", benchmarks=["math500"], limit=2,
                                            protocol="quick", n=2, max_tokens=16, data_dir=str(data_dir),
                                            out=str(out), no_diversity=True, no_progress=True,
                                            base_url=[server.base_url], reasoning_format="think"),
                                 command=["test_reasoning"])
    assert outcome.exit_code == 0
    from dsdr_eval.rundir.jsonl import read_json
    assert read_json(out / "config.json")["reasoning_format"] == "think"
    assert read_json(out / "metrics.json")["provenance"]["grading"]["reasoning"]["reasoning_format"] == "think"
    samples = read_jsonl(out / "samples.jsonl")
    assert samples and all(s["reasoning"] == "so maybe \\boxed{42} but wait" and s["n_reasoning_tokens"] == 5
                           for s in samples)
    graded = read_jsonl(out / "graded.jsonl")
    expected = [("no_answer", "closed") if s["seed"] % 2 == 0 else ("truncated", "unclosed") for s in samples]
    assert len(set(expected)) == 2 and [(g["status"], g["reasoning_state"]) for g in graded] == expected
    assert all(g["extracted"] is None for g in graded)


def test_openai_batch_import_keeps_reasoning_content(tmp_path, data_dir):
    """A batch answered by a reasoning model: reasoning_content, finish_reason and the reasoning token
    count are kept; the gold in an unfinished reasoning is not graded. Mutant 'importer drops
    reasoning_content/finish_reason': fields missing."""
    import json

    from helpers import import_sources as src

    from dsdr_eval.cli import main
    from dsdr_eval.rundir.jsonl import read_jsonl
    from dsdr_eval.rundir.samples import read_samples

    inputs, outputs = src.write_openai_batch(tmp_path / "batch", data_dir)
    lines = [json.loads(line) for line in outputs.read_text(encoding="utf-8").splitlines()]
    gold = src.math500(data_dir)[0]["answer"]
    body = lines[0]["response"]["body"]
    body["choices"] = [{"index": 0, "finish_reason": "length", "message": {
        "role": "assistant", "content": None, "reasoning_content": f"so it is \\boxed{{{gold}}}? check"}}]
    body["usage"]["completion_tokens_details"] = {"reasoning_tokens": 40}
    outputs.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    run = tmp_path / "run"
    assert main(["import", "--from", "openai-batch", str(outputs), "--batch-input", str(inputs), "--benchmark",
                 "math500", "--data-dir", str(data_dir), "--out", str(run)]) == 0
    first = read_samples(run / "samples.jsonl")[0]
    assert (first.completion, first.reasoning, first.finish_reason, first.n_reasoning_tokens) == (
        "", f"so it is \\boxed{{{gold}}}? check", "length", 40)
    assert main(["score", str(run), "--bootstrap", "0", "--workers", "1", "--no-progress"]) == 0
    graded = read_jsonl(run / "graded.jsonl")[0]
    assert (graded["status"], graded["reasoning_state"], graded["correct"]) == ("truncated", "unclosed", False)


def test_diversity_and_judge_read_the_answer_part_by_default():
    """Mutant 'diversity reads the whole completion': the reasoning text would be measured."""
    from dsdr_eval.diversity_metrics.run import load_problems
    from dsdr_eval.llm_judge.run import answer_part
    from dsdr_eval.rundir.samples import as_graded, parse_sample

    rows = [_row("<think>long reasoning A</think>answer one", sample_idx=0, phase="sampling"),
            _row("answer two", sample_idx=1, phase="sampling", reasoning="reasoning B"),
            _row("<think>never closed", sample_idx=2, phase="sampling")]
    records = as_graded(grade_samples(rows, workers=1, progress=False))
    [problem] = load_problems(None, records)
    assert [r.text for r in problem.rollouts] == ["answer one", "answer two", ""]
    [problem] = load_problems(None, records, "reasoning")
    assert [r.text for r in problem.rollouts] == ["<think>long reasoning A</think>", "reasoning B",
                                                  "<think>never closed"]
    [problem] = load_problems(None, records, "whole")
    assert [r.text for r in problem.rollouts] == [rows[0]["completion"], "reasoning B\nanswer two",
                                                  rows[2]["completion"]]
    assert [answer_part(r) for r in records] == ["answer one", "answer two", ""]
    ungraded, _ = parse_sample(rows[0], "x:1")
    assert answer_part(ungraded) == "answer one"


def test_score_table_metrics_and_report_show_the_reasoning_figures(tmp_path, capsys):
    """`score` prints, metrics.json holds, load_run reads and the report writes the figures.
    Mutants: the report's reasoning lines dropped; results.py not reading unclosed_reasoning_fraction."""
    import json

    from dsdr_eval.cli import main
    from dsdr_eval.reporting.readme import ReportContent, reasoning_lines, render_readme
    from dsdr_eval.rundir.results import load_run

    run = tmp_path / "run"
    run.mkdir()
    rows = [_row("<think>r</think>\\boxed{70}", problem_id="a", n_completion_tokens=8, n_reasoning_tokens=5),
            _row("<think>maybe \\boxed{70}", problem_id="b", finish_reason="length", n_completion_tokens=9,
                 n_reasoning_tokens=9),
            _row("\\boxed{70}", problem_id="c", finish_reason="stop", n_completion_tokens=4)]
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["score", str(run), "--bootstrap", "0", "--workers", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "unclosed reasoning" in out and "reasoning_unclosed 1" in out
    entry = load_run(run).benchmarks["default"]
    assert entry.unclosed_reasoning_fraction == pytest.approx(1 / 3)
    assert entry.truncated_fraction == pytest.approx(1 / 2)  # finish_reason of 2 samples recorded, 1 is length
    assert entry.mean_reasoning_tokens == pytest.approx((5 + 9 + 0) / 3)
    assert entry.mean_answer_tokens == pytest.approx((3 + 0 + 4) / 3)
    assert entry.status_counts["truncated"] == 1
    [line] = reasoning_lines([load_run(run)])
    assert "unclosed reasoning 33.3%" in line and "reasoning\\_unclosed 1" in line  # Markdown-escaped
    readme = render_readme(ReportContent("t", (), ".", 1, 0, 0, runs=[load_run(run)]))
    assert line in readme and "reasoning format auto" in readme


def test_reasoning_format_option_on_score_and_import_is_recorded(tmp_path, data_dir, capsys):
    """--reasoning-format: `none` grades the whole completion (recorded in the provenance);
    `import --reasoning-format think` writes config.json, which `score` then reads; a bad spec is
    one line and exit 2."""
    import json

    from dsdr_eval.cli import main
    from dsdr_eval.rundir.jsonl import read_json, read_jsonl

    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps(_row("<think>\\boxed{70}</think>done", finish_reason="stop")) + "\n"
                       + json.dumps(_row("plain \\boxed{70}", problem_id="q", finish_reason="stop")) + "\n",
                       encoding="utf-8")
    for spec, statuses in (("none", ["correct", "correct"]), ("auto", ["no_answer", "correct"]),
                           ("think", ["no_answer", "truncated"])):
        assert main(["score", str(samples), "--out", str(tmp_path / spec), "--bootstrap", "0", "--workers", "1",
                     "--no-progress", "--reasoning-format", spec]) == 0
        assert [r["status"] for r in read_jsonl(tmp_path / spec / "graded.jsonl")] == statuses, spec
        assert read_json(tmp_path / spec / "metrics.json")["provenance"]["grading"]["reasoning"][
            "reasoning_format"] == spec
    capsys.readouterr()
    assert main(["score", str(samples), "--out", str(tmp_path / "bad"), "--reasoning-format", "end:"]) == 2
    assert "end marker" in capsys.readouterr().err

    plain = tmp_path / "plain.jsonl"
    plain.write_text(samples.read_text(encoding="utf-8"), encoding="utf-8")
    run = tmp_path / "imported"
    assert main(["import", "--from", "jsonl", "--id-field", "problem_id", "--gold-field", "gold", str(plain), "--out", str(run), "--reasoning-format", "think"]) == 0
    assert read_json(run / "config.json")["reasoning_format"] == "think"
    assert main(["score", str(run), "--bootstrap", "0", "--workers", "1", "--no-progress"]) == 0
    assert [r["status"] for r in read_jsonl(run / "graded.jsonl")] == ["no_answer", "truncated"]


class _JinjaTokenizer:
    """A tokenizer's chat template, rendered as transformers renders one (Jinja, the kwargs as variables):
    a Qwen3-style template that writes an empty think block when enable_thinking is false, and an
    R1-style opening when it is true."""

    chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                     "<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
                     "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}")

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False, **kwargs):
        import jinja2

        return jinja2.Template(self.chat_template).render(messages=messages, **kwargs)


def test_chat_template_kwargs_reach_the_template_and_the_server(tmp_path, data_dir):
    """--chat-template-kwargs: rendered into the prompt by a local tokenizer, sent as the body's
    chat_template_kwargs to a server, recorded in config.json. Mutant 'kwargs dropped': the prompt
    keeps the opened <think> (and the prompt-opened split applies), the body lacks them."""
    from helpers.fault_server import FaultServer

    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.options.commands import RunOptions
    from dsdr_eval.backends.base import LocalTokenizerBackend
    from dsdr_eval.prompts import BUILTIN_TEMPLATES, DEFAULT_TEMPLATE
    from dsdr_eval.rundir.jsonl import read_json

    class Local(LocalTokenizerBackend):  # only the rendering of the hf / vllm backends
        name = "local"
        tokenizer, _chat = _JinjaTokenizer(), True

        def __init__(self, kwargs):
            self.chat_template_kwargs = kwargs

        def generate(self, requests, batches, on_results):
            raise NotImplementedError

        def batch_capacity(self):
            return 1

        def config(self):
            return {}

    template = BUILTIN_TEMPLATES[DEFAULT_TEMPLATE]
    thinking, _ = Local({}).render(template, "1+1?")
    plain, _ = Local({"enable_thinking": False}).render(template, "1+1?")
    assert thinking.endswith("<think>\n") and plain.endswith("<think>\n\n</think>\n\n")
    assert split_completion("2", prompt=thinking).state == "unclosed"
    assert split_completion("The answer is \\boxed{2}", prompt=plain).state == "none"

    out = tmp_path / "run"
    with FaultServer(reply="The answer is \\boxed{42}.") as server:
        run_evaluation(RunOptions(model=server.model, backend="openai", benchmarks=["math500"], limit=1,
                                  protocol="quick", n=1, max_tokens=16, data_dir=str(data_dir), out=str(out),
                                  no_diversity=True, no_progress=True, base_url=[server.base_url],
                                  chat_template_kwargs='{"enable_thinking": false}'), command=["t"])
        bodies = [r.body for r in server.completion_requests()]
    assert bodies and all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in bodies)
    assert read_json(out / "config.json")["template"]["chat_template_kwargs"] == {"enable_thinking": False}
    with pytest.raises(DsdrError, match="chat-template-kwargs: expected a JSON object"):
        run_evaluation(RunOptions(model=server.model, backend="openai", benchmarks=["math500"], limit=1,
                                  protocol="quick", n=1, data_dir=str(data_dir), out=str(tmp_path / "bad"),
                                  base_url=["http://127.0.0.1:9/v1"], chat_template_kwargs="[1]"), command=["t"])


SKY_T1 = Path(__file__).parent / "real_files" / "sky-t1-27b" / "amc23" / "test_Sky-T1_-1_seed0_t0.0_s0_e-1.jsonl"


def test_real_sky_t1_traces_cut_off_in_their_thought_are_truncated(tmp_path, data_dir):
    """A real Qwen2.5-Math math_eval file of a Sky-T1 model (tests/eval/real_files/PROVENANCE.md):
    idx 8 and 32 never close <|begin_of_thought|>; the file's grader scores both correct and dsdr's
    flexible profile read idx 32's last number 3 (= gold). Now both are truncated; idx 1 is graded on
    its solution block, idx 3 (no markers) as a whole. Mutant 'grade the whole completion': idx 32 correct."""
    from dsdr_eval.cli import main
    from dsdr_eval.rundir.jsonl import read_json, read_jsonl

    run = tmp_path / "run"
    assert main(["import", "--from", "qwen-math", str(SKY_T1), "--data-dir", str(data_dir), "--out", str(run)]) == 0
    assert main(["score", str(run), "--bootstrap", "0", "--workers", "1", "--no-progress"]) == 0
    graded = {int(r["source_id"]): r for r in read_jsonl(run / "graded.jsonl")}
    states = {idx: (r["status"], r["reasoning_state"], r.get("source_correct")) for idx, r in graded.items()}
    assert states == {1: ("correct", "closed", True), 3: ("correct", "none", True), 8: ("truncated", "unclosed", True),
                      24: ("incorrect", "closed", False), 32: ("truncated", "unclosed", True)}
    assert graded[32]["changed_by"] == ["reasoning_unclosed"]
    solution = graded[1]["completion"][graded[1]["answer_span"][0]:graded[1]["answer_span"][1]]
    assert "<|begin_of_thought|>" not in solution and "\\boxed" in solution
    agreement = read_json(run / "metrics.json")["provenance"]["source_agreement"]
    assert {tuple(d["key"])[2] for d in agreement["disagreements"]} == {graded[8]["problem_id"], graded[32]["problem_id"]}


def test_token_means_are_null_unless_every_sample_is_counted():
    """A reasoning sample without a token count makes both means null (not the mean of the rest)."""
    rows = [_row("<think>r</think>\\boxed{70}", n_completion_tokens=8),
            _row("\\boxed{70}", problem_id="q", n_completion_tokens=4)]
    entry = compute_metrics(grade_samples(rows, workers=1, progress=False), bootstrap=0)["benchmarks"]["default"]
    assert entry["mean_reasoning_tokens"] is None and entry["mean_answer_tokens"] is None
    assert entry["mean_completion_tokens"] == pytest.approx(6.0)


def test_grading_hostile_thinking_traces_is_linear_and_never_correct():
    """A 2 MB unclosed trace full of boxed guesses of the gold, and 10^5 alternating blocks whose
    last close is followed by no answer: bounded time, no false positive."""
    guesses = "<think>" + "maybe \\boxed{70} " * 120_000
    blocks = "<think>\\boxed{70}</think>" * 100_000 + "<think>\\boxed{70}"
    started = time.process_time()
    graded = grade_samples([_row(guesses, finish_reason="length"), _row(blocks, problem_id="q"),
                            _row(blocks + "</think>", problem_id="r")], workers=1, progress=False, extraction="flexible")
    assert time.process_time() - started < 20.0
    assert [(r["status"], r["correct"]) for r in graded] == [("truncated", False), ("truncated", False),
                                                            ("no_answer", False)]


def test_diversity_text_option_is_recorded(tmp_path, monkeypatch):
    """`dsdr-eval diversity --text reasoning`: measured on the reasoning, recorded in the settings
    (a stub encoder: the texts it is given are the ones measured)."""
    import json

    from dsdr_eval.diversity_metrics.run import compute_run_diversity
    from dsdr_eval.rundir.jsonl import read_json

    class Recorder:
        seen: list[str] = []

        def encode(self, texts):
            import numpy as np

            Recorder.seen.extend(texts)
            vectors = np.ones((len(texts), 4)) + np.arange(len(texts))[:, None] * np.eye(4)[0]
            return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    run = tmp_path / "run"
    run.mkdir()
    rows = [_row(f"<think>R{i}</think>A{i} \\boxed{{70}}", sample_idx=i, phase="sampling") for i in range(3)]
    (run / "graded.jsonl").write_text("".join(json.dumps(r) + "\n" for r in grade_samples(rows, workers=1,
                                                                                          progress=False)))
    compute_run_diversity(run, encoder=Recorder(), progress=False, text="reasoning")
    assert Recorder.seen[:3] == [f"<think>R{i}</think>" for i in range(3)]
    assert read_json(run / "metrics.json")["benchmarks"]["default"]["diversity"]["settings"]["text"]["part"] == \
        "reasoning"
    with pytest.raises(DsdrError, match="unknown text part"):
        compute_run_diversity(run, encoder=Recorder(), progress=False, text="scratchpad")
    # the options path of `dsdr-eval diversity --text whole` (the encoder it loads stubbed)
    from dsdr_eval.api.analysis import run_diversity
    from dsdr_eval.options.commands import DiversityOptions
    from dsdr_eval.diversity_metrics import semantic

    monkeypatch.setattr(semantic, "load_encoder", lambda *args, **kwargs: Recorder())
    run_diversity(DiversityOptions(str(run), no_progress=True, text="whole"), log=lambda message: None)
    assert read_json(run / "metrics.json")["benchmarks"]["default"]["diversity"]["settings"]["text"]["part"] == "whole"
