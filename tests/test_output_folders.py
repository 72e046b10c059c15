"""What each command writes is ctu's, whichever command wrote it (`ctu.output_folders`): `ctu view`'s page and `ctu
eval --regrade`'s folder inside an evaluation do not make `ctu eval` refuse to continue it, `--overwrite` removes
them with the evaluation they described, and no `--out` replaces a file ctu did not write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctu.evaluation.policies import EvalError
from ctu.evaluation.runner import _check_config
from ctu.output_folders import PAGE_MARK, not_a_page
from ctu.view.data import ViewError
from ctu.view.page import render_page, write_page

CONFIG = {"spec": "s", "spec_hash": "h", "policy": "p", "policy_identity": {"endpoint": "e"}, "samples": 1,
          "seeding": "per-task", "tasks_sha256": {}}


def evaluation(folder: Path) -> Path:
    """An evaluation's folder as `ctu eval` leaves it, then `ctu view` (its default page) and a regrade."""
    folder.mkdir()
    (folder / "eval_config.json").write_text(json.dumps(CONFIG))
    (folder / "trajectories.jsonl").write_text('{"task_id": "1"}\n')
    (folder / "view.html").write_text(render_page({"episodes": []}, "ctu view: x"))  # type: ignore[typeddict-item]
    (folder / "regraded" / "fixed").mkdir(parents=True)
    (folder / "regraded" / "fixed" / "eval.json").write_text("{}")
    return folder


def test_ctu_eval_continues_an_evaluation_holding_ctus_own_page_and_regrade(tmp_path: Path):
    folder = evaluation(tmp_path / "eval")
    _check_config(folder, CONFIG, overwrite=False)  # continued: nothing refused, nothing removed
    assert (folder / "view.html").exists() and (folder / "regraded" / "fixed" / "eval.json").exists()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(EvalError, match=r"holds files `ctu eval` does not write \(notes.txt\)"):
        _check_config(folder, CONFIG, overwrite=False)
    (folder / "notes.txt").unlink()
    _check_config(folder, CONFIG, overwrite=True)  # afresh: the page and regrades of the evaluation go with it
    assert not (folder / "view.html").exists() and not (folder / "regraded").exists()


def test_a_users_own_view_html_is_never_replaced(tmp_path: Path):
    folder = evaluation(tmp_path / "eval")
    (folder / "view.html").write_text("<html>my notes</html>")
    _check_config(folder, CONFIG, overwrite=True)
    assert (folder / "view.html").read_text() == "<html>my notes</html>"  # not ctu's: kept
    report = tmp_path / "report.html"
    report.write_text("<html>my report</html>")
    with pytest.raises(ViewError, match=r"report\.html is not a page `ctu view` wrote"):
        write_page([folder], report, 10)
    assert report.read_text() == "<html>my report</html>"
    assert not_a_page(report) and not not_a_page(tmp_path / "absent.html")
    assert PAGE_MARK in render_page({"episodes": []}, "t")  # type: ignore[typeddict-item]
