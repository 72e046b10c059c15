"""`ctu data sft`: conversations to fine-tune on before GRPO, in SkyRL's SFT format, never from a test task.

Two sources, alone or together:

- **gold replays**: each training task of the spec (`data.train`) played as an episode with the spec's own user
  simulator, environment limits and parser, the policy's turns being the task's gold actions
  (`tau_bench_env.replay.GoldReplayAgent`): in text mode written by the spec's parser as the policy would write
  them (`Parser.write`, `parse`'s inverse), with native tool calling as structured tool calls. An episode tau2
  scores below `min_reward` (a user simulator that strayed) is not kept.
- **rejection sampling**: the trajectories of `ctu eval`-format folders (``trajectories.jsonl``; `ctu tasks
  calibrate`'s ``episodes/`` samples a teacher on the training tasks), kept when tau2's reward is at least
  `min_reward`, at most `max_per_task` per task, each conversation once; episodes ended by an infrastructure
  error never, nor lines cut short or not episodes as ctu writes them (`is_episode_line`), each counted by reason.

A task of the spec's validation or test sets (by domain and task id) is never written: finding one is an error
(`SFTDataError`), not a warning. The shape follows the published recipe behind tau2 gains (slime's tau2 cookbook:
SFT, then rejection sampling, then GRPO; the Vertex AI report; CTU-Agent-v0's SFT checkpoint before GRPO).

Written in ``--out DIR``: ``train.parquet``, one row per conversation with SkyRL's SFT columns ``messages``
(OpenAI-format, the system prompt first) and ``tools`` (the OpenAI tool schemas as JSON with native tool calling,
else null: the system prompt holds them), plus ``domain``, ``task_id``, ``source`` (``gold`` or ``eval:<folder>``)
and ``reward``; and ``sft_report.json`` (tasks covered, rows kept, rejected by reason, tokens).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctu.errors import CtuError, NothingMeasuredError
from ctu.jsonl import text_lines
from ctu.output_folders import refusal, unowned
from ctu.rollout.trajectories import conversation_of, is_episode_line
from ctu.spec.held_out import held_out_keys, leaked

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ctu.composition import Components
    from ctu.sft.tokens import SftRow
    from ctu.spec import Spec
    from tau_bench_env.interfaces import ParsedTurn

ROWS = "train.parquet"
REPORT = "sft_report.json"


class SFTDataError(CtuError):
    """SFT data that must not be written: a held-out task in it, no source named, a parser that cannot write turns,
    or an unreadable evaluation folder."""


@dataclass
class SFTData:
    """What `build_sft_data` wrote."""

    rows: list[SftRow] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    tokens: int | None = None

    def report(self) -> dict[str, Any]:
        """``sft_report.json``'s content."""
        return {"rows": len(self.rows), "tasks": len({(row["domain"], row["task_id"]) for row in self.rows}),
                "by_source": dict(Counter(row["source"].split(":", 1)[0] for row in self.rows)),
                "rejected": dict(sorted(self.rejected.items())), "tokens": self.tokens}


def evaluation_task_keys(components: Components) -> set[tuple[str, str]]:
    """``(domain, task id)`` of every task of the spec's validation and test sets (`Data.evaluation_sets`), as the
    evaluation rows take them (each source's split, at most `max_tasks`)."""
    return {(source.domain.type, str(task.id))
            for source in components.spec.data.evaluation_sets().values()
            for task in components.domain(source).tasks(source.split)[: source.max_tasks]}


@dataclass
class WrittenTurns:
    """A gold replay's turns as the policy writes them (what `tau_bench_env.replay.play` iterates): the text
    `write` makes of each (text mode), or the turns themselves (`write` None: native tool calling)."""

    agent: Any
    write: Callable[[ParsedTurn], str] | None

    def turns(self) -> Iterator[str | ParsedTurn]:
        """The turns, in order, the closing message last."""
        for turn in self.agent.turns():
            yield turn if self.write is None else self.write(turn)


async def gold_rows(components: Components, min_reward: float, on_task: Callable[[int], None] | None = None
                    ) -> tuple[list[SftRow], Counter[str]]:
    """One row per training task whose gold replay, played with the spec's user simulator, tau2 scores at least
    `min_reward`; the rest counted by why. `on_task(total)` is called once before the first task, then
    `on_task(0)` after each (progress).

    Raises:
        SFTDataError: text mode with a parser that has no `write`.
    """
    from ctu.rollout.build import env_setup
    from tau_bench_env.episode import Episode
    from tau_bench_env.replay import GoldReplayAgent, play

    setup = env_setup(components)
    native = setup.config.native_tool_calling
    write = getattr(setup.parser, "write", None)
    if not native and write is None:
        raise SFTDataError(f"the spec's parser ({components.spec.rollout.parser.type}) cannot write turns (it has no "
                           "`write(turn)`): gold replays need it in text mode; use rejection sampling (--from-eval)")

    rows: list[SftRow] = []
    rejected: Counter[str] = Counter()
    sources = [(source, components.domain(source)) for source in components.spec.data.train]
    chosen = [(source, domain, task) for source, domain in sources for task in domain.tasks(source.split)[: source.max_tasks]]
    if on_task is not None:
        on_task(len(chosen))
    for source, domain, task in chosen:
        episode = Episode(domain, task, setup.user_simulator, setup.parser, setup.config)
        result = await play(episode, WrittenTurns(GoldReplayAgent(task), None if native else write))  # type: ignore[arg-type]
        if result.user_error:
            rejected["gold_user_error"] += 1
        elif result.reward < min_reward:
            rejected["gold_below_min_reward"] += 1
        else:
            rows.append({"messages": result.conversation, "tools": domain.tool_schemas if native else None,
                         "domain": source.domain.type, "task_id": str(task.id), "source": "gold",
                         "reward": float(result.reward)})
        if on_task is not None:
            on_task(0)
    return rows, rejected


def eval_rows(folders: list[Path], min_reward: float, max_per_task: int, tools: dict[str, Any] | None
              ) -> tuple[list[SftRow], Counter[str]]:
    """The kept trajectories of `ctu eval`-format folders (see the module docstring), in file order; `tools`:
    each domain's tool schemas with native tool calling, else None.

    Raises:
        SFTDataError: a folder without trajectories.jsonl.
    """
    rows: list[SftRow] = []
    rejected: Counter[str] = Counter()
    per_task: Counter[tuple[str, str]] = Counter()
    seen: set[str] = set()
    for folder in folders:
        path = episodes_file(folder)
        if not path.is_file():
            raise SFTDataError(f"{folder} holds no trajectories.jsonl (a `ctu eval` or `ctu tasks calibrate` folder)")
        for text in text_lines(path):
            try:
                line = json.loads(text)
            except ValueError:
                rejected["cut_line"] += 1
                continue
            if not is_episode_line(line):
                rejected["not_an_episode"] += 1
                continue
            key = (str(line.get("domain")), str(line.get("task_id")))
            digest = hashlib.sha256(json.dumps(line.get("messages"), sort_keys=True).encode()).hexdigest()
            if line.get("infra_error") is not None:
                rejected["infra_error"] += 1
            elif float(line.get("raw_reward") or 0.0) < min_reward:
                rejected["below_min_reward"] += 1
            elif digest in seen:
                rejected["duplicate"] += 1
            elif per_task[key] >= max_per_task:
                rejected["over_max_per_task"] += 1
            else:
                seen.add(digest)
                per_task[key] += 1
                rows.append({"messages": conversation_of(line["messages"]), "tools": (tools or {}).get(key[0]), "domain": key[0],
                             "task_id": key[1], "source": f"eval:{folder}", "reward": float(line["raw_reward"])})
    return rows, rejected


def episodes_file(folder: Path) -> Path:
    """The trajectories file of a `ctu eval` folder, of a `ctu tasks calibrate` folder (its ``episodes/``), or
    `folder` itself when it is a file."""
    if not folder.is_dir():
        return folder
    own = folder / "trajectories.jsonl"
    return own if own.exists() or not (folder / "episodes" / "trajectories.jsonl").exists() else folder / "episodes" / "trajectories.jsonl"


def eval_task_keys(folders: list[Path]) -> list[tuple[str, str]]:
    """``(domain, task id)`` of every line of `ctu eval`-format folders, kept or not, in file order (a line that is not
    JSON has none)."""
    keys: list[tuple[str, str]] = []
    for folder in folders:
        path = episodes_file(folder)
        for text in text_lines(path) if path.is_file() else ():
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if is_episode_line(line):
                keys.append((str(line.get("domain")), str(line.get("task_id"))))
    return keys


def count_tokens(components: Components, rows: list[SftRow]) -> int:
    """Tokens of every row as the spec's chat template renders it for the spec's tokenizer."""
    from transformers import AutoTokenizer

    from ctu.models.builtin import resolve

    tokenizer = AutoTokenizer.from_pretrained(resolve(components.spec.model.path))
    template = components.chat_template
    return sum(len(template.encode_text(tokenizer, template.render(tokenizer, row["messages"], row["tools"]))) for row in rows)


def eval_scenarios(folders: list[Path]) -> dict[str, str]:
    """``domain/id`` -> scenario digest of each task the evaluations in `folders` recorded (their ``eval.json``'s
    ``test_set_sources``, beside the trajectories `episodes_file` finds); a folder without them adds none."""
    from ctu.evaluation.report import read_report

    scenarios: dict[str, str] = {}
    for folder in folders:
        result = episodes_file(Path(folder)).with_name("eval.json")
        try:
            sources = read_report(result).get("test_set_sources") or {} if result.is_file() else {}
        except ValueError:
            continue
        for source in sources.values():
            scenarios.update({f"{source.get('domain')}/{task_id}": digest for task_id, digest in (source.get("task_scenarios") or {}).items()})
    return scenarios


def _refuse_held_out(components: Components, candidates: list[tuple[str, str]], gold: bool,
                     scenarios: dict[str, str] | None = None) -> None:
    """Refuse SFT data holding a held-out task (`candidates`: ``(domain, task id)`` of every task it would hold):
    by id (`ctu.spec.held_out`, the spec's evaluation sets), and a held-out task under another id
    (`ctu.runners.task_rows.held_out_copies`: the same customer and database) among the training tasks, for gold
    replays, and among the evaluated tasks' recorded `scenarios` (`eval_scenarios`), for evaluation folders.

    Raises:
        SFTDataError: naming each one.
    """
    from ctu.runners.task_rows import held_out_copies, held_out_scenarios

    held_out = held_out_keys(components.spec, {domain for domain, _ in candidates})
    held_out.update({key: "the spec's validation or test sets" for key in evaluation_task_keys(components) - held_out.keys()})
    held = held_out_scenarios(components) if gold or scenarios else {}  # the held-out tasks' content, read once
    if gold and (copies := held_out_copies(components, held=held)):
        raise SFTDataError(f"{len(copies)} training task(s) are held-out tasks under another id (the same customer "
                           f"and database): {', '.join(copies[:10])}{' ...' if len(copies) > 10 else ''}; remove "
                           "them from the training tasks")
    if scenarios and (copies := held_out_copies(components, scenarios, held)):
        raise SFTDataError(f"{len(copies)} evaluated task(s) are held-out tasks under another id (the same customer "
                           f"and database): {', '.join(copies[:10])}{' ...' if len(copies) > 10 else ''}; their "
                           "episodes would teach the test: sample a teacher on other tasks")
    if found := leaked(candidates, held_out):
        raise SFTDataError(f"{len(found)} held-out task(s) would enter the SFT data: {', '.join(found[:10])}"
                           f"{' ...' if len(found) > 10 else ''}; train on other tasks, or sample a teacher on the "
                           "training tasks (`ctu tasks calibrate`). Held out whether or not its episode would be kept.")


def build_sft_data(spec: Spec, out_dir: Path, *, gold: bool = True, from_eval: list[Path] | None = None,
                   min_reward: float = 1.0, max_per_task: int = 4, tokens: bool = True,
                   on_task: Callable[[int], None] | None = None) -> SFTData:
    """Build and write the spec's SFT data (see the module docstring); `on_task` follows the gold replays
    (`gold_rows`).

    Raises:
        SFTDataError: no source; `out_dir` holding files this command does not write; a held-out task among the training tasks or the evaluation folders' episodes, kept or
            not (every one named; `ctu.spec.held_out`); see `gold_rows`, `eval_rows`.
        NothingMeasuredError: no conversation kept (nothing is written).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctu.composition import build_components

    if not gold and not from_eval:
        raise SFTDataError("no source of SFT data: gold replays (--gold) or evaluation folders (--from-eval DIR)")
    out_dir = Path(out_dir)
    if found := unowned(out_dir, (ROWS, REPORT), (ROWS, REPORT)):
        raise SFTDataError(refusal(out_dir, "ctu data sft", found))
    components = build_components(spec)
    candidates = [(source.domain.type, str(task.id)) for source in components.spec.data.train
                  for task in components.domain(source).tasks(source.split)[: source.max_tasks]] if gold else []
    candidates += eval_task_keys([Path(folder) for folder in from_eval or ()])
    _refuse_held_out(components, candidates, gold, eval_scenarios([Path(folder) for folder in from_eval or ()]))
    data = SFTData()
    if gold:
        rows, rejected = asyncio.run(gold_rows(components, min_reward, on_task))
        data.rows += rows
        data.rejected += rejected
    if from_eval:
        native = spec.rollout.native_tool_calling
        tools = {source.domain.type: components.domain(source).tool_schemas for source in spec.data.train} if native else None
        rows, rejected = eval_rows([Path(folder) for folder in from_eval], min_reward, max_per_task, tools)
        data.rows += rows
        data.rejected += rejected
    if not data.rows:
        reasons = ", ".join(f"{reason} {n}" for reason, n in data.rejected.most_common()) or "no task, no episode"
        raise NothingMeasuredError(f"no conversation kept ({reasons}): nothing written to {out_dir}")
    if tokens:
        data.tokens = count_tokens(components, data.rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{**row, "messages": [_message(m) for m in row["messages"]],
                                   "tools": None if row["tools"] is None else json.dumps(row["tools"])}
                                  for row in data.rows], schema=parquet_schema())
    temporary = out_dir / f".{ROWS}.tmp"
    pq.write_table(table, temporary)
    temporary.replace(out_dir / ROWS)
    (out_dir / REPORT).write_text(json.dumps(data.report(), indent=2) + "\n", encoding="utf-8")
    return data


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI message with the fields `parquet_schema` holds (tool-call arguments as JSON strings)."""
    calls = message.get("tool_calls")
    return {"role": message["role"], "content": message.get("content"), "tool_call_id": message.get("tool_call_id"),
            "tool_calls": None if not calls else [
                {"id": call.get("id"), "type": call.get("type", "function"),
                 "function": {"name": call["function"]["name"], "arguments": call["function"]["arguments"]
                              if isinstance(call["function"]["arguments"], str) else json.dumps(call["function"]["arguments"])}}
                for call in calls]}


def parquet_schema() -> Any:
    """``train.parquet``'s pyarrow schema: SkyRL's SFT columns (``messages``, ``tools`` as JSON) and ctu's own."""
    import pyarrow as pa

    call = pa.struct([("id", pa.string()), ("type", pa.string()),
                      ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
    message = pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_call_id", pa.string()),
                         ("tool_calls", pa.list_(call))])
    return pa.schema([("messages", pa.list_(message)), ("tools", pa.string()), ("domain", pa.string()),
                      ("task_id", pa.string()), ("source", pa.string()), ("reward", pa.float64())])
