"""Controller election through the ephemeral `/controller` and the persistent `/controller_epoch`.

Kafka's way (`KafkaZkClient.registerControllerAndIncrementControllerEpoch`): a candidate reads
`/controller_epoch` and its znode version, then in one multi-op creates the ephemeral
`/controller` `{"brokerid", "timestamp"}` and sets `/controller_epoch` to epoch + 1 *on the
version it read*. Either both happen or neither, so every win bumps the epoch exactly once, and
two candidates can never win with the same epoch. Losers watch `/controller` and try again when
it goes. The epoch's new znode version is the controller's `ControllerFence`: writes fenced with
it fail once another controller has won (`ControllerMovedError`).

At most one candidate believes it is the controller at any moment:

- `is_controller` turns False on the connection thread the instant the client sees its
  connection drop (SUSPENDED), before anything else, as well as on expiry and `stop()`. A
  disconnected client cannot know whether its session still lives, and ZooKeeper clients notice a
  dead connection (after 2/3 of the session timeout at most) before the server expires the
  session (after all of it), so the old controller stops believing before `/controller` can go.
- It turns True only after the win was confirmed, and only if the session that won is still the
  current, connected one.
- After a reconnect within the session timeout, `/controller` may still be ours (ephemeralOwner
  is our session): nobody else can have won meanwhile, so we take the role back with the same
  epoch and `on_elected` is called again. After an expiry a new session competes afresh.

A controller that cannot do its job resigns (`resign`, Kafka's `triggerControllerMove`): the
candidate stops believing, then deletes `/controller` in one multi-op that checks
`/controller_epoch` is still at its fence's version, so it can only delete its own, and only if
no other controller has won since. Every other candidate then competes at once; this one only
after a hold-off, so that another broker takes over if there is one.

Callbacks (`on_elected(epoch)`, `on_resigned()`) run on the store's event thread, in order, and
must be quick. An `on_resigned` always follows the `on_elected` it ends.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from kazoo.protocol.states import EventType, WatchedEvent

from rafka.coordination import layout
from rafka.coordination.errors import (
    CoordinationError,
    StaleVersionError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZooKeeperUnavailableError,
)
from rafka.coordination.models import ControllerFence, ControllerInfo, Versioned
from rafka.coordination.store import ClusterStore, SessionEvent, encode
from rafka.coordination.validation import validate_broker_id

log = logging.getLogger(__name__)

_MAX_ATTEMPTS = 20


def read_controller(store: ClusterStore) -> Versioned[ControllerInfo] | None:
    """Who the controller is now, or None."""
    found = store.read_optional(layout.CONTROLLER)
    if found is None or found.value is None:
        return None
    return Versioned(ControllerInfo.from_json(found.value), found.version)


def read_controller_epoch(store: ClusterStore) -> Versioned[int] | None:
    """The last controller epoch (0 before any election) with its znode version."""
    found = store.read_optional(layout.CONTROLLER_EPOCH)
    return None if found is None else Versioned(int(found.value or 0), found.version)


class ControllerElection:
    """One broker's candidacy for controller.

    >>> election = ControllerElection(store, broker_id=1, on_elected=print).start()
    >>> election.is_controller, election.epoch
    """

    def __init__(
        self,
        store: ClusterStore,
        broker_id: int,
        *,
        on_elected: Callable[[int], object] | None = None,
        on_resigned: Callable[[], object] | None = None,
    ) -> None:
        self.store = store
        self.broker_id = validate_broker_id(broker_id)
        self._on_elected = on_elected
        self._on_resigned = on_resigned
        self._lock = threading.Lock()
        self._active = False
        self._believes = False
        self._fence: ControllerFence | None = None
        self._won_session: int | None = None  # the session in which we hold /controller
        # Resigning: the fence of the term given up, until `/controller` is found not ours; and
        # until when this candidate lets the others compete alone.
        self._resigning: ControllerFence | None = None
        self._hold_off_until = 0.0
        self._hold_off_timer: threading.Timer | None = None

    # --- public ---------------------------------------------------------------------------------

    @property
    def is_controller(self) -> bool:
        """True only while this candidate won, in its current, connected session."""
        return self._believes

    @property
    def epoch(self) -> int | None:
        """The controller epoch while we are controller, else None."""
        fence = self._fence
        return fence.epoch if self._believes and fence else None

    @property
    def fence(self) -> ControllerFence | None:
        """What to fence controller writes with while we are controller, else None."""
        return self._fence if self._believes else None

    def start(self) -> ControllerElection:
        """Compete now and after every change of `/controller` or of the session."""
        with self._lock:
            if self._active:
                return self
            self._active = True
        self.store.add_session_listener(self._on_session)
        self.store.run_in_worker(self._resync)
        return self

    def resign(self, fence: ControllerFence, hold_off_s: float = 0.0) -> None:
        """Give up the role won with `fence`: a controller that cannot do its job.

        Stops believing at once (`on_resigned` follows), then, on the worker thread, deletes
        `/controller` if it is still ours, fenced by the controller epoch. This candidate
        competes again after `hold_off_s`, unless another has won by then. Nothing happens
        unless `fence` is the term held now: an older controller's late word, or one that
        lost its connection meanwhile (the election takes the role back on reconnect, with a
        fresh controller), gives up nothing.
        """
        with self._lock:
            if not self._active or not self._believes or self._fence != fence:
                return
            self._resigning = fence
            self._hold_off_until = time.monotonic() + hold_off_s
        log.warning("broker %d resigns as controller (epoch %d)", self.broker_id, fence.epoch)
        self._resign()
        self.store.run_in_worker(self._resync)

    def stop(self) -> None:
        """Stop competing; resign (deleting `/controller`) if we are controller."""
        with self._lock:
            self._active = False
            session, self._won_session = self._won_session, None
            timer, self._hold_off_timer = self._hold_off_timer, None
        if timer is not None:
            timer.cancel()
        self._resign()
        self.store.remove_session_listener(self._on_session)
        if session is not None and self.store.connected:
            self.store.delete_if_owned(layout.CONTROLLER, session)

    # --- machinery ------------------------------------------------------------------------------

    def _on_session(self, event: SessionEvent) -> None:
        # Kazoo's connection thread: stop believing first, think later.
        if event in (SessionEvent.SUSPENDED, SessionEvent.EXPIRED, SessionEvent.CLOSED):
            self._resign()
            if event is not SessionEvent.SUSPENDED:
                with self._lock:
                    self._won_session = None
        elif self._active:
            self.store.run_in_worker(self._resync)

    def _on_controller_event(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE and self._active:
            self.store.run_in_worker(self._resync)

    def _resign(self) -> None:
        with self._lock:
            was_controller, self._believes = self._believes, False
            if was_controller:
                # Queued under the lock, so it cannot overtake the on_elected it ends.
                log.warning("broker %d is no longer the controller", self.broker_id)
                if self._on_resigned is not None:
                    self.store.run_callback(self._on_resigned)

    def _believe(self, session: int | None, fence: ControllerFence) -> None:
        with self._lock:
            if (
                not self._active
                or self._resigning is not None  # a term given up is not taken back
                or session is None
                or session != self.store.session_id
                or not self.store.connected
            ):
                return  # the session that won is gone or disconnected: it must not believe
            self._won_session = session
            self._fence = fence
            if self._believes:
                return
            self._believes = True
            log.info("broker %d is the controller, epoch %d", self.broker_id, fence.epoch)
            if self._on_elected is not None:
                self.store.run_callback(self._on_elected, fence.epoch)

    def _resync(self) -> None:
        """Worker thread: find out who holds `/controller`, and compete if nobody does."""
        if not self._active or not self.store.connected:
            return
        try:
            self._compete()
        except ZooKeeperUnavailableError:
            pass  # a session event brings us back
        except CoordinationError:
            log.exception("controller election of broker %d failed", self.broker_id)
        else:
            return
        if self._resigning is not None:
            self._compete_later(1.0)  # /controller may still be ours: try again to give it up

    def _compete(self) -> None:
        for _ in range(_MAX_ATTEMPTS):
            if not self._active:
                return
            stat = self.store.stat(layout.CONTROLLER, self._on_controller_event)
            # The session of now: a request may have waited across an expiry into a new one.
            session = self.store.session_id
            if stat is not None and stat.ephemeralOwner == session:
                if self._resigning is None:
                    self._reassume(session)
                    return
                self._give_up(self._resigning, stat.version)
                continue  # look again: gone now, or moved on
            self._resign()  # someone else is controller (we may have been deleted), or nobody
            self._resigning = None
            if stat is not None:
                return
            wait_s = self._hold_off_until - time.monotonic()
            if wait_s > 0:
                self._compete_later(wait_s)  # the others first; the watch is set meanwhile
                return
            if self._try_win(session):
                return
        log.warning("broker %d: controller election did not settle; retrying", self.broker_id)
        self.store.run_in_worker(self._resync)

    def _give_up(self, fence: ControllerFence, version: int) -> None:
        """Delete our `/controller`, only if `/controller_epoch` is still at our fence's version
        (Kafka's `deleteController(expectedControllerEpochZkVersion)`)."""
        transaction = self.store.transaction()
        transaction.check(layout.CONTROLLER_EPOCH, fence.epoch_zk_version)
        transaction.delete(layout.CONTROLLER, version)
        try:
            self.store.commit(transaction)
            log.warning("broker %d deleted /controller (epoch %d): another broker may take "
                        "over", self.broker_id, fence.epoch)
        except (StaleVersionError, ZNodeMissingError):
            pass  # another controller won, or /controller went: nothing of ours is left
        self._resigning = None

    def _compete_later(self, wait_s: float) -> None:
        with self._lock:
            if not self._active or (self._hold_off_timer is not None
                                    and self._hold_off_timer.is_alive()):
                return
            timer = threading.Timer(wait_s, self.store.run_in_worker, (self._resync,))
            timer.daemon = True
            self._hold_off_timer = timer
        timer.start()

    def _try_win(self, session: int | None) -> bool:
        """One attempt at the multi-op; True when settled (won, or somebody else holds it)."""
        current = read_controller_epoch(self.store)
        if current is None:
            with contextlib.suppress(ZNodeExistsError):
                self.store.create(layout.CONTROLLER_EPOCH, 0)
            return False
        epoch = current.value + 1
        transaction = self.store.transaction()
        transaction.create(
            layout.CONTROLLER,
            encode(ControllerInfo(self.broker_id).to_json()),
            acl=self.store.acl,
            ephemeral=True,
        )
        transaction.set_data(layout.CONTROLLER_EPOCH, encode(epoch), current.version)
        try:
            results = self.store.commit(transaction)
        except ZNodeExistsError:
            return False  # lost the race: the next loop sets the watch and settles
        except StaleVersionError:
            return False  # the epoch moved: read it again
        epoch_stat = results[1]
        self._believe(session, ControllerFence(epoch, int(epoch_stat.version)))
        return True

    def _reassume(self, session: int | None) -> None:
        """`/controller` is ours (a reconnect, or a win whose answer was lost): take it back."""
        with self._lock:
            fence = self._fence if self._won_session == session else None
        if fence is None:
            # Nobody else can have bumped the epoch while /controller was ours.
            current = read_controller_epoch(self.store)
            if current is None:
                return
            fence = ControllerFence(current.value, current.version)
        self._believe(session, fence)
