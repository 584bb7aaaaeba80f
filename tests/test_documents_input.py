"""Documents read into chapters and paragraphs, and every kind of bad document refused clearly."""

import io
import subprocess
import sys
import zipfile

import pytest

from pipeline.documents import kind_for, read_document
from pipeline.documents.epub import MAX_ENTRIES
from pipeline.documents.plan import Place, client_id_for, document_jobs, place_of
from pipeline.errors import InputError
from tests.cli_helpers import REPO
from tests.documents import CHAPTERS, epub_book, markdown_book, xhtml

LIMIT = 50 * 1024 * 1024


def read(data, kind, source="book"):
    return read_document(data if isinstance(data, bytes) else data.encode(), kind, source=source, max_bytes=LIMIT)


def test_a_lone_top_level_heading_is_the_title_and_the_next_level_makes_the_chapters():
    doc = read(markdown_book(), "markdown")
    assert doc.title == "A Short Voyage"
    assert [c.title for c in doc.chapters] == [t for t, _ in CHAPTERS]
    assert doc.chapters[0].spoken() == ["The Harbour", *CHAPTERS[0][1]]


def test_markdown_markup_is_read_as_text_and_code_is_not_read():
    doc = read(
        "# One\n\nSome *very* **bold** [link](http://x.example) and `code`.\n\n```\nprint(1)\n```\n\n"
        "- first item\n- second item\n\n> quoted words\n\n![a picture](p.png)\n\n# Two\n\nMore.\n",
        "markdown",
    )
    assert [c.title for c in doc.chapters] == ["One", "Two"] and doc.title is None
    assert doc.chapters[0].paragraphs == ["Some very bold link and code.", "first item", "second item", "quoted words"]


def test_underlined_headings_tables_and_rules_read_as_written():
    doc = read(
        "My Book\n=======\n\nFirst Part\n----------\n\n| a | b |\n|---|---|\n| one | two |\n\n"
        "Second Part\n---\n\nBye now.\n\n---\n\nAfter a rule.\n",
        "markdown",
    )
    assert doc.title == "My Book" and [c.title for c in doc.chapters] == ["First Part", "Second Part"]
    assert doc.chapters[0].paragraphs == ["a, b", "one, two"]
    assert doc.chapters[1].paragraphs == ["Bye now.", "After a rule."]


def test_a_chapter_with_nothing_to_say_is_skipped_and_named():
    doc = read("# Book\n\n## Cover\n\n![cover](c.png)\n\n## Real\n\nWords here.\n", "markdown")
    assert [c.title for c in doc.chapters] == ["Real"] and doc.skipped == ["Cover"]
    with pytest.raises(InputError, match="no speakable text"):
        read("# Book\n\n## Cover\n\n![cover](c.png)\n", "markdown")


def test_plain_text_takes_chapter_headings_and_joins_wrapped_lines():
    doc = read("The Tale\n\nCHAPTER I.\n\nIt was\na night.\n\nChapter 2: The Road\n\nWalking on.\n", "text")
    assert doc.title == "The Tale"
    assert [c.title for c in doc.chapters] == ["CHAPTER I.", "Chapter 2: The Road"]
    assert doc.chapters[0].paragraphs == ["It was a night."]
    # A sentence that starts with a heading word is not a heading.
    assert len(read("Part of me wanted to stay, but I left.\n\nThen I came back.\n", "text").chapters) == 1


def test_a_long_paragraph_splits_at_sentences_into_jobs_that_keep_their_place():
    doc = read("# A\n\n" + " ".join(f"Sentence number {i} is here." for i in range(40)) + "\n", "markdown")
    jobs = document_jobs(doc, max_chars=200)
    assert [p for p, _ in jobs][:2] == [Place(1, 1, 1), Place(1, 2, 1)]
    assert len(jobs) > 3 and all(len(t) <= 200 and t.endswith(".") for _, t in jobs[1:])
    assert place_of(client_id_for(Place(3, 12, 2))) == Place(3, 12, 2) and place_of("line-000001") is None


@pytest.mark.parametrize("nav", [True, False], ids=["epub3-nav", "epub2-ncx"])
def test_an_epub_reads_in_spine_order_with_titles_from_its_table_of_contents(nav):
    doc = read(epub_book(nav=nav), "epub")
    assert (doc.title, doc.author) == ("A Short Voyage", "Ann Writer")
    assert [c.title for c in doc.chapters] == [t for t, _ in CHAPTERS]
    assert doc.chapters[1].paragraphs == ["The Storm", *CHAPTERS[1][1]]


def test_an_epub_file_its_table_of_contents_does_not_name_continues_the_chapter_before():
    doc = read(epub_book(files={"ch3b.xhtml": xhtml("", ["The tide came in."], heading=False)}), "epub")
    assert len(doc.chapters) == 3 and doc.chapters[2].paragraphs[-1] == "The tide came in."


def test_epub_html_entities_are_read_and_footnotes_and_scripts_are_not():
    page = xhtml(
        "Odd",
        [
            "Caf&eacute;&nbsp;au&nbsp;lait &mdash; hot.",
            'Text<span epub:type="pagebreak" title="4"/> goes on.<script>var x;</script>',
        ],
    )
    page = page.replace("</body>", '<aside epub:type="footnote">A note.</aside></body>')
    doc = read(epub_book(files={"ch2.xhtml": page}), "epub")
    assert doc.chapters[1].paragraphs == ["Odd", "Café au lait - hot.", "Text goes on."]


def zipped(entries: dict[str, bytes | str], compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, body in entries.items():
            z.writestr(name, body)
    return buf.getvalue()


ENCRYPTION = (
    '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
    'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:EncryptionMethod '
    'Algorithm="{}"/><enc:CipherData><enc:CipherReference URI="OEBPS/ch1.xhtml"/></enc:CipherData>'
    "</enc:EncryptedData></encryption>"
)


BAD_EPUBS = {
    "drm": (
        lambda: epub_book(
            extra={"META-INF/encryption.xml": ENCRYPTION.format("http://www.w3.org/2001/04/xmlenc#aes128-cbc")}
        ),
        "encrypted (DRM: META-INF/encryption.xml)",
    ),
    "adobe_rights": (lambda: epub_book(extra={"META-INF/rights.xml": "<rights/>"}), "DRM (META-INF/rights.xml)"),
    "truncated": (lambda: epub_book()[:-200], "malformed or truncated zip"),
    "not_a_zip": (lambda: b"PK\x03\x04 this is not really a zip file at all", "malformed or truncated zip"),
    "ratio_bomb": (lambda: epub_book(extra={"OEBPS/fill.bin": b"\0" * (8 << 20)}), "inflates 1,0"),
    "many_entries": (
        lambda: zipped({f"e{i}": b"" for i in range(MAX_ENTRIES + 1)}, zipfile.ZIP_STORED),
        "10,001 entries",
    ),
    "bad_xhtml": (
        lambda: epub_book(files={"ch2.xhtml": xhtml("T", ["a <b>bold</p> line"])}),
        "OEBPS/ch2.xhtml is not well-formed XML at line 2, column",
    ),
    "entities_declared": (
        lambda: epub_book(
            files={"ch1.xhtml": '<?xml version="1.0"?><!DOCTYPE h [<!ENTITY a "aaaa">]><html><body>&a;</body></html>'}
        ),
        "declares XML entities",
    ),
    "no_container": (lambda: zipped({"mimetype": "application/epub+zip"}), "no META-INF/container.xml"),
}


@pytest.mark.parametrize("case", BAD_EPUBS)
def test_a_bad_epub_is_refused_with_its_reason(case):
    build, reason = BAD_EPUBS[case]
    with pytest.raises(InputError, match="^book: ") as e:
        read(build(), "epub")
    assert reason in str(e.value)


def test_obfuscated_fonts_are_not_drm():
    doc = read(
        epub_book(extra={"META-INF/encryption.xml": ENCRYPTION.format("http://www.idpf.org/2008/embedding")}), "epub"
    )
    assert len(doc.chapters) == 3


def test_the_kind_comes_from_the_extension_and_a_document_past_the_limit_is_refused():
    assert (kind_for("a/Book.MD"), kind_for("b.epub"), kind_for("c.txt")) == ("markdown", "epub", None)
    with pytest.raises(InputError, match="the limit for a document is 10"):
        read_document(b"# x\n\nwords\n" * 10, "markdown", source="book", max_bytes=10)


def test_a_20_mb_document_is_parsed_in_bounded_memory_and_time(tmp_path):
    """In a process of its own that holds only the file's bytes, so the growth of its peak resident
    memory is the parse's alone (VmHWM: ru_maxrss would carry pytest's own peak across exec)."""
    chapter = "## Chapter {}\n\n" + ("A sentence of ordinary prose, with a clause or two. " * 12 + "\n\n") * 60
    path = tmp_path / "big.md"
    with open(path, "w") as f:
        f.write("# Big\n\n")
        for i in range(540):
            f.write(chapter.format(i))
    script = """
import re, sys, time
from pipeline.documents import read_document
peak = lambda: int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
data = open(sys.argv[1], "rb").read()
before = peak()
started = time.process_time()
doc = read_document(data, "markdown", source="big.md", max_bytes=64 << 20)
print(len(data), len(doc.chapters), time.process_time() - started,
      (peak() - before) * 1024)
"""
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    size, chapters, cpu_s, grown = map(float, done.stdout.split())
    assert size > 20e6 and chapters == 540
    assert cpu_s < 30, cpu_s
    assert grown < 8 * size, f"{grown / size:.1f}x the document's size"
    print(f"{size / 1e6:.1f} MB parsed in {cpu_s:.2f} s of CPU, peak memory grew {grown / size:.1f}x its size")
