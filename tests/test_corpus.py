import pytest

from pipeline.corpus import client_id_for, parse_corpus
from pipeline.errors import InputError


def parse(data: bytes, limit: int = 1000):
    return parse_corpus(data, source="c.txt", max_line_chars=limit)


def test_lines_and_empty_lines():
    corpus = parse(b"one\n\n  \ntwo\r\nthree")
    assert corpus.lines == [(1, "one"), (4, "two"), (5, "three")]
    assert corpus.empty_lines == [2, 3]


def test_utf8_bom_is_accepted():
    assert parse("\ufeffh\u00e9llo".encode("utf-8")).lines == [(1, "h\u00e9llo")]


@pytest.mark.parametrize(
    "data,message",
    [
        (b"", "empty"),
        (b"\n \n\t\n", "empty"),
        ("\u00a0".encode(), "no text: its only line is empty"),  # blank to the reader, not to bytes.strip()
        ("\u00a0\n\u200b\n".encode(), "no text: all 2 lines are empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
        (b"ok\nna\xefve caf\xe9\n", "not UTF-8 text (bad byte 0xef on line 2)"),
        (b"A line of text.\n" * 5000 + b"nul\x00here\n", "binary file (a NUL byte on line 5001)"),  # past 64 KiB
    ],
)
def test_bad_files_are_refused_with_a_reason(data, message):
    with pytest.raises(InputError, match="c.txt: .*" + message.split(" (")[0]) as info:
        parse(data)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_line_over_the_limit_names_the_line():
    with pytest.raises(InputError, match=r"line 2 has 1,048,576 characters; the limit is 1,000"):
        parse(b"fine\n" + b"a" * 1_048_576 + b"\n")


def test_client_ids_are_stable_per_line():
    assert client_id_for(7) == "line-000007"


def test_a_line_ends_only_at_a_newline_so_every_client_id_is_its_line_number():
    separators = ["\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"]
    text = "".join(f"line {n} has a{sep}separator inside\n" for n, sep in enumerate(separators, 1))
    corpus = parse((text + "\r\nlast line\r\n").encode())
    assert [n for n, _ in corpus.lines] == [*range(1, len(separators) + 1), len(separators) + 2]
    assert corpus.empty_lines == [len(separators) + 1]
    assert all(line == f"line {n} has a separator inside" for n, line in corpus.lines[:-1])
    assert corpus.lines[-1] == (len(separators) + 2, "last line")


def test_a_nul_byte_anywhere_in_the_file_is_refused_with_its_line_number():
    with pytest.raises(InputError, match=r"a NUL byte on line 7001"):
        parse(b"plain text line\n" * 7000 + b"late \x00 byte\n")
