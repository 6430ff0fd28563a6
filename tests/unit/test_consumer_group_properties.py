"""Properties of KIP-848 reconciliation over random joins, leaves, subscription and
topic changes (hypothesis), with the real server-side assignors:

* no partition is ever owned by two members, neither in the coordinator's view
  (assigned or pending revocation) nor in what the clients hold;
* once the changes stop and members keep heartbeating, every subscribed
  partition is assigned and the group is stable.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.group.consumer_group import ConsumerGroupState
from tests.unit.consumer_group_harness import Client, Harness, owned_twice

TOPICS = ("t0", "t1", "t2")
CLIENTS = 4

operation = st.one_of(
    st.tuples(st.just("join"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("leave"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("beat"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("beat"), st.integers(0, CLIENTS - 1)),
    st.tuples(
        st.just("subscribe"),
        st.integers(0, CLIENTS - 1),
        st.lists(st.sampled_from(TOPICS), min_size=1, max_size=3, unique=True),
    ),
    st.tuples(st.just("grow"), st.sampled_from(TOPICS), st.integers(1, 6)),
)


def check_ownership(h: Harness, clients: list[Client], active: set[int]) -> None:
    group = h.cg.group("g")
    if group is None:
        return
    held = [dict(m.assigned) for m in group.members.values()]
    held += [dict(m.pending_revocation) for m in group.members.values()]
    server = [
        {t: m.assigned.get(t, frozenset()) | m.pending_revocation.get(t, frozenset()) for t in
         set(m.assigned) | set(m.pending_revocation)}
        for m in group.members.values()
    ]  # fmt: skip
    assert not owned_twice(server), "a partition is held by two members (coordinator)"
    assert not owned_twice([c.owned for i, c in enumerate(clients) if i in active]), (
        "two clients own one partition"
    )
    for i in active:
        member = group.members.get(clients[i].member_id)
        if member is None:
            continue
        for topic_id, parts in clients[i].owned.items():
            allowed = member.assigned.get(topic_id, frozenset()) | member.pending_revocation.get(
                topic_id, frozenset()
            )
            assert parts <= allowed, "a client holds what the coordinator does not count"
    del held


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    assignor=st.sampled_from(["uniform", "range"]),
    ops=st.lists(operation, min_size=1, max_size=40),
)
def test_no_partition_is_owned_twice_and_all_are_eventually_assigned(
    assignor: str, ops: list[tuple[object, ...]]
) -> None:
    h = Harness()
    for topic in TOPICS:
        h.topic(topic, 2)
    clients = [h.client(f"c{i}", "t0", assignor=assignor) for i in range(CLIENTS)]
    active: set[int] = set()
    for op in ops:
        kind = op[0]
        if kind == "join":
            i = int(op[1])  # type: ignore[call-overload]
            clients[i].join()
            active.add(i)
        elif kind == "leave":
            i = int(op[1])  # type: ignore[call-overload]
            if i in active:
                clients[i].leave()
                active.discard(i)
        elif kind == "beat":
            i = int(op[1])  # type: ignore[call-overload]
            if i in active:
                clients[i].beat()
        elif kind == "subscribe":
            i = int(op[1])  # type: ignore[call-overload]
            if i in active:
                clients[i].subscribe(*op[2])  # type: ignore[misc]
        else:
            topic, partitions = str(op[1]), int(op[2])  # type: ignore[call-overload]
            current = h.topics.get(topic)
            if current is None or partitions > current.num_partitions:
                h.topic(topic, partitions)
        for i in list(active):  # a fenced client rejoins, as a real one does
            if clients[i].epoch == 0 and clients[i].last is not None and clients[i].last.error:
                clients[i].join()
        check_ownership(h, clients, active)

    for _ in range(8):
        for i in sorted(active):
            clients[i].beat()
            check_ownership(h, clients, active)
    group = h.cg.group("g")
    if not active:
        return
    assert group is not None
    assert group.state is ConsumerGroupState.STABLE
    wanted = {
        (h.topics.topics[t].topic_id, p)
        for i in active
        for t in clients[i].topics
        for p in range(h.topics.topics[t].num_partitions)
    }
    assigned = {(t, p) for i in active for t, parts in clients[i].owned.items() for p in parts}
    assert assigned == wanted
