"""hivebatch.strtol against the C library's own strtol."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest

from hivebatch.strtol import strtol

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
_LIBC.strtol.restype = ctypes.c_long
_LIBC.strtol.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]


def c_strtol(text: str, base: int) -> tuple[int, str]:
    raw = text.encode()
    buffer = ctypes.create_string_buffer(raw)
    end = ctypes.c_char_p()
    value = _LIBC.strtol(buffer, ctypes.byref(end), base)
    used = ctypes.cast(end, ctypes.c_void_p).value - ctypes.addressof(buffer)  # type: ignore[operator]
    return value, raw[used:].decode()


@pytest.mark.parametrize(
    "text",
    ["", " ", "7", " 7", "\t-12x", "+3", "-", "+", "0", "00", "007", "08", "0x", "0x1f", "0X1Fg", "-0x10",
     "1e3", "yes", "2x", " +0 ", "0777", "1000", "x1"],
)  # fmt: skip
@pytest.mark.parametrize("base", [0, 10, 16])
def test_strtol_reads_as_the_c_library_does(text: str, base: int) -> None:
    assert strtol(text, base) == c_strtol(text, base)
