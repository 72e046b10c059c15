"""`ctu eval` against an OpenAI-compatible server on 127.0.0.1 that plays tau2 tasks' gold actions (native tool
calls or Hermes text), spoils some samples and fails one episode's endpoint: rewards, success, pass^k and the
infrastructure-error exclusion against hand-computed values and against tau2's own `compute_metrics`, resume, and
the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ctu.evaluation.policies import PolicyChoice
from ctu.evaluation.report import figures
from ctu.evaluation.runner import TRAJECTORIES, run_evaluation
from ctu.spec import spec_from_dict
from tau_bench_env.domains import tau2_domain

from ..conftest import MINIMAL_SPEC
from ..support import gold_policy
from ..support.openai_server import ScriptedOpenAIServer

SEED = 11
TASKS = 3  # the first three retail test tasks
SPOILED = {(0, 1)}  # (task index, sample): a gold replay missing its last write (reward 0)
DOWN = (2, 0)  # the policy endpoint answers 500 to every request of this episode (an infrastructure error)


def eval_spec(native: bool) -> Any:
    data = json.loads(json.dumps(MINIMAL_SPEC))
    data["experiment"]["seed"] = SEED
    data["model"] = {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking"}
    data["data"]["test_sets"] = {"retail": {"domain": "retail", "split": "test", "max_tasks": TASKS}}
    data["rollout"] = {"native_tool_calling": native, "parser": "hermes", "eval_n_samples_per_prompt": 2}
    data["environment"]["max_turns"] = 30
    return spec_from_dict(data).spec


def gold(native: bool, down: bool) -> gold_policy.GoldPolicy:
    """The first `TASKS` retail test tasks' gold replays, `SPOILED` spoiled, and `DOWN` down when `down`."""
    return gold_policy.GoldPolicy(native, SEED, tasks=TASKS, spoiled=SPOILED, down=DOWN if down else None)


def by_key(out: Path) -> dict[tuple[str, int], dict[str, Any]]:
    lines = [json.loads(text) for text in (out / TRAJECTORIES).read_text().splitlines()]
    return {(line["task_id"], line["sample"]): line for line in lines}


@pytest.mark.parametrize("native", [True, False], ids=["native", "text"])
def test_eval_scores_an_endpoint_as_tau2_and_resumes_what_an_outage_left(native: bool, tmp_path: Path):
    spec = eval_spec(native)
    policy = gold(native, down=True)
    server = ScriptedOpenAIServer(default=policy).__enter__()
    choice = PolicyChoice(endpoint=server.base_url, model="gold", api_key_env=None)
    first = run_evaluation(spec, choice, tmp_path, concurrency=4, progress=False)
    overall = first.report["overall"]
    # 6 episodes: one infrastructure error; of the other 5, task 0 sample 1 is spoiled
    assert first.ran == 6 and overall["episodes"] == 6 and overall["infra_errors"] == 1
    assert overall["success_rate"] == pytest.approx(4 / 5) and overall["average_reward"] == pytest.approx(4 / 5)
    # pass^1 per task: 1/2, 1, 1 (task 2 over its one kept trial); task 2 kept one trial, so no pass^2 (tau2's rule)
    assert overall["pass^k"] == {"1": pytest.approx((0.5 + 1 + 1) / 3)}
    assert overall["parse_failure_rate"] == 0  # every gold call read (natively, or by the hermes parser)
    assert overall["terminations"] == {"user_stop": 1.0}
    lines = by_key(tmp_path)
    down = lines[(policy.tasks[2].id, 0)]
    assert "EndpointError" in down["infra_error"] and down["reward"] == 0.0
    spoiled = lines[(policy.tasks[0].id, 1)]  # the replay missing its last write: tau2's action check names it
    assert spoiled["failed_actions"] == [policy.tasks[0].evaluation_criteria.actions[policy.writes[0][-1]].name] and spoiled["checks"]["actions"] < 1.0
    assert all(line["failed_actions"] == [] for key, line in lines.items() if line["raw_reward"] == 1.0)
    log = (tmp_path / "eval.log").read_text()  # the outage's traceback is in the evaluation's log, not the console
    assert "is an infrastructure error" in log and "Traceback" in log and "EndpointError" in log

    policy.down = False  # the endpoint is back (the same URL: the same policy): a rerun runs only the spoiled episode
    asked = len(server.requests)
    try:
        second = run_evaluation(spec, PolicyChoice(endpoint=server.base_url, model="gold", api_key_env=None), tmp_path,
                                concurrency=4, progress=False)
        assert second.ran == 1 and len({m["seed"] for m in list(server.requests)[asked:]}) == 1
    finally:
        server.__exit__(None, None, None)
    overall = second.report["overall"]
    assert overall["infra_errors"] == 0 and overall["success_rate"] == pytest.approx(5 / 6)
    assert overall["pass^k"] == {"1": pytest.approx((0.5 + 1 + 1) / 3), "2": pytest.approx((0 + 1 + 1) / 3)}
    assert len((tmp_path / TRAJECTORIES).read_text().splitlines()) == 6  # compacted: one line per episode
    assert json.loads((tmp_path / "eval.json").read_text())["overall"] == overall
    assert (tmp_path / "eval.png").stat().st_size > 1000
    assert tau2_metrics(list(by_key(tmp_path).values()), policy.tasks) == (overall["average_reward"], overall["pass^k"])


def tau2_metrics(lines: list[dict[str, Any]], tasks: list[Any]) -> tuple[float, dict[str, float]]:
    """tau2's own `compute_metrics` over the same episodes (as tau2 `SimulationRun`s with their rewards)."""
    from unittest.mock import MagicMock

    from tau2.data_model.simulation import Info, Results, RewardInfo, SimulationRun
    from tau2.metrics.agent_metrics import compute_metrics

    simulations = [SimulationRun.model_construct(
        id=f"{line['task_id']}-{line['sample']}", task_id=line["task_id"], trial=line["sample"], seed=line["sample"],
        start_time="0", end_time="1", duration=1.0, termination_reason=line["termination"], messages=[],
        reward_info=RewardInfo(reward=line["raw_reward"]), agent_cost=0.0, user_cost=0.0) for line in lines
        if line["infra_error"] is None]
    info = Info.model_construct(git_commit="", num_trials=2, max_steps=30, max_errors=10, user_info=MagicMock(),
                                agent_info=MagicMock(), environment_info=MagicMock(), seed=SEED)
    metrics = compute_metrics(Results.model_construct(info=info, tasks=tasks, simulations=simulations))
    return metrics.avg_reward, {str(k): v for k, v in metrics.pass_hat_ks.items()}


def test_figures_by_hand():
    def line(task: str, reward: float, infra: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"task_id": task, "domain": "retail", "test_set": "t", "reward": reward, "raw_reward": reward,
                "infra_error": infra, "termination": "user_stop", "policy_turns": 4, "tool_errors": 1,
                "parse_failures": 0, "empty_turns": 0, "policy_tokens": 100, **extra}

    lines = [line("a", 1.0), line("a", 1.0), line("a", 0.0), line("b", 1.0), line("b", 0.0, parse_failures=2),
             line("b", 0.0, infra="user simulator: 503"), line("c", 0.0, termination="max_turns")]
    result = figures(lines)
    assert result["episodes"] == 7 and result["infra_errors"] == 1
    assert result["success_rate"] == pytest.approx(3 / 6)
    # c has one trial, so k stops at 1: (2/3 + 1/2 + 0) / 3
    assert result["pass^k"] == {"1": pytest.approx((2 / 3 + 1 / 2 + 0) / 3)}
    assert result["terminations"] == {"max_turns": pytest.approx(1 / 6), "user_stop": pytest.approx(5 / 6)}
    assert result["tool_error_rate"] == pytest.approx(6 / 24) and result["parse_failure_rate"] == pytest.approx(2 / 24)
    assert figures([line("a", 0.0, infra="down")]) == {"episodes": 1, "infra_errors": 1}


def test_the_command_line_evaluates_an_endpoint_and_compares_results(tmp_path: Path):
    spec_file = tmp_path / "spec.yaml"
    data = json.loads(json.dumps(MINIMAL_SPEC))
    data["experiment"].update(seed=SEED, output_dir=str(tmp_path / "runs"))
    data["model"] = {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking"}
    data["data"]["test_sets"] = {"retail": {"domain": "retail", "split": "test"}}
    data["rollout"] = {"native_tool_calling": True, "eval_n_samples_per_prompt": 2}
    spec_file.write_text(yaml.safe_dump(data))
    policy = gold(native=True, down=False)

    def ctu(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ctu.cli", *args], cwd=tmp_path, capture_output=True, text=True,
                              env={**__import__("os").environ, "COLUMNS": "250"}, timeout=600)

    with ScriptedOpenAIServer(default=policy) as server:
        unsigned = ctu("eval", str(spec_file), "--endpoint", server.base_url, "--model", "gold", "--submission", "sub.json")
        assert unsigned.returncode == 2 and "--submission needs --organization and --email" in unsigned.stderr
        done = ctu("eval", str(spec_file), "--endpoint", server.base_url, "--model", "gold", "--limit", "3", "--no-progress",
                   "--repeats", "2", "--submission", "sub.json", "--organization", "ctu", "--email", "team@example.com")
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "runs" / "minimal" / "eval" / "endpoint-gold"
    report = json.loads((out / "eval.json").read_text())
    assert report["policy"] == "endpoint-gold" and report["overall"]["episodes"] == 12  # 3 tasks x 2 samples x 2 repeats
    assert sorted({line["sample"] for line in map(json.loads, (out / "trajectories.jsonl").read_text().splitlines())}) == [0, 1, 2, 3]
    spread = report["repeats"]["by_test_set"]["retail"]["success_rate"]
    assert report["repeats"]["count"] == 2 and len(spread["values"]) == 2 and spread["low"] <= spread["mean"] <= spread["high"]
    assert "success, 2 repeats" in done.stdout
    # re-scored against a task file where task 5 also asks the agent to say something it never says
    import tau2

    tasks = json.loads((Path(tau2.__file__).parent / "data" / "tau2" / "domains" / "retail" / "tasks.json").read_text())
    first = report["test_set_sources"]["retail"]["task_ids"][0].split("/")[1]
    for task in tasks:
        if task["id"] == first:
            task["evaluation_criteria"]["communicate_info"] = ["the code word is 98765"]
    (tmp_path / "fixed.json").write_text(json.dumps(tasks))
    regraded = ctu("eval", str(spec_file), "--endpoint", "http://127.0.0.1:9/v1", "--model", "gold", "--regrade", "fixed.json")
    assert regraded.returncode == 0, regraded.stdout + regraded.stderr
    again = json.loads((out / "regraded" / "fixed" / "eval.json").read_text())["by_test_set"]["retail"]["by_task"]
    before = report["by_test_set"]["retail"]["by_task"]
    assert again[f"retail/{first}"] == [0, 4] and all(again[t] == before[t] for t in before if t != f"retail/{first}")
    assert f"12 episode(s) re-scored against fixed.json: 0 became successes, {before[f'retail/{first}'][0]} failures" in " ".join(regraded.stdout.split())
    # `ctu view` of the two evaluations, in a real browser: the tasks it marks flipped are the ones `ctu compare`
    # pairs whose success rate changed, here the one task the new file made fail
    from urllib.parse import urlencode

    from tests.support.browser import browser, console_errors, embedded_data, episode_facts, open_page

    flipped = sorted(task for task in before if again[task][0] / again[task][1] != before[task][0] / before[task][1])
    assert flipped == [f"retail/{first}"]
    viewed = ctu("view", str(out), str(out / "regraded" / "fixed"), "--out", "page.html")
    assert viewed.returncode == 0 and "24 of 24 episode(s), 2 evaluation(s)" in viewed.stdout, viewed.stdout + viewed.stderr
    compared = ctu("compare", str(out), str(out / "regraded" / "fixed"))
    with browser() as driver:
        open_page(driver, tmp_path / "page.html", "view=flipped")
        assert [flip.get_attribute("data-task") for flip in driver.find_elements("css selector", "div.flip")] == flipped
        sides = driver.find_elements("css selector", "div.flip div.side")
        assert [len(side.find_elements("css selector", "article.episode")) for side in sides] == [4, 4]
        line = driver.find_element("css selector", "p.comparison").text
        # each failed episode named in tau2's evaluator's terms: in the regrade, the new file's communicate check
        open_page(driver, tmp_path / "page.html", urlencode({"view": "episodes", "failure": "failed check: COMMUNICATE"}))
        rows = [[cell.text for cell in row.find_elements("css selector", "td")] for row in driver.find_elements("css selector", "tr.row")]
        # the spoiled replay (one write short) opened: the gold action tau2's action check found missing
        episodes = embedded_data(tmp_path / "page.html")["episodes"]
        short = next(e for e in episodes if e["column"] == "endpoint-gold:eval" and e["failed_actions"])
        open_page(driver, tmp_path / "page.html", f"view=episodes&episode={short['id']}")
        facts = episode_facts(driver)
        assert facts["gold actions missed"] == ", ".join(short["failed_actions"]) and facts["failure"] == short["failure"]
        assert console_errors(driver) == []
    regraded = [e for e in episodes if e["column"] == "fixed:eval" and e["task"] == f"retail/{first}"]
    assert len(regraded) == 4 and all("COMMUNICATE" in e["failure"] and e["checks"]["communicate"] == 0.0 for e in regraded)
    assert [row[0] for row in rows] == [str(e["id"]) for e in regraded if e["failure"] == "failed check: COMMUNICATE"] != []
    assert all(row[5] == "failed check: COMMUNICATE" for row in rows)
    difference = f"{-before[f'retail/{first}'][0] / 4 / len(before):+.3f}"
    assert f"{difference} success over the {len(before)} tasks both evaluated with the same content" in line
    assert compared.returncode == 0 and difference in compared.stdout
    # another domain's tasks (ids 0-49 exist in both), or retail's with the ids moved to other tasks: refused
    airline = Path(tau2.__file__).parent / "data" / "tau2" / "domains" / "airline" / "tasks.json"
    wrong = ctu("eval", str(spec_file), "--endpoint", "http://127.0.0.1:9/v1", "--model", "gold", "--regrade", str(airline))
    assert wrong.returncode == 2 and "they are not of domain 'retail'" in " ".join(wrong.stderr.split()), wrong.stderr
    (tmp_path / "moved.json").write_text(json.dumps([{**task, "id": tasks[(i + 1) % len(tasks)]["id"]} for i, task in enumerate(tasks)]))
    moved = ctu("eval", str(spec_file), "--endpoint", "http://127.0.0.1:9/v1", "--model", "gold", "--regrade", "moved.json")
    said = " ".join(moved.stderr.split())
    assert moved.returncode == 2 and "3 evaluated task(s) ask for another customer or start from another database" in said
    assert all(f"retail/{task_id.split('/')[1]}" in said for task_id in report["test_set_sources"]["retail"]["task_ids"])
    evaluated = {task_id.split("/")[1] for task_id in report["test_set_sources"]["retail"]["task_ids"]}
    (tmp_path / "none.json").write_text(json.dumps([task for task in tasks if task["id"] not in evaluated][:3]))
    none = ctu("eval", str(spec_file), "--endpoint", "http://127.0.0.1:9/v1", "--model", "gold", "--regrade", "none.json")
    said = " ".join(none.stderr.split())  # nothing re-scored is no result: exit 3, nothing written
    assert none.returncode == 3 and "none of the 12 episode(s)" in said and "nothing was written" in said, said
    assert not (out / "regraded" / "airline").exists() and not (out / "regraded" / "moved").exists()
    assert not (out / "regraded" / "none").exists()
    elsewhere = tmp_path / "elsewhere" / "fixed.json"  # another file of the same name: its regrade would mix into fixed/
    elsewhere.parent.mkdir()
    elsewhere.write_text(json.dumps(tasks[::-1]))
    clash = ctu("eval", str(spec_file), "--endpoint", "http://127.0.0.1:9/v1", "--model", "gold", "--regrade", str(elsewhere))
    assert clash.returncode == 2 and "holds a regrade against another fixed.json" in " ".join(clash.stderr.split())
    from tau2.scripts.leaderboard.submission import Submission

    submitted = Submission.model_validate_json((tmp_path / "sub.json").read_text())  # tau2's own schema
    assert submitted.model_name == "endpoint-gold" and submitted.organization == "ctu" and submitted.results.airline is None
    assert submitted.results.retail.pass_1 == pytest.approx(100 * report["by_test_set"]["retail"]["pass^k"]["1"])
    assert submitted.results.retail.pass_4 == pytest.approx(100 * report["by_test_set"]["retail"]["pass^k"]["4"])
    warned = " ".join(done.stderr.split())
    assert "retail: split 'test'; the leaderboard takes the `base` split" in warned
    assert "airline: not evaluated" in warned and "retail: 3 of the split's 40 tasks evaluated" in warned
    source = report["test_set_sources"]["retail"]  # what `ctu compare` checks before comparing
    assert (source["domain"], source["split"], source["tasks_file"], len(source["task_ids"])) == ("retail", "test", None, 3)
    assert sorted(report["by_test_set"]["retail"]["by_task"]) == sorted(source["task_ids"])
    assert all(trials == 4 for _, trials in report["by_test_set"]["retail"]["by_task"].values())
    assert "pass^4" in done.stdout and "12 episode(s) run" in done.stdout
    assert ctu("eval", str(spec_file), "--test-set", "airline").returncode == 2
    # a policy endpoint where nothing listens: a line per episode and a summary, the tracebacks in eval.log
    from ctu.backends.tinker.server import free_port

    down = ctu("eval", str(spec_file), "--endpoint", f"http://127.0.0.1:{free_port()}/v1", "--model", "gold", "--limit", "1",
               "--no-progress", "--out", str(tmp_path / "down"))
    # nothing measured: exit 3 (not a success), and eval.json holds no success figure
    assert down.returncode == 3 and "Traceback" not in down.stdout + down.stderr, down.stderr[-3000:]
    assert down.stderr.count("is an infrastructure error") == 2 and "2 episode(s) ended by an infrastructure error" in down.stderr
    assert "nothing measured: none of the 2 episode(s) finished" in " ".join(down.stderr.split())
    assert "success_rate" not in json.loads((tmp_path / "down" / "eval.json").read_text())["overall"]
    assert "Traceback" in (tmp_path / "down" / "eval.log").read_text()
    other = tmp_path / "other"
    other.mkdir()
    (other / "eval.json").write_text(json.dumps({**report, "policy": "other", "overall": {"episodes": 6, "infra_errors": 6},
                                                 "by_test_set": {"retail": {"episodes": 6, "infra_errors": 6}}}))
    compared = ctu("compare", str(out), str(other / "eval.json"), "--plot", "both.png")
    assert compared.returncode == 0, compared.stderr
    assert "endpoint-gold" in compared.stdout and "other" in compared.stdout and (tmp_path / "both.png").exists()


def test_the_eval_table_reads_in_80_columns_and_the_pass_k_axis_is_whole_numbers(tmp_path: Path, monkeypatch):
    from rich.console import Console

    from ctu.evaluation.report import plot_report, report_table

    report = {"spec": "retail_8b_taxonomy", "policy": "http://127.0.0.1:8000/v1", "samples_per_task": 1,
              "by_test_set": {name: {"episodes": 40, "infra_errors": 0, "average_reward": 0.25, "success_rate": 0.25,
                                     "tool_error_rate": 0.1, "parse_failure_rate": 0.0, "turns_per_episode": 7.5,
                                     "policy_tokens_per_episode": 812, "pass^k": {"1": 0.25}}
                              for name in ("retail", "airline", "telecom")}}
    report["overall"] = report["by_test_set"]["retail"]
    console = Console(width=80, record=True)
    console.print(report_table(report))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    for cell in ("episodes", "parse failures/turn", "tokens/episode", "pass^1", "telecom", "overall", "0.250"):
        assert cell in text
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "close", lambda figure: None)  # keep the figure to read its axes
    plot_report(report, tmp_path / "eval.png")
    assert (tmp_path / "eval.png").stat().st_size > 0
    assert plt.gcf().axes[1].get_xlim() == (0.5, 1.5)  # k = 1 alone, centred; not 0.945-1.05
    plt.close("all")


def test_an_evaluation_folder_is_reused_only_by_the_evaluation_it_holds(tmp_path: Path):
    """An evaluation folder's identity (`eval_config.json`): the same command resumes; another endpoint serving a
    model of the same name, the test set's tasks file edited in place, or a folder seeded the older way, is refused
    naming what differs; a folder holding someone else's files is refused and left as it was."""
    import tau2

    tasks = json.loads((Path(tau2.__file__).parent / "data" / "tau2" / "domains" / "retail" / "tasks.json").read_text())
    test_ids = {str(task.id) for task in tau2_domain("retail").tasks("test")}
    tasks_file = tmp_path / "retail_test.json"
    tasks_file.write_text(json.dumps([task for task in tasks if task["id"] in test_ids]))
    data = json.loads(json.dumps(MINIMAL_SPEC))
    data["experiment"]["seed"] = SEED
    data["model"] = {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking"}
    data["data"]["test_sets"] = {"retail": {"domain": {"type": "retail", "tasks_file": str(tasks_file)}, "split": "base",
                                            "max_tasks": 1}}
    data["rollout"] = {"native_tool_calling": True, "eval_n_samples_per_prompt": 1}
    data["environment"]["max_turns"] = 30
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    out = tmp_path / "eval"

    def ctu(url: str, folder: Path = out) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ctu.cli", "eval", str(spec_file), "--endpoint", url, "--model", "gold",
                               "--no-progress", "--out", str(folder)], capture_output=True, text=True, timeout=600)

    with ScriptedOpenAIServer(default=gold(native=True, down=False)) as first, \
            ScriptedOpenAIServer(default=gold(native=True, down=False)) as second:
        done = ctu(first.base_url)
        assert done.returncode == 0 and "1 episode(s) run" in done.stdout, done.stdout + done.stderr
        again = ctu(first.base_url)
        assert again.returncode == 0 and "0 episode(s) run" in again.stdout, again.stdout + again.stderr
        older = tmp_path / "older"  # written before the episode seeds had a task's offset: not resumed with new ones
        older.mkdir()
        config = json.loads((out / "eval_config.json").read_text())
        del config["seeding"]
        (older / "eval_config.json").write_text(json.dumps(config))
        reseeded = ctu(first.base_url, older)
        said = " ".join(reseeded.stderr.split())
        assert reseeded.returncode == 2 and 'episode seeds: "seed + k" -> "seed + task offset + k"' in said, said
        other = ctu(second.base_url)
        said = " ".join(other.stderr.split())
        assert other.returncode == 2 and "holds an evaluation of another policy:" in said, said
        assert first.base_url.rstrip("/") in said and second.base_url.rstrip("/") in said
        edited = json.loads(tasks_file.read_text())
        edited[0]["user_scenario"]["instructions"]["reason_for_call"] += " Quickly."
        tasks_file.write_text(json.dumps(edited))
        stale = ctu(first.base_url)
        assert stale.returncode == 2 and "another tasks files (their content)" in " ".join(stale.stderr.split())
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        (theirs / "notes.txt").write_text("mine")
        refused = ctu(first.base_url, theirs)
        assert refused.returncode == 2 and "holds files `ctu eval` does not write (notes.txt)" in " ".join(refused.stderr.split())
        assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]
    assert json.loads((out / "eval.json").read_text())["overall"]["episodes"] == 1
    # the evaluated tasks file edited in place, then a regrade with it: its task is not the one evaluated
    in_place = subprocess.run([sys.executable, "-m", "ctu.cli", "eval", str(spec_file), "--out", str(out), "--regrade",
                               str(tasks_file)], capture_output=True, text=True, timeout=600)
    said = " ".join(in_place.stderr.split())
    assert in_place.returncode == 2 and f"1 evaluated task(s) ask for another customer or start from another database than " \
        f"when they were evaluated: retail/{edited[0]['id']}" in said, said
    assert not (out / "regraded").exists()
    line = json.loads((out / "trajectories.jsonl").read_text())
    del line["sample"]  # edited by hand: not a line ctu eval wrote
    (out / "trajectories.jsonl").write_text(json.dumps(line) + "\n")
    edited = subprocess.run([sys.executable, "-m", "ctu.cli", "eval", str(spec_file), "--out", str(out), "--regrade",
                             str(tasks_file)], capture_output=True, text=True, timeout=600)
    assert edited.returncode == 2 and "line 1, has no valid test set, task id or sample index" in " ".join(edited.stderr.split())


def test_an_evaluator_exception_the_policy_caused_counts_against_it(tmp_path: Path):
    """mock's `create_task_1_with_env_assertions` asserts on the task the policy should have created: a policy that
    says goodbye at once makes tau2's evaluator raise, which tau2 scores 0 and keeps in every average and pass^k."""
    data = json.loads(json.dumps(MINIMAL_SPEC))
    data["model"] = {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking"}
    data["data"]["test_sets"] = {"mock": {"domain": "mock", "split": "base", "max_tasks": 2}}
    data["rollout"] = {"eval_n_samples_per_prompt": 2}
    spec = spec_from_dict(data).spec
    from ..support.openai_server import Answer

    with ScriptedOpenAIServer(default=Answer.text("I cannot do that. Goodbye. ###STOP###")) as server:
        result = run_evaluation(spec, PolicyChoice(endpoint=server.base_url, model="quitter", api_key_env=None), tmp_path,
                                concurrency=2, progress=False)
    overall = result.report["overall"]
    assert overall["episodes"] == 4 and overall["infra_errors"] == 0 and overall["success_rate"] == 0.0
    assert overall["pass^k"] == {"1": 0.0, "2": 0.0}
    raised = [line for line in by_key(tmp_path).values() if line["task_id"] == "create_task_1_with_env_assertions"]
    assert len(raised) == 2 and all(line["evaluation_error"] == "ValueError: Task task_2 not found" for line in raised)
    assert all(line["infra_error"] is None and line["evaluator_fault"] is None for line in raised)
    from ctu.view.data import page_data

    shown = [episode for episode in page_data([tmp_path])["episodes"] if episode["task_id"] == "create_task_1_with_env_assertions"]
    assert [episode["failure"] for episode in shown] == ["evaluator raised: ValueError: Task task_2 not found"] * 2


def test_an_evaluation_where_no_episode_reached_the_policy_measures_nothing(tmp_path: Path):
    """With a context smaller than the first prompt, every episode ends `context_overflow` before the policy's first
    turn: its 0.000 is no measurement, and `ctu eval` exits 3 saying why (a policy turn played is a measurement)."""
    from ctu.evaluation.report import policy_never_played

    from ..support.openai_server import Answer

    data = json.loads(json.dumps(MINIMAL_SPEC))
    data["model"] = {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking", "max_model_len": 300}
    data["data"]["test_sets"] = {"mock": {"domain": "mock", "split": "base", "max_tasks": 2}}
    data["rollout"] = {"max_tokens_per_turn": 64}
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(json.dumps(data))
    with ScriptedOpenAIServer(default=Answer.text("Goodbye. ###STOP###")) as server:
        done = subprocess.run([sys.executable, "-m", "ctu.cli", "eval", str(spec_file), "--endpoint", server.base_url,
                               "--model", "any", "--no-progress", "--out", str(tmp_path / "short")],
                              capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "200"}, timeout=300)
        assert server.requests == []  # the policy was never asked
    assert done.returncode == 3, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "nothing measured: none of the 2 finished episode(s) reached a policy turn" in said and "context_overflow 100%" in said
    overall = json.loads((tmp_path / "short" / "eval.json").read_text())["overall"]
    assert policy_never_played(overall) is not None
    assert policy_never_played({**overall, "turns_per_episode": 0.5}) is None  # a turn played is a measurement
    assert policy_never_played({"episodes": 2, "infra_errors": 2}) is None  # the infrastructure errors say why
    from ctu.errors import NothingMeasuredError
    from ctu.tasks.calibrate import calibrate_tasks

    data["data"]["train"] = [{"domain": "mock", "split": "base", "max_tasks": 2}]  # calibrated: measures nothing too
    data["data"]["test_sets"], data["trainer"] = {}, {"train_batch_size": 1, "policy_mini_batch_size": 1}
    with (ScriptedOpenAIServer(default=Answer.text("Goodbye. ###STOP###")) as server,
          pytest.raises(NothingMeasuredError, match="no task calibrated: none of the 4 finished episode")):
        calibrate_tasks(spec_from_dict(data).spec, PolicyChoice(endpoint=server.base_url, model="any", api_key_env=None),
                        tmp_path / "calibrated", samples=2, progress=False)
    assert sorted(path.name for path in (tmp_path / "calibrated").iterdir()) == ["episodes"]  # no bucket written
