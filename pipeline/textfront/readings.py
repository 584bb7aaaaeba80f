"""Spoken forms of patterns that voices read badly on their own: money, web addresses, e-mail.

espeak (Piper) reads "$1,250.50" as "one thousand two hundred fifty point five zero" with no
currency, and a URL letter by letter from "h t t p s colon slash slash"; a language-model voice
guesses. Rewritten here, every engine gets the same words; numbers stay digits, which every
engine reads.
"""

from __future__ import annotations

import re

# symbol -> (one, many, hundredth one, hundredths many)
CURRENCIES = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", "sen", "sen"),
}
_MONEY = re.compile(
    r"(?<![\w$€£¥])([$€£¥])\s?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
    r"(?:\s+(thousand|million|billion|trillion)\b)?"
)
_URL = re.compile(r"\b(?:https?://|www\.)[^\s<>\"']+", re.IGNORECASE)
_EMAIL = re.compile(r"\b([\w.+-]+)@([\w-]+(?:\.[\w-]+)+)\b")
_TRAILING = ".,;:!?)]}'\""


def expand(text: str) -> tuple[str, int]:
    """The text with money, URLs and e-mail addresses in words, and how many were rewritten."""
    count = 0

    def counted(fn):
        def sub(m: re.Match) -> str:
            nonlocal count
            count += 1
            return fn(m)

        return sub

    text = _URL.sub(counted(_url), text)
    text = _EMAIL.sub(counted(_email), text)
    text = _MONEY.sub(counted(_money), text)
    return text, count


def _money(m: re.Match) -> str:
    symbol, whole, fraction, scale = m.groups()
    one, many, sub_one, sub_many = CURRENCIES[symbol]
    if scale:  # $1.5 million -> 1.5 million dollars
        number = f"{whole}.{fraction}" if fraction else whole
        return f"{number} {scale} {many}"
    if fraction and len(fraction) != 2:  # $0.5: not cents; read as a number
        return f"{whole}.{fraction} {many}"
    units = f"{whole} {one if whole == '1' else many}"
    cents = int(fraction) if fraction else 0
    if not cents:
        return units
    return f"{units} and {cents} {sub_one if cents == 1 else sub_many}"


def _url(m: re.Match) -> str:
    url = m.group(0)
    tail = ""
    while url and url[-1] in _TRAILING:  # the sentence's punctuation, not the URL's
        url, tail = url[:-1], url[-1] + tail
    url = re.sub(r"^(?:https?://)?(?:www\.)?", "", url, flags=re.IGNORECASE)
    url = re.split(r"[?#]", url, maxsplit=1)[0].rstrip("/")  # a query is never read out
    parts = [p for p in url.split("/") if p]
    return " slash ".join(_dotted(p) for p in parts) + tail


def _email(m: re.Match) -> str:
    return f"{_dotted(m.group(1))} at {_dotted(m.group(2))}"


def _dotted(name: str) -> str:
    return " dot ".join(p for p in name.replace("_", " underscore ").split(".") if p)
