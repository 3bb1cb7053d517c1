"""Users' own documents for ingestion: a small CSV of reviews (``write_csv``, read with ``COLUMNS``), a one-page
PDF, and the documents a collection holds."""

from __future__ import annotations

import csv

from qa_system.ingestion import IngestOptions, open_collection

REVIEWS = [
    ("r1", "P1", "Great battery, it lasts a whole week of reading.", "5"),
    ("r2", "P1", "The screen is dim in direct sunlight.", "2"),
    ("r3", "P2", "Comfortable headphones with deep bass.", "4"),
    ("r4", "P2", "The cable broke after two months.", "1"),
]
COLUMNS = IngestOptions(text_column="body", id_column="review_id", item_column="product")


def write_csv(path, rows=REVIEWS, header=("review_id", "product", "body", "stars"), delimiter=",", encoding="utf-8"):
    with path.open("w", newline="", encoding=encoding) as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def pdf(text: str | None) -> bytes:
    """A one-page PDF showing ``text`` in Helvetica, or a page without any text (as a scan has)."""
    content = b"" if text is None else b"BT /F1 12 Tf 72 720 Td (" + text.encode("latin-1") + b") Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def documents(settings, name):
    index = open_collection(settings, name)
    return {d.id: d for d in index.store.filter_documents()}
