"""SkyRL's Tinker API server with its JAX backend, started on this machine for one run.

It must be started through ``uv run`` (it re-launches its engine with the same uv flags); ``--no-project
--python <this interpreter>`` keeps uv from resolving ctu's own project for it. It listens on 127.0.0.1
only, keeps its sqlite database and checkpoints in the run directory, and is stopped (its whole process group)
at the end of the run or on Ctrl-C, and by a watchdog process if the run is killed (SIGKILL, the OOM killer).

Its JAX engine keeps the programs it compiles in JAX's persistent compilation cache (`JAX_CACHE_ENV`), under ctu's
cache folder: a run, an evaluation or a calibration after the first on the same model and shapes loads them instead
of compiling them again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

from ctu.errors import CtuError
from ctu.runners.watchdog import watch


class TinkerServerError(CtuError, RuntimeError):
    """The local Tinker server could not be started or did not become healthy (printed without a traceback)."""


JAX_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
"""JAX's persistent compilation cache (https://docs.jax.dev/en/latest/persistent_compilation_cache.html): the server
process gets ``<ctu's cache folder>/jax`` (`ctu.models.cache.cache_dir`) unless the environment names a folder
itself; ``JAX_ENABLE_COMPILATION_CACHE=false`` turns it off. JAX keys an entry by the program, the compile options,
its own version and the device, so a changed model, shape or JAX compiles anew."""


def jax_cache_env(environ: dict[str, str]) -> dict[str, str]:
    """`environ` with `JAX_CACHE_ENV` set to ctu's JAX cache folder where it is not set."""
    from ctu.models.cache import cache_dir

    return {JAX_CACHE_ENV: str(cache_dir() / "jax"), **environ}


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalTinkerServer:
    """Context manager: starts the server on entry and stops it on exit; `wait_healthy` waits until
    `/api/v1/healthz` answers, so a caller can prepare other things while the server boots.

    Args:
        base_model: local folder of the base model.
        folder: where the database, checkpoints and `server.log` go.
        lora_rank: the largest LoRA rank clients may ask for.
        max_lora_adapters: adapters alive at once (a training client and its samplers).
        sample_max_num_sequences: sequences the JAX engine samples in one compiled batch (`TinkerParams.
            sample_batch_size`). The engine pads a batch to this size and compiles one program per (batch size,
            length bucket); left unset, every new number of waiting requests compiled anew (5-10 s each on this
            CPU).
        startup_timeout_s: seconds to wait for health.
    """

    def __init__(self, base_model: str, folder: Path, lora_rank: int = 8, max_lora_adapters: int = 4,
                 sample_max_num_sequences: int = 1, startup_timeout_s: float = 300.0) -> None:
        self.base_model = base_model
        self.folder = Path(folder)
        self.lora_rank = lora_rank
        self.max_lora_adapters = max_lora_adapters
        self.sample_max_num_sequences = sample_max_num_sequences
        self.startup_timeout_s = startup_timeout_s
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._deadline = 0.0
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def uv_binary() -> str:
        """The uv executable: the `uv` package's own binary (a ctu dependency), else uv on PATH.

        Raises:
            TinkerServerError: no uv anywhere.
        """
        try:
            from uv import find_uv_bin

            return find_uv_bin()
        except (ImportError, FileNotFoundError):
            found = shutil.which("uv")
            if found is None:
                raise TinkerServerError("the local Tinker server is started through `uv run`, and uv cannot be found") from None
            return found

    def command(self) -> list[str]:
        """The server's command line."""
        uv = self.uv_binary()
        backend_config = json.dumps({"max_lora_adapters": self.max_lora_adapters, "max_lora_rank": self.lora_rank,
                                     "sample_max_num_sequences": self.sample_max_num_sequences, "train_micro_batch_size": 1})
        return [
            uv, "run", "--no-project", "--python", sys.executable, "-m", "skyrl.tinker.api",
            "--base-model", self.base_model,
            "--backend", "jax",
            "--backend-config", backend_config,
            "--checkpoints-base", str((self.folder / "checkpoints").resolve()),
            "--database-url", f"sqlite:///{(self.folder / 'tinker.sqlite').resolve()}",
            "--host", "127.0.0.1",
            "--port", str(self.port),
        ]

    def healthy(self) -> bool:
        """Whether the server answers its health check."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/api/v1/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def start(self) -> LocalTinkerServer:
        """Start the server process and return at once (`wait_healthy` waits for it)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._log = (self.folder / "server.log").open("ab")
        # the server relaunches its engine with a bare `uv run`: uv's folder goes first on PATH
        uv_folder = str(Path(self.uv_binary()).parent)
        env = {**jax_cache_env(dict(os.environ)), "JAX_PLATFORMS": "cpu", "PATH": uv_folder + os.pathsep + os.environ.get("PATH", "")}
        self.process = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=self.folder
        )
        watch(self.process.pid, group=True)  # the server never outlives this process
        self._deadline = time.monotonic() + self.startup_timeout_s
        return self

    def wait_healthy(self) -> str:
        """Block until the started server answers its health check; returns `base_url`.

        Raises:
            TinkerServerError: the server exited, or was not healthy `startup_timeout_s` after `start` (it is
                stopped then).
        """
        assert self.process is not None, "start() the server first"
        while time.monotonic() < self._deadline:
            if self.process.poll() is not None:
                self.stop()
                raise TinkerServerError(f"the local Tinker server exited with code {self.process.returncode}; see {self.folder / 'server.log'}")
            if self.healthy():
                return self.base_url
            time.sleep(0.5)
        self.stop()
        raise TinkerServerError(f"the local Tinker server was not healthy after {self.startup_timeout_s:.0f} s; see {self.folder / 'server.log'}")

    def __enter__(self) -> LocalTinkerServer:
        """`start` (call `wait_healthy` before using the server)."""
        return self.start()

    def stop(self) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after 15 s."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=15)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
