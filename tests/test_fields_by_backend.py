"""Every leaf field of the spec's schema, on every registered backend, is applied or refused: no third outcome.

The test walks the pydantic models (`leaves`), so a field added tomorrow is covered without a line here. For each
backend it runs what the backend runs on a spec with its features turned on, with a stand-in only where compute or
a server would be (`trace_tinker`, `trace_skyrl`), and records every spec field read on the way (`FieldReads`).
A field read there reaches what the backend runs; any other field, set to a value other than its default on a spec
of that backend, must be refused by `ctu validate` at its own path (`refused_at`). A field neither read nor refused
is a setting validated `ok` and then ignored: the test fails and names it.

What "the backend runs" means here:
- tinker: `TinkerRunner.run` whole (evaluations, GRPO steps with a KL reference, checkpoints, exports), the Tinker
  server and its clients replaced by `FakeTinker` (it samples fixed text and records what it is sent), the
  episodes played by ctu's own generator against tau2's environment and the scripted user; and once more with
  dynamic sampling, which reads its settings only when a batch lacks groups with a spread.
- skyrl: what ctu hands SkyRL (`skyrl_overrides`, the datasets `prepare_data` writes, what its Ray worker reads of
  the spec: `worker_settings`) and the same generator's episodes, which SkyRL's generator wraps.

Only the sections that are no backend's setting are left out, each with what applies it (`NOT_BACKEND_SETTINGS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import create_model

from ctu.spec import SpecError, spec_from_dict
from ctu.spec.models import Rollout, Section, Spec

NOT_BACKEND_SETTINGS = {
    "extends": "merged by the spec loader",
    "imports": "imported by the spec loader",
    "backend": "the backend's own section: its params model is the backend's",
    "task_generation": "read by `ctu tasks generate`, never by a run",
    "environment.warn_unsolvable_tasks": "a switch of `ctu validate`'s own warning (`check_gold_solutions`)",
}
"""What is no backend's setting, with what applies it."""


@dataclass(frozen=True)
class Leaf:
    """A leaf field: its `owner` model, its `name` there and its dotted `path` in a spec (``*`` for a list item or
    a mapping's value)."""

    owner: type[Section]
    name: str
    path: str


def _sections(annotation: Any) -> list[type[Section]]:
    """The spec sections an annotation holds (through Optional, unions, lists and mappings)."""
    if isinstance(annotation, type) and issubclass(annotation, Section):
        return [annotation]
    return [found for arg in typing.get_args(annotation) for found in _sections(arg)]


def leaves(model: type[Section] = Spec, prefix: str = "") -> Iterator[Leaf]:
    """Every leaf field under `model` (a section's fields recursed into; a component reference is a leaf)."""
    for name, field in model.model_fields.items():
        path = prefix + name
        if path in NOT_BACKEND_SETTINGS:
            continue
        nested = _sections(field.annotation)
        if nested:
            origin = typing.get_origin(field.annotation)
            many = origin in (list, dict) or any(typing.get_origin(a) in (list, dict) for a in typing.get_args(field.annotation))
            yield from leaves(nested[0], f"{path}.{'*.' if many else ''}")
        else:
            yield Leaf(model, name, path)


class FieldReads:
    """Records ``(section class, field name)`` for every field read off a spec section while active (a context
    manager replacing `Section.__getattribute__`)."""

    def __init__(self) -> None:
        self.read: set[tuple[type, str]] = set()

    @contextlib.contextmanager
    def active(self) -> Iterator[FieldReads]:
        original = Section.__getattribute__
        read = self.read

        def recording(section: Section, name: str) -> Any:
            owner = type(section)
            if name in owner.model_fields:
                read.add((owner, name))
            return original(section, name)

        Section.__getattribute__ = recording  # type: ignore[method-assign]
        try:
            yield self
        finally:
            Section.__getattribute__ = original  # type: ignore[method-assign]

    def __contains__(self, leaf: Leaf) -> bool:
        return any((owner, leaf.name) in self.read for owner in leaf.owner.__mro__)


def trace_spec(backend: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A spec of `backend` with the features whose settings are read only when on: a KL reference, a validation
    set, a judge, evaluations and saves at every step of two; `changes` are ``section__key=value``."""
    spec: dict[str, Any] = {
        "experiment": {"name": "walk", "seed": 3, "tags": ["walk"]},
        "model": {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking", "max_model_len": 8192},
        "data": {"train": [{"domain": "retail", "split": "train", "max_tasks": 4}],
                 "test_sets": {"retail": {"domain": "retail", "split": "test", "max_tasks": 1}},
                 "validation": {"domain": "retail", "split": "test", "max_tasks": 1}},
        "environment": {"max_turns": 2, "user_simulator": {"type": "scripted"}, "warn_unsolvable_tasks": False},
        "rollout": {"n_samples_per_prompt": 2, "max_tokens_per_turn": 8},
        "algorithm": {"use_kl_loss": True, "kl_estimator": "k1"},
        "trainer": {"train_batch_size": 2, "policy_mini_batch_size": 2, "max_steps": 2, "eval_interval": 1,
                    "eval_batch_size": 1, "ckpt_interval": 1, "hf_save_interval": 1},
        "rewards": ["tau_outcome", {"type": "taxonomy_feedback", "weight": 0.2}],
        "judge": {"type": "rule_taxonomy"},
        "tracking": {"trackers": ["jsonl"]},
        "backend": backend,
    }
    for path, value in changes.items():
        section, key = path.split("__")
        spec[section][key] = value
    return spec


class Done(types.SimpleNamespace):
    """A Tinker future already resolved."""

    async def result_async(self) -> Done:
        return self


class FakeTinker:
    """The Tinker service, training and sampling clients of a run, recording what they are sent: each sample is
    ``Hello.`` and the end of the turn, with log-probability -1.0 a token."""

    def __init__(self, tokenizer: Any) -> None:
        self.answer = tokenizer.encode("Hello.", add_special_tokens=False) + [tokenizer.eos_token_id]
        self.sampling_params: list[Any] = []
        self.losses: list[tuple[str, Any]] = []
        self.adam: list[Any] = []

    async def create_lora_training_client_async(self, base_model: str, rank: int) -> FakeTinker:
        return self

    async def create_sampling_client_async(self, base_model: str) -> FakeTinker:
        return self

    async def save_weights_and_get_sampling_client_async(self) -> FakeTinker:
        return self

    async def sample_async(self, prompt: Any, num_samples: int, sampling_params: Any) -> Done:
        self.sampling_params.append(sampling_params)
        tokens = self.answer[: sampling_params.max_tokens]
        return Done(sequences=[Done(tokens=tokens, stop_reason="stop", logprobs=[-1.0] * len(tokens))])

    async def compute_logprobs_async(self, prompt: Any) -> list[float | None]:
        return [None] + [-1.5] * (prompt.length - 1)

    async def forward_backward_async(self, data: list[Any], loss: str, config: Any = None) -> Done:
        self.losses.append((loss, config))
        return Done(metrics={"loss:sum": 0.5}, loss_fn_outputs=[])

    async def optim_step_async(self, params: Any) -> Done:
        self.adam.append(params)
        return Done(metrics={})

    async def save_state_async(self, name: str, overwrite: bool = True) -> Done:
        return Done(path=f"tinker://walk/{name}")


def trace_tinker(spec_data: dict[str, Any], run_dir: Path, reads: FieldReads, monkeypatch: pytest.MonkeyPatch) -> FakeTinker:
    """`TinkerRunner.run` of `spec_data` with `FakeTinker` for the server and its clients (the built-in model's
    tokenizer; no model is built), every field read recorded; returns the fake. A run that stops with an error
    (dynamic sampling that finds no spread) has read what it read."""
    from transformers import AutoTokenizer

    import ctu.backends.tinker.runner as runner_module
    import ctu.backends.tinker.service as service_module
    from ctu.backends.tinker.runner import TinkerRunner
    from ctu.models.tiny_qwen3 import tokenizer_path
    from ctu.runners.rundir import RunDir

    fake = FakeTinker(AutoTokenizer.from_pretrained(str(tokenizer_path())))

    @contextlib.contextmanager
    def server(self: TinkerRunner, model_path: str) -> Iterator[Any]:
        yield lambda: "http://127.0.0.1:1"

    @contextlib.contextmanager
    def service(base_url: str, api_key: str) -> Iterator[FakeTinker]:
        yield fake

    async def export(*args: Any) -> None:
        return None

    monkeypatch.setattr(TinkerRunner, "_server", server)
    monkeypatch.setattr(service_module, "tinker_service", service)
    monkeypatch.setattr(runner_module, "export_policy", export)
    monkeypatch.setattr(runner_module, "resolve", lambda path: str(tokenizer_path()))
    spec = spec_from_dict(spec_data).spec
    with reads.active(), contextlib.suppress(RuntimeError):
        RunDir.of(spec)  # the run directory `ctu run` hands the backend (`ctu.runners.launch.launch`)
        TinkerRunner(spec, spec.backend.params, RunDir(run_dir), progress=False).run()
    return fake


def trace_skyrl(spec_data: dict[str, Any], run_dir: Path, reads: FieldReads, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """What ctu hands SkyRL for `spec_data` (its config overrides, the datasets, the worker's settings) and the
    generator's episodes (one training batch and the evaluations, sampled by `FakeTinker` through ctu's Tinker
    sampler), every field read recorded; returns the overrides."""
    from transformers import AutoTokenizer

    import ctu.backends.skyrl.launch as launch_module
    import ctu.backends.skyrl.sft as sft_module
    from ctu.backends.skyrl.config import prepare_data, skyrl_overrides
    from ctu.backends.skyrl.worker import worker_settings
    from ctu.backends.tinker.sampler import TinkerSampler
    from ctu.composition import build_components
    from ctu.models.tiny_qwen3 import tokenizer_path
    from ctu.rollout.build import build_generator
    from ctu.rollout.requests import requests_for
    from ctu.runners.rundir import RunDir
    from ctu.runners.task_rows import evaluation_rows, train_rows

    for module, name in ((launch_module, "run_skyrl"), (sft_module, "run_skyrl_sft")):  # the Ray launch itself
        monkeypatch.setattr(module, name, lambda *args, **kwargs: {})
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path()))
    spec = spec_from_dict(spec_data).spec
    with reads.active():
        RunDir.of(spec)  # the run directory `ctu run` hands the backend (`ctu.runners.launch.launch`)
        spec.backend.build().run(spec, RunDir(run_dir), resume=False, progress=False, verbose=False)  # chooses a launch
        components = build_components(spec)
        overrides = skyrl_overrides(components, spec.backend.params, run_dir / "data", run_dir)
        prepare_data(components, run_dir / "data")
        worker_settings(spec)
        generator = build_generator(components, tokenizer, TinkerSampler(FakeTinker(tokenizer)))  # type: ignore[arg-type]
        batches = [(train_rows(components), spec.rollout.n_samples_per_prompt, "train"),
                   *((rows, spec.rollout.eval_n_samples_per_prompt, "eval") for rows in evaluation_rows(components).values())]
        for rows, samples, phase in batches:
            asyncio.run(generator.run_batch(requests_for(rows, samples), phase, 1))
    return overrides


BACKENDS = {"tinker": {"type": "tinker", "local": True}, "skyrl": {"type": "skyrl"}}
"""Every backend ctu registers, as a spec names it."""


@pytest.fixture(scope="module")
def reads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FieldReads]:
    """The fields each backend read on its path, each run twice: the spec of `trace_spec`, then with dynamic
    sampling (on tinker it finds no spread here and stops after its first batch)."""
    found = {name: FieldReads() for name in BACKENDS}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for index, changes in enumerate(({}, {"algorithm__dynamic_sampling": {"max_sample_batches": 1}})):
            data = trace_spec(BACKENDS["tinker"], **changes)
            trace_tinker(data, tmp_path_factory.mktemp(f"tinker{index}"), found["tinker"], monkeypatch)
        for index, changes in enumerate(({}, {"algorithm__dynamic_sampling": {"type": "replace"}})):
            data = trace_spec(BACKENDS["skyrl"], **changes)
            trace_skyrl(data, tmp_path_factory.mktemp(f"skyrl{index}"), found["skyrl"], monkeypatch)
    return found


def test_every_registered_backend_is_walked():
    from ctu.registry import registry

    assert set(registry.backends.names()) == set(BACKENDS)


VALUES: dict[str, list[Any]] = {
    "judge": [{"type": "rule_taxonomy"}],
    "rewards": [["tau_outcome", "partial_credit"]],
    "tracking.trackers": [["console"]],
    "experiment.output_dir": ["elsewhere"],
    "experiment.tags": [["other"]],
    "model.reference_path": ["Qwen/Qwen2.5-0.5B-Instruct"],
}
"""Values other than the default where the schema's type gives none to try (component references, free text)."""


def non_defaults(leaf: Leaf) -> list[Any]:
    """Values of `leaf` other than its default that its own type and bounds accept: every other choice of a
    `Literal` (none: it has one), the other boolean, a number moved within its bounds, or `VALUES`'.

    Raises:
        AssertionError: none of these gives a value (a new field's type: add one to `VALUES`)."""
    from pydantic import TypeAdapter, ValidationError

    if leaf.path in VALUES:
        return VALUES[leaf.path]
    field = leaf.owner.model_fields[leaf.name]
    default = field.get_default(call_default_factory=True)
    kinds = [arg for arg in (typing.get_args(field.annotation) or (field.annotation,)) if arg is not type(None)]
    if typing.get_origin(field.annotation) is typing.Literal:
        return [choice for choice in typing.get_args(field.annotation) if choice != default]
    if kinds == [bool]:
        return [not default]
    adapter = TypeAdapter(typing.Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation)
    start = default if isinstance(default, (int, float)) else 1
    for candidate in (start + 1, start * 2, start / 2, start - 1, 0.5, 0):
        if candidate != default:
            try:
                return [adapter.validate_python(candidate)]
            except ValidationError:
                continue
    raise AssertionError(f"{leaf.path}: no value other than the default found to try: add one to VALUES")


def with_value(spec_data: dict[str, Any], leaf: Leaf, value: Any) -> dict[str, Any]:
    """`spec_data` with `leaf` set to `value` (every item of a list or mapping ``*`` stands for; a missing
    section made)."""
    import copy

    data = copy.deepcopy(spec_data)
    targets = [data]
    *parents, name = leaf.path.split(".")
    for key in parents:
        if key == "*":
            targets = [item for target in targets for item in (target if isinstance(target, list) else target.values())]
        else:
            for target in targets:
                if target.get(key) is None:
                    target[key] = {}
            targets = [target[key] for target in targets]
    for target in targets:
        target[name] = value
    return data


def refused_at(spec_data: dict[str, Any], leaf: Leaf) -> list[str]:
    """The messages `ctu validate`'s checks give at `leaf`'s path (a mapping's or list's item: any)."""
    try:
        spec_from_dict(spec_data)
    except SpecError as error:
        pattern = leaf.path.split(".*.")
        return [issue.message for issue in error.issues
                if issue.path.startswith(pattern[0]) and issue.path.endswith(pattern[-1])]
    return []


def unaccounted(backend: str, found: FieldReads, refused: Any, schema: type[Section] = Spec) -> list[str]:
    """The leaves of `schema` neither read on `backend`'s path nor refused there at every value other than their
    default (``refused(leaf) -> bool``)."""
    return [f"{leaf.path}: {backend} neither applies nor refuses it" for leaf in leaves(schema)
            if leaf not in found and not refused(leaf)]


def refused_on(backend: str) -> Any:
    """``refused(leaf) -> bool``: whether `ctu validate` refuses every value of `non_defaults(leaf)` at the
    leaf's path on a spec of `backend`."""
    def refused(leaf: Leaf) -> bool:
        return all(refused_at(with_value(trace_spec(BACKENDS[backend]), leaf, value), leaf) for value in non_defaults(leaf))
    return refused


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_leaf_field_is_applied_by_the_backend_or_refused_by_validate(backend, reads):
    found = reads[backend]
    assert (Rollout, "temperature") in found.read and len(found.read) > 40  # the walk ran the backend's path
    assert unaccounted(backend, found, refused_on(backend)) == []


def test_a_field_added_that_no_backend_reads_or_refuses_fails_the_walk(reads):
    """The walk failing on purpose: a throwaway field added to `rollout` (a copy of the schema; the walk finds it
    by itself) that nothing reads is named for every backend. `ctu validate` of the real schema cannot hold the
    field, so its refusal is what a new field without a backend check gets: none."""
    from pydantic import Field

    rollout = create_model("Rollout", __base__=Rollout, throwaway=(int, 0))
    schema = create_model("Spec", __base__=Spec, rollout=(rollout, Field(default_factory=rollout)))
    assert "rollout.throwaway" in {leaf.path for leaf in leaves(schema)}
    for backend in BACKENDS:
        real = refused_on(backend)
        refused = functools.partial(lambda check, leaf: leaf.name != "throwaway" and check(leaf), real)  # none for it
        assert unaccounted(backend, reads[backend], refused, schema) == [
            f"rollout.throwaway: {backend} neither applies nor refuses it"]
