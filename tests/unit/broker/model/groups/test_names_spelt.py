"""GroupNames.spelt (broker.model.groups.names): a group name as a job's line
spells it maps to the name's gid, the one :meth:`GroupNames.gid` gives; a
release empties it, so a spelling never finds an id that a new name took;
it stays bounded."""

from __future__ import annotations

import orjson

from broker.model.groups.names import NO_GROUP, GroupNames


def test_a_spelling_maps_to_the_names_gid() -> None:
    names = GroupNames()
    a = names.gid_spelt(orjson.dumps("a"), "a")
    assert a == names.gid("a") != NO_GROUP
    assert names.spelt == {None: NO_GROUP, b'"a"': a}


def test_a_release_forgets_the_spellings_before_the_id_is_reused() -> None:
    names = GroupNames()
    a = names.gid_spelt(b'"a"', "a")
    names.release(a)
    b = names.gid("b")
    assert b == a  # (the freed id, reused)
    assert b'"a"' not in names.spelt
    assert names.spelt[None] == NO_GROUP
    assert names.gid_spelt(b'"a"', "a") != b


def test_the_spellings_stay_bounded() -> None:
    names = GroupNames()
    for i in range(20_000):
        names.gid_spelt(b'"g%d"' % i, f"g{i}")
    assert len(names.spelt) <= 16_384
    assert names.spelt[None] == NO_GROUP
    assert names.spelt[b'"g19999"'] == names.gid("g19999")
