"""CUDA to CPU for SkyRL's trainer workers on a machine without GPUs: test support, never shipped.

SkyRL 0.4.0's FSDP workers hard-code CUDA: device meshes built on "cuda", `torch.cuda.set_device/synchronize/
current_device`, `.cuda()` calls and the process-group backend ``"cpu:gloo,cuda:nccl"``. `install()` turns those
into their CPU equivalents (a CPU mesh, gloo, no-ops) in the process that calls it, puts the `flash_attn` stand-in
(`site/`) on its path, and answers the preflight's GPU count with torch's (patched) one. A CPU spec names it as
every Ray worker's setup hook (``backend.runtime_env.worker_process_setup_hook: tests.skyrl_cpu.shim.install``), so
`uv run ctu run` needs nothing else; Ray's own infrastructure processes never import torch. What it cannot make
true on a CPU: NCCL weight transfer, CUDA IPC, flash-attn packing, bf16 autocast (disabled without CUDA): see
README.md beside this file.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

from ctu.backends.skyrl.import_hooks import after_import

SITE = Path(__file__).resolve().parent / "site"
REPO = Path(__file__).resolve().parents[2]


def install() -> None:
    """Patch torch's CUDA entry points that SkyRL's workers call into CPU equivalents and put the `flash_attn`
    stand-in on the path (idempotent)."""
    if str(SITE) not in sys.path:
        sys.path.insert(0, str(SITE))
    import torch
    import torch.distributed
    import torch.distributed.device_mesh as device_mesh

    if getattr(torch, "_ctu_cpu_shim", False):
        return
    torch._ctu_cpu_shim = True  # type: ignore[attr-defined]
    cpu = torch.device("cpu")

    def nothing() -> object:
        # a new function per name: torch.compile's trace rules key torch functions by identity
        return lambda *args, **kwargs: None

    for name in ("set_device", "synchronize", "empty_cache", "manual_seed_all", "ipc_collect", "reset_peak_memory_stats"):
        setattr(torch.cuda, name, nothing())
    torch.cuda.current_device = lambda: cpu
    torch.cuda.device_count = lambda: 1
    # CUDA stays unavailable: `import vllm` sets PYTORCH_NVML_BASED_CUDA_CHECK=1, under which torch's own
    # `is_available()` answers with `device_count() > 0`, and autocast would then take this machine for a GPU
    torch.cuda.is_available = lambda: False
    torch.cuda.mem_get_info = lambda *args: (8 << 30, 8 << 30)
    torch.cuda.memory_allocated = lambda *args: 0
    torch.cuda.memory_reserved = lambda *args: 0
    torch.cuda.max_memory_allocated = lambda *args: 0
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self

    init_process_group = torch.distributed.init_process_group

    def gloo_process_group(*args, backend=None, **kwargs):
        return init_process_group(*args, backend="gloo", **kwargs)

    torch.distributed.init_process_group = gloo_process_group
    init_device_mesh = device_mesh.init_device_mesh

    def cpu_device_mesh(device_type, *args, **kwargs):
        return init_device_mesh("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    device_mesh.init_device_mesh = cpu_device_mesh
    torch.distributed.init_device_mesh = cpu_device_mesh  # type: ignore[attr-defined]
    # the preflight's question "does CUDA see a GPU here" answered as for the logical GPU Ray schedules on
    after_import("ctu.backends.skyrl.preflight", lambda module: setattr(module, "cuda_devices", torch.cuda.device_count))
    if os.environ.get("CTU_WEIGHT_SYNC_DIR"):
        after_import("skyrl.backends.skyrl_train.workers.worker_dispatch",
                     lambda module: install_weight_sync(module.WorkerDispatch, Path(os.environ["CTU_WEIGHT_SYNC_DIR"])))


def install_weight_sync(WorkerDispatch: type, export: Path) -> None:
    """Replace only the weight transfer of SkyRL's `WorkerDispatch.save_weights_for_sampler`: the policy is saved as
    Hugging Face files under `export` and loaded by vLLM's own ``reload_weights`` (``POST /collective_rpc`` to every
    server SkyRL's client knows, then ``/reset_prefix_cache``); on GPUs SkyRL sends them over NCCL or CUDA IPC, which
    need CUDA. The rest of SkyRL's sync runs as on GPUs: the pause around it and, colocated, the engines' sleep, the
    policy's offload and the ``wake_up(weights)`` / ``wake_up(kv_cache)`` bracket."""

    def no_weight_sync_state(self, inference_engine_client) -> None:
        return None  # the NCCL group SkyRL would build with the servers

    def reload_in_vllm(self, inference_engine_client, model_id: str | None = None) -> None:
        folder = export / f"v{len(list(export.glob('v*'))) if export.exists() else 0:04d}"
        self.save_hf_model("policy", str(folder), None)
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}}
        for url in inference_engine_client.server_urls:  # synchronous, as SkyRL's own broadcast (ray.get) is
            for endpoint, payload in (("/collective_rpc", body), ("/reset_prefix_cache", None)):
                request = urllib.request.Request(url + endpoint, data=json.dumps(payload).encode() if payload else b"",
                                                 headers={"Content-Type": "application/json"}, method="POST")
                with urllib.request.urlopen(request, timeout=600) as response:
                    response.read()

    WorkerDispatch.init_weight_sync_state = no_weight_sync_state
    WorkerDispatch._broadcast_to_inference_engines = reload_in_vllm
