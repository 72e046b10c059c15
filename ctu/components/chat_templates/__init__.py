"""Chat-template policies: the one place ctu turns conversations (and tools) into text and token ids."""

from ctu.components.chat_templates import huggingface as huggingface  # registers "default", "qwen3_no_thinking", "jinja_file"
