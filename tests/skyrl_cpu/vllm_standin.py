"""A stand-in for a vLLM server on a machine without GPUs: a test device, never a serving path.

It answers, on 127.0.0.1 only, the calls SkyRL's `RemoteInferenceClient` makes of an external vLLM server
(``generator.inference_engine.external_proxy_url`` / ``external_server_urls``), with a transformers model on CPU:

- ``POST /inference/v1/generate``: token ids in; sampled token ids, their log-probabilities and a finish reason
  out (vLLM's raw log-probabilities: of the model's logits before temperature, as vLLM reports them by default);
- ``POST /v1/chat/completions``: an OpenAI chat request with tools, rendered by the model's own chat template,
  answered with content, Hermes tool calls parsed from the text (as vLLM's ``hermes`` tool parser does), and the
  sampled token ids and log-probabilities (vLLM's ``logprobs`` and ``return_token_ids``);
- the control calls ``/get_world_size``, ``/is_sleeping``, ``/pause``, ``/resume``, ``/sleep``, ``/wake_up``,
  ``/reset_prefix_cache``, ``/collective_rpc`` (acknowledged; nothing to pause on one CPU process);
- ``POST /ctu/load_weights`` ``{"path": DIR}``: load new weights saved in Hugging Face format (the CPU weight sync;
  on GPUs SkyRL transfers weights over NCCL).

Run: ``python -m tests.skyrl_cpu.vllm_standin --model DIR --port N``. One request is served at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import threading
import uuid
from typing import Any

import torch
from aiohttp import web
from transformers import AutoModelForCausalLM, AutoTokenizer

HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class StandIn:
    """The model, its tokenizer and sampling; every call holds one lock (one request at a time)."""

    def __init__(self, model_path: str) -> None:
        self.model_path = model_path
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.lock = threading.Lock()
        self.loads = 0

    def load(self, path: str) -> None:
        """Replace the weights with those saved in `path`."""
        with self.lock:
            self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            self.loads += 1

    @torch.no_grad()
    def sample(self, prompt: list[int], params: dict[str, Any]) -> tuple[list[int], list[float], str]:
        """Sample up to ``max_tokens`` ids after `prompt`: ``(ids, raw logprobs, "stop" | "length")``."""
        temperature = float(params.get("temperature", 1.0))
        top_p = float(params.get("top_p", 1.0))
        max_tokens = int(params.get("max_tokens") or 16)
        stops = set(params.get("stop_token_ids") or []) | {self.tokenizer.eos_token_id}
        seed = params.get("seed")
        generator = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        with self.lock:
            output = self.model(input_ids=torch.tensor([prompt]), use_cache=True)
            cache, logits = output.past_key_values, output.logits[0, -1]
            ids: list[int] = []
            logprobs: list[float] = []
            for _ in range(max_tokens):
                raw = torch.log_softmax(logits.float(), dim=-1)
                if temperature == 0.0:
                    token = int(torch.argmax(raw))
                else:
                    probs = torch.softmax(logits.float() / temperature, dim=-1)
                    if top_p < 1.0:
                        ordered, order = torch.sort(probs, descending=True)
                        keep = torch.cumsum(ordered, 0) - ordered < top_p
                        probs = torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])
                    token = int(torch.multinomial(probs / probs.sum(), 1, generator=generator))
                ids.append(token)
                logprobs.append(float(raw[token]))
                if token in stops:
                    return ids, logprobs, "stop"
                output = self.model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True)
                cache, logits = output.past_key_values, output.logits[0, -1]
        return ids, logprobs, "length"

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """An OpenAI chat completion for `body`, with Hermes tool calls parsed out of the text."""
        kwargs = dict(body.get("chat_template_kwargs") or {})
        prompt = self.tokenizer.apply_chat_template(body["messages"], tools=body.get("tools") or None, tokenize=False,
                                                    add_generation_prompt=True, **kwargs)
        prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        ids, logprobs, finish = self.sample(prompt_ids, body)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        calls = []
        for block in HERMES_CALL.findall(text):
            try:
                call = json.loads(block)
                calls.append({"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                              "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))}})
            except (ValueError, KeyError, TypeError):
                calls = []
                break
        content = HERMES_CALL.sub("", text).strip() if calls else text
        message = {"role": "assistant", "content": content or None, **({"tool_calls": calls} if calls else {})}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "model": body.get("model"),
            "prompt_token_ids": prompt_ids,
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls and finish == "stop" else finish,
                "token_ids": ids,
                "logprobs": {"content": [{"token": self.tokenizer.decode([t]), "logprob": lp} for t, lp in zip(ids, logprobs)]},
            }],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids)},
        }


def make_app(standin: StandIn) -> web.Application:
    """The aiohttp application serving `standin`."""

    async def generate(request: web.Request) -> web.Response:
        body = await request.json()
        ids, logprobs, finish = await asyncio.to_thread(standin.sample, body["token_ids"], body.get("sampling_params") or {})
        choice = {"token_ids": ids, "finish_reason": finish,
                  "logprobs": {"content": [{"logprob": lp} for lp in logprobs]}}
        return web.json_response({"choices": [choice]})

    async def chat(request: web.Request) -> web.Response:
        return web.json_response(await asyncio.to_thread(standin.chat, await request.json()))

    async def load_weights(request: web.Request) -> web.Response:
        await asyncio.to_thread(standin.load, (await request.json())["path"])
        return web.json_response({"loads": standin.loads})

    async def world_size(request: web.Request) -> web.Response:
        return web.json_response({"world_size": 1})

    async def sleeping(request: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": False})

    async def acknowledge(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"loads": standin.loads})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/inference/v1/generate", generate)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/ctu/load_weights", load_weights)
    app.router.add_get("/ctu/stats", stats)
    app.router.add_get("/get_world_size", world_size)
    app.router.add_get("/is_sleeping", sleeping)
    app.router.add_get("/health", acknowledge)
    for path in ("/pause", "/resume", "/sleep", "/wake_up", "/reset_prefix_cache", "/collective_rpc"):
        app.router.add_post(path, acknowledge)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    web.run_app(make_app(StandIn(args.model)), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
