"""The errors a user can make or meet, and how the command line reports them.

An expected error (a wrong option, a cluster that is not up, a topic that exists already) is one
line on stderr that says what to do, and exit code 1; only a bug shows a Python traceback.
"""

from __future__ import annotations

from actors.client_config import InvalidConfigError as InvalidClientConfigError
from actors.errors import InvalidConfigError, RafkaError
from actors.stack import RayHeadError
from coordination.errors import CoordinationError

EXIT_ERROR = 1
# argparse's code for a usage error; also what a feature not available in this build returns.
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An error the command line reports as one message, with an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class NotAvailableError(CliError):
    """A feature this build of rafka does not have yet (exit code 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


# The typed errors of the layers below: their messages are written for users already.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    CoordinationError,
    RafkaError,
    InvalidConfigError,
    InvalidClientConfigError,
    RayHeadError,
)
