"""Documents built by the tests: Markdown, plain text and EPUB files of a few chapters."""

from __future__ import annotations

import io
import zipfile

CHAPTERS = [
    (
        "The Harbour",
        ["The boat left the harbour at dawn. Gulls followed it out to sea.", "Nobody on board said a word."],
    ),
    ("The Storm", ["By noon the sky had turned grey. The waves grew tall and the rain came down."]),
    ("The Island", ["At dusk they saw the island. It was green and quiet."]),
]


def markdown_book(title: str = "A Short Voyage", chapters=CHAPTERS) -> str:
    return f"# {title}\n\n" + "".join(f"## {name}\n\n" + "\n\n".join(paras) + "\n\n" for name, paras in chapters)


def xhtml(title: str, paragraphs: list[str], *, heading: bool = True) -> str:
    body = (f"<h1>{title}</h1>" if heading else "") + "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml" '
        f'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>{title}</title></head><body>{body}</body></html>'
    )


def epub_book(
    chapters=CHAPTERS,
    *,
    title: str = "A Short Voyage",
    author: str = "Ann Writer",
    extra: dict[str, bytes | str] | None = None,
    files: dict[str, str] | None = None,
    nav: bool = True,
) -> bytes:
    """An EPUB 3 (nav document) or, with ``nav=False``, an EPUB 2 (NCX) of ``chapters``;
    ``files`` replaces a chapter file's XHTML by name (ch1.xhtml ...) or adds one to the end of the
    spine that the table of contents does not name; ``extra`` adds other entries."""
    names = [f"ch{i}.xhtml" for i in range(1, len(chapters) + 1)]
    docs = {name: xhtml(t, p) for name, (t, p) in zip(names, chapters)}
    docs.update(files or {})
    manifest = "".join(f'<item id="c{i}" href="{n}" media-type="application/xhtml+xml"/>' for i, n in enumerate(docs))
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(docs)))
    toc_item = (
        '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
        if nav
        else '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
    )
    opf = (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata '
        f'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title><dc:creator>{author}'
        f"</dc:creator></metadata><manifest>{manifest}{toc_item}</manifest>"
        f"<spine{'' if nav else ' toc=' + chr(34) + 'ncx' + chr(34)}>{spine}</spine></package>"
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        z.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:'
            'names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        z.writestr("OEBPS/content.opf", opf)
        links = "".join(f'<li><a href="{n}">{t}</a></li>' for n, (t, _) in zip(names, chapters))
        if nav:
            z.writestr(
                "OEBPS/nav.xhtml",
                '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml" '
                'xmlns:epub="http://www.idpf.org/2007/ops"><body><nav epub:type="toc"><ol>'
                f"{links}</ol></nav></body></html>",
            )
        else:
            points = "".join(
                f'<navPoint id="p{i}"><navLabel><text>{t}</text></navLabel><content src="{n}"/></navPoint>'
                for i, (n, (t, _)) in enumerate(zip(names, chapters))
            )
            z.writestr(
                "OEBPS/toc.ncx",
                '<?xml version="1.0"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/">'
                f"<navMap>{points}</navMap></ncx>",
            )
        for name, body in docs.items():
            z.writestr(f"OEBPS/{name}", body)
        for name, body in (extra or {}).items():
            z.writestr(name, body)
    return buf.getvalue()
