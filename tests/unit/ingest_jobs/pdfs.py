"""A real, minimal PDF with text pages and document info, written with pypdf (the library the loader reads with)."""

from __future__ import annotations

import io

from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject


def text_pdf(pages: list[str], info: dict[str, str], to_unicode: dict[str, str] | None = None) -> bytes:
    """`to_unicode`: a ToUnicode CMap for the font, character -> UTF-16BE hex (what a text extractor reads
    instead of the character itself)."""
    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    if to_unicode:
        cmap = DecodedStreamObject()
        chars = "\n".join(f"<{ord(c):02X}> <{target}>" for c, target in to_unicode.items())
        cmap.set_data(
            "/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Adobe-Identity-UCS def "
            "/CMapType 2 def 1 begincodespacerange <00> <FF> endcodespacerange\n"
            f"{len(to_unicode)} beginbfchar\n{chars}\nendbfchar endcmap "
            "CMapName currentdict /CMap defineresource pop end end".encode("latin-1")
        )
        font[NameObject("/ToUnicode")] = writer._add_object(cmap)
    font_ref = writer._add_object(font)
    for text in pages:
        page = writer.add_blank_page(width=612, height=792)
        content = DecodedStreamObject()
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        content.set_data(f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(content)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font_ref})}
        )
    writer.add_metadata(info)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
