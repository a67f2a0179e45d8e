"""The binary pieces of Kafka's coordinator records (the keys and values of
`__consumer_offsets` and `__transaction_state`), as Kafka's generated message classes write
them: big-endian integers, strings as an int16 length and UTF-8 bytes, arrays as an int32
count; in flexible versions, compact strings and arrays (an unsigned varint of length + 1) and
tagged fields. Pure: the codecs of the two topics are built from these.
"""

from __future__ import annotations

import struct

from rafka.common.errors import RafkaError


class RecordFormatError(RafkaError, ValueError):
    """Bytes that are not the record they were read as."""


class RecordWriter:
    """Appends Kafka's types to a byte string."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int8(self, value: int) -> RecordWriter:
        self._parts.append(struct.pack(">b", value))
        return self

    def int16(self, value: int) -> RecordWriter:
        self._parts.append(struct.pack(">h", value))
        return self

    def int32(self, value: int) -> RecordWriter:
        self._parts.append(struct.pack(">i", value))
        return self

    def int64(self, value: int) -> RecordWriter:
        self._parts.append(struct.pack(">q", value))
        return self

    def string(self, value: str) -> RecordWriter:
        data = value.encode()
        if len(data) > 0x7FFF:
            raise RecordFormatError(f"a string of {len(data)} bytes is longer than Kafka's "
                                    "32,767")
        return self.int16(len(data)).raw(data)

    def raw(self, data: bytes) -> RecordWriter:
        self._parts.append(data)
        return self

    def bytes(self) -> bytes:
        return b"".join(self._parts)


class RecordReader:
    """Reads Kafka's types from `data`, front to back; `RecordFormatError` past its end."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._at = 0

    def _take(self, size: int) -> memoryview:
        if size < 0 or self._at + size > len(self._data):
            raise RecordFormatError(f"the record ends at byte {len(self._data)}, before "
                                    f"{self._at + size}")
        piece = self._data[self._at:self._at + size]
        self._at += size
        return piece

    def int8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def unsigned_varint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("an unsigned varint longer than five bytes")

    def string(self) -> str:
        return self._text(self.int16())

    def compact_string(self) -> str:
        return self._text(self.unsigned_varint() - 1)

    def _text(self, length: int) -> str:
        if length < 0:
            raise RecordFormatError("a null string where Kafka's schema has none")
        try:
            return bytes(self._take(length)).decode()
        except UnicodeDecodeError as error:
            raise RecordFormatError(f"a string that is not UTF-8: {error}") from None

    def skip_tagged_fields(self) -> None:
        for _ in range(self.unsigned_varint()):
            self.unsigned_varint()  # the tag
            self._take(self.unsigned_varint())

    def end(self) -> None:
        """Nothing may follow what was read."""
        if self._at != len(self._data):
            raise RecordFormatError(f"{len(self._data) - self._at} bytes follow the record")
