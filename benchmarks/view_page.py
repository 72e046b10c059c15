"""`ctu view` on a large run: the page's file size, the time `ctu view` takes to write it, and the time a real browser
takes to first render it (headless chromium, `tests/support/browser.py`), for a run of `--lines` trajectory lines
(10,000 by default) with the page's default cap on embedded episodes and with every line embedded.

Run: `uv run python benchmarks/view_page.py (--from RUN_OR_EVAL_DIR | --retail TASKS) [--lines N] [--screenshot
docs/view.png]`. The run is made of a source's trajectory lines, repeated (each copy a step of its own) until it holds
`--lines`: a real episode's size and shape, at a scale a long run reaches. The source is a given folder's lines, or
(`--retail`) a `ctu eval` of tau2's first TASKS retail test tasks, two samples each, in text mode (each call parsed
beside its text), against a policy endpoint on 127.0.0.1 that plays each task's gold actions and leaves every third
task's second sample one write short (tests/support/gold_policy.py): retail's long system prompt and 10-30 turn
conversations, as a retail run's episodes are. `--screenshot` also saves the page (the
episode browser, one episode open) as docs/running.md shows it. The figures are recorded in
`benchmarks/results/view_page.json`, from which docs/benchmarks.md's table is generated.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import reference_loop_seconds
from results import record

from ctu.jsonl import text_lines

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def source_lines(folder: Path) -> list[dict]:
    """Every trajectory line of a run directory or a `ctu eval` folder."""
    files = [folder / "trajectories.jsonl"] if (folder / "trajectories.jsonl").is_file() else sorted((folder / "trajectories").glob("*.jsonl"))
    return [json.loads(text) for file in files for text in text_lines(file) if text.strip()]


def retail_eval(tasks: int, out: Path) -> Path:
    """A `ctu eval` folder of tau2's first `tasks` retail test tasks x 2 samples, text mode, the scripted user, the
    policy endpoint a local server playing gold replays (every third task's sample 1 spoiled)."""
    import yaml

    from tests.support.gold_policy import GoldPolicy
    from tests.support.openai_server import ScriptedOpenAIServer

    seed = 7
    spec = {"experiment": {"name": "view_retail", "seed": seed, "output_dir": str(out)},
            "model": {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking"},
            "data": {"train": [{"domain": "retail", "split": "train"}],
                     "test_sets": {"retail": {"domain": "retail", "split": "test", "max_tasks": tasks}}},
            "environment": {"user_simulator": {"type": "scripted"}, "max_turns": 40},
            "rollout": {"native_tool_calling": False, "parser": "hermes", "eval_n_samples_per_prompt": 2},
            "backend": {"type": "tinker", "local": True}, "algorithm": {"use_kl_loss": False},
            "trainer": {"train_batch_size": 2, "policy_mini_batch_size": 2}}
    (out / "spec.yaml").write_text(yaml.safe_dump(spec))
    policy = GoldPolicy(native=False, seed=seed, tasks=tasks, spoiled={(i, 1) for i in range(0, tasks, 3)})
    folder = out / "eval"
    with ScriptedOpenAIServer(default=policy) as server:
        subprocess.run([sys.executable, "-m", "ctu.cli", "eval", str(out / "spec.yaml"), "--endpoint", server.base_url,
                        "--model", "gold", "--out", str(folder), "--no-progress"], check=True, cwd=REPO)
    return folder


def build_run(lines: list[dict], count: int, run: Path) -> None:
    """A run directory of `count` training lines (the given ones repeated, copy k as step k + 1) and one evaluation
    step (the given lines once), with a ``metrics.jsonl`` of a success figure per step."""
    (run / "trajectories").mkdir(parents=True)
    (run / "spec.resolved.yaml").write_text("# a stand-in run directory for benchmarks/view_page.py\n")
    per_step = len(lines)
    steps = -(-count // per_step)
    metrics = []
    for step in range(1, steps + 1):
        chunk = lines[: min(per_step, count - (step - 1) * per_step)]
        with open(run / "trajectories" / f"train_step{step:06d}.jsonl", "w") as out:
            out.writelines(json.dumps({**line, "step": step, "phase": "train"}) + "\n" for line in chunk)
        metrics.append({"step": step, "generation/success_rate": sum(float(line.get("raw_reward") or 0) for line in chunk) / len(chunk)})
    with open(run / "trajectories" / f"eval_step{steps:06d}.jsonl", "w") as out:
        out.writelines(json.dumps({**line, "step": steps, "phase": "eval"}) + "\n" for line in lines)
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in metrics))


def measure(run: Path, page: Path, extra: list[str], screenshot: Path | None) -> dict[str, float]:
    """Write the page with `ctu view` and open it in headless chromium: seconds to write, MB, ms to first render."""
    from tests.support.browser import browser, console_errors, embedded_data, open_page

    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ctu.cli", "view", str(run), "--out", str(page), *extra], check=True, cwd=REPO)
    written = time.perf_counter() - started
    with browser() as driver:
        open_page(driver, page)
        rendered = float(driver.execute_script("return window.ctuRendered"))
        errors = console_errors(driver)
        if screenshot is not None:
            open_page(driver, page, "view=episodes&episode=0")
            driver.save_screenshot(str(screenshot))
    if errors:
        raise SystemExit(f"the page logged errors: {errors}")
    return {"write_s": written, "size_mb": page.stat().st_size / 1e6, "first_render_ms": rendered,
            "episodes": len(embedded_data(page)["episodes"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="source", type=Path, help="a run directory or a `ctu eval` folder")
    source.add_argument("--retail", type=int, metavar="TASKS", help="a `ctu eval` of tau2's first TASKS retail test tasks")
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        lines = source_lines(args.source or retail_eval(args.retail, Path(scratch)))
        run = Path(scratch) / "run"
        build_run(lines, args.lines, run)
        capped = measure(run, Path(scratch) / "capped.html", [], args.screenshot)
        whole = measure(run, Path(scratch) / "whole.html", ["--max-episodes", str(args.lines + len(lines))], None)
    loop = reference_loop_seconds()
    rows = [[label, f"{m['episodes']:,}", f"{m['size_mb']:.1f} MB", f"{m['write_s']:.1f} s", f"{m['first_render_ms']:.0f} ms"]
            for label, m in (("default (`--max-episodes 3000`)", capped), ("every line", whole))]
    for row in rows:
        print(" | ".join(row))
    record("view_page", {"lines": args.lines + len(lines), "source_lines": len(lines), "capped": capped, "whole": whole},
           {"columns": ["page", "episodes embedded", "file", "ctu view", "first render (headless chromium)"], "rows": rows}, loop,
           f"A run of {args.lines:,} training lines and {len(lines)} evaluation lines: "
           + (f"the {len(lines)} episodes of a `ctu eval` of tau2's first {args.retail} retail test tasks (gold replays, "
              f"text mode; {sum(len(line['messages']) for line in lines) / len(lines):.0f} messages an episode), "
              if args.retail else f"the {len(lines)} episodes of {args.source.name}, ")
           + "repeated. The default embeds every evaluation episode, then training ones at an even stride, up to 3,000.")


if __name__ == "__main__":
    main()
