"""SkyRL's own router (`VLLMRouter`, over the locked `vllm-router`) starts and fronts an OpenAI-compatible server.

SkyRL 0.4.0 reads `RouterArgs.pd_disaggregation`, which vllm-router dropped in 0.1.15: with the newer router every
GPU run whose vLLM servers SkyRL starts crashed as soon as they were up. The lock pins 0.1.14 (pyproject.toml).
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.support.openai_server import Answer, ScriptedOpenAIServer


def test_skyrls_router_starts_and_forwards_a_chat_request_to_its_server():
    from skyrl.backends.skyrl_train.inference_servers.utils import build_router_args
    from skyrl.backends.skyrl_train.inference_servers.vllm_router import VLLMRouter
    from skyrl.train.config import SkyRLTrainConfig

    with ScriptedOpenAIServer(default=Answer.text("through the router")) as server:
        engine = SkyRLTrainConfig().generator.inference_engine
        router = VLLMRouter(build_router_args(engine, server_urls=[server.base_url.removesuffix("/v1")]))
        url = router.start()  # SkyRL's own start: raised AttributeError with vllm-router 0.1.17
        try:
            body = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "hi"}]}).encode()
            request = urllib.request.Request(f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                answer = json.loads(response.read())
        finally:
            router.shutdown()
        assert answer["choices"][0]["message"]["content"] == "through the router"
        assert server.requests[-1]["messages"] == [{"role": "user", "content": "hi"}]
        with pytest.raises(OSError):  # shut down: its port no longer answers
            urllib.request.urlopen(f"{url}/health", timeout=2)
