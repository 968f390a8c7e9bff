"""Group names (broker.model.groups.names): the one check of a name, and
interning with id reuse."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import CorruptState, InvalidRequest
from broker.model.groups.names import NO_GROUP, GroupNames, check_group, valid_group

GOOD = ["a", "tenant-42", "x" * 128, "ключ", "🙂" * 128, "with space", "tab\u00a0nbsp", "\u0080"]
BAD = ["", "x" * 129, "🙂" * 129, "a\x00", "line\nbreak", "\x1f", "del\x7f", "\ud800", 7, 1.5,
       True, b"bytes", ["a"], {"a": 1}]


@pytest.mark.parametrize("name", GOOD)
def test_a_name_of_1_to_128_characters_without_control_characters_is_taken(name: str) -> None:
    assert check_group(name, "jobs[0]") == name
    assert valid_group(name)


def test_no_group_is_none() -> None:
    assert check_group(None, "jobs[0]") is None
    assert not valid_group(None)


@pytest.mark.parametrize("raw", BAD)
def test_anything_else_is_refused_naming_where_and_quoting_a_prefix(raw: object) -> None:
    with pytest.raises(InvalidRequest) as err:
        check_group(raw, "jobs[3]")
    assert err.value.code == "invalid_request" and err.value.status == 422
    assert err.value.message.startswith(
        "jobs[3]: group must be a string of 1..128 characters without control characters, got ")
    assert len(err.value.message) < 220  # the value is quoted by a prefix (shown), never whole
    assert not valid_group(raw)
    pickle.loads(pickle.dumps(err.value))


def test_a_long_bad_name_is_quoted_by_its_prefix_only() -> None:
    with pytest.raises(InvalidRequest) as err:
        check_group("secret-ish" * 100, "jobs[0]")
    assert "secret-ish" * 7 not in err.value.message


def test_the_decoder_may_ask_for_its_own_error() -> None:
    with pytest.raises(CorruptState):
        check_group("", "job 12", CorruptState)


def test_gid_0_is_no_group_and_is_never_interned_or_released() -> None:
    names = GroupNames()
    assert names.gid(None) == NO_GROUP == 0
    assert names.name(0) is None and names.find(None) == 0
    names.release(0)
    assert names.gid(None) == 0 and len(names) == 0


def test_names_are_interned_once_and_found_back() -> None:
    names = GroupNames()
    a, b = names.gid("a"), names.gid("b")
    assert (a, b) == (1, 2) and names.gid("a") == a
    assert names.name(a) == "a" and names.name(b) == "b"
    assert names.find("a") == a and names.find("zzz") is None
    assert "a" in names and "zzz" not in names and len(names) == 2


def test_a_released_id_is_reused_and_its_old_name_forgotten() -> None:
    names = GroupNames()
    a, b = names.gid("a"), names.gid("b")
    names.release(a)
    assert names.find("a") is None and len(names) == 1
    with pytest.raises(KeyError):
        names.name(a)
    with pytest.raises(KeyError):
        names.release(a)  # twice: the caller's reference count is wrong
    assert names.gid("c") == a and names.name(a) == "c"
    assert names.gid("a") == 3 and names.name(b) == "b"


@given(st.lists(st.tuples(st.booleans(), st.sampled_from("abcdefgh")), max_size=80))
def test_interning_and_releasing_keep_a_bijection_of_live_names(
        steps: list[tuple[bool, str]]) -> None:
    names, live = GroupNames(), {}
    for release, name in steps:
        if release and name in live:
            names.release(live.pop(name))
        elif not release:
            live[name] = names.gid(name)
    assert len(names) == len(live) and len(set(live.values())) == len(live)
    for name, gid in live.items():
        assert names.name(gid) == name and names.find(name) == gid
    # the table never grows past the most names live at once
    assert max(live.values(), default=0) <= len({n for _, n in steps})


def test_release_all_frees_each_id_skips_0_and_empties_spelt() -> None:
    names = GroupNames()
    a, b, c = (names.gid_spelt(f'"{n}"'.encode(), n) for n in "abc")
    names.release_all([a, NO_GROUP, c])
    assert len(names) == 1 and names.find("b") == b and names.find("a") is None
    assert names.spelt == {None: NO_GROUP}  # (a spelling would find a freed id, reused)
    assert {names.gid("d"), names.gid("e")} == {a, c}
    with pytest.raises(KeyError):
        names.release_all([names.gid("f") + 1])
