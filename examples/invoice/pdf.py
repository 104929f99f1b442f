"""A one-page invoice as a small, valid PDF, written by hand (no PDF library).

Five objects (catalog, page tree, page, the standard Helvetica font, the page's content stream), a
cross-reference table with the byte offset of each, and the trailer: what a PDF reader needs and
nothing more, a few hundred bytes. Text is Latin-1; the invoice's lines are ASCII anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

__all__ = ["PDF_MAGIC", "invoice_pdf"]

#: Every PDF file starts with these bytes.
PDF_MAGIC: Final = b"%PDF-"

#: The A4 page size in points.
_PAGE: Final = "[0 0 595 842]"
_LEFT: Final = 72
_TOP: Final = 770
_LEADING: Final = 22


def invoice_pdf(number: str, customer: str, amount: str) -> bytes:
    """The invoice ``number`` for ``customer`` over ``amount`` (already formatted), as a PDF."""
    lines = (
        ("F1", 20, f"Invoice {number}"),
        ("F1", 12, f"Billed to: {customer}"),
        ("F1", 12, f"Amount due: {amount}"),
        ("F1", 10, "Pay online with the link in the e-mail that carried this file."),
    )
    return _document(_content(lines))


def _content(lines: Sequence[tuple[str, int, str]]) -> bytes:
    """The page's content stream: one text object, a line per entry, top to bottom."""
    ops = ["BT", f"{_LEFT} {_TOP} Td"]
    for n, (font, size, text) in enumerate(lines):
        if n:
            ops.append(f"0 -{_LEADING} Td")
        ops.append(f"/{font} {size} Tf ({_escaped(text)}) Tj")
    ops.append("ET")
    return "\n".join(ops).encode("latin-1")


def _escaped(text: str) -> str:
    """A PDF literal string's body: backslash and parentheses escaped."""
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _document(content: bytes) -> bytes:
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        (
            f"<< /Type /Page /Parent 2 0 R /MediaBox {_PAGE}"
            " /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>"
        ).encode("ascii"),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
    ]
    # The header, then a comment of bytes above 127: the file is binary to any transfer that asks.
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n" % (len(objects) + 1)
    # Each entry is exactly 20 bytes: 10-digit offset, 5-digit generation, keyword, space, LF.
    out += b"0000000000 65535 f \n"
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
