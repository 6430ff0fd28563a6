"""The client side of KIP-227: which partitions the next FetchRequest must name.

Sans-I/O, one handler per broker. The consumer says which partitions it
wants and at which offsets (``build``); the handler answers with a full
request or an incremental one that carries only what changed, and reads
back each response (``handle_response``) or failure (``handle_error``) to
decide the next (session id, epoch):

===========================================  ===============================
event                                        next request
===========================================  ===============================
start, or session closed by the broker       (0, 0) full, asks for a session
full response with session id N              (N, 1) incremental
incremental response, same session           (N, epoch + 1), 2^31-1 -> 1
top-level FETCH_SESSION_ID_NOT_FOUND (70)    (0, 0)
any other top-level error, a network error,  (N, 0) full: close N, make a new
or a response that does not match the
request it answers
===========================================  ===============================

A full response must name exactly the requested partitions; an
incremental one may omit partitions but never name one outside the
session. Kafka's ``FetchSessionHandler`` follows the same rules; this is
an independent implementation of them, checked rule by rule in
``tests/unit/test_client_session_handler.py``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Final

from headwater.protocol.fetch_metadata import (
    FINAL_EPOCH,
    FIRST_SESSION_VERSION,
    FIRST_TOPIC_ID_VERSION,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    next_epoch,
)
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchRequestData,
    FetchResponseData,
    PartitionFetch,
    TopicIdPartition,
)

log = logging.getLogger(__name__)

FETCH_SESSION_ID_NOT_FOUND: Final = 70

# Name-keyed, like the consumer's TopicPartition.
_Key = tuple[str, int]


def _state(p: PartitionFetch) -> tuple[int, int, int, int, int, uuid.UUID]:
    """What an incremental request must resend when it changes (Kafka: PartitionData.equals)."""
    return (
        p.fetch_offset,
        p.partition_max_bytes,
        p.log_start_offset,
        p.current_leader_epoch,
        p.last_fetched_epoch,
        p.topic_id,
    )


def _forget(p: PartitionFetch) -> TopicIdPartition:
    return TopicIdPartition(p.topic_id, p.topic, p.partition)


def _resend(
    old: PartitionFetch,
    new: PartitionFetch,
    uses_ids: bool,
    forgotten: list[TopicIdPartition],
) -> bool:
    """Whether an incremental request must carry ``new`` for a partition the session
    holds as ``old``; a re-created topic (new id) also forgets the old id."""
    if new is old or _state(new) == _state(old):
        return False
    if uses_ids and new.topic_id != old.topic_id:
        # The topic was re-created: the old id is a different partition.
        forgotten.append(_forget(old))
    return True


class FetchSessionHandler:
    """Tracks one broker's fetch session for one consumer.

    ``enabled=False`` (``headwater.fetch.session.enable=false``) or a
    Fetch version below 7 makes every request sessionless (0, -1).
    """

    def __init__(self, node_id: int = -1, *, enabled: bool = True) -> None:
        self.node_id = node_id
        self.enabled = enabled
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # The broker's view of the session after the last request we built, in order.
        self._session: dict[_Key, PartitionFetch] = {}
        # Topic ids of the session, to name v13+ response partitions.
        self._names_by_id: dict[uuid.UUID, str] = {}
        self._last_full = True
        self._last_sessionless = False

    # -- state ----------------------------------------------------------------

    @property
    def next_is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    @property
    def session_partitions(self) -> list[_Key]:
        """The partitions the broker holds for us, as of the last request built."""
        return list(self._session)

    @property
    def has_partitions(self) -> bool:
        """Whether the broker holds partitions for us (``session_partitions`` without a copy)."""
        return bool(self._session)

    def _reset(self, session_id: int) -> None:
        """Next request is full: (0, 0) opens a session, (id, 0) replaces ``id``."""
        self.session_id = session_id
        self.epoch = INITIAL_EPOCH

    # -- requests -------------------------------------------------------------

    def build(
        self,
        partitions: Iterable[PartitionFetch],
        *,
        version: int,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 52_428_800,
        isolation_level: int = 0,
        rack_id: str = "",
    ) -> FetchRequestData:
        """The next request for ``partitions`` (in the order a full request should list them).

        The handler keeps the ``PartitionFetch`` objects it is given: pass
        fresh ones each time rather than mutating them afterwards.
        """
        wanted: dict[_Key, PartitionFetch] = {(p.topic, p.partition): p for p in partitions}
        req = FetchRequestData(
            version=version,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            rack_id=rack_id,
        )
        if not self.enabled or version < FIRST_SESSION_VERSION:
            req.session_id, req.session_epoch = INVALID_SESSION_ID, FINAL_EPOCH
            req.partitions = list(wanted.values())
            self._remember(wanted, full=True, sessionless=True)
            return req

        req.session_id, req.session_epoch = self.session_id, self.epoch
        if self.next_is_full:
            req.partitions = list(wanted.values())
            self._remember(wanted, full=True, sessionless=False)
            return req

        session = self._session
        uses_ids = version >= FIRST_TOPIC_ID_VERSION
        to_send: list[PartitionFetch] = []
        forgotten: list[TopicIdPartition] = []
        for key, old in session.items():
            new = wanted.get(key)
            if new is None:
                forgotten.append(_forget(old))
            elif _resend(old, new, uses_ids, forgotten):
                to_send.append(new)
        to_send.extend(p for key, p in wanted.items() if key not in session)
        req.partitions = to_send
        req.forgotten = forgotten
        self._remember(wanted, full=False, sessionless=False)
        return req

    def builds_changes(self, version: int) -> bool:
        """Whether the next request is incremental, so :meth:`build_changes` may make it."""
        return self.enabled and version >= FIRST_SESSION_VERSION and not self.next_is_full

    def build_changes(
        self,
        changes: Mapping[_Key, PartitionFetch | None],
        *,
        version: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
    ) -> FetchRequestData:
        """The next incremental request from the partitions whose wanted entry may have
        changed since the last request built (None: no longer wanted), O(changes).

        ``build`` compares the whole wanted set with the session, O(partitions) per
        round trip: for a follower of 10,000 idle partitions that was most of the
        broker's idle CPU (issue 33 item 2). Partitions not named keep their
        session entry; only those whose fetch state differs are sent. Full
        requests (a new session, after an error) still go through ``build``.
        """
        req = FetchRequestData(
            version=version, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes
        )
        req.session_id, req.session_epoch = self.session_id, self.epoch
        session = self._session
        uses_ids = version >= FIRST_TOPIC_ID_VERSION
        to_send: list[PartitionFetch] = []
        forgotten: list[TopicIdPartition] = []
        for key, new in changes.items():
            old = session.get(key)
            if new is None:
                if old is not None:
                    forgotten.append(_forget(old))
                    del session[key]
                continue
            if old is None or _resend(old, new, uses_ids, forgotten):
                to_send.append(new)
            session[key] = new
            if new.topic_id != ZERO_UUID:
                self._names_by_id[new.topic_id] = new.topic
        req.partitions = to_send
        req.forgotten = forgotten
        self._last_full = False
        self._last_sessionless = False
        return req

    def _remember(
        self, wanted: dict[_Key, PartitionFetch], *, full: bool, sessionless: bool
    ) -> None:
        self._session = wanted
        self._last_full = full
        self._last_sessionless = sessionless
        names: dict[uuid.UUID, str] = {}
        for p in wanted.values():
            if p.topic_id != ZERO_UUID:
                names[p.topic_id] = p.topic
        self._names_by_id = names

    # -- responses ------------------------------------------------------------

    def handle_response(self, response: FetchResponseData) -> bool:
        """Advance the session from the response to the last request built.

        Returns whether the response's partition data may be used. v13+
        responses name topics only by id; their ``topic`` fields are filled
        in here from the session's ids.
        """
        if response.error_code:
            log.info(
                "fetch session %d/%d to node %d failed with error %d",
                self.session_id,
                self.epoch,
                self.node_id,
                response.error_code,
            )
            if self._last_sessionless:
                return False
            if response.error_code == FETCH_SESSION_ID_NOT_FOUND:
                self._reset(INVALID_SESSION_ID)
            else:
                self._reset(self.session_id)
            return False

        problem = self._name_and_check(response)
        if self._last_sessionless:
            if problem:
                log.info("sessionless fetch response from node %d: %s", self.node_id, problem)
            return problem is None
        if problem is not None:
            log.info(
                "fetch session %d/%d to node %d: %s; next fetch is full",
                self.session_id,
                self.epoch,
                self.node_id,
                problem,
            )
            if self._last_full:
                # Close whatever session this response just created, if any.
                self._reset(response.session_id)
            else:
                self._reset(self.session_id)
            return False

        if response.session_id == INVALID_SESSION_ID:
            self._reset(INVALID_SESSION_ID)  # no session, or the broker closed ours
        elif self._last_full:
            self.session_id, self.epoch = response.session_id, next_epoch(INITIAL_EPOCH)
        elif response.session_id != self.session_id:
            log.info(
                "node %d answered session %d with session %d; next fetch is full",
                self.node_id,
                self.session_id,
                response.session_id,
            )
            self._reset(self.session_id)
            return False
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self, error: BaseException | None = None) -> None:
        """The request failed on the network (or was abandoned): next is (id, 0)."""
        if error is not None:
            log.info(
                "fetch session %d/%d to node %d: %s",
                self.session_id,
                self.epoch,
                self.node_id,
                error,
            )
        self._reset(self.session_id)

    def _name_and_check(self, response: FetchResponseData) -> str | None:
        """None if the response fits the request, else what is wrong."""
        session = self._session
        names = self._names_by_id
        seen: set[_Key] = set()
        unknown: list[_Key] = []
        for p in response.partitions:
            if not p.topic and p.topic_id != ZERO_UUID:
                p.topic = names.get(p.topic_id, "")
            key = (p.topic, p.partition)
            if key not in session:
                unknown.append(key)
            elif key in seen:
                return f"partition {key[0]}-{key[1]} appears twice"
            seen.add(key)
        if unknown:
            shown = ", ".join(f"{t or '<unknown id>'}-{i}" for t, i in unknown[:5])
            return f"response names {len(unknown)} partition(s) outside the session: {shown}"
        if self._last_full and len(seen) != len(session):
            missing = [k for k in session if k not in seen]
            shown = ", ".join(f"{t}-{i}" for t, i in missing[:5])
            return f"full response lacks {len(missing)} requested partition(s): {shown}"
        return None
