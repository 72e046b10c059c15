"""`ctu data prepare`: SkyRL-format parquet that pyarrow and SkyRL's own loader read, byte-stable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ctu.backends.skyrl.datasets import ENV_CLASS, prepare_datasets
from ctu.components.parsers.hermes import HermesParser
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from tau_bench_env.env import EnvSetup, TauBenchEnv, shared_domain, tau2_domains

from ..conftest import REPO

DOMAINS = [shared_domain(name) for name in ("retail", "airline", "telecom")]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("data")
    prepare_datasets(DOMAINS, ["train", "test"], out, max_tasks_per_domain=3)
    return out


def test_one_file_per_domain_and_split_plus_combined_train(prepared: Path):
    names = sorted(p.name for p in prepared.glob("*.parquet"))
    assert names == sorted(
        [f"{d}_{s}.parquet" for d in ("retail", "airline", "telecom") for s in ("train", "test")] + ["train.parquet"]
    )
    table = pq.read_table(prepared / "retail_test.parquet").to_pylist()
    assert len(table) == 3
    row = table[0]
    assert row["env_class"] == ENV_CLASS and row["data_source"] == "retail" and row["split"] == "test"
    assert row["prompt"][0]["role"] == "system" and "<policy>" in row["prompt"][0]["content"]
    combined = pq.read_table(prepared / "train.parquet").to_pylist()
    assert [r["domain"] for r in combined] == ["retail"] * 3 + ["airline"] * 3 + ["telecom"] * 3


def test_task_ids_follow_tau2_splits(prepared: Path):
    for split in ("train", "test"):
        rows = pq.read_table(prepared / f"airline_{split}.parquet").to_pylist()
        assert [r["task_id"] for r in rows] == [t.id for t in shared_domain("airline").tasks(split)[:3]]


def test_output_is_byte_identical_across_runs(prepared: Path, tmp_path: Path):
    prepare_datasets(DOMAINS, ["train", "test"], tmp_path, max_tasks_per_domain=3)
    for path in prepared.glob("*.parquet"):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


def test_skyrl_prompt_dataset_loads_it_and_rows_build_environments(prepared: Path):
    from skyrl.train.dataset.dataset import PromptDataset
    from transformers import AutoTokenizer

    from ctu.models.tiny_qwen3 import tokenizer_path

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path()))
    dataset = PromptDataset([str(prepared / "train.parquet")], tokenizer, max_prompt_length=100_000, num_workers=1)
    assert len(dataset) == 9
    messages, env_class, extras, _uid = dataset[4]
    assert env_class == ENV_CLASS and messages[0]["role"] == "system"
    assert extras["domain"] == "airline" and extras["data_source"] == "airline"
    env = TauBenchEnv(EnvSetup(ScriptedUserSimulator(), HermesParser(), domains=tau2_domains("airline")), extras)
    prompt, _ = env.init(messages)
    assert prompt[-1]["role"] == "user"


def test_cli_reports_bad_domains_and_splits(tmp_path: Path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "ctu.cli", "data", "prepare", "--out", str(tmp_path), *args],
                              cwd=REPO, capture_output=True, text=True, timeout=300)

    bad = run("--domains", "retial")
    assert bad.returncode == 2 and "did you mean 'retail'" in bad.stderr
    bad = run("--domains", "mock", "--splits", "train")
    assert bad.returncode == 2 and "no split 'train'" in bad.stderr
    good = run("--domains", "mock", "--splits", "base")
    assert good.returncode == 0 and (tmp_path / "mock_base.parquet").exists()
    assert not (tmp_path / "train.parquet").exists()
