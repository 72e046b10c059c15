"""The built-in model's text format: its chat template (Qwen3's layout, with thinking and tools) and the Hermes call
scaffolding its tokenizer keeps as single tokens. Shared by the model's build (`ctu.models.tiny_qwen3`) and its
training data (`ctu.models.tiny_qwen3_data`)."""

CALL_SCAFFOLD_TOKENS = ['<tool_call>\n{"name": "', '", "arguments": {', '}}\n</tool_call>']
"""Hermes call scaffolding kept as single tokens, so that a model this small can learn the call format at all
(decoded text is unchanged: parsers see ordinary Hermes calls). Each tool name of tau2's domains, and each
argument key as ``"key": ``, is a single token too (`call_tokens`)."""


CHAT_TEMPLATE = r"""{%- set enable_thinking = enable_thinking if enable_thinking is defined else true %}
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + (message.content or '') + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' }}
{%- if message.content %}{{- message.content }}{%- endif %}
{%- for call in (message.tool_calls or []) %}
{%- set function = call.function if call.function is defined else call %}
{%- if message.content or not loop.first %}{{- '\n' }}{%- endif %}
{%- set arguments = function.arguments if function.arguments is string else (function.arguments | tojson) %}
{{- '<tool_call>\n{"name": "' + function.name + '", "arguments": ' + arguments + '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if not enable_thinking %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}"""
"""Qwen-format chat template (written for ctu; same layout as Qwen2.5/Qwen3's, including `enable_thinking`)."""
