"""Numbers, dates and telephone numbers as English words, for SSML's ``say-as``.

Plain digits in running text are left to the engine (espeak reads them well); these are for text a
document marks up, so that every engine says the same words.
"""

from __future__ import annotations

import re

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL_WORDS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
MONTHS = ("January February March April May June July August September October November December").split()
_NUMBER = re.compile(r"^([+-]?)(\d[\d,]*)(?:\.(\d+))?$")
_ORDINAL_SUFFIX = re.compile(r"^(\d[\d,]*)(?:st|nd|rd|th)?\.?$", re.IGNORECASE)


def cardinal(n: int) -> str:
    if n < 0:
        return f"minus {cardinal(-n)}"
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {cardinal(rest)}" if rest else "")
    for size, name in _SCALES:
        if n >= size:
            high, rest = divmod(n, size)
            return f"{cardinal(high)} {name}" + (f" {cardinal(rest)}" if rest else "")
    raise AssertionError("unreachable")


def ordinal(n: int) -> str:
    words = cardinal(n)
    head, sep, last = words.rpartition(" ")
    stem_sep, hyphen, unit = last.rpartition("-")
    if unit in _ORDINAL_WORDS:
        unit = _ORDINAL_WORDS[unit]
    elif unit.endswith("y"):
        unit = unit[:-1] + "ieth"
    else:
        unit += "th"
    return f"{head}{sep}{stem_sep}{hyphen}{unit}"


def cardinal_text(text: str) -> str | None:
    """'1,234.50' -> 'one thousand two hundred thirty-four point five zero'; None if not a number."""
    m = _NUMBER.match(text.strip())
    if not m:
        return None
    sign, whole, fraction = m.groups()
    words = cardinal(int(whole.replace(",", "")))
    if fraction:
        words += " point " + " ".join(_ONES[int(d)] for d in fraction)
    return f"minus {words}" if sign == "-" else words


def ordinal_text(text: str) -> str | None:
    m = _ORDINAL_SUFFIX.match(text.strip())
    return ordinal(int(m.group(1).replace(",", ""))) if m else None


def year(n: int) -> str:
    """1999 -> nineteen ninety-nine, 2005 -> two thousand five, 1900 -> nineteen hundred."""
    if n < 1000 or n >= 10000 or 2000 <= n < 2010:
        return cardinal(n)
    high, low = divmod(n, 100)
    if low == 0:
        return f"{cardinal(high)} hundred"
    return f"{cardinal(high)} {'oh ' + _ONES[low] if low < 10 else cardinal(low)}"


def date_text(text: str, fmt: str | None) -> str | None:
    """A date's digits in the order ``fmt`` names (SSML: ymd, mdy, dmy, md, dm, ym, my, y, ...;
    default: ymd when the first field has four digits, else mdy) -> 'March fifth, twenty
    twenty-four'. None when the fields do not make a date."""
    fields = re.split(r"[-/.\s]+", text.strip())
    if not all(f.isdigit() for f in fields):
        return None
    order = (fmt or ("ymd" if len(fields[0]) == 4 else "mdy"))[: len(fields)]
    if len(order) != len(fields) or set(order) - set("ymd"):
        return None
    parts = dict(zip(order, (int(f) for f in fields)))
    if not 1 <= parts.get("m", 1) <= 12 or not 1 <= parts.get("d", 1) <= 31:
        return None
    words = []
    if "m" in parts:
        words.append(MONTHS[parts["m"] - 1])
    if "d" in parts:
        words.append(ordinal(parts["d"]))
    spoken = " ".join(words)
    if "y" in parts:
        spoken = f"{spoken}, {year(parts['y'])}" if spoken else year(parts["y"])
    return spoken


def telephone_text(text: str) -> str | None:
    """Digit by digit, a comma between groups: '+1 (555) 010-2345' -> 'plus one, five five five,
    zero one zero, two three four five'."""
    groups = re.findall(r"\d+", text)
    if not groups:
        return None
    spoken = ", ".join(" ".join(_ONES[int(d)] for d in g) for g in groups)
    return f"plus {spoken}" if text.strip().startswith("+") else spoken
