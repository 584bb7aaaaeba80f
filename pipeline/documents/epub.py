"""EPUB in: a zip of XHTML files, read with the standard library's zipfile and XML parser.

The chapters are the spine's documents in order, titled from the navigation document (EPUB 3) or
the NCX table of contents (EPUB 2), else from their first heading. A spine document the table of
contents does not name continues the chapter before it (a chapter split over two files).

What is refused, before anything is rendered: a file that is not a zip or is truncated, a zip
past the limits below (a zip bomb), DRM or encryption (anything in META-INF/encryption.xml but
font obfuscation, or an Adobe rights.xml), and XHTML that is not well-formed (its file, line and
column are named). HTML's named entities (&nbsp;, &mdash; ...), which EPUB 2 books use without
declaring, are read as their characters; a document that declares entities of its own is refused,
since the parser would expand them.
"""

from __future__ import annotations

import html.entities
import io
import posixpath
import re
import zipfile
from collections.abc import Iterable
from urllib.parse import unquote
from xml.etree import ElementTree as ET

from pipeline.documents.model import MAX_TITLE_CHARS, Chapter, Document, finish, paragraph
from pipeline.errors import InputError

# Zip bomb limits. A novel is a few hundred entries and a few MB; an illustrated textbook a few
# thousand entries and a few hundred MB of images, of which only the XHTML is ever inflated here.
MAX_ENTRIES = 10_000
MAX_TOTAL_BYTES = 1 << 30  # declared uncompressed size of all entries together
MAX_ENTRY_BYTES = 64 << 20  # one XHTML, OPF or NCX file, inflated
MAX_RATIO = 200  # inflated / compressed, for an entry over RATIO_FROM bytes
RATIO_FROM = 1 << 20  # text compresses 3-10x; a bomb 1000x and more

# Encryption that only obfuscates embedded fonts (IDPF and Adobe's): no text is hidden by it.
_FONT_OBFUSCATION = {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
_NS = {
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
    "ncx": "http://www.daisy.org/z3986/2005/ncx/",
    "enc": "http://www.w3.org/2001/04/xmlenc#",
    "epub": "http://www.idpf.org/2007/ops",
}
_XHTML = "{http://www.w3.org/1999/xhtml}"
_BLOCKS = {
    "p",
    "div",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "li",
    "blockquote",
    "dd",
    "dt",
    "td",
    "th",
    "pre",
    "section",
    "article",
    "header",
    "footer",
    "figcaption",
    "tr",
    "br",
    "hr",
    "table",
    "ul",
    "ol",
    "dl",
    "body",
    "aside",
    "nav",
}
_HEADINGS = {"h1", "h2", "h3"}
_SILENT = {"head", "script", "style", "rt", "rp", "svg", "math", "img", "audio", "video", "object"}
_SILENT_TYPES = {"footnote", "endnote", "rearnote", "pagebreak", "noteref"}
_ENTITY = re.compile(rb"&([A-Za-z][A-Za-z0-9]{1,31});")
_XML_ENTITIES = {b"amp", b"lt", b"gt", b"quot", b"apos"}


def read_epub(data: bytes, *, source: str) -> Document:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError) as e:
        raise InputError(f"{source}: not a readable EPUB: a malformed or truncated zip ({e})") from e
    with archive:
        book = _Book(archive, source)
        book.check_limits()
        book.refuse_encryption()
        opf_path = book.rootfile()
        opf = book.xml(opf_path)
        return book.document(opf, opf_path)


class _Book:
    def __init__(self, archive: zipfile.ZipFile, source: str) -> None:
        self.archive = archive
        self.source = source
        self.names = {info.filename for info in archive.infolist()}

    def check_limits(self) -> None:
        infos = self.archive.infolist()
        if len(infos) > MAX_ENTRIES:
            raise InputError(f"{self.source}: the EPUB has {len(infos):,} entries; the limit is {MAX_ENTRIES:,}")
        total = sum(info.file_size for info in infos)
        if total > MAX_TOTAL_BYTES:
            raise InputError(f"{self.source}: the EPUB inflates to {total:,} bytes; the limit is {MAX_TOTAL_BYTES:,}")
        for info in infos:
            if info.file_size > RATIO_FROM and info.file_size > MAX_RATIO * max(info.compress_size, 1):
                raise InputError(
                    f"{self.source}: {info.filename} inflates {info.file_size // max(info.compress_size, 1):,}"
                    f" times over; the limit is {MAX_RATIO} (a zip bomb?)"
                )

    def read(self, name: str) -> bytes:
        """One entry, inflated no further than its limit whatever its header says."""
        try:
            info = self.archive.getinfo(name)
        except KeyError:
            raise InputError(f"{self.source}: the EPUB names {name}, which it does not contain") from None
        if info.flag_bits & 0x1:
            raise InputError(f"{self.source}: {name} is encrypted (DRM); synth reads only unprotected EPUBs")
        try:
            with self.archive.open(info) as f:
                body = f.read(MAX_ENTRY_BYTES + 1)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
            raise InputError(f"{self.source}: {name} cannot be read: a malformed or truncated zip ({e})") from e
        if len(body) > MAX_ENTRY_BYTES:
            raise InputError(f"{self.source}: {name} inflates past {MAX_ENTRY_BYTES:,} bytes; the limit")
        return body

    def xml(self, name: str) -> ET.Element:
        body = self.read(name)
        if b"<!ENTITY" in body:
            raise InputError(f"{self.source}: {name} declares XML entities, which synth does not expand")
        body = _ENTITY.sub(_html_entity, body)
        try:
            return ET.fromstring(body)
        except ET.ParseError as e:
            line, column = e.position
            reason = str(e).split(":")[0]
            raise InputError(
                f"{self.source}: {name} is not well-formed XML at line {line}, column {column + 1}: {reason}"
            ) from e

    def refuse_encryption(self) -> None:
        if "META-INF/rights.xml" in self.names:
            raise InputError(
                f"{self.source}: the EPUB carries DRM (META-INF/rights.xml); synth reads only unprotected EPUBs"
            )
        if "META-INF/encryption.xml" not in self.names:
            return
        methods = {
            m.get("Algorithm") for m in self.xml("META-INF/encryption.xml").iter(f"{{{_NS['enc']}}}EncryptionMethod")
        }
        if methods - _FONT_OBFUSCATION:
            raise InputError(
                f"{self.source}: the EPUB is encrypted (DRM: META-INF/encryption.xml); synth reads "
                "only unprotected EPUBs"
            )

    def rootfile(self) -> str:
        if "META-INF/container.xml" not in self.names:
            raise InputError(f"{self.source}: not an EPUB: no META-INF/container.xml")
        root = self.xml("META-INF/container.xml").find(".//c:rootfile", _NS)
        path = root.get("full-path") if root is not None else None
        if not path:
            raise InputError(f"{self.source}: META-INF/container.xml names no package (rootfile)")
        return path

    def document(self, opf: ET.Element, opf_path: str) -> Document:
        base = posixpath.dirname(opf_path)
        items = {i.get("id"): i for i in opf.iterfind("opf:manifest/opf:item", _NS)}
        titles = self._toc(opf, items, base)
        chapters: list[Chapter] = []
        for ref in opf.iterfind("opf:spine/opf:itemref", _NS):
            item = items.get(ref.get("idref"))
            if item is None or "html" not in (item.get("media-type") or ""):
                continue
            path = _join(base, item.get("href"))
            try:
                paragraphs, heading = _text(self.xml(path))
            except RecursionError:
                raise InputError(f"{self.source}: {path} nests its elements too deeply to read") from None
            title = titles.get(path)
            if title is None and chapters and titles:  # a chapter split over two files
                chapters[-1].paragraphs.extend(paragraphs)
                continue
            chapters.append(
                Chapter(
                    title=(title or heading or f"Chapter {len(chapters) + 1}")[:MAX_TITLE_CHARS], paragraphs=paragraphs
                )
            )
        if not chapters:
            raise InputError(f"{self.source}: the EPUB's spine names no XHTML document")
        return finish(_meta(opf, "title"), _meta(opf, "creator"), chapters, self.source)

    def _toc(self, opf: ET.Element, items: dict, base: str) -> dict[str, str]:
        """Chapter titles by the path of their file, from the EPUB 3 nav or else the EPUB 2 NCX."""
        nav = next((i for i in items.values() if "nav" in (i.get("properties") or "").split()), None)
        if nav is not None:
            path = _join(base, nav.get("href"))
            return _first_titles(path, _nav_entries(self.xml(path)))
        spine = opf.find("opf:spine", _NS)
        ncx = items.get(spine.get("toc")) if spine is not None else None
        if ncx is not None:
            path = _join(base, ncx.get("href"))
            return _first_titles(path, _ncx_entries(self.xml(path)))
        return {}


def _nav_entries(root: ET.Element) -> Iterable[tuple[str, str]]:
    navs = [n for n in root.iter(f"{_XHTML}nav") if n.get(f"{{{_NS['epub']}}}type") == "toc"]
    for nav in navs or list(root.iter(f"{_XHTML}nav"))[:1]:
        for a in nav.iter(f"{_XHTML}a"):
            yield " ".join("".join(a.itertext()).split()), a.get("href") or ""


def _ncx_entries(root: ET.Element) -> Iterable[tuple[str, str]]:
    for point in root.iter(f"{{{_NS['ncx']}}}navPoint"):
        label, content = point.find("ncx:navLabel", _NS), point.find("ncx:content", _NS)
        yield (
            " ".join("".join(label.itertext()).split()) if label is not None else "",
            (content.get("src") or "") if content is not None else "",
        )


def _first_titles(toc_path: str, entries: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The first title the table of contents gives each file (a link's #fragment is dropped: a
    section inside a chapter's file does not start a chapter)."""
    titles: dict[str, str] = {}
    for label, href in entries:
        if href and label:
            titles.setdefault(_join(posixpath.dirname(toc_path), href.split("#")[0]), label)
    return titles


def _text(root: ET.Element) -> tuple[list[str], str | None]:
    """The paragraphs of an XHTML document, in reading order, and its first heading."""
    paragraphs: list[str] = []
    heading: list[str | None] = [None]
    buffer: list[str] = []

    def flush() -> None:
        if buffer and (said := paragraph("".join(buffer))) is not None:
            paragraphs.append(said)
        buffer.clear()

    def walk(el: ET.Element) -> None:
        tag = el.tag.rsplit("}", 1)[-1] if isinstance(el.tag, str) else ""
        silent = tag in _SILENT or bool(set((el.get(f"{{{_NS['epub']}}}type") or "").split()) & _SILENT_TYPES)
        if not silent:
            block = tag in _BLOCKS
            if block:
                flush()
            if tag in _HEADINGS and heading[0] is None:
                heading[0] = paragraph("".join(el.itertext()))
            buffer.append(el.text or "")
            for child in el:
                walk(child)
            if block:
                flush()
        buffer.append(el.tail or "")

    walk(root)
    flush()
    return paragraphs, heading[0]


def _meta(opf: ET.Element, name: str) -> str | None:
    el = opf.find(f"opf:metadata/dc:{name}", _NS)
    text = " ".join("".join(el.itertext()).split()) if el is not None else ""
    return text[:MAX_TITLE_CHARS] or None


def _join(base: str, href: str | None) -> str:
    return posixpath.normpath(posixpath.join(base, unquote(href or ""))).lstrip("/")


def _html_entity(m: re.Match) -> bytes:
    name = m.group(1)
    if name in _XML_ENTITIES or name.decode() not in html.entities.name2codepoint:
        return m.group(0)
    return b"&#%d;" % html.entities.name2codepoint[name.decode()]
