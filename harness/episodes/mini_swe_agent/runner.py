"""mini-swe-agent as an EpisodeRunner of the seam (harness/seam.py).

Its DefaultAgent runs its own loop; the harness gives it a model that calls the episode's endpoint
with the openai client, and an environment whose every command is one ``sandbox.exec`` in the
sandbox's working directory. The agent's messages become Turn records as they come, the loop
monitor watches them (``watch_loops``; the model-call proxy may do it instead), and its trajectory
is saved in mini-swe-agent's own format as ``<out_dir>/mini-swe-agent.traj.json``, which
`harness loops` reads.

How mini-swe-agent's endings map onto the seam's statuses:
- ``Submitted`` (the submit command ran): finished (verification decides resolved or not);
- ``LimitsExceeded`` (the step limit): max_iterations;
- ``RepeatedFormatError`` (``max_consecutive_format_errors`` unparseable responses in a row): stuck.
  mini-swe-agent gave up on the model's output, as OpenHands' stuck detector gives up on a repeating
  agent: the model's behaviour, not a failure of the harness, so the workspace is still verified.
  With the loop monitor on, the same responses are a ``repeat_error`` loop (responses that ran
  nothing), found on the same turn: the episode is then loop_stopped, as OpenHands episodes are;
- ``TimeExceeded`` (the task's wall time, also mid-request or mid-command): error ``TimeLimit``;
- a certain loop: loop_stopped (exit status ``LoopDetected`` in the trajectory);
- an exception (the model request failed, the sandbox broke): error, infrastructure or not by
  harness/episodes/faults.py's rules (a 5xx or a dropped connection is; a 400 for a prompt past the
  context is the model's);
- ``stop`` set: the agent ends at once, the outcome says ``stopped``.
"""

import threading
import time
from typing import Any

from harness.episodes.faults import is_infra_fault
from harness.episodes.mini_swe_agent._upstream import check_version
from harness.episodes.mini_swe_agent.config import load_mini_swe_agent
from harness.episodes.scaffold import Scaffold
from harness.monitor import LoopConfig, LoopDetector, LoopFinding, Turn
from harness.resume.files import CheckpointUnusable
from harness.seam import EpisodeOutcome, EpisodeSpec, EpisodeStatus, ModelEndpoint, Sandbox

TRAJECTORY = "mini-swe-agent.traj.json"

_STATUS: dict[str, EpisodeStatus] = {
    "Submitted": "finished",
    "LimitsExceeded": "max_iterations",
    "RepeatedFormatError": "stuck",
}


def _root_cause(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None and exc.__cause__ is not exc:
        exc = exc.__cause__
    return exc


class MiniSweAgentRunner:
    """mini-swe-agent 2.4.6's DefaultAgent, text actions or tool calls (by the scaffold's data).

    ``watch_loops``: run the loop monitor on the turns and end the episode on a certain loop
    (False, as `harness eval` makes it: the model-call proxy watches its requests instead).
    """

    loggers = ("minisweagent", "agent")  # mini-swe-agent's own logging names

    def __init__(
        self,
        scaffold: Scaffold | None = None,
        loop_config: LoopConfig | None = None,
        *,
        watch_loops: bool = False,
    ) -> None:
        self.watch_loops = self.watches_loops = watch_loops
        self.loop_config = loop_config

    def run(
        self, spec: EpisodeSpec, sandbox: Sandbox, endpoint: ModelEndpoint, stop: threading.Event
    ) -> EpisodeOutcome:
        version = check_version()
        msa = load_mini_swe_agent(spec.scaffold)
        # imported only now: minisweagent must be checked (and silenced) first
        from harness.episodes.mini_swe_agent._agent import HarnessAgent
        from harness.episodes.mini_swe_agent._environment import SandboxEnvironment, SandboxEnvironmentConfig
        from harness.episodes.mini_swe_agent._model import ChatModel

        started = time.monotonic()
        deadline = started + spec.time_limit_s if spec.time_limit_s else None
        detector = LoopDetector(self.loop_config) if self.watch_loops else None

        def on_turn(turn: Turn) -> LoopFinding | None:
            return detector.feed(turn) if detector is not None else None

        model = ChatModel(
            base_url=endpoint.openai_url,
            api_key=endpoint.api_key,
            name=endpoint.name,
            scaffold=msa,
            seed=spec.seed,
            temperature=spec.temperature,
            max_output_tokens=spec.max_output_tokens,
            stop=stop,
            deadline=deadline,
        )
        env = SandboxEnvironment(
            sandbox,
            SandboxEnvironmentConfig(
                cwd=sandbox.workdir,
                env=msa.config.env,
                timeout=msa.config.command_timeout_s,
                submit_marker=msa.config.submit_marker,
            ),
            stop=stop,
            deadline=deadline,
        )
        trajectory = spec.out_dir / TRAJECTORY
        agent = HarnessAgent(
            model,
            env,
            on_turn=on_turn,
            text_actions=msa.config.actions == "text",
            stop=stop,
            deadline=deadline,
            trajectory_extra={
                "instance_id": spec.key,
                "info": {"config": {"agent": {"action_regex": msa.config.action_regex}}},
            },
            system_template=msa.templates.system,
            instance_template=msa.templates.instance,
            step_limit=spec.max_iterations or msa.scaffold.max_iterations,
            cost_limit=0.0,  # no cost tracking: the step limit and the wall time bound an episode
            max_consecutive_format_errors=msa.config.max_consecutive_format_errors,
            output_path=trajectory,
            checkpoint=spec.checkpoint,
        )
        error: BaseException | None = None
        try:
            agent.run(task=spec.instruction)
        except CheckpointUnusable:
            raise  # the driver begins the episode again from turn 1
        except Exception as exc:  # the model request or the sandbox failed: recorded, never raised
            error = _root_cause(exc)
        finally:
            model.close()
            agent.flush()
        agent.save(trajectory)  # run() saves after each step; this covers one that failed before its first
        last: dict[str, Any] = agent.messages[-1] if agent.messages else {}
        exit_status = str((last.get("extra") or {}).get("exit_status") or "")
        turns = agent.turns
        finding = detector.finding if detector is not None else None
        outcome: dict[str, Any] = {}
        if finding is not None:
            outcome["status"] = "loop_stopped"
        elif exit_status == "TimeExceeded":
            outcome |= {
                "status": "error",
                "error_type": "TimeLimit",
                "error": f"episode time limit of {spec.time_limit_s:g} s reached after {len(turns)} turns",
                "timed_out": True,
            }
        elif error is not None:
            outcome |= {
                "status": "error",
                "error_type": type(error).__name__,
                "error": str(error)[:2000],
                "infra": is_infra_fault(error),
            }
        elif exit_status in _STATUS:
            outcome["status"] = _STATUS[exit_status]
        else:  # Stopped, or an ending this runner does not know
            outcome |= {
                "status": "error",
                "error_type": exit_status or "Error",
                "error": str(last.get("content")),
            }
        return EpisodeOutcome(
            turns=turns,
            loop=finding,
            wall_s=time.monotonic() - started,
            llm_s=model.llm_s,
            prompt_tokens=sum(t.prompt_tokens or 0 for t in turns),
            completion_tokens=sum(t.completion_tokens or 0 for t in turns),
            stopped=stop.is_set() or exit_status == "Stopped",  # a graceful stop ends it as "Stopped" too
            details={"exit_status": exit_status, "trajectory": TRAJECTORY, "mini_swe_agent": version},
            **outcome,
        )
