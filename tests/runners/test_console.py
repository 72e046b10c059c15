"""What a SkyRL run's entrypoint prints (`ctu.runners.console.route_library_logs`), in a process of its own (it
reconfigures the process's logging): SkyRL's loguru records, the standard-library records it intercepts and its
own `skyrl` logger's go to the run's log file; ctu's lines and anyone's errors to the console."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENTRYPOINT = """
import logging, sys
from pathlib import Path
from loguru import logger
from skyrl.train.utils.utils import configure_ray_worker_logging
import skyrl.utils.log  # SkyRL's own `skyrl` logger, with its rich handler
from ctu.runners.console import route_library_logs

configure_ray_worker_logging()  # as SkyRL's trainer sets its workers' logging up
route_library_logs(Path(sys.argv[1]), verbose=sys.argv[2] == "verbose")
logger.info("SkyRL's loguru line")
logging.getLogger("vllm.something").warning("a library's warning")
logging.getLogger("skyrl.backends.server_group").info("SkyRL's standard-library line")
logging.getLogger("ctu.rollout").warning("ctu's own line")
logger.error("SkyRL's error")
logger.complete()
"""


def run(tmp_path: Path, mode: str) -> tuple[str, str]:
    log = tmp_path / mode / "skyrl.log"
    result = subprocess.run([sys.executable, "-c", ENTRYPOINT, str(log), mode], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr, log.read_text()


def test_the_libraries_lines_go_to_the_log_file_and_ctus_to_the_console(tmp_path: Path):
    console, logged = run(tmp_path, "quiet")
    for line in ("SkyRL's loguru line", "a library's warning", "SkyRL's standard-library line", "SkyRL's error"):
        assert line in logged, line
    assert "ctu's own line" in console and "SkyRL's error" in console
    assert "SkyRL's loguru line" not in console and "a library's warning" not in console
    assert "SkyRL's standard-library line" not in console
    verbose, _ = run(tmp_path, "verbose")  # --verbose: everything live too, ctu's line once
    for line in ("SkyRL's loguru line", "a library's warning", "SkyRL's standard-library line"):
        assert line in verbose, line
    assert verbose.count("ctu's own line") == 1
