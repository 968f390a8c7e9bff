"""PartsReader: an object's parts read as one seekable file, without joining them."""

from __future__ import annotations

import io

import pytest

from broker.storage.cloud import PartsReader

PARTS = [b"abc", b"", b"defgh", b"i", b"", b"jklmnopq"]
JOINED = b"".join(PARTS)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 100])
def test_parts_reader_reads_the_joined_bytes_in_any_block_size(size: int) -> None:
    reader = PartsReader(PARTS)
    assert len(reader) == len(JOINED)
    got = b"".join(iter(lambda: reader.read(size), b""))
    assert got == JOINED
    assert reader.tell() == len(JOINED)
    assert reader.read(5) == b""


def test_parts_reader_seeks_back_and_reads_again() -> None:
    reader = PartsReader(PARTS)
    assert reader.read(4) == b"abcd"
    assert reader.seek(0) == 0
    assert reader.read() == JOINED
    assert reader.seek(-3, io.SEEK_END) == len(JOINED) - 3
    assert reader.read(10) == b"opq"
    reader.seek(2)
    assert reader.seek(5, io.SEEK_CUR) == 7
    assert reader.read(3) == JOINED[7:10]
    with pytest.raises(ValueError, match="negative"):
        reader.seek(-1)


def test_parts_reader_hands_a_whole_part_without_copying_it() -> None:
    big = b"x" * 1000
    reader = PartsReader([b"ab", big])
    reader.seek(2)
    assert reader.read(1000) is big


def test_parts_reader_readinto_and_single_bytes() -> None:
    reader = PartsReader(b"hello")
    buf = bytearray(3)
    assert reader.readinto(buf) == 3 and bytes(buf) == b"hel"
    assert reader.readinto(buf) == 2 and bytes(buf[:2]) == b"lo"
    assert reader.readinto(buf) == 0
    assert len(PartsReader([])) == 0 and PartsReader([]).read() == b""
