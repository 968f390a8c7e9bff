"""The connection admission rule (broker.http.admission.Book), pure: examples and
hypothesis over random sequences of connects, requests, answers and closes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.http.admission import SILENT_S, Book
from broker.limits import BUSY_FRACTION


def test_idle_connections_of_one_address_make_room_for_another() -> None:
    book: Book[str] = Book(max_total=4, max_per_address=4)
    for n in range(4):
        assert book.admit(f"idle{n}", "10.0.0.2", now=n).admitted
    verdict = book.admit("worker", "10.0.0.1", now=10)
    assert verdict.admitted and verdict.shed == ("idle0",)  # the oldest silent one
    assert book.count("10.0.0.2") == 3 and book.state("idle0") is None


def test_the_busiest_address_is_shed_first_not_the_newcomer() -> None:
    book: Book[str] = Book(max_total=4, max_per_address=4)
    book.admit("a", "10.0.0.1", now=0)  # a worker that just connected (unheard too)
    for n in range(3):
        book.admit(f"idle{n}", "10.0.0.2", now=1 + n)
    assert book.admit("b", "10.0.0.3", now=10).shed == ("idle0",)
    assert book.state("a") == "unheard"


def test_an_address_at_its_share_sheds_its_own_connections_first() -> None:
    book: Book[str] = Book(max_total=100, max_per_address=2)
    book.admit("x1", "10.0.0.2", now=0)
    book.admit("x2", "10.0.0.2", now=1)
    book.heard("x1")
    book.answered("x1", now=2)  # x1: idle since 2; x2: unheard (silent) since 1
    assert book.admit("x3", "10.0.0.2", now=3).shed == ("x2",)  # silent before idle
    # x3 is unheard but not yet silent (a client about to speak): idle x1 goes first
    assert book.admit("x4", "10.0.0.2", now=3 + SILENT_S / 2).shed == ("x1",)
    book.heard("x3")
    book.heard("x4")  # both busy: nothing of its own to shed
    verdict = book.admit("x5", "10.0.0.2", now=5)
    assert (verdict.admitted, verdict.full) == (False, "address")
    assert book.admit("y", "10.0.0.9", now=6).admitted  # another address is not held up


def test_a_burst_of_new_connections_does_not_shed_itself_while_idle_ones_exist() -> None:
    book: Book[str] = Book(max_total=3, max_per_address=3)
    book.admit("pooled", "10.0.0.1", now=0)
    book.heard("pooled")
    book.answered("pooled", now=1)
    book.admit("new1", "10.0.0.2", now=5)
    book.admit("new2", "10.0.0.2", now=5)
    assert book.admit("new3", "10.0.0.2", now=5).shed == ("pooled",)
    # with nothing idle left, the oldest unheard goes even before it is silent
    assert book.admit("new4", "10.0.0.2", now=5).shed == ("new1",)


def test_busy_connections_are_never_shed_and_the_newcomer_is_refused() -> None:
    book: Book[str] = Book(max_total=3, max_per_address=3)
    for n in range(3):
        book.admit(f"poll{n}", "10.0.0.1", now=n)
        book.heard(f"poll{n}")  # a long-poll claim in flight
    verdict = book.admit("new", "10.0.0.2", now=9)
    assert (verdict.admitted, verdict.shed, verdict.full) == (False, (), "total")
    assert all(book.state(f"poll{n}") == "busy" for n in range(3))


def test_a_trusted_proxy_is_not_capped_per_address() -> None:
    book: Book[str] = Book(max_total=10, max_per_address=1)
    for n in range(5):
        verdict = book.admit(f"p{n}", "10.0.0.5", now=n, capped=False)
        assert verdict.admitted and verdict.shed == ()
        book.heard(f"p{n}")
    assert book.count("10.0.0.5") == 5


def test_near_the_limit_a_new_connection_is_told_to_hurry() -> None:
    book: Book[str] = Book(max_total=8, max_per_address=8)
    hurried = [book.admit(f"c{n}", f"10.0.0.{n}", now=n).hurry for n in range(8)]
    first = int(BUSY_FRACTION * 8)  # the connection that makes it 6 of 8
    assert hurried == [n + 1 >= first for n in range(8)]


def test_gone_is_idempotent_and_forgets_everything() -> None:
    book: Book[str] = Book(max_total=2, max_per_address=2)
    book.admit("a", "h", now=0)
    book.gone("a")
    book.gone("a")
    assert len(book) == 0 and book.count("h") == 0 and book.unheard("h") == 0
    with pytest.raises(ValueError):
        Book(0, 1)


# -- properties ------------------------------------------------------------------

ADDRESSES = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "proxy"]  # "proxy": not capped


@dataclass
class Model:
    """What the test knows of each open connection: its address and state."""

    address: dict[int, str] = field(default_factory=dict)
    state: dict[int, str] = field(default_factory=dict)

    def of(self, address: str, *states: str) -> list[int]:
        return [c for c, a in self.address.items() if a == address and self.state[c] in states]


ops = st.lists(st.tuples(st.sampled_from(["connect", "connect", "hear", "answer", "close"]),
                         st.integers(0, 3), st.integers(0, 40)), max_size=120)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(1, 8), st.integers(1, 8))
def test_the_rule_holds_for_any_sequence(steps: list[tuple[str, int, int]], max_total: int,
                                         max_per_address: int) -> None:
    book: Book[int] = Book(max_total, max_per_address)
    model = Model()
    next_id = 0
    for now, (op, a, pick) in enumerate(steps):
        open_ids = sorted(model.address)
        if op == "connect":
            address, capped = ADDRESSES[a], ADDRESSES[a] != "proxy"
            before = dict(model.state)
            verdict = book.admit(next_id, address, float(now), capped=capped)
            for victim in verdict.shed:
                # only a connection with no request in flight is ever shed
                assert before[victim] in ("unheard", "idle")
                del model.address[victim], model.state[victim]
            if verdict.admitted:
                model.address[next_id], model.state[next_id] = address, "unheard"
            elif verdict.full == "address":
                # refused for its address's share: that address has nothing to shed
                assert capped and not model.of(address, "unheard", "idle")
                assert len(model.of(address, "busy")) >= max_per_address
            else:
                # refused for the total: no connection anywhere could be shed
                assert not [c for c, s in model.state.items() if s != "busy"]
                assert len(model.address) >= max_total
            next_id += 1
        elif open_ids:
            conn = open_ids[pick % len(open_ids)]
            if op == "hear":
                book.heard(conn)
                model.state[conn] = "busy"
            elif op == "answer" and model.state[conn] == "busy":
                book.answered(conn, float(now))
                model.state[conn] = "idle"
            elif op == "close":
                book.gone(conn)
                del model.address[conn], model.state[conn]
        # the book agrees with the model, and the limits hold
        assert len(book) == len(model.address) <= max_total
        for conn, state in model.state.items():
            assert book.state(conn) == state
        for address in ADDRESSES[:3]:
            assert book.count(address) <= max_per_address


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 50), st.integers(1, 30))
def test_any_number_of_silent_connections_never_keep_a_worker_out(max_total: int,
                                                                  silent: int) -> None:
    """However many never-spoken connections one address opens (up to the whole
    limit), a worker from another address is admitted, and its own connection is
    not the one shed."""
    book: Book[str] = Book(max_total, max(1, max_total // 2))
    for n in range(silent):
        book.admit(f"s{n}", "attacker", now=n)
    verdict = book.admit("worker", "worker-host", now=1000)
    assert verdict.admitted and book.state("worker") == "unheard"
    assert all(v.startswith("s") for v in verdict.shed)
