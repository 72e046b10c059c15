"""`auto`: tries several parsers in a configured order and takes the first that finds a call."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ctu.components.parsers.base import ParsedTurn
from ctu.registry import ComponentParams, registry
from ctu.registry.config import ComponentConfig
from tau_bench_env.interfaces import Parser

ParserName = Literal["hermes", "json", "openai", "python_call", "react"]
DEFAULT_ORDER: tuple[ParserName, ...] = ("hermes", "openai", "json", "react", "python_call")


class AutoParser:
    """Tries parsers in order; the first that finds a tool call (or a broken one) wins, else the text is a reply."""

    class Params(ComponentParams):
        order: list[ParserName] = Field(default_factory=lambda: list(DEFAULT_ORDER), min_length=1)
        """Parsers to try, first to last; the first renders the tools into the system prompt."""
        repair_truncated_json: bool = True
        """Passed to each JSON parser tried (see theirs)."""

    def __init__(self, params: Params | None = None) -> None:
        self.params = params or self.Params()
        self.parsers: list[Parser] = []
        for name in self.params.order:
            model = registry.parsers.get(name).params_model
            fields = {"repair_truncated_json": self.params.repair_truncated_json} if "repair_truncated_json" in model.model_fields else {}
            self.parsers.append(ComponentConfig[Parser].named("parsers", name, fields).build())

    def render_tools(self, tools: list[dict[str, object]]) -> str:
        """The first parser's rendering."""
        return self.parsers[0].render_tools(tools)

    def write(self, turn: ParsedTurn) -> str:
        """The first parser's writing of `turn` (the format the system prompt shows)."""
        return self.parsers[0].write(turn)  # type: ignore[attr-defined]

    def parse(self, text: str) -> ParsedTurn:
        """Parse one turn; never raises."""
        for parser in self.parsers:
            turn = parser.parse(text)
            if turn.tool_calls or turn.parse_errors:
                return turn
        return ParsedTurn(content=text.strip())
