"""mini-swe-agent's ``Environment`` over the seam's Sandbox: every action is one ``sandbox.exec``.

What the agent sees is what mini-swe-agent's own environments give (environments/local.py and
docker.py of 2.4.6): each command in a fresh ``bash -c`` in the working directory, stdout and stderr
together, a timeout reported as an exception with return code -1, and a command whose output starts
with the submit marker (exit code 0) ends the episode with the rest of its output as submission.
A sandbox that fails (gone, broken) raises: that is the infrastructure, not an observation.
"""

import platform
import threading
import time
from typing import Any

from minisweagent.exceptions import Submitted
from pydantic import BaseModel

from harness.episodes.mini_swe_agent._wait import wait_for
from harness.seam import Sandbox


class SandboxEnvironmentConfig(BaseModel):
    cwd: str
    env: dict[str, str]
    timeout: float
    submit_marker: str


class SandboxEnvironment:
    def __init__(
        self,
        sandbox: Sandbox,
        config: SandboxEnvironmentConfig,
        *,
        stop: threading.Event,
        deadline: float | None,
    ) -> None:
        self.sandbox = sandbox
        self.config = config
        self._stop = stop
        self._deadline = deadline

    def execute(
        self, action: dict[str, Any], cwd: str = "", *, timeout: float | None = None
    ) -> dict[str, Any]:
        command = str(action.get("command", ""))
        limit = timeout or self.config.timeout
        if self._deadline is not None:  # a command never outlives the episode
            limit = max(1.0, min(limit, self._deadline - time.monotonic()))
        result = wait_for(
            lambda: self.sandbox.exec(
                command, cwd=cwd or self.config.cwd, env=self.config.env, timeout=limit
            ),
            self._stop,
            self._deadline,
        )
        output: dict[str, Any]
        if result.timed_out or result.exit_code is None:
            # mini-swe-agent's words for subprocess.TimeoutExpired
            what = f"Command '{command}' timed out after {limit:g} seconds"
            output = {
                "output": result.output,
                "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {what}",
                "extra": {"exception_type": "TimeoutExpired", "exception": what},
            }
        else:
            output = {"output": result.output, "returncode": result.exit_code, "exception_info": ""}
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        """Raise Submitted when the output starts with the submit marker and the command exited 0."""
        lines = str(output.get("output", "")).lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == self.config.submit_marker and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # system/release/version/machine for the instance template: the kernel's, which a
        # container shares with this host (mini-swe-agent's docker environment does the same)
        return self.config.model_dump() | platform.uname()._asdict() | kwargs

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                }
            }
        }
