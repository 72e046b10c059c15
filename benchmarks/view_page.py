"""`ctu view` on a large run: the page's file size, the time `ctu view` takes to write it, and the time a real browser
takes to first render it (headless chromium, `tests/support/browser.py`), for a run of `--lines` trajectory lines
(10,000 by default) with the page's default cap on embedded episodes and with every line embedded.

Run: `uv run python benchmarks/view_page.py --from RUN_OR_EVAL_DIR [--lines N] [--screenshot docs/view.png]`. The
run is made of the given folder's own trajectory lines, repeated (each copy a step of its own) until it holds
`--lines`: a real episode's size and shape, at a scale a long run reaches. `--screenshot` also saves the page (the
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def source_lines(folder: Path) -> list[dict]:
    """Every trajectory line of a run directory or a `ctu eval` folder."""
    files = [folder / "trajectories.jsonl"] if (folder / "trajectories.jsonl").is_file() else sorted((folder / "trajectories").glob("*.jsonl"))
    return [json.loads(text) for file in files for text in file.read_text().splitlines() if text.strip()]


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
    from tests.support.browser import browser, console_errors, open_page

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
    data = json.loads(page.read_text().split('<script id="ctu-data" type="application/json">')[1].split("</script>")[0])
    return {"write_s": written, "size_mb": page.stat().st_size / 1e6, "first_render_ms": rendered,
            "episodes": len(data["episodes"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--from", dest="source", type=Path, required=True)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args()
    lines = source_lines(args.source)
    with tempfile.TemporaryDirectory() as scratch:
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
           f"A run of {args.lines:,} training lines and {len(lines)} evaluation lines: the learning chain's 200 held-out "
           f"episodes of one `ctu eval` (mock tasks, short conversations), repeated. The default embeds every evaluation "
           f"episode, then training ones at an even stride, up to 3,000.")


if __name__ == "__main__":
    main()
