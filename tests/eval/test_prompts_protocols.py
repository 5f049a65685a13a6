"""Templates, protocols, seeds and the runner's plan/batching/config checks (no model needed)."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from types import SimpleNamespace

import pytest

from dsdr_eval.backends.base import Backend
from dsdr_eval.errors import DsdrError
from dsdr_eval.prompts import (BUILTIN_TEMPLATES, PromptTemplate, encode_prompt, load_template, render_prompt,
                               resolve_chat_mode)
from dsdr_eval.protocols import PROTOCOLS, apply_overrides, derive_seed, get_protocol
from dsdr_eval.run import generate as run_generate
from dsdr_eval.run import plan as run_plan
from dsdr_eval.run import resume as run_resume
from test_cli_bad_args import RUN, _argv, invoke, tripwires, world  # noqa: F401 - fixtures used by name


def test_default_template_is_the_qwen_boxed_instruction_and_keeps_latex_braces():
    template = load_template(None)
    assert template.name == "qwen-boxed"
    text = template.user_message(r"Find $\frac{a}{b}$ if {x} = 1.")
    assert text == (r"Find $\frac{a}{b}$ if {x} = 1." + "\n"
                    + r"Please reason step by step, and put your final answer within \boxed{}.")
    raw = template.raw_prompt("2+2?")
    assert raw.startswith("Problem: 2+2?") and raw.endswith("Solution:") and r"\boxed{}" in raw


def test_template_file_needs_exactly_one_placeholder(tmp_path):
    good = tmp_path / "t.txt"
    good.write_text("Q: {problem}\nA: let's think. \\boxed{}\n", encoding="utf-8")
    template = load_template(str(good))
    assert template.name == "file:t.txt"
    assert template.user_message("1+1") == "Q: 1+1\nA: let's think. \\boxed{}"
    for bad_text in ("no placeholder", "{problem} twice {problem}"):
        bad = tmp_path / "bad.txt"
        bad.write_text(bad_text, encoding="utf-8")
        with pytest.raises(DsdrError, match="bad.txt.*placeholder"):
            load_template(str(bad))
    with pytest.raises(DsdrError, match="neither a built-in template"):
        load_template(str(tmp_path / "missing.txt"))
    with pytest.raises(DsdrError):
        PromptTemplate("x", "nothing here")


class _ChatTokenizer:
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt and not tokenize
        return "<s>USER:" + messages[0]["content"] + "\nASSISTANT:"

    def __call__(self, text, add_special_tokens):
        ids = [ord(c) for c in text]
        return {"input_ids": ([1] + ids) if add_special_tokens else ids}


def test_chat_mode_resolution_and_rendering():
    tok = _ChatTokenizer()
    template = BUILTIN_TEMPLATES["qwen-boxed"]
    assert resolve_chat_mode("auto", tok) is True
    assert resolve_chat_mode("auto", SimpleNamespace(chat_template=None)) is False
    assert resolve_chat_mode("raw", tok) is False
    with pytest.raises(DsdrError, match="no chat template"):
        resolve_chat_mode("chat", SimpleNamespace(chat_template=None))
    chat = render_prompt(template, "1+1?", tokenizer=tok, chat=True)
    assert chat.startswith("<s>USER:1+1?\nPlease reason") and chat.endswith("ASSISTANT:")
    assert render_prompt(template, "1+1?", tokenizer=tok, chat=False).startswith("Problem: 1+1?")
    # a chat-templated prompt already carries its specials: no second BOS
    assert encode_prompt(tok, "ab", chat=True) == [97, 98]
    assert encode_prompt(tok, "ab", chat=False) == [1, 97, 98]


def test_paper_protocol_matches_algorithms_section_5():
    paper = get_protocol("dsdr-paper")
    assert [(p.phase, p.n, p.temperature, p.top_p) for p in paper.phases] == [
        ("pass1", 1, 0.1, 0.9), ("sampling", 64, 0.7, 0.9)]
    assert paper.max_tokens == 4096 and paper.seed == 0
    assert get_protocol("greedy").phases[0].temperature == 0.0
    quick = get_protocol("quick")
    assert quick.max_tokens == 256 and [p.n for p in quick.phases] == [1, 4]
    with pytest.raises(FrozenInstanceError):
        paper.max_tokens = 1  # type: ignore[misc]
    with pytest.raises(DsdrError, match="unknown protocol"):
        get_protocol("nope")
    assert json.loads(json.dumps(paper.to_config()))["phases"][1]["n"] == 64


def test_overrides_touch_the_right_phase_and_mark_the_name():
    paper = PROTOCOLS["dsdr-paper"]
    assert apply_overrides(paper) == paper
    custom = apply_overrides(paper, n=8, temperature=1.0, top_p=0.95, pass1_temperature=0.0,
                             max_tokens=8192, seed=3)
    assert custom.name == "dsdr-paper+custom" and custom.max_tokens == 8192 and custom.seed == 3
    assert [(p.phase, p.n, p.temperature, p.top_p) for p in custom.phases] == [
        ("pass1", 1, 0.0, 0.9), ("sampling", 8, 1.0, 0.95)]
    only = apply_overrides(paper, phases=["sampling"])
    assert [p.phase for p in only.phases] == ["sampling"]
    greedy_n = apply_overrides(PROTOCOLS["greedy"], n=3)  # the only phase of a one-phase protocol
    assert greedy_n.phases[0].n == 3
    with pytest.raises(DsdrError, match="no phase bogus"):
        apply_overrides(paper, phases=["bogus"])
    with pytest.raises(DsdrError, match="top_p"):
        apply_overrides(paper, top_p=0.0)
    with pytest.raises(DsdrError, match="n must be"):
        apply_overrides(paper, n=0)


def test_seeds_are_keyed_by_content():
    a = derive_seed(0, "math500", "sampling", "p1", 0)
    assert a == derive_seed(0, "math500", "sampling", "p1", 0)
    assert len({a, derive_seed(1, "math500", "sampling", "p1", 0), derive_seed(0, "math500", "pass1", "p1", 0),
                derive_seed(0, "math500", "sampling", "p2", 0), derive_seed(0, "math500", "sampling", "p1", 16)}) == 5
    assert 0 <= a < 2**31 - 1


class _FakeBackend(Backend):
    name = "fake"

    def __init__(self, capacity: int, piece: int | None = None):
        self.capacity, self.piece = capacity, piece

    def render(self, template, problem):
        return "P:" + problem, problem

    def batch_capacity(self):
        return self.capacity

    def max_n_per_request(self):
        return self.piece or self.capacity

    def generate(self, requests, batches, on_results):
        raise AssertionError("not used")

    def config(self):
        return {"name": self.name}


def _bench(name, n):
    problems = tuple(SimpleNamespace(id=f"{name}-{i}", problem=f"q{i}", answer=str(i)) for i in range(n))
    return run_plan.BenchmarkData(name, name, problems)


def test_plan_splits_n_and_batches_depend_only_on_the_plan():
    benches = [_bench("a", 3), _bench("b", 2)]
    protocol = apply_overrides(PROTOCOLS["dsdr-paper"], n=10)
    plan = run_generate.plan_requests(benches, protocol, _FakeBackend(capacity=4), BUILTIN_TEMPLATES["plain"])
    keys = [k for p in plan for k in p.keys()]
    assert len(keys) == len(set(keys)) == 5 * (1 + 10)
    assert set(keys) == run_plan.expected_keys(benches, protocol)
    assert {p.request.n for p in plan if p.phase.phase == "sampling"} == {4, 2}  # 10 = 4 + 4 + 2
    batches = run_generate.pack_batches(plan, capacity=4, max_prompts=4)
    assert sorted(i for b in batches for i in b) == list(range(len(plan)))
    for batch in batches:
        settings = {(plan[i].benchmark, plan[i].phase.phase, plan[i].request.n) for i in batch}
        assert len(settings) == 1 and sum(plan[i].request.n for i in batch) <= 4
    # same plan -> same batches (the resume guarantee for batch-seeded engines)
    assert batches == run_generate.pack_batches(plan, capacity=4, max_prompts=4)
    seeds = {p.request.seed for p in plan}
    assert len(seeds) == len(plan)


def test_open_samples_repairs_a_torn_tail_and_rejects_duplicates(tmp_path):
    path = tmp_path / "samples.jsonl"
    rows = [{"benchmark": "a", "phase": "sampling", "problem_id": "x", "sample_idx": i, "gold": "1", "completion": "c"}
            for i in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"benchmark": "a", "probl')
    assert run_resume.open_samples(path).keys == {("a", "sampling", "x", 0), ("a", "sampling", "x", 1)}
    assert path.read_text().endswith("}\n")  # the partial line was cut
    path.write_text(path.read_text() + json.dumps(rows[0]) + "\n")
    with pytest.raises(DsdrError, match="record 3 duplicates"):
        run_resume.open_samples(path).keys


def test_config_mismatch_refuses_unless_forced(tmp_path):
    from dsdr_eval.rundir import directory as rundir

    base = {"kind": "eval", "model": {"path": "/m", "fingerprint": "f1"},
            "protocol": PROTOCOLS["quick"].to_config(),
            "template": {"name": "qwen-boxed", "text": "t", "raw_text": None, "mode": "auto"},
            "benchmarks": [{"name": "math500", "n_problems": 8, "ids_sha256": "abc"}]}
    assert run_resume.check_resume_config(tmp_path, base, force=False) is None
    rundir.save_config(tmp_path, base)
    assert run_resume.check_resume_config(tmp_path, dict(base, label="other"), force=False)["kind"] == "eval"
    changed = dict(base, model={"path": "/m", "fingerprint": "f2"})
    with pytest.raises(DsdrError, match="different model"):
        run_resume.check_resume_config(tmp_path, changed, force=False)
    assert run_resume.check_resume_config(tmp_path, changed, force=True) is not None
    with pytest.raises(DsdrError, match="different protocol"):
        run_resume.check_resume_config(tmp_path, dict(base, protocol=PROTOCOLS["greedy"].to_config()), force=False)
    with pytest.raises(DsdrError, match="different benchmarks"):
        run_resume.check_resume_config(tmp_path, dict(base, benchmarks=[]), force=False)


def test_hostile_completion_text_is_written_safely(tmp_path):
    from dsdr_eval.backends.base import Completion, GenerationRequest
    from dsdr_eval.rundir.jsonl import append_jsonl, read_jsonl
    from dsdr_eval.protocols import Phase

    planned = run_generate.PlannedRequest("b", SimpleNamespace(id="p", problem="q", answer="1"),
                                    Phase("sampling", 1, 0.7, 0.9), 0,
                                    GenerationRequest("prompt", "q", 1, 0.7, 0.9, 8, 5))
    text = "lone surrogate \ud800 and NUL \x00 and \\boxed{1} </s> {\"json\": 1}\n"
    row = run_generate.new_sample(planned, 0, Completion(text, "stop", 3, 4, None)).to_json()
    append_jsonl(tmp_path / "s.jsonl", [row])
    [back] = read_jsonl(tmp_path / "s.jsonl")
    assert back["completion"].startswith("lone surrogate ") and "\\boxed{1}" in back["completion"]
    assert back["seed"] == 5 and back["sample_idx"] == 0 and back["phase"] == "sampling"


# ----------------------------------------------------------------------------- darling-paper, protocol files

def test_darling_protocol_matches_algorithms_section_5():
    darling = get_protocol("darling-paper")
    assert [(p.phase, p.n, p.temperature, p.top_p) for p in darling.phases] == [("sampling", 256, 0.6, 0.95)]
    assert darling.max_tokens == 8192 and darling.seed == 0
    assert get_protocol("dsdr-paper") != darling


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_protocol_file_yaml_and_json_define_the_same_protocol(tmp_path):
    from dsdr_eval.protocols import load_protocol_file, resolve_protocol

    yaml_file = _write(tmp_path / "mine.yaml", "# my protocol\nname: mine\nphases:\n"
                       "  - {phase: pass1, n: 1, temperature: 0, top_p: 1}\n"
                       "  - phase: sampling\n    n: 32\n    temperature: 0.8\n    top_p: 0.95\n"
                       "max_tokens: 2048\nseed: 5\n")
    json_file = _write(tmp_path / "other.json", json.dumps({
        "name": "mine", "max_tokens": 2048, "seed": 5,
        "phases": [{"phase": "pass1", "n": 1, "temperature": 0.0, "top_p": 1.0},
                   {"phase": "sampling", "n": 32, "temperature": 0.8, "top_p": 0.95}]}))
    from_yaml, from_json = load_protocol_file(yaml_file), resolve_protocol(str(json_file))
    assert from_yaml == from_json and from_yaml.to_config() == from_json.to_config()
    assert [(p.phase, p.n, p.temperature, p.top_p) for p in from_yaml.phases] == [
        ("pass1", 1, 0.0, 1.0), ("sampling", 32, 0.8, 0.95)]
    assert from_yaml.max_tokens == 2048 and from_yaml.seed == 5
    no_seed = load_protocol_file(_write(tmp_path / "s.yaml", "name: s\nphases: [{phase: sampling, n: 2, "
                                        "temperature: 1, top_p: 1}]\nmax_tokens: 8\n"))
    assert no_seed.seed == 0
    # the overrides apply to a file protocol as to a named one
    assert apply_overrides(from_yaml, n=4).name == "mine+custom"
    # a file that restates a built-in protocol is that protocol; one that reuses its name is refused
    same = _write(tmp_path / "darling.yaml", "name: darling-paper\nmax_tokens: 8192\nphases:\n"
                  "  - {phase: sampling, n: 256, temperature: 0.6, top_p: 0.95}\n")
    assert load_protocol_file(same) == get_protocol("darling-paper")
    with pytest.raises(DsdrError, match=r"impostor.yaml:name: 'dsdr-paper' is a built-in"):
        load_protocol_file(_write(tmp_path / "impostor.yaml", "name: dsdr-paper\nmax_tokens: 4096\n"
                                  "phases: [{phase: sampling, n: 8, temperature: 0.7, top_p: 0.9}]\n"))
    with pytest.raises(DsdrError, match="unknown protocol"):
        resolve_protocol("nosuch")


_GOOD_PHASE = "{phase: sampling, n: 4, temperature: 0.7, top_p: 0.9}"
BAD_PROTOCOL_FILES = [
    # (id, file name, content, the FILE:FIELD the one-line error must name)
    ("missing-name", "p.yaml", f"phases: [{_GOOD_PHASE}]\nmax_tokens: 64\n", "p.yaml:name: missing field"),
    ("missing-max-tokens", "p.yaml", f"name: x\nphases: [{_GOOD_PHASE}]\n", "p.yaml:max_tokens: missing field"),
    ("missing-phase-top-p", "p.yaml", "name: x\nmax_tokens: 64\nphases: [{phase: sampling, n: 4, temperature: 1}]\n",
     "p.yaml:phases[0].top_p: missing field"),
    ("n-zero", "p.yaml", "name: x\nmax_tokens: 64\nphases: [{phase: sampling, n: 0, temperature: 1, top_p: 1}]\n",
     "p.yaml:phases[0].n: must be >= 1"),
    ("n-string", "p.yaml", "name: x\nmax_tokens: 64\nphases: [{phase: sampling, n: '4', temperature: 1, top_p: 1}]\n",
     "p.yaml:phases[0].n: must be an integer"),
    ("n-float", "p.json", json.dumps({"name": "x", "max_tokens": 64, "phases": [
        {"phase": "sampling", "n": 2.5, "temperature": 1, "top_p": 1}]}), "p.json:phases[0].n: must be an integer"),
    ("max-tokens-bool", "p.yaml", f"name: x\nphases: [{_GOOD_PHASE}]\nmax_tokens: true\n",
     "p.yaml:max_tokens: must be an integer"),
    ("top-p-above-1", "p.yaml", "name: x\nmax_tokens: 64\nphases: [{phase: sampling, n: 4, temperature: 1, top_p: 1.5}]\n",
     "p.yaml:phases[0].top_p: must be in (0, 1]"),
    ("top-p-zero", "p.yaml", "name: x\nmax_tokens: 64\nphases: [{phase: sampling, n: 4, temperature: 1, top_p: 0}]\n",
     "p.yaml:phases[0].top_p: must be in (0, 1]"),
    ("temperature-negative", "p.yaml", "name: x\nmax_tokens: 64\nphases:\n"
     f"  - {_GOOD_PHASE}\n  - {{phase: pass1, n: 1, temperature: -0.1, top_p: 1}}\n",
     "p.yaml:phases[1].temperature: must be >= 0"),
    ("temperature-nan", "p.yaml", "name: x\nmax_tokens: 64\nphases: [{phase: sampling, n: 4, temperature: .nan, top_p: 1}]\n",
     "p.yaml:phases[0].temperature: must be a finite number"),
    ("phase-unknown", "p.yaml", "name: x\nmax_tokens: 64\nphases: [{phase: warmup, n: 4, temperature: 1, top_p: 1}]\n",
     "p.yaml:phases[0].phase: must be one of pass1, sampling"),
    ("phase-twice", "p.yaml", f"name: x\nmax_tokens: 64\nphases: [{_GOOD_PHASE}, {_GOOD_PHASE}]\n",
     "p.yaml:phases[1].phase: 'sampling' appears twice"),
    ("phases-empty", "p.yaml", "name: x\nmax_tokens: 64\nphases: []\n", "p.yaml:phases: must be a non-empty list"),
    ("unknown-field", "p.yaml", f"name: x\nmax_token: 64\nphases: [{_GOOD_PHASE}]\n", "p.yaml:max_token: unknown field"),
    ("unknown-phase-field", "p.yaml", "name: x\nmax_tokens: 64\nphases: [{phase: sampling, n: 4, temperature: 1, "
     "top_p: 1, top_a: 20}]\n", "p.yaml:phases[0].top_a: unknown field"),
    ("seed-negative", "p.yaml", f"name: x\nseed: -1\nmax_tokens: 64\nphases: [{_GOOD_PHASE}]\n",
     "p.yaml:seed: must be >= 0"),
    ("not-a-mapping", "p.yaml", "- just\n- a list\n", "p.yaml: expected a mapping"),
    ("yaml-syntax", "p.yaml", "name: x\nphases: [unclosed\n", "p.yaml:3: not valid YAML"),
    ("json-syntax", "p.json", '{"name": "x",\n', "p.json:2: not valid JSON"),
    ("no-such-file", "absent.yaml", None, "absent.yaml: no such protocol file"),
]


@pytest.mark.parametrize("case_id,name,content,expected", BAD_PROTOCOL_FILES, ids=[c[0] for c in BAD_PROTOCOL_FILES])
def test_bad_protocol_file_is_one_line_file_field_and_exit_2(case_id, name, content, expected, tmp_path, world,
                                                             data_dir, tripwires):
    """`dsdr-eval run --protocol bad.yaml ...`: exit 2, one line naming FILE:FIELD, before any backend."""
    from dsdr_eval.cli import main

    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    code, _, err = invoke(main, _argv(RUN + ["--protocol", str(path)], world, data_dir))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"{case_id}: exit {code!r}; stderr: {err[-600:]}"
    assert len(lines) == 1 and "Traceback" not in err, lines
    assert f"{tmp_path}/{expected}" in lines[0], lines[0]


def test_file_protocol_resumes_a_run_of_the_same_content(tmp_path, world, data_dir, tripwires, monkeypatch):
    """The run identity is the protocol's content: a file restating darling-paper resumes a
    darling-paper run directory (and the file is recorded beside it); other content is refused."""
    from dsdr_eval.cli import main
    from dsdr_eval.rundir.jsonl import write_json

    seen: list[dict] = []
    real_check = run_resume.check_resume_config

    def check(run_dir, config, **kwargs):
        seen.append(config)
        return real_check(run_dir, config, **kwargs)

    monkeypatch.setattr(run_resume, "check_resume_config", check)
    out = tmp_path / "run_dir"
    argv = _argv(RUN + ["--out", str(out)], world, data_dir)
    code, _, err = invoke(main, argv + ["--protocol", "darling-paper"])
    assert code == "accepted (run: built a backend)", err
    assert "protocol_file" not in seen[-1]
    out.mkdir(exist_ok=True)
    write_json(out / "config.json", seen[-1])  # what the named run recorded

    same = _write(tmp_path / "same.yaml", "name: darling-paper\nseed: 0\nmax_tokens: 8192\nphases:\n"
                  "  - {phase: sampling, n: 256, temperature: 0.6, top_p: 0.95}\n")
    code, _, err = invoke(main, argv + ["--protocol", str(same)])
    assert code == "accepted (run: built a backend)", err
    assert seen[-1]["protocol"] == get_protocol("darling-paper").to_config()
    assert seen[-1]["protocol_file"]["path"] == str(same) and len(seen[-1]["protocol_file"]["sha256"]) == 64

    other = _write(tmp_path / "other.yaml", "name: darling-like\nmax_tokens: 8192\nphases:\n"
                   "  - {phase: sampling, n: 256, temperature: 0.6, top_p: 0.95}\n")
    code, _, err = invoke(main, argv + ["--protocol", str(other)])
    assert code == 2 and "different protocol" in err, err
