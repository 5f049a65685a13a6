"""One real-browser check: the dashboard served by `streamlit run` on loopback, loaded in headless
Chromium through Playwright, shows the fixture runs and a chart; a screenshot goes to test-artifacts/."""

from __future__ import annotations

import json
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from dashboards import launch
from helpers.demo_script import load_demo
from helpers.fixtures_runs import build_fixture_runs
from helpers.net_helpers import free_port, stop_process, wait_until_healthy

demo = load_demo()

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@contextmanager
def served(runs: Path, log: Path) -> Iterator[str]:
    """`dsdr-dashboard --runs RUNS --port PORT` (the exact command), yielding its URL once healthy."""
    port = free_port()
    command = launch.build_command(launch.parse_args(["--runs", str(runs), "--port", str(port)]))
    with log.open("w") as fh:
        server = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_healthy(server, f"http://127.0.0.1:{port}/_stcore/health", log, timeout_s=60,
                           what="streamlit", poll_s=0.5)
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop_process(server, timeout_s=20)


@pytest.mark.browser
def test_dashboard_renders_in_chromium(tmp_path_factory, data_dir):
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: `make browser` (apt-get install chromium) installs it")
    from playwright.sync_api import sync_playwright

    runs = build_fixture_runs(tmp_path_factory.getbasetemp() / "dsdr_fixture_runs", data_dir)
    artifacts = REPO / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    # The exact command `dsdr-dashboard --runs RUNS --port PORT` runs (headless, 127.0.0.1).
    with served(runs, tmp_path_factory.mktemp("streamlit") / "streamlit.log") as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(f"{url}?page=evaluation&run=eval/grpo&run=eval/dsdr")
            page.get_by_role("heading", name="Evaluation").wait_for(timeout=60_000)
            page.get_by_role("tab", name="Pass@k").click()
            page.locator(".js-plotly-plot .main-svg").first.wait_for(state="visible", timeout=60_000)
            body = page.inner_text("body")
            assert "grpo" in body and "dsdr" in body
            assert page.locator(".js-plotly-plot").count() >= 3
            page.wait_for_timeout(1500)  # let plotly finish drawing before the screenshot
            page.screenshot(path=str(artifacts / "dashboard_evaluation.png"), full_page=True)

            page.goto(f"{url}?page=training")
            page.get_by_role("heading", name="Training dynamics").wait_for(timeout=60_000)
            page.locator(".js-plotly-plot .main-svg").first.wait_for(state="visible", timeout=60_000)
            body = page.inner_text("body")
            assert "dsdr-fixture" in body and "grpo-fixture" in body
            page.wait_for_timeout(1500)
            page.screenshot(path=str(artifacts / "dashboard_training.png"), full_page=True)
        finally:
            browser.close()
    assert (artifacts / "dashboard_evaluation.png").stat().st_size > 10_000


HOSTILE_COMPLETION = ("We get $![x](http://10.255.255.1/f.png)$ and $<img src=http://10.255.255.1/g.png>$, "
                      "also ![y](http://10.255.255.1/h.png) <img src=http://10.255.255.1/i.png> "
                      "so \\boxed{4}")


@pytest.mark.browser
@pytest.mark.slow
def test_no_completion_makes_the_page_load_anything(tmp_path, data_dir):
    """Issue 24: a formula chip `$![x](http://host/img.png)$` made the browser fetch a remote image.
    Every request the samples page makes (all rollouts expanded) must go to the dashboard itself."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: `make browser` (apt-get install chromium) installs it")
    from playwright.sync_api import sync_playwright

    from dsdr_eval.scoring.score import score_run_dir
    from helpers.fixtures_runs import write_eval_samples

    runs = tmp_path / "runs"
    run = write_eval_samples(runs / "hostile", data_dir, label="hostile", accuracy=0.5, benchmarks={"math500": 1})
    lines = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    for record in lines:
        record["completion"] = HOSTILE_COMPLETION
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    score_run_dir(run, progress=False, workers=1, bootstrap=0)
    artifacts = REPO / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    requests: list[str] = []
    with served(runs, tmp_path / "streamlit.log") as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.on("request", lambda request: requests.append(request.url))
            page.goto(f"{url}?page=samples&run=hostile")
            page.get_by_role("heading", name="Samples").wait_for(timeout=60_000)
            page.locator("[data-testid='stExpander'] summary").first.wait_for(timeout=60_000)
            for summary in page.locator("[data-testid='stExpander'] summary").all()[:4]:
                summary.click()
            page.get_by_text("Formulas (green").first.wait_for(timeout=30_000)
            page.wait_for_timeout(2000)
            page.screenshot(path=str(artifacts / "dashboard_hostile_formulas.png"), full_page=True)
            body = page.inner_text("body")
        finally:
            browser.close()
    outside = [request for request in requests if not request.startswith((url, "data:", "blob:"))]
    assert not outside, outside
    assert "![x](http://10.255.255.1/f.png)" in body  # shown as text


@pytest.mark.browser
def test_the_demo_runs_open_on_a_page_with_content(tmp_path):
    """Issue 23: `make demo` ends with `dsdr-dashboard --runs runs/demo`, which opened on an empty
    "Training dynamics" page. The demo's runs (scored evaluation runs and the ablation study's training
    logs, as examples/demo.py copies them) open on the training curves; evaluation runs alone open on
    the evaluation page, never on a page saying there is nothing to show."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: `make browser` (apt-get install chromium) installs it")
    from playwright.sync_api import sync_playwright

    runs = tmp_path / "demo"
    for name, (source, _) in demo.study_eval_runs(demo_examples()).items():
        shutil.copytree(source, runs / "ablation_study" / name)
    artifacts = REPO / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    with served(runs, tmp_path / "streamlit.log") as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(url)
            page.get_by_role("heading", name="Evaluation").wait_for(timeout=60_000)
            page.get_by_role("tab", name="Pass@k").click()
            page.locator(".js-plotly-plot .main-svg").first.wait_for(state="visible", timeout=60_000)
            assert "No evaluation runs" not in page.inner_text("body")

            demo.copy_training_logs(demo_examples(), runs / "ablation_study")  # the demo's runs, complete
            page.goto(url)
            page.get_by_role("heading", name="Training dynamics").wait_for(timeout=60_000)
            page.locator(".js-plotly-plot .main-svg").first.wait_for(state="visible", timeout=60_000)
            body = page.inner_text("body")
            # the page overlays the first runs in name order (ablation_study/dapo_s0_train, ...)
            assert "No training runs" not in body and "_s0_train" in body
            page.wait_for_timeout(1500)  # let plotly finish drawing before the screenshot
            page.screenshot(path=str(artifacts / "dashboard_demo_landing.png"), full_page=True)
        finally:
            browser.close()


def demo_examples() -> Path:
    return REPO / "reports" / "ablation_study" / "runs"
