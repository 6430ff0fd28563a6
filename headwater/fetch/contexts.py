"""How one FetchRequest is served: one class per case of KIP-227's (session id, epoch) table.

==========  ==========  =============================================  =======================
session id  epoch       meaning                                        context
==========  ==========  =============================================  =======================
0           -1          full fetch, no session (every request < v7)    SessionlessFetchContext
0           0           full fetch, create a session if admitted       FullFetchContext
id          0           close id, full fetch, create a new session     FullFetchContext
id          -1          close id, full fetch, no session               SessionlessFetchContext
id          n > 0       incremental fetch on session id at epoch n     IncrementalFetchContext
unknown id  n > 0       error 70 ErrorCode.fetch_session_id_not_found            SessionErrorContext
id          wrong n     error 71 ErrorCode.invalid_fetch_session_epoch           SessionErrorContext
id          n > 0       error 106 ErrorCode.fetch_session_topic_id_error when    SessionErrorContext
                        the request's topic-id mode (v13+) differs
==========  ==========  =============================================  =======================

Beyond Kafka: an incremental request that repeats the previous epoch with
identical content is a client's retry after a lost response (seed 001); with
retransmission on it is answered again, with at least what the lost response
carried, instead of error 71.

Every context is used the same way by the broker::

    ctx = new_fetch_context(cache, request, now_ms, watcher)
    if ctx.error_code: ...                      # answer the error, session id 0
    results = planner(ctx.partitions_to_read())  # same order; KIP-74 applied there
    response = ctx.update_and_generate_response(results, now_ms)

A broker runs the same work as steps, in time slices (``prepare_steps``,
``partitions_to_read_steps``, ``respond_steps``). A log notification may
then fall between a partition's read and its answer: the session's change
clock, taken when the partitions were chosen, keeps such a partition pending
for the next fetch instead of losing the change.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

from headwater.fetch.session import (
    ChangeListener,
    FetchSession,
    PartitionWatcher,
    SessionKey,
    session_key,
)
from headwater.fetch.session_cache import FetchSessionCache
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_metadata import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    next_epoch,
)
from headwater.protocol.fetch_types import (
    FetchRequestData,
    FetchResponseData,
    PartitionData,
    PartitionFetch,
)
from headwater.steps import drain


class FetchContext:
    """The common shape: what to read, and how to turn what was read into a response."""

    error_code = 0
    """Non-zero: answer ``FetchResponseData(error_code=..., session_id=0)`` at once."""

    def __init__(self, request: FetchRequestData) -> None:
        self.request = request
        self.partitions_read = 0
        """How many partitions the last ``partitions_to_read`` handed out."""

    @property
    def session(self) -> FetchSession | None:
        """The session this fetch runs on, if it runs on one already."""
        return None

    @property
    def read_committed(self) -> bool:
        return self.request.replica_id < 0 and self.request.isolation_level == 1

    def partitions_to_read(self) -> list[PartitionFetch]:
        """The partitions the planner must read, in the order it must serve them."""
        return []

    def partitions_to_read_steps(self) -> Generator[None, None, list[PartitionFetch]]:
        """``partitions_to_read`` as steps a broker may run in slices."""
        return self.partitions_to_read()
        yield  # a generator

    def update_and_generate_response(
        self, results: Sequence[PartitionData], now_ms: int
    ) -> FetchResponseData:
        """Fold the planner's results into the session state and build the response."""
        raise NotImplementedError

    def prepare_steps(self, now_ms: int) -> Generator[None, None, None]:
        """Work before the read, as steps a broker may run in slices (none by default)."""
        yield from ()

    def respond_steps(
        self, results: Sequence[PartitionData], now_ms: int
    ) -> Generator[None, None, FetchResponseData]:
        """``update_and_generate_response`` as steps a broker may run in slices."""
        return self.update_and_generate_response(results, now_ms)
        yield  # a generator

    def has_news(self) -> bool:
        """Whether a change that wakes a parked fetch landed since ``partitions_to_read``.

        A long-polling broker re-reads when this turns true. A follower's high
        watermark news (which wakes no parked follower fetch) does not count:
        it rides with the next answer, and a follower fetch that moved the high
        watermark itself would otherwise read its partitions twice. Contexts without
        a session answer False: the broker watches the logs of a full fetch's
        partitions itself.
        """
        return False

    def add_change_listener(self, listener: ChangeListener) -> bool:
        """Wake ``listener`` when the session has news; False if there is no session."""
        session = self.session
        if session is None:
            return False
        session.add_listener(listener)
        return True

    def remove_change_listener(self, listener: ChangeListener) -> None:
        session = self.session
        if session is not None:
            session.remove_listener(listener)

    def completion_error(self) -> int:
        """The error a response must carry if the session moved on while this fetch waited."""
        return self.error_code


class SessionErrorContext(FetchContext):
    """A request the session table refuses (70, 71 or 106): no partitions, session id 0."""

    def __init__(self, request: FetchRequestData, error_code: int) -> None:
        super().__init__(request)
        self.error_code = error_code

    def update_and_generate_response(
        self, results: Sequence[PartitionData], now_ms: int
    ) -> FetchResponseData:
        return FetchResponseData(error_code=self.error_code, session_id=INVALID_SESSION_ID)


class SessionlessFetchContext(FetchContext):
    """A full fetch that neither uses nor creates a session: answer exactly what was asked."""

    def __init__(self, request: FetchRequestData) -> None:
        super().__init__(request)
        self._unique = _UniquePartitions(request)

    def prepare_steps(self, now_ms: int) -> Generator[None, None, None]:
        yield from self._unique.steps()

    def partitions_to_read(self) -> list[PartitionFetch]:
        partitions = self._unique.get()
        self.partitions_read = len(partitions)
        return list(partitions)

    def update_and_generate_response(
        self, results: Sequence[PartitionData], now_ms: int
    ) -> FetchResponseData:
        return FetchResponseData(session_id=INVALID_SESSION_ID, partitions=list(results))


class FullFetchContext(FetchContext):
    """A full fetch that asks for a session: created when the response is built.

    Like Kafka, the session is created from the read results (so it knows
    what the client was told) and only if the cache admits it; the response
    carries its id, or 0 when declined.
    """

    def __init__(
        self,
        cache: FetchSessionCache,
        request: FetchRequestData,
        watcher: PartitionWatcher,
        client: str = "",
        owner: str = "",
    ) -> None:
        super().__init__(request)
        self._cache = cache
        self._unique = _UniquePartitions(request)
        self._watcher = watcher
        self._client = client
        self._owner = owner
        self._created: FetchSession | None = None
        self._answered = False
        self._prepared = False
        self._read_since = 0
        self._woken_since = 0

    @property
    def session(self) -> FetchSession | None:
        return self._created

    def has_news(self) -> bool:
        created = self._created
        return created is not None and (created.closed or created.wake_clock > self._woken_since)

    @property
    def _partitions(self) -> list[PartitionFetch]:
        return self._unique.get()

    def partitions_to_read(self) -> list[PartitionFetch]:
        if self._created is not None and not self._answered:
            # A re-read after a long-poll wake-up includes what woke it.
            self._read_since = self._created.change_clock
            self._woken_since = self._created.wake_clock
        self.partitions_read = len(self._partitions)
        return list(self._partitions)

    def prepare_steps(self, now_ms: int) -> Generator[None, None, None]:
        """Admit the session and add (and watch) its partitions before they are read.

        The broker runs this in slices (a 100,000-partition session takes
        longer than any client may be kept waiting). Watching before reading
        means a change that lands after a partition's read reaches the
        session and keeps that partition pending; see ``respond_steps``.
        """
        if self._answered or self._prepared:
            return
        yield from self._unique.steps()
        self._prepared = True
        self._created = self._admit(now_ms, _nothing)
        if self._created is not None:
            yield from self._created.add_steps(self._partitions)
            self._read_since = self._created.change_clock
            self._woken_since = self._created.wake_clock

    def respond_steps(
        self, results: Sequence[PartitionData], now_ms: int
    ) -> Generator[None, None, FetchResponseData]:
        if not self._prepared:
            return self.update_and_generate_response(results, now_ms)
        self._answered = True
        session = self._created
        if session is not None:
            yield from session.absorb_steps(
                results, read_since=self._read_since, read_committed=self.read_committed
            )
        if session is None or session.closed:  # declined, or evicted meanwhile
            return FetchResponseData(session_id=INVALID_SESSION_ID, partitions=list(results))
        return FetchResponseData(session_id=session.id, partitions=list(results))

    def update_and_generate_response(
        self, results: Sequence[PartitionData], now_ms: int
    ) -> FetchResponseData:
        if self._prepared and not self._answered:
            return drain(self.respond_steps(results, now_ms))
        if not self._answered:
            self._answered = True
            self._created = self._admit(now_ms, lambda s: self._populate(s, results))
        created = self._created
        session_id = INVALID_SESSION_ID if created is None or created.closed else created.id
        return FetchResponseData(session_id=session_id, partitions=list(results))

    def _admit(self, now_ms: int, populate: Callable[[FetchSession], None]) -> FetchSession | None:
        return self._cache.maybe_create_session(
            now_ms,
            privileged=self.request.replica_id >= 0,
            size=len(self._partitions),
            uses_topic_ids=self.request.uses_topic_ids,
            watcher=self._watcher,
            populate=populate,
            client=self._client,
            owner=self._owner,
        )

    def _populate(self, session: FetchSession, results: Sequence[PartitionData]) -> None:
        session.populate(self._partitions, results, read_committed=self.read_committed)


def _nothing(_session: FetchSession) -> None:
    """The session is filled in steps afterwards (``FullFetchContext.prepare_steps``)."""


class IncrementalFetchContext(FetchContext):
    """An incremental fetch: read only the session's pending partitions.

    Kafka reads every partition of the session here; this context hands the
    planner only the partitions that may have news, in session order.
    A retransmitted request (``retransmission``) also reads and re-sends
    the partitions the lost response carried, whatever their state.
    """

    def __init__(
        self,
        cache: FetchSessionCache,
        request: FetchRequestData,
        session: FetchSession,
        *,
        retransmission: bool = False,
        update_pending: bool = False,
        fingerprint_pending: bool = False,
    ) -> None:
        super().__init__(request)
        self._cache = cache
        self._session = session
        self._update_pending = update_pending
        """The request's partitions and forgotten list are not in the session yet."""
        self._fingerprint_pending = fingerprint_pending
        """The session must remember this request's fingerprint (retransmission)."""
        self._prepared = False
        self.is_retransmission = retransmission
        self._resend: frozenset[SessionKey] = (
            frozenset(session.last_response_keys) if retransmission else frozenset()
        )
        self.expected_epoch = session.epoch
        """The session epoch this fetch leaves behind; a newer request moves it on."""
        self._read_since = session.change_clock
        self._woken_since = session.wake_clock

    @property
    def session(self) -> FetchSession:
        return self._session

    def prepare_steps(self, now_ms: int) -> Generator[None, None, None]:
        """Apply the request to the session and remember its fingerprint (it may
        name 100,000 partitions)."""
        if self._prepared:
            return
        self._prepared = True
        session = self._session
        if self._update_pending:
            yield from session.update_steps(self.request.partitions, self.request.forgotten)
            self._cache.touch(session, now_ms)  # re-indexed under its new size
        if self._fingerprint_pending:
            fingerprint = yield from request_fingerprint_steps(self.request)
            if session.last_request_epoch == self.request.session_epoch:
                session.last_request_fingerprint = fingerprint

    def _ensure_updated(self) -> None:
        """For callers that skip :meth:`prepare_steps` (a throttled answer, pure tests)."""
        if not self._prepared:
            drain(self.prepare_steps(self._session.last_used_ms))

    def partitions_to_read(self) -> list[PartitionFetch]:
        return drain(self.partitions_to_read_steps())

    def partitions_to_read_steps(self) -> Generator[None, None, list[PartitionFetch]]:
        self._ensure_updated()
        session = self._session
        self._read_since = session.change_clock
        self._woken_since = session.wake_clock
        chosen = yield from session.pending_requests_steps(self._resend)
        self.partitions_read = len(chosen)
        session.partitions_read_total += len(chosen)
        self._cache.incremental_partitions_read_total += len(chosen)
        return chosen

    def has_news(self) -> bool:
        return self._session.closed or self._session.wake_clock > self._woken_since

    def completion_error(self) -> int:
        """70 if the session was closed or evicted meanwhile, 71 if a newer request overtook."""
        if self._session.closed:
            return ErrorCode.fetch_session_id_not_found
        if self._session.epoch != self.expected_epoch:
            return ErrorCode.invalid_fetch_session_epoch
        return 0

    def update_and_generate_response(
        self, results: Sequence[PartitionData], now_ms: int
    ) -> FetchResponseData:
        return drain(self.respond_steps(results, now_ms))

    def respond_steps(
        self, results: Sequence[PartitionData], now_ms: int
    ) -> Generator[None, None, FetchResponseData]:
        self._ensure_updated()
        error = self.completion_error()
        if error:
            return FetchResponseData(error_code=error, session_id=INVALID_SESSION_ID)
        session = self._session
        answer = yield from session.absorb_results_steps(
            results,
            read_since=self._read_since,
            read_committed=self.read_committed,
            always_send=self._resend,
        )
        error = self.completion_error()  # evicted or overtaken between two steps
        if error:
            return FetchResponseData(error_code=error, session_id=INVALID_SESSION_ID)
        by_id = session.uses_topic_ids
        session.last_response_keys = [session_key(data, by_id) for data in answer]
        return FetchResponseData(session_id=session.id, partitions=answer)


def new_fetch_context(
    cache: FetchSessionCache,
    request: FetchRequestData,
    now_ms: int,
    watcher: PartitionWatcher,
    *,
    client: str = "",
    owner: str = "",
) -> FetchContext:
    """Pick the context for ``request`` (the table in this module's docstring).

    ``owner`` is who asks (the broker passes the principal). A session
    belongs to its creator: someone else presenting its id, guessed or
    stolen, is told FETCH_SESSION_ID_NOT_FOUND and cannot close it, and the
    session is left exactly as it was (epoch, partitions, use time).
    """
    session_id, epoch = request.session_id, request.session_epoch
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            existing = cache.get(session_id)
            if existing is not None and existing.owner == owner:
                cache.remove(session_id)
        cache.full_fetches_total += 1
        if epoch == FINAL_EPOCH:
            return SessionlessFetchContext(request)
        return FullFetchContext(cache, request, watcher, client, owner)

    session = cache.get(session_id)
    if session is None or session.owner != owner:
        cache.session_errors_total += 1
        if session is not None:
            cache.foreign_session_attempts_total += 1
        return SessionErrorContext(request, ErrorCode.fetch_session_id_not_found)
    if epoch != session.epoch:
        if cache.retransmit_enabled and _is_retransmission(session, request):
            cache.incremental_fetches_total += 1
            cache.touch(session, now_ms)
            return IncrementalFetchContext(cache, request, session, retransmission=True)
        cache.session_errors_total += 1
        return SessionErrorContext(request, ErrorCode.invalid_fetch_session_epoch)
    if session.uses_topic_ids != request.uses_topic_ids:
        cache.session_errors_total += 1
        return SessionErrorContext(request, ErrorCode.fetch_session_topic_id_error)

    # Only a request that names nothing and forgets at least as many partitions
    # as the session holds may empty it; any other update can wait for the
    # context's prepare steps, which a broker runs in slices.
    if not request.partitions and len(request.forgotten) >= session.size:
        session.update(request.partitions, request.forgotten)
        if session.size == 0:
            # Everything was forgotten: Kafka drops the session and serves sessionless.
            cache.remove(session_id)
            cache.full_fetches_total += 1
            return SessionlessFetchContext(request)
        update_pending = False
    else:
        update_pending = True
    cache.incremental_fetches_total += 1
    cache.touch(session, now_ms)
    if cache.retransmit_enabled:
        session.last_request_epoch = epoch
        # Computed in the prepare steps; until then no retry can match.
        session.last_request_fingerprint = None
    session.epoch = next_epoch(session.epoch)
    return IncrementalFetchContext(
        cache,
        request,
        session,
        update_pending=update_pending,
        fingerprint_pending=cache.retransmit_enabled,
    )


def unique_partitions(
    partitions: Sequence[PartitionFetch], uses_topic_ids: bool
) -> list[PartitionFetch]:
    """The request's partitions without repeats, each at its first position.

    librdkafka can list a topic twice in one request; a full response must
    name each partition once. A repeat's values win (as in Kafka's map).
    """
    return drain(unique_partitions_steps(partitions, uses_topic_ids))


UNIQUE_STEP = 2048


def unique_partitions_steps(
    partitions: Sequence[PartitionFetch], uses_topic_ids: bool
) -> Generator[None, None, list[PartitionFetch]]:
    """:func:`unique_partitions`, yielding every ``UNIQUE_STEP`` partitions."""
    unique: dict[SessionKey, PartitionFetch] = {}
    for start in range(0, len(partitions), UNIQUE_STEP):
        for fetch in partitions[start : start + UNIQUE_STEP]:
            unique[session_key(fetch, uses_topic_ids)] = fetch
        yield None
    return list(unique.values())


class _UniquePartitions:
    """A full fetch's partitions without repeats: found in steps by ``prepare_steps``
    (the broker slices them), or at once when first needed."""

    __slots__ = ("_request", "_unique")

    def __init__(self, request: FetchRequestData) -> None:
        self._request = request
        self._unique: list[PartitionFetch] | None = None

    def steps(self) -> Generator[None, None, None]:
        if self._unique is None:
            request = self._request
            self._unique = yield from unique_partitions_steps(
                request.partitions, request.uses_topic_ids
            )

    def get(self) -> list[PartitionFetch]:
        if self._unique is None:
            drain(self.steps())
        assert self._unique is not None
        return self._unique


def request_fingerprint(request: FetchRequestData) -> int:
    """A digest of everything a retried request repeats (not its correlation id).

    A hash, not a copy, so a 100,000-partition session does not keep its
    last request twice; a collision needs a repeated epoch, which real
    clients never send.
    """
    return drain(request_fingerprint_steps(request))


def request_fingerprint_steps(request: FetchRequestData) -> Generator[None, None, int]:
    """:func:`request_fingerprint`, hashing ``UNIQUE_STEP`` partitions per step
    (one hash over 100,000 partitions held the event loop ~40 ms)."""
    digest = hash(
        (
            request.version,
            request.replica_id,
            request.max_wait_ms,
            request.min_bytes,
            request.max_bytes,
            request.isolation_level,
            request.rack_id,
            len(request.partitions),
            tuple(request.forgotten),
        )
    )
    partitions = request.partitions
    for start in range(0, len(partitions), UNIQUE_STEP):
        chunk = tuple(
            (
                p.topic_id,
                p.topic,
                p.partition,
                p.fetch_offset,
                p.log_start_offset,
                p.partition_max_bytes,
                p.current_leader_epoch,
                p.last_fetched_epoch,
            )
            for p in partitions[start : start + UNIQUE_STEP]
        )
        digest = hash((digest, chunk))
        yield None
    return digest


def _is_retransmission(session: FetchSession, request: FetchRequestData) -> bool:
    return (
        session.last_request_epoch == request.session_epoch
        and session.last_request_fingerprint == request_fingerprint(request)
    )
