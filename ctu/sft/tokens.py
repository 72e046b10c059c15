"""SFT conversations as token ids and a loss mask, tokenised exactly as ctu's generator tokenises an episode.

The prompt is the conversation up to its first user message (what `TauBenchEnv` hands the policy: the system
prompt, tau2's greeting, the user's opening), through `TokenAccount.prompt_ids`; each later assistant turn is
`TokenAccount.assistant_ids` (the turn the policy would generate after the generation prompt, its end-of-turn token
included; loss mask 1); the messages between two assistant turns (tool results, the user's replies) are
`TokenAccount.observation_ids` (loss mask 0). Messages after the last assistant turn are not trained on and are
left out. So SFT and GRPO see one tokenisation, through one chat-template policy (Qwen3's thinking off included).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from ctu.rollout.tokens import TokenAccount

Message = dict[str, Any]
"""One OpenAI-format chat message (role, content, tool calls...), as tau2 and the chat templates take it."""


class SftRow(TypedDict):
    """One SFT conversation, a row of `ctu data sft`'s ``train.parquet``."""

    messages: list[Message]
    tools: list[dict[str, object]] | None
    """The tools' OpenAI schemas, when the conversation calls them natively (else they are in the system prompt)."""
    domain: str
    task_id: str
    source: str
    """``gold`` (a gold replay) or ``eval:<folder>`` (a rejection-sampled episode)."""
    reward: float
    """tau2's reward of the conversation."""


def read_sft_rows(path: str | Path) -> list[SftRow]:
    """The rows of `ctu data sft`'s ``train.parquet`` (`path` is the file or its folder): ``messages`` without
    empty fields, ``tools`` decoded (a list of OpenAI schemas, or None), and the row's other columns.

    Raises:
        OSError, pyarrow.ArrowInvalid: the file cannot be read.
    """
    import pyarrow.parquet as pq

    file = Path(path)
    if file.is_dir():
        file = file / "train.parquet"
    rows = pq.read_table(file).to_pylist()
    for row in rows:
        row["messages"] = [{key: value for key, value in message.items() if value is not None} for message in row["messages"]]
        row["tools"] = json.loads(row["tools"]) if row.get("tools") else None
    return rows  # the columns `ctu data sft` wrote


def conversation_tokens(account: TokenAccount, messages: list[Message], tools: list[dict[str, object]] | None
                        ) -> tuple[list[int], list[int], list[int]]:
    """``(prompt_ids, response_ids, loss_mask)`` of one conversation (see the module docstring); `loss_mask` has
    one entry per response id, 1 on the assistant's tokens.

    Raises:
        ValueError: the conversation has no user message, or no assistant turn after it.
    """
    first = next((i for i, message in enumerate(messages) if message["role"] == "user"), None)
    if first is None:
        raise ValueError("an SFT conversation needs a user message (the end of the prompt)")
    prompt = account.prompt_ids(messages[: first + 1], tools)
    response: list[int] = []
    mask: list[int] = []
    between: list[Message] = []
    for message in messages[first + 1 :]:
        if message["role"] != "assistant":
            between.append(message)
            continue
        if between:
            observed = account.observation_ids(between, True)
            response += observed
            mask += [0] * len(observed)
            between = []
        turn = account.assistant_ids(message)
        response += turn
        mask += [1] * len(turn)
    if not any(mask):
        raise ValueError("an SFT conversation needs an assistant turn after its first user message")
    return list(prompt), response, mask
