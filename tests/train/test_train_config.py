"""dsdr-train config and data: typed fields, clear errors naming the key, algorithm defaults,
JSONL field mapping, the resumable prompt sampler. Fast (no model)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dsdr_eval.errors import DsdrError
from dsdr_train import config as C
from dsdr_train.core_algos import ALGO_DEFAULTS
from dsdr_train.data import PromptSampler, load_train_problems

REQUIRED = {"model": "m", "train_data": "d.jsonl", "out": "o"}


def build(**overrides):
    return C.config_from_sources(yaml_path=None, cli=dict(REQUIRED), overrides=overrides)


def test_every_field_has_help_and_help_config_lists_it(capsys):
    from dsdr_train.cli import main

    assert main(["--help-config"]) == 0
    out = capsys.readouterr().out
    for f in dataclasses.fields(C.TrainConfig):
        assert f.metadata.get("help"), f"field {f.name} has no help text"
        assert f.name in out


@pytest.mark.parametrize("algo", sorted(ALGO_DEFAULTS))
def test_algorithm_defaults_fill_objective_fields(algo):
    cfg = C.config_from_sources(yaml_path=None, cli={**REQUIRED, "algo": algo}, overrides={})
    for key, value in ALGO_DEFAULTS[algo].items():
        if key in C.FIELDS and not (key == "overlong_buffer" and value is None):
            assert getattr(cfg.objective, key) == value, key
    assert cfg.to_dict()["algo"] == algo


def test_paper_values_per_algo():
    assert build().objective.clip_ratio_high == 0.2
    dapo = C.config_from_sources(yaml_path=None, cli={**REQUIRED, "algo": "dapo"}, overrides={})
    o = dapo.objective
    assert (o.clip_ratio_high, o.loss_agg_mode, o.dynamic_sampling) == (0.28, "token-mean", True)
    assert o.overlong_buffer == dapo.max_response_length // 4
    o = C.config_from_sources(yaml_path=None, cli={**REQUIRED, "algo": "dsdr"}, overrides={}).objective
    assert (o.lambda_d, o.lambda_l, o.tau, o.reward) == (0.001, 0.001, 5.0, "dsdr")


def test_choices_the_papers_leave_open_are_recorded_options():
    """Defaults keep today's behaviour; every choice is a field of the recorded config."""
    for algo in sorted(ALGO_DEFAULTS):
        cfg = C.config_from_sources(yaml_path=None, cli={**REQUIRED, "algo": algo}, overrides={})
        record = cfg.to_dict()
        assert (record["singleton_advantage"], record["local_norm"], record["dapo_exhausted"]) == ("zero", "prompts", "train")
        assert (record["encoder_chunked"], record["encoder_max_seq_length"], record["disable_dropout"]) == (False, None, True)
        assert record["formula_rules"] == "extended"
    cfg = build(**C.parse_overrides(["dapo_exhausted=error", "singleton_advantage=reward", "local_norm=correct_prompts",
                                     "encoder_chunked=true", "encoder_max_seq_length=128"]))
    assert cfg.objective.dapo_exhausted == "error" and cfg.objective.local_norm == "correct_prompts"
    assert cfg.encoder_chunked and cfg.encoder_max_seq_length == 128 and cfg.objective.singleton_advantage == "reward"


def test_overrides_are_typed_and_beat_yaml(tmp_path):
    yml = tmp_path / "c.yaml"
    yml.write_text("group_size: 4\nlr: 3.0e-6\nalgo: dsdr\n")
    cfg = C.config_from_sources(yaml_path=str(yml), cli=dict(REQUIRED),
                                overrides=C.parse_overrides(["group_size=6", "tau=2", "val_data=none"]))
    assert (cfg.group_size, cfg.lr, cfg.objective.tau, cfg.objective.algo, cfg.val_data) == (6, 3e-6, 2.0, "dsdr", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("item, needle", [
    ("grop_size=3", "'grop_size'"),
    ("group_size=abc", "'group_size'"),
    ("group_size=1", "'group_size'"),
    ("lr=true", "'lr'"),
    ("loss_agg_mode=sum", "loss_agg_mode"),
    ("lambda_l=-1", "lambda_l"),
    ("rollout_engine=sglang", "'rollout_engine'"),
    ("mini_batch_prompts=3", "'mini_batch_prompts'"),
    ("nokeyvalue", "key=value"),
    ("dapo_exhausted=stop", "'dapo_exhausted'"),
    ("singleton_advantage=one", "'singleton_advantage'"),
    ("local_norm=groups", "'local_norm'"),
    ("loss_norm_constant=0", "'loss_norm_constant'"),
    ("encoder_max_seq_length=2", "'encoder_max_seq_length'"),
    ("formula_rules=latex", "'formula_rules'"),
])
def test_bad_keys_and_values_name_the_key(item, needle):
    with pytest.raises(DsdrError) as err:
        build(**C.parse_overrides([item]))
    assert needle in str(err.value)


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(DsdrError, match="did you mean group_size"):
        C.parse_overrides(["grop_size=3"])


def test_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("group_size: [1\n")
    with pytest.raises(DsdrError, match="bad.yaml"):
        C.load_yaml(bad)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("not_a_key: 1\n")
    with pytest.raises(DsdrError, match="unknown.yaml.*not_a_key"):
        C.load_yaml(unknown)


def test_cli_reports_config_errors_without_traceback(capsys, tmp_path):
    from dsdr_train.cli import main

    code = main(["--model", "m", "--train-data", "d.jsonl", "--out", str(tmp_path / "r"), "group_size=x"])
    assert code == 2
    assert "group_size" in capsys.readouterr().err


def test_jsonl_field_mapping_and_errors(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "1+1?", "solution": "2"}) + "\n" + json.dumps({"prompt": "2+2?", "solution": "4"}) + "\n")
    problems = load_train_problems(str(path))
    assert [(p.problem, p.answer) for p in problems] == [("1+1?", "2"), ("2+2?", "4")]
    assert problems[0].id == "t-0"
    with pytest.raises(DsdrError, match="'question'"):
        load_train_problems(str(path), problem_field="question")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "x", "answer": "1"}) + "\n" + json.dumps({"problem": "y"}) + "\n")
    with pytest.raises(DsdrError, match="record 2"):
        load_train_problems(str(bad))
    with pytest.raises(DsdrError, match="not found"):
        load_train_problems("/nonexistent/train.jsonl")


def test_shared_train_data_loads(train_data_dir):
    problems = load_train_problems(str(train_data_dir / "gsm8k_train.jsonl"), limit=5)
    assert len(problems) == 5 and all(p.problem and p.answer for p in problems)


def test_prompt_sampler_is_resumable_and_covers_each_epoch():
    a = PromptSampler(7, seed=3)
    first = a.next_indices(10)
    assert sorted(first[:7]) == list(range(7))  # one epoch = a permutation
    b = PromptSampler(7, seed=3)
    b.load_state_dict(a.state_dict())
    assert b.next_indices(9) == a.next_indices(9)
    with pytest.raises(DsdrError, match="7 problems, the data now has 6"):
        PromptSampler(6, seed=3).load_state_dict(a.state_dict())


def test_objective_config_is_nested_not_repeated():
    """TrainConfig holds one ObjectiveConfig; no objective field is declared twice."""
    from dsdr_train.objective import ObjectiveConfig

    run_fields = {f.name for f in dataclasses.fields(C.TrainConfig)}
    objective_fields = {f.name for f in dataclasses.fields(ObjectiveConfig)}
    assert not run_fields & objective_fields
    cfg = C.config_from_sources(yaml_path=None, cli={**REQUIRED, "algo": "dsdr"}, overrides={"tau": 2.0})
    assert isinstance(cfg.objective, ObjectiveConfig) and cfg.objective.tau == 2.0
    assert cfg.objective.algo == cfg.to_dict()["algo"] == "dsdr"


def test_nested_sections_replace_and_flat_attributes_do_not_exist():
    """The objective is read and replaced through its section: ``dataclasses.replace`` works on it,
    and a flat objective key is no attribute of the config (type checkers see what exists)."""
    cfg = C.config_from_sources(yaml_path=None, cli={**REQUIRED, "algo": "dsdr"}, overrides={})
    changed = dataclasses.replace(cfg, objective=dataclasses.replace(cfg.objective, tau=2.0), group_size=4)
    assert (changed.objective.tau, changed.group_size, changed.objective.lambda_d) == (2.0, 4, 0.001)
    assert (cfg.objective.tau, cfg.group_size) == (5.0, 8)  # the original is untouched
    for key in C.OBJECTIVE_KEYS:
        with pytest.raises(AttributeError):
            getattr(cfg, key)
    with pytest.raises(TypeError):
        dataclasses.replace(cfg, tau=2.0)  # a flat key is no field: cfg.replace(tau=...) routes it
    assert cfg.replace(tau=2.0).objective.tau == 2.0


def test_flat_record_round_trips_and_a_nested_objective_is_accepted(tmp_path):
    cfg = build(**C.parse_overrides(["lambda_l=0.01", "group_size=4"]))
    record = cfg.to_dict()
    assert "objective" not in record and record["lambda_l"] == 0.01 and record["local_term"] is True
    assert C.config_from_dict(json.loads(json.dumps(record)), source="config.json") == cfg
    older = {k: v for k, v in record.items() if k not in ("adv_estimator", "policy_loss")}  # before the registries
    assert C.config_from_dict(older, source="config.json") == cfg
    nested = {k: v for k, v in record.items() if k not in C.OBJECTIVE_KEYS}
    nested["objective"] = {k: record[k] for k in C.OBJECTIVE_KEYS}
    assert C.config_from_dict(nested, source="config.json") == cfg
    yml = tmp_path / "nested.yaml"
    yml.write_text("algo: dsdr\nobjective:\n  tau: 3\n  lambda_l: 0.01\n")
    assert C.config_from_sources(yaml_path=str(yml), cli=dict(REQUIRED), overrides={}).objective.tau == 3.0
    yml.write_text("objective:\n  group_size: 3\n")
    with pytest.raises(DsdrError, match="objective.group_size"):
        C.load_yaml(yml)


def test_replace_routes_flat_objective_keys_and_validates():
    cfg = build()
    changed = cfg.replace(loss_agg_mode="token-mean", micro_batch_size=3)
    assert changed.objective.loss_agg_mode == "token-mean" and changed.micro_batch_size == 3
    with pytest.raises(ValueError, match="loss_agg_mode"):
        cfg.replace(loss_agg_mode="sum")


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(C.__file__).parent / "configs").glob("*.yaml")))
def test_every_shipped_yaml_config_loads(name):
    path = Path(C.__file__).parent / "configs" / name
    values = C.load_yaml(path)
    cfg = C.resolve_config({"model": "m", "train_data": "d.jsonl", "out": "o", **values})
    assert cfg.objective.algo == values.get("algo", "grpo")



def test_training_problems_are_the_eval_problem_type_and_grade_with_its_metadata(tmp_path, monkeypatch):
    from dsdr_eval.tasks import Problem
    from dsdr_train import scoring
    from dsdr_train.rollout import RolloutBatch

    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n")
    [problem] = load_train_problems(str(path))
    assert isinstance(problem, Problem) and (problem.benchmark, problem.id, problem.answer) == ("t", "t-0", "2")
    rows: list[dict] = []
    monkeypatch.setattr("dsdr_eval.grading.grade_samples", lambda batch_rows, **kw: rows.extend(batch_rows) or [])
    monkeypatch.setattr(scoring, "grading_pool", lambda cfg: None)
    olympiad = Problem("olympiadbench", "7", "How far?", "3", {"unit": "m"})
    scoring.grade(RolloutBatch(texts=["3 m"], group_ids=[0], problem_idx=[0]), [olympiad], None)
    assert rows[0]["gold"] == "3" and rows[0]["answer_meta"] == {"unit": "m"}


def test_an_unregistered_name_is_a_config_error():
    """A reward / estimator / policy-loss name no registry holds stops the run at configuration
    (one DsdrError line, exit 2), not at the first dispatch."""
    base = {"algo": "grpo", "model": "m", "train_data": "t", "out": "o"}
    for key in ("reward", "adv_estimator", "policy_loss"):
        with pytest.raises(DsdrError, match=f"config key {key}: unknown 'nope'"):
            C.config_from_sources(yaml_path=None, cli=base, overrides={key: "nope"})


# ------------------------------------------------------------------ shipped configs, by name from anywhere


def test_a_shipped_config_is_named_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # outside the repository: a repo path like dsdr_train/configs/... does not exist here
    shipped = Path(C.__file__).parent / "configs"
    by_name = C.config_from_sources(yaml_path="cpu_demo", cli=dict(REQUIRED), overrides={})
    by_path = C.config_from_sources(yaml_path=str(shipped / "cpu_demo.yaml"), cli=dict(REQUIRED), overrides={})
    assert by_name == by_path and by_name.group_size == 4
    # the docs' older spelling (a repository path) names the shipped copy too
    assert C.config_from_sources(yaml_path="dsdr_train/configs/paper_dsdr.yaml", cli=dict(REQUIRED),
                                 overrides={}).objective.algo == "dsdr"
    with pytest.raises(DsdrError, match=r"nosuch: no such file.*paper_dsdr.*accelerate/zero2"):
        C.config_from_sources(yaml_path="nosuch", cli=dict(REQUIRED), overrides={})
    # a file in the working directory wins over a shipped name
    (tmp_path / "cpu_demo").write_text("group_size: 6\n")
    assert C.config_from_sources(yaml_path="cpu_demo", cli=dict(REQUIRED), overrides={}).group_size == 6


def test_where_prints_every_shipped_file_and_one_path(capsys):
    from dsdr_train.cli import main

    assert main(["--where"]) == 0
    listing = capsys.readouterr().out
    package = Path(C.__file__).parent
    for path in [*(package / "configs").glob("*.yaml"), *(package / "configs" / "accelerate").glob("*.yaml"),
                 package / "integrations" / "verl" / "paper_runs.sh"]:
        assert str(path) in listing
    assert main(["--where", "accelerate/zero2"]) == 0
    assert capsys.readouterr().out.strip() == str(package / "configs" / "accelerate" / "zero2.yaml")
    assert main(["--where", "verl/nosuch.sh"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "verl/nosuch.sh: no such file" in err


def test_every_file_where_lists_is_in_the_wheel():
    # `--where` and `--config NAME` promise an installed copy: each such file must match pyproject's package-data
    import fnmatch
    import tomllib

    from dsdr_train.packaged import PACKAGE_DIR, packaged_files

    pyproject = tomllib.loads((PACKAGE_DIR.parent / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["dsdr_train"]
    for name, path in packaged_files().items():
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{name} ({rel}) is not shipped in the wheel"


def test_stop_strings_are_a_typed_list_from_yaml_overrides_and_config_json(tmp_path):
    """config key `stop` (issue 42 item 6): a YAML list, a key=value YAML list or one string; recorded in
    config.json and read back; an empty string or a non-string refused naming the key."""
    yml = tmp_path / "c.yaml"
    yml.write_text('stop: ["\\n\\nProblem:", "###"]\n')
    cfg = C.config_from_sources(yaml_path=str(yml), cli=dict(REQUIRED), overrides={})
    assert cfg.stop == ("\n\nProblem:", "###")
    assert build(**C.parse_overrides(['stop=["A:", "B:"]'])).stop == ("A:", "B:")
    assert build(**C.parse_overrides(["stop=Question:"])).stop == ("Question:",)
    assert build().stop == ()
    record = json.loads(json.dumps(cfg.to_dict()))
    assert record["stop"] == ["\n\nProblem:", "###"]
    assert C.config_from_dict(record, source="config.json") == cfg
    for bad in ('stop=[""]', "stop=[3]"):
        with pytest.raises(DsdrError, match="'stop'"):
            build(**C.parse_overrides([bad]))


def test_trl_engine_passes_stop_to_vllm_and_refuses_it_without(tmp_path):
    from dsdr_train.integrations.trl.mapping import geometry, grpo_config_kwargs

    cfg = build(**C.parse_overrides(['stop=["Q:"]', "engine=trl", "rollout_engine=vllm", "prompts_per_step=2",
                                     "mini_batch_prompts=2", "group_size=2"]))
    geo = geometry(cfg, 1)
    kwargs = grpo_config_kwargs(cfg, geo, tmp_path, device_type="cuda")
    assert kwargs["use_vllm"] and kwargs["generation_kwargs"] == {"stop": ["Q:"], "include_stop_str_in_output": False}
    with pytest.raises(DsdrError, match="'stop'"):
        grpo_config_kwargs(cfg.replace(rollout_engine="hf"), geo, tmp_path, device_type="cpu")
    assert "generation_kwargs" not in grpo_config_kwargs(cfg.replace(stop=(), rollout_engine="hf"), geo, tmp_path,
                                                         device_type="cpu")
