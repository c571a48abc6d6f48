"""C's ``strtol``, as Slurm's commands read a number out of a word (a flag's variable, a Torque
resource, a umask): blanks and a sign first, then the longest run of digits; what follows is left."""

from __future__ import annotations

_BLANKS = " \t\n\v\f\r"  # C's isspace
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def strtol(text: str, base: int = 10) -> tuple[int, str]:
    """The number at the start of ``text`` and the rest after it; ``(0, text)`` when none is there.
    ``base`` 0 reads ``0x`` as hexadecimal and a leading 0 as octal, as C does."""
    s = text.lstrip(_BLANKS)
    sign = -1 if s[:1] == "-" else 1
    body = s[1:] if s[:1] in ("+", "-") else s
    if base in (0, 16) and body[:2].lower() == "0x" and body[2:3].lower() in tuple(_DIGITS[:16]):
        base, body = 16, body[2:]
    elif base == 0:
        base = 8 if body[:1] == "0" else 10
    valid = _DIGITS[:base] + _DIGITS[10:base].upper()
    end = 0
    while end < len(body) and body[end] in valid:
        end += 1
    if end == 0:
        return 0, text
    return sign * int(body[:end], base), body[end:]
