"""The OpenHands SDK as a scaffold runner (the seam's EpisodeRunner, harness/seam.py).

The conversation, the model calls and the live loop monitor run in this process. Where the
agent's tools act depends on the sandbox: in a local directory the SDK's own executors act there,
in-process; in a container its tool server does (container_tools.py), started by this runner's
``prep`` (ahead of the episode, when the runtime starts sandboxes ahead).
"""

import threading
import time
from pathlib import Path

from harness.episodes.faults import failed_outcome
from harness.episodes.openhands._patching import check_all
from harness.episodes.openhands.container_tools import ContainerTools, ToolServerPrep
from harness.episodes.openhands.driver import kill_running_shells, run_sdk_episode
from harness.episodes.scaffold import Scaffold
from harness.monitor import LoopConfig
from harness.runtime.container import ContainerSandbox
from harness.seam import EpisodeOutcome, EpisodeSpec, LocalHelpers, ModelEndpoint, Sandbox


class OpenHandsRunner:
    """OpenHands SDK (the CodeAct tools of the scaffold), watched turn by turn by the monitor."""

    loggers = ("openhands",)
    watches_loops = True  # from the SDK's events, observations and all (driver.py)

    def __init__(self, scaffold: Scaffold, loop_config: LoopConfig | None = None) -> None:
        check_all()  # the libraries its patches were written for: a run with others stops here, in one line
        self.scaffold = scaffold
        self.loop_config = loop_config
        self.prep = ToolServerPrep(scaffold.terminal_type)

    def run(
        self, spec: EpisodeSpec, sandbox: Sandbox, endpoint: ModelEndpoint, stop: threading.Event
    ) -> EpisodeOutcome:
        started = time.monotonic()
        tools: ContainerTools | None = None
        workspace = Path(sandbox.workdir)
        if isinstance(sandbox, ContainerSandbox):
            # The conversation's own directory is on this machine; the tools act in the container.
            workspace = spec.out_dir / "workspace"
            workspace.mkdir(parents=True, exist_ok=True)
            tools = ContainerTools(sandbox, self.scaffold.terminal_type)
            try:
                tools.start()
            except Exception as exc:  # the sandbox never came up: the episode errors, the run goes on
                tools.close()
                return failed_outcome("the sandbox's tools did not start", exc, started)
        params = tools.params() if tools else {}
        if isinstance(sandbox, LocalHelpers):  # a confining sandbox: the shell and the editor kept in it
            history = spec.out_dir / "shell"
            history.mkdir(parents=True, exist_ok=True)
            params = {
                "terminal": {"confine": list(sandbox.helper_prefix([history])), "history_dir": str(history)},
                "file_editor": {"confine_to": str(sandbox.confined_to or workspace)},
            }
        try:
            return run_sdk_episode(
                instruction=spec.instruction,
                workspace=workspace,
                tool_params=params,
                sandbox_failure=tools.failure if tools else None,
                base_url=endpoint.openai_url,
                model=endpoint.name,
                api_key=endpoint.api_key,
                scaffold=self.scaffold,
                out_dir=spec.out_dir,
                seed=spec.seed,
                max_iterations=spec.max_iterations,
                loop_config=self.loop_config,
                temperature=spec.temperature,
                max_output_tokens=spec.max_output_tokens,
                time_limit_s=spec.time_limit_s,
                stop=stop,
                checkpoint=spec.checkpoint,
            )
        finally:
            if tools is not None:
                tools.close()

    def halt(self) -> None:
        """The run is stopping: every conversation's local shell killed from the main thread now
        (an episode's own stop watch is a daemon thread, which the exit does not wait for)."""
        kill_running_shells()
