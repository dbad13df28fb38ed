"""Error types that the CLI turns into one clear line instead of a traceback."""


class HarnessError(Exception):
    """A problem the user can fix (bad flag, missing file, plan that cannot fit).

    The CLI prints ``harness: <message>`` and exits with ``exit_code`` (2: bad input).
    """

    exit_code = 2


class ServerStartError(HarnessError):
    """The vLLM server did not become ready; the message carries the diagnosis."""

    exit_code = 1


class ServerClosed(HarnessError):
    """A start asked of a server that was released for good (its run stopping or done)."""

    exit_code = 1

    def __init__(self, why: str) -> None:
        super().__init__(f"the model server is not started again: {why}")


class ServerCrashed(HarnessError):
    """The vLLM server process (or its engine) died while serving."""

    exit_code = 1
