"""A run's spec names its local files by absolute path, so its Ray workers, a resume and `ctu eval --run-dir` read
the same files from any folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import tau2

from ctu.spec import load_spec
from ctu.spec.paths import absolute_paths

from .conftest import REPO

MOCK = Path(tau2.__file__).parent / "data" / "tau2" / "domains" / "mock"


def test_relative_task_files_sft_data_and_model_folders_become_absolute(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tasks").mkdir()
    for name in ("tasks.json", "split_tasks.json"):
        shutil.copy(MOCK / name, tmp_path / "tasks" / name)
    (tmp_path / "sft").mkdir()
    pq.write_table(pa.table({"messages": [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]]}),
                   tmp_path / "sft" / "train.parquet")
    source = "{domain: {type: mock, tasks_file: tasks/tasks.json, split_file: tasks/split_tasks.json}, split: base}"
    spec = load_spec(REPO / "specs" / "smoke.yaml", [f"data.train=[{source}]", "data.sft=sft"]).spec
    made = absolute_paths(spec)
    domain = made.data.train[0].domain
    assert (domain.params.tasks_file, domain.params.split_file) == (
        str(tmp_path / "tasks" / "tasks.json"), str(tmp_path / "tasks" / "split_tasks.json"))
    assert made.data.sft == str(tmp_path / "sft")
    assert made.model.path == spec.model.path == "builtin:tiny-qwen3"  # not a folder: kept
    assert absolute_paths(made) is made  # nothing left to change

    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "config.json").write_text("{}")
    local = absolute_paths(load_spec(REPO / "specs" / "tau_bench.yaml", ["model.path=policy", "model.family=qwen2.5"]).spec)
    assert local.model.path == str(tmp_path / "policy")
    hub = load_spec(REPO / "specs" / "tau_bench.yaml").spec
    assert absolute_paths(hub) is hub  # a Hub id, no folder of that name here
