"""verl's own loggers' output (FileLogger JSONL, console concat_dict_to_str) -> dsdr metrics.jsonl."""

from __future__ import annotations

import json

import numpy as np
import pytest
from verl.utils.logger.aggregate_logger import concat_dict_to_str
from verl.utils.tracking import FileLogger

from dsdr_train.integrations.verl import metrics_log

STEP_1 = {"actor/pg_loss": -0.012, "actor/actor/dsdr_loss_local": 0.0004, "actor/pg_clipfrac": 0.03,
          "critic/advantages/mean": 0.0, "critic/score/mean": -0.5, "response_length/mean": 812.5,
          "timing_s/gen": 41.2, "dsdr/acc/mean": 0.25, "dsdr/bonus/mean": 0.0001, "dsdr/diversity/semantic": 0.4,
          "actor/ppo_kl": np.float64(1e-4)}
STEP_2 = {**STEP_1, "actor/pg_loss": 0.02, "dsdr/acc/mean": 0.375}
EXPECTED_1 = {"step": 1, "loss/pg": -0.012, "loss/local": 0.0004, "clip/frac": 0.03, "adv/mean": 0.0,
              "verl/critic/score/mean": -0.5, "response_length/mean": 812.5, "time/generate_s": 41.2,
              "acc/mean": 0.25, "bonus/mean": 0.0001, "diversity/semantic": 0.4, "verl/actor/ppo_kl": 1e-4}


def test_file_logger_jsonl(tmp_path, monkeypatch):
    path = tmp_path / "run.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("p", "e")
    logger.log(STEP_1, step=1)
    logger.log(STEP_2, step=2)
    logger.finish()
    rows = metrics_log.convert(path)
    assert rows[0] == pytest.approx(EXPECTED_1)
    assert rows[1]["acc/mean"] == 0.375 and rows[1]["loss/pg"] == 0.02


def test_console_log_with_ray_prefixes_and_noise(tmp_path):
    path = tmp_path / "console.log"
    lines = ["(TaskRunner pid=123) Training Progress:  0%|", f"(TaskRunner pid=123) {concat_dict_to_str(STEP_1, step=1)}",
             "INFO something else: 3", concat_dict_to_str(STEP_2, step=2)]
    path.write_text("\n".join(lines) + "\n")
    rows = metrics_log.convert(path)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0] == pytest.approx(EXPECTED_1)


def test_cli_writes_a_run_the_dashboard_lists(tmp_path):
    log = tmp_path / "console.log"
    log.write_text(concat_dict_to_str(STEP_1, step=1) + "\n")
    out = tmp_path / "runs" / "verl_dsdr"
    assert metrics_log.main([str(log), "--out", str(out), "--algo", "dsdr"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["kind"] == "train" and config["engine"] == "verl" and config["algo"] == "dsdr"
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[0]) == pytest.approx(EXPECTED_1)


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "data": {"a": 1}}\n{"step": "x"}\n')
    assert metrics_log.main([str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.jsonl:2" in err
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    assert metrics_log.main([str(empty), "--out", str(tmp_path / "o")]) == 2
    assert metrics_log.main([str(tmp_path / "missing.log"), "--out", str(tmp_path / "o")]) == 2
