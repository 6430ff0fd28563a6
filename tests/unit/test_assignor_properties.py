"""Properties of the server-side assignors over random groups, and over random
sequences of joins, leaves and subscription changes where each target is fed
back as the members' ``owned`` (as the KIP-848 coordinator does)."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.group.assignors import ASSIGNORS, MemberSpec, TopicSpec, UniformAssignor
from headwater.group.assignors.racks import partition_racks, use_rack_awareness
from headwater.group.assignors.spec import Assignment

TOPIC_NAMES = ["a", "b", "c", "d"]
RACKS = ["r1", "r2", "r3"]
UNIFORM = UniformAssignor()


@st.composite
def topic_specs(draw: st.DrawFn) -> dict[str, TopicSpec]:
    names = draw(st.lists(st.sampled_from(TOPIC_NAMES), min_size=1, max_size=4, unique=True))
    with_racks = draw(st.booleans())
    result = {}
    for name in names:
        count = draw(st.integers(0, 12))
        racks = (
            {p: frozenset(draw(st.sets(st.sampled_from(RACKS), max_size=2))) for p in range(count)}
            if with_racks
            else {}
        )
        result[name] = TopicSpec(name, count, racks)
    return result


@st.composite
def groups(
    draw: st.DrawFn, homogeneous: bool | None = None, racks: bool = True
) -> tuple[dict[str, MemberSpec], dict[str, TopicSpec]]:
    topics = draw(topic_specs())
    # Subscriptions may name topics that do not exist; owned may be stale or doubly claimed.
    pool = TOPIC_NAMES
    same = draw(st.booleans()) if homogeneous is None else homogeneous
    shared = frozenset(draw(st.sets(st.sampled_from(pool), min_size=1)))
    members = {}
    for i in range(draw(st.integers(1, 7))):
        member_id = f"m{i}"
        subs = shared if same else frozenset(draw(st.sets(st.sampled_from(pool))))
        owned = {
            t: frozenset(draw(st.sets(st.integers(0, 14), max_size=4)))
            for t in draw(st.sets(st.sampled_from(pool), max_size=2))
        }
        rack = draw(st.sampled_from([None, *RACKS])) if racks else None
        members[member_id] = MemberSpec(member_id, rack, subs, owned)
    return members, topics


def check_valid(
    members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec], result: Assignment
) -> None:
    assert set(result) == set(members)
    seen: set[tuple[str, int]] = set()
    for member_id, parts in result.items():
        for topic, partitions in parts.items():
            assert topic in topics and topic in members[member_id].subscribed_topics
            assert partitions, "no empty topic entries"
            for p in partitions:
                assert 0 <= p < topics[topic].partitions
                assert (topic, p) not in seen, f"{topic}-{p} assigned twice"
                seen.add((topic, p))
    wanted = {
        (t, p)
        for m in members.values()
        for t in m.subscribed_topics
        if t in topics
        for p in range(topics[t].partitions)
    }
    assert seen == wanted


def count(parts: Mapping[str, frozenset[int]]) -> int:
    return sum(len(p) for p in parts.values())


def fed_back(members: Mapping[str, MemberSpec], result: Assignment) -> dict[str, MemberSpec]:
    return {
        m: MemberSpec(m, spec.rack, spec.subscribed_topics, result.get(m, {}), spec.instance_id)
        for m, spec in members.items()
    }


def owned_by(assignment: Assignment, member_id: str) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in assignment.get(member_id, {}).items() for p in ps}


def moved(before: Assignment, after: Assignment) -> set[tuple[str, int]]:
    """Partitions that had an owner before and now have another one."""
    owner = {(t, p): m for m, parts in before.items() for t, ps in parts.items() for p in ps}
    return {
        (t, p)
        for m, parts in after.items()
        for t, ps in parts.items()
        for p in ps
        if (t, p) in owner and owner[(t, p)] != m
    }


@settings(max_examples=60, deadline=None)
@given(groups(), st.sampled_from(sorted(ASSIGNORS)))
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(
    group: tuple[dict[str, MemberSpec], dict[str, TopicSpec]], name: str
) -> None:
    members, topics = group
    result = ASSIGNORS[name].assign(members, topics)
    check_valid(members, topics, result)
    assert ASSIGNORS[name].assign(dict(reversed(list(members.items()))), topics) == result


@settings(max_examples=40, deadline=None)
@given(groups(homogeneous=True))
def test_uniform_homogeneous_counts_differ_by_at_most_one(
    group: tuple[dict[str, MemberSpec], dict[str, TopicSpec]],
) -> None:
    members, topics = group
    counts = [count(parts) for parts in UNIFORM.assign(members, topics).values()]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=40, deadline=None)
@given(groups(), st.sampled_from(sorted(ASSIGNORS)))
def test_a_second_run_on_its_own_result_changes_nothing(
    group: tuple[dict[str, MemberSpec], dict[str, TopicSpec]], name: str
) -> None:
    members, topics = group
    first = ASSIGNORS[name].assign(members, topics)
    assert ASSIGNORS[name].assign(fed_back(members, first), topics) == first


@settings(max_examples=40, deadline=None)
@given(groups(homogeneous=True, racks=False))
def test_a_member_joining_a_balanced_group_moves_only_what_it_gets(
    group: tuple[dict[str, MemberSpec], dict[str, TopicSpec]],
) -> None:
    members, topics = group
    before = UNIFORM.assign(members, topics)
    shared = next(iter(members.values())).subscribed_topics
    grown = fed_back(members, before) | {"new": MemberSpec("new", None, shared, {})}
    after = UNIFORM.assign(grown, topics)
    total = sum(count(parts) for parts in before.values())
    assert count(after["new"]) == total // len(grown)
    assert len(moved(before, after)) == count(after["new"])


@settings(max_examples=40, deadline=None)
@given(groups(homogeneous=True, racks=False), st.data())
def test_a_member_leaving_moves_only_its_own_partitions(
    group: tuple[dict[str, MemberSpec], dict[str, TopicSpec]], data: st.DataObject
) -> None:
    members, topics = group
    before = UNIFORM.assign(members, topics)
    leaver = data.draw(st.sampled_from(sorted(members)))
    rest = {m: s for m, s in fed_back(members, before).items() if m != leaver}
    after = UNIFORM.assign(rest, topics)
    assert moved(before, after) <= owned_by(before, leaver)
    for m in rest:
        for t, ps in before[m].items():
            assert ps <= after[m].get(t, frozenset())


@settings(max_examples=40, deadline=None)
@given(groups(homogeneous=True))
def test_no_swap_between_members_could_gain_rack_locality(
    group: tuple[dict[str, MemberSpec], dict[str, TopicSpec]],
) -> None:
    members, topics = group
    subscribed = sorted(t for t in next(iter(members.values())).subscribed_topics if t in topics)
    result = UNIFORM.assign(fed_back(members, UNIFORM.assign(members, topics)), topics)
    if not use_rack_awareness(members, topics, subscribed):
        return

    def local(m: str, t: str, p: int) -> bool:
        rack = members[m].rack
        return rack is not None and rack in partition_racks(topics[t], p)

    holds_remote = {
        m
        for m, parts in result.items()
        if any(not local(m, t, p) for t, ps in parts.items() for p in ps)
    }
    for m, parts in result.items():
        for t, ps in parts.items():
            for p in ps:
                if not local(m, t, p):
                    # Whoever sits in this partition's rack holds only local partitions.
                    assert not any(local(o, t, p) for o in holds_remote - {m})


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, str, frozenset[str], str | None, int]]:
    """(kind, member id, subscription, rack, partitions for 'grow') steps."""
    kinds = st.sampled_from(["join", "leave", "subscribe", "grow"])
    return [
        (
            draw(kinds),
            f"m{draw(st.integers(0, 5))}",
            frozenset(draw(st.sets(st.sampled_from(TOPIC_NAMES), min_size=1, max_size=3))),
            draw(st.sampled_from([None, *RACKS])),
            draw(st.integers(1, 4)),
        )
        for _ in range(draw(st.integers(1, 12)))
    ]


@settings(max_examples=60, deadline=None)
@given(topic_specs(), steps(), st.sampled_from(sorted(ASSIGNORS)), st.booleans())
def test_joins_leaves_and_subscription_changes_keep_every_invariant(
    topics: dict[str, TopicSpec],
    script: list[tuple[str, str, frozenset[str], str | None, int]],
    name: str,
    same_subscriptions: bool,
) -> None:
    assignor = ASSIGNORS[name]
    members: dict[str, MemberSpec] = {}
    target: Assignment = {}
    shared = frozenset(TOPIC_NAMES[:2])
    for kind, member_id, subs, rack, grow in script:
        subs = shared if same_subscriptions else subs
        if kind == "join" and member_id not in members:
            members[member_id] = MemberSpec(member_id, rack, subs, {})
        elif kind == "leave":
            members.pop(member_id, None)
        elif kind == "subscribe" and member_id in members and not same_subscriptions:
            old = members[member_id]
            members[member_id] = MemberSpec(member_id, old.rack, subs, old.owned)
        elif kind == "grow":
            topic = sorted(topics)[grow % len(topics)]
            spec = topics[topic]
            topics = topics | {
                topic: TopicSpec(topic, spec.partitions + grow, spec.partition_racks)
            }
        target = assignor.assign(members, topics)
        check_valid(members, topics, target)
        if name == "uniform" and same_subscriptions and members:
            counts = [count(parts) for parts in target.values()]
            assert max(counts) - min(counts) <= 1
        members = fed_back(members, target)
