"""What a controller does when a step fails: retry it, resign, or just stop. Pure: no I/O.

A step is the controller's initialization (rebuilding everything from ZooKeeper when it is
elected) or the handling of one event. A step that fails mid-way leaves the controller's
picture of the cluster in doubt (the handlers change it as they go), so the controller must not
simply carry on with the next event: that was a controller holding `/controller` while doing
nothing, or doing it from a wrong picture. What it does instead depends on the failure:

- `ControllerMovedError` (a fenced write found another controller's epoch), or the controller is
  no longer elected (its connection dropped, its session expired): **stop**. Another controller
  has won, or this one is taken back by the election on reconnect, with a fresh controller; either
  way there is nothing of ours to give up.
- `ZooKeeperUnavailableError` (connection loss, a request timed out) while still elected:
  **retry** after a backoff, doubling from `first_backoff_s` to `max_backoff_s`. The retry
  rebuilds everything from ZooKeeper, as a newly elected controller would, which also does what
  a failed event would have done, so no event is lost. Past `max_attempts` failures in a row, or
  once failing for `give_up_after_s` (the broker's ZooKeeper session timeout: ZooKeeper has not
  answered this broker for as long as it takes to declare a broker dead), **resign**.
- Anything else (ZooKeeper refusing a request, a value that cannot be read, a bug): **resign**
  at once. Retrying would fail the same way; a controller elected afresh, perhaps on another
  broker, rebuilds from ZooKeeper.

Resigning is Kafka's `triggerControllerMove`: the controller stops, and `/controller` is deleted
if it is still ours (`ControllerElection.resign`, fenced by the controller epoch), so that every
broker competes again. The broker that resigned competes only after `hold_off_s`, so that
another broker takes over if there is one: the fault may well be this broker's.
"""

from __future__ import annotations

from dataclasses import dataclass

from rafka.coordination.errors import ControllerMovedError, ZooKeeperUnavailableError


@dataclass(frozen=True)
class Retry:
    """Rebuild from ZooKeeper after `delay_s`."""

    delay_s: float
    reason: str


@dataclass(frozen=True)
class Resign:
    """Give up `/controller`; compete again only after `hold_off_s`."""

    hold_off_s: float
    reason: str


@dataclass(frozen=True)
class Stop:
    """Stop without touching `/controller`: it is not ours any more, or not for now."""

    reason: str


Recovery = Retry | Resign | Stop


@dataclass(frozen=True)
class RecoveryPolicy:
    """The bounds of a controller's recovery from failed steps (see the module's docstring)."""

    give_up_after_s: float
    max_attempts: int = 8
    first_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    hold_off_s: float | None = None  # None: `give_up_after_s`

    @classmethod
    def for_session(cls, session_timeout_ms: int) -> RecoveryPolicy:
        """The policy of a broker whose ZooKeeper session times out after `session_timeout_ms`."""
        return cls(give_up_after_s=session_timeout_ms / 1000)

    def backoff_s(self, attempts: int) -> float:
        """How long to wait after the `attempts`-th failure in a row (1 for the first)."""
        return min(self.max_backoff_s, self.first_backoff_s * 2.0 ** max(0, attempts - 1))

    def decide(
        self, error: BaseException, *, attempts: int, elapsed_s: float, elected: bool
    ) -> Recovery:
        """What to do after the `attempts`-th failure in a row (1 for the first), the first of
        them `elapsed_s` ago, `error` the last; `elected`: whether the election still says this
        broker is controller with the fence the controller holds."""
        cause = f"{type(error).__name__}: {error}"
        if isinstance(error, ControllerMovedError):
            return Stop(f"another controller was elected ({cause})")
        if not elected:
            return Stop(f"no longer elected ({cause})")
        hold_off_s = self.give_up_after_s if self.hold_off_s is None else self.hold_off_s
        if not isinstance(error, ZooKeeperUnavailableError):
            return Resign(hold_off_s, f"unexpected failure ({cause})")
        delay_s = self.backoff_s(attempts)
        if attempts >= self.max_attempts or elapsed_s + delay_s > self.give_up_after_s:
            return Resign(hold_off_s, f"ZooKeeper still failing after {attempts} attempts in "
                                      f"{elapsed_s:.1f} s ({cause})")
        return Retry(delay_s, f"ZooKeeper failed, attempt {attempts} ({cause})")
