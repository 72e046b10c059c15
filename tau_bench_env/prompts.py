"""The policy's prompt as an episode opens it: tau2's agent system prompt (the domain's policy, and the tools in
text mode), tau2's greeting, and the lower bound of a first prompt that `ctu validate` counts before any episode
runs (`opening_floor`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tau_bench_env.runtime import prepare

if TYPE_CHECKING:
    from tau_bench_env.domains import Domain
    from tau_bench_env.interfaces import Parser
    from tau_bench_env.outcome import EpisodeConfig

GREETING = "Hi! How can I help you today?"
"""tau2's first agent message (`tau2.orchestrator.orchestrator.DEFAULT_FIRST_AGENT_MESSAGE`)."""


def agent_system_prompt(policy: str) -> str:
    """tau2's agent system prompt (`tau2.agent.llm_agent.SYSTEM_PROMPT`) for a domain policy."""
    prepare()
    from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT

    return SYSTEM_PROMPT.format(domain_policy=policy, agent_instruction=AGENT_INSTRUCTION)


def episode_system_prompt(policy: str, parser: Parser, tools: list[dict[str, object]], config: EpisodeConfig) -> str:
    """The system prompt an episode gives the policy: tau2's agent system prompt with `policy` (empty when
    `config.domain_policy` is off) and, in text mode (`config.native_tool_calling` off), `tools` (OpenAI schemas)
    as `parser` presents them."""
    prompt = agent_system_prompt(policy if config.domain_policy else "")
    if not config.native_tool_calling:
        prompt += "\n\n" + parser.render_tools(tools)
    return prompt


def opening_floor(domain: Domain, parser: Parser, config: EpisodeConfig) -> tuple[list[dict[str, object]], list[dict[str, object]] | None]:
    """The smallest first prompt an episode of `domain` can give the policy: the system prompt, tau2's greeting and
    an empty opening line of the user (every one of the user's first words only adds to it), with the tool schemas
    the chat template renders (None in text mode, where the system prompt holds them). A task with a message
    history opens on that history instead.

    Returns:
        ``(messages, tools)`` in OpenAI format, as an episode hands them to the chat template.
    """
    tools = domain.tool_schemas
    messages: list[dict[str, object]] = [
        {"role": "system", "content": episode_system_prompt(domain.policy, parser, tools, config)},
        {"role": "assistant", "content": GREETING},
        {"role": "user", "content": ""},
    ]
    return messages, tools if config.native_tool_calling else None
