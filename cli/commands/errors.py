"""The errors a user can make or meet, and how the command line reports them.

An expected error (a wrong option, a cluster that is not up, a topic that exists already) is one
line on stderr that says what to do, and exit code 1; only a bug shows a Python traceback.
"""

from __future__ import annotations

from rafka.actors.errors import InvalidConfigError, RafkaError
from rafka.actors.stack import RayHeadError
from rafka.coordination.errors import CoordinationError, InvalidTopicError
from rafka.coordination.validation import validate_topic_name

EXIT_ERROR = 1
# argparse's code for a usage error; also what a feature not available in this build returns.
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(RafkaError):
    """An error the command line reports as one message, with an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# The typed errors of the layers below: their messages are written for users already.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    CoordinationError,
    RafkaError,
    InvalidConfigError,  # a topic's, a broker's or a client's
    RayHeadError,
)


def checked_topic(name: str) -> str:
    """`name` if it is a legal topic name, else a usage error, before any connection is made."""
    try:
        return validate_topic_name(name)
    except InvalidTopicError as error:
        raise CliError(str(error), EXIT_USAGE) from None


def checked_count(value: int | None, option: str, minimum: int) -> int | None:
    """`value` if it is None or at least `minimum`, else a usage error naming `option`."""
    if value is not None and value < minimum:
        raise CliError(f"{option} must be at least {minimum}, got {value}", EXIT_USAGE)
    return value
