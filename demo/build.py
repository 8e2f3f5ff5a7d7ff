"""Render the demo knowledge base (`content.py`) into real files of every supported format.

    python -m demo.build OUT_DIR

Output is deterministic: rebuilding gives byte-identical files with the pinned library versions
(ZIP entry times and document timestamps are fixed, reportlab runs in invariant mode, noise is
seeded). Only the files named in `content.MANIFEST` are written; other files in OUT_DIR are left
alone.
"""

from __future__ import annotations

import csv
import html
import io
import os
import random
import re
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape as xml_escape

from PIL import Image, ImageDraw, ImageFont

from demo import content as c

if TYPE_CHECKING:
    from docx.document import Document as DocxDocument
    from reportlab.pdfgen.canvas import Canvas as PdfCanvas
    from reportlab.platypus import Flowable

DEFAULT_CJK_FONT = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"
FONT_ENV_VAR = "RAGSITE_CJK_FONT"
PDF_FONT_NAME = "WQY"

FIXED_DATETIME = datetime(*c.FIXED_TIMESTAMP)
AUTHOR = c.COMPANY


class CJKFontMissing(RuntimeError):
    """The CJK font needed to draw Chinese text into PDFs and images is not installed."""


def cjk_font_path() -> Path:
    path = Path(os.environ.get(FONT_ENV_VAR) or DEFAULT_CJK_FONT)
    if not path.is_file():
        raise CJKFontMissing(
            f"CJK font not found at {path}. Install it with `apt-get install fonts-wqy-microhei` "
            f"(Debian/Ubuntu), or point {FONT_ENV_VAR} at a TrueType/TTC font with Chinese glyphs."
        )
    return path


def build_demo_corpus(out_dir: Path) -> list[Path]:
    """Write every demo file into `out_dir` and return their paths in `content.MANIFEST` order."""
    font_path = cjk_font_path()  # fail before writing anything
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    builders: dict[str, Callable[[Path], None]] = {
        "employee_handbook.md": lambda path: path.write_text(
            render_markdown(c.EMPLOYEE_HANDBOOK), encoding="utf-8"
        ),
        "it_helpdesk_guide.docx": write_docx,
        "product_specs.xlsx": write_xlsx,
        "product_manual.pdf": lambda path: write_manual_pdf(path, font_path),
        "scanned_safety_notice.pdf": lambda path: write_scanned_pdf(path, font_path),
        "guest_wifi_notice.png": lambda path: path.write_bytes(
            render_notice_png(c.GUEST_WIFI_NOTICE, font_path)
        ),
        "office_locations.csv": write_csv,
        "it_announcement_vpn.html": lambda path: path.write_text(
            render_html(c.IT_ANNOUNCEMENT), encoding="utf-8"
        ),
        "onboarding_training.pptx": write_pptx,
    }
    paths = []
    for entry in c.MANIFEST:
        path = out_dir / entry.name
        builders[entry.name](path)
        paths.append(path)
    return paths


def walk(sections: list[c.Section], level: int = 1) -> Iterator[tuple[int, c.Section]]:
    for section in sections:
        yield level, section
        yield from walk(section.subsections, level + 1)


# ---------------------------------------------------------------------------------------------
# Markdown, HTML, CSV
# ---------------------------------------------------------------------------------------------

def render_markdown(doc: c.Document) -> str:
    lines = [f"# {doc.title}", "", f"> {doc.subtitle}", ""]
    for block in doc.intro:
        lines += _markdown_block(block)
    for level, section in walk(doc.sections):
        lines += [f"{'#' * (level + 1)} {section.heading}", ""]
        for block in section.blocks:
            lines += _markdown_block(block)
    return "\n".join(lines).rstrip() + "\n"


def _markdown_block(block: c.Block) -> list[str]:
    if isinstance(block, str):
        return [block, ""]
    if isinstance(block, c.Bullets):
        return [
            f"{index}. {item}" if block.ordered else f"- {item}"
            for index, item in enumerate(block.items, start=1)
        ] + [""]
    if isinstance(block, c.Table):
        def row(cells: list[str]) -> str:
            return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

        caption = [f"**{block.caption}**", ""] if block.caption else []
        return [*caption, row(block.header), row(["---"] * len(block.header)),
                *(row(cells) for cells in block.rows), ""]
    raise TypeError(f"Markdown cannot render {type(block).__name__}")


def render_html(doc: c.Document) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="zh-CN">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{e(doc.title)}</title>",
        "</head>",
        "<body>",
        "<article>",
        f"<h1>{e(doc.title)}</h1>",
        f'<p class="meta">{e(doc.subtitle)}</p>',
    ]
    blocks = [(0, None, block) for block in doc.intro]
    blocks += [
        (level, section, block)
        for level, section in walk(doc.sections)
        for block in [None, *section.blocks]
    ]
    for level, section, block in blocks:
        if block is None:
            parts.append(f"<h{level + 1}>{e(section.heading)}</h{level + 1}>")
        elif isinstance(block, str):
            parts.append(f"<p>{e(block)}</p>")
        elif isinstance(block, c.Bullets):
            tag = "ol" if block.ordered else "ul"
            parts += [f"<{tag}>", *(f"<li>{e(item)}</li>" for item in block.items), f"</{tag}>"]
        elif isinstance(block, c.Table):
            parts.append("<table>")
            parts.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in block.header) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{e(v)}</td>" for v in row) + "</tr>"
                      for row in block.rows]
            parts.append("</table>")
    parts += ["</article>", "</body>", "</html>"]
    return "\n".join(parts) + "\n"


def write_csv(path: Path) -> None:
    # Plain UTF-8 without BOM: the sniffer accepts it and parsers never see a stray U+FEFF.
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(c.OFFICE_LOCATIONS.header)
        writer.writerows(c.OFFICE_LOCATIONS.rows)


# ---------------------------------------------------------------------------------------------
# Office formats
# ---------------------------------------------------------------------------------------------

_CORE_DATE = re.compile(rb"(<dcterms:(created|modified)[^>]*>)[^<]*(</dcterms:\2>)")


def normalize_zip(path: Path) -> None:
    """Rewrite an OOXML package with fixed entry times and core-property dates.

    The Office libraries stamp "now" into both; openpyxl even overrides `modified` on save.
    """
    stamp = FIXED_DATETIME.strftime("%Y-%m-%dT%H:%M:%SZ").encode()
    with zipfile.ZipFile(path) as source:
        entries = [(info.filename, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w") as target:
        for name, data in entries:
            if name == "docProps/core.xml":
                data = _CORE_DATE.sub(lambda m: m.group(1) + stamp + m.group(3), data)
            info = zipfile.ZipInfo(name, date_time=c.FIXED_TIMESTAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            target.writestr(info, data)


def write_docx(path: Path) -> None:
    from docx import Document as new_docx
    from docx.oxml.ns import qn
    from docx.shared import Pt

    doc_data = c.IT_GUIDE
    doc = new_docx()
    props = doc.core_properties
    props.title, props.author, props.last_modified_by = doc_data.title, AUTHOR, AUTHOR
    props.created = props.modified = FIXED_DATETIME

    # Word falls back to a Latin font for CJK unless the East Asian slot is named.
    for style_name in ("Normal", "Title", "Heading 1", "Heading 2"):
        rpr = doc.styles[style_name].element.get_or_add_rPr()
        rpr.get_or_add_rFonts().set(qn("w:eastAsia"), "微软雅黑")
    doc.styles["Normal"].font.size = Pt(10.5)

    doc.add_heading(doc_data.title, level=0)
    doc.add_paragraph(doc_data.subtitle)
    for block in doc_data.intro:
        _docx_block(doc, block)
    for level, section in walk(doc_data.sections):
        doc.add_heading(section.heading, level=level)
        for block in section.blocks:
            _docx_block(doc, block)
    doc.save(str(path))
    normalize_zip(path)


def _docx_block(doc: DocxDocument, block: c.Block) -> None:
    if isinstance(block, str):
        doc.add_paragraph(block)
    elif isinstance(block, c.Bullets):
        style = "List Number" if block.ordered else "List Bullet"
        for item in block.items:
            doc.add_paragraph(item, style=style)
    elif isinstance(block, c.Table):
        if block.caption:
            doc.add_paragraph(block.caption, style="Caption")
        table = doc.add_table(rows=1 + len(block.rows), cols=len(block.header))
        table.style = "Table Grid"
        for row_index, cells in enumerate([block.header, *block.rows]):
            for col_index, text in enumerate(cells):
                cell = table.cell(row_index, col_index)
                cell.text = text
                if row_index == 0:
                    for run in cell.paragraphs[0].runs:
                        run.bold = True
    else:
        raise TypeError(f"DOCX cannot render {type(block).__name__}")


def write_xlsx(path: Path) -> None:
    from openpyxl import Workbook
    from openpyxl.styles import Alignment, Font, PatternFill

    workbook = Workbook()
    workbook.properties.creator = AUTHOR
    workbook.properties.title = "星河 X 系列产品规格表"
    workbook.properties.created = FIXED_DATETIME
    header_font = Font(bold=True, color="FFFFFF")
    header_fill = PatternFill("solid", fgColor="1F4E79")
    sheets = [
        ("产品规格", c.PRODUCT_SPECS),
        ("价格与保修", c.PRICE_LIST),
        ("售后服务网点", c.SERVICE_OUTLETS),
    ]
    for index, (title, table) in enumerate(sheets):
        sheet = workbook.active if index == 0 else workbook.create_sheet()
        sheet.title = title
        sheet.append(table.header)
        for row in table.rows:
            sheet.append(row)
        for cell in sheet[1]:
            cell.font, cell.fill = header_font, header_fill
            cell.alignment = Alignment(vertical="center", wrap_text=True)
        sheet.freeze_panes = "B2"
        for column in sheet.columns:
            width = max(_display_width(str(cell.value)) for cell in column)
            sheet.column_dimensions[column[0].column_letter].width = min(max(width + 2, 8), 48)
    workbook.save(path)
    normalize_zip(path)


def _display_width(text: str) -> int:
    # CJK glyphs are about two character cells wide in Excel's column-width unit.
    return sum(2 if ord(char) > 0x2E80 else 1 for char in text)


def write_pptx(path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Pt

    deck = Presentation()
    props = deck.core_properties
    props.title, props.author, props.last_modified_by = c.ONBOARDING_DECK[0].title, AUTHOR, AUTHOR
    props.created = props.modified = FIXED_DATETIME
    props.revision = 1
    for index, slide_data in enumerate(c.ONBOARDING_DECK):
        layout = deck.slide_layouts[0 if index == 0 else 1]
        slide = deck.slides.add_slide(layout)
        slide.shapes.title.text = slide_data.title
        body = slide.placeholders[1].text_frame
        body.text = slide_data.bullets[0]
        for bullet in slide_data.bullets[1:]:
            body.add_paragraph().text = bullet
        if index > 0:
            for paragraph in body.paragraphs:
                paragraph.font.size = Pt(22)
    deck.save(str(path))
    normalize_zip(path)


# ---------------------------------------------------------------------------------------------
# Images (Pillow)
# ---------------------------------------------------------------------------------------------

def _font(font_path: Path, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(font_path), size, index=0)


def render_router_diagram(font_path: Path) -> bytes:
    """A simple back-panel drawing of the 星河X3 Pro, labelled in Chinese, as PNG bytes."""
    width, height = 1400, 720
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    title_font, label_font, small_font = (_font(font_path, s) for s in (44, 26, 22))

    draw.text((width // 2, 50), "星河X3 Pro 背面接口示意图", font=title_font, fill="#1F4E79",
              anchor="mm")
    body = (110, 300, 1290, 470)
    for x in (200, 420, 980, 1200):  # four of the eight antennas are visible from the back
        draw.rounded_rectangle((x - 16, 120, x + 16, body[1] + 10), radius=14, fill="#4A4A4A")
    draw.rounded_rectangle(body, radius=36, fill="#2B2B2B")
    draw.text((body[0] + 40, body[1] + 20), "XINGHE X3 PRO", font=small_font, fill="#BBBBBB")

    # (label, x, kind, colour) from left to right as seen from the back.
    ports = [
        ("电源 DC 12V", 200, "round", "#111111"),
        ("RESET 孔", 310, "pin", "#111111"),
        ("WPS/Mesh 键", 420, "button", "#DDDDDD"),
        ("2.5G WAN", 560, "rj45", "#2E75D6"),
        ("2.5G LAN", 680, "rj45", "#F2F2F2"),
        ("LAN1", 800, "rj45", "#F2F2F2"),
        ("LAN2", 910, "rj45", "#F2F2F2"),
        ("LAN3", 1020, "rj45", "#F2F2F2"),
        ("USB 3.0", 1150, "usb", "#2E75D6"),
    ]
    port_y = 400
    for index, (label, x, kind, colour) in enumerate(ports):
        if kind == "round":
            draw.ellipse((x - 22, port_y - 22, x + 22, port_y + 22), fill="#666666")
            draw.ellipse((x - 8, port_y - 8, x + 8, port_y + 8), fill=colour)
        elif kind == "pin":
            draw.ellipse((x - 7, port_y - 7, x + 7, port_y + 7), fill="#000000", outline="#888888",
                         width=2)
        elif kind == "button":
            draw.rounded_rectangle((x - 26, port_y - 14, x + 26, port_y + 14), radius=8,
                                   fill=colour)
        elif kind == "rj45":
            draw.rectangle((x - 36, port_y - 30, x + 36, port_y + 30), fill=colour,
                           outline="#888888", width=2)
            draw.rectangle((x - 14, port_y + 18, x + 14, port_y + 30), fill="#2B2B2B")
        elif kind == "usb":
            draw.rectangle((x - 34, port_y - 12, x + 34, port_y + 12), fill=colour,
                           outline="#888888", width=2)
        # Alternate label rows so neighbouring labels never overlap.
        label_y = 560 if index % 2 == 0 else 640
        draw.line((x, port_y + 32, x, label_y - 22), fill="#888888", width=2)
        draw.text((x, label_y), label, font=label_font, fill="#222222", anchor="mm")
    return _png_bytes(image)


def render_notice_png(notice: c.Notice, font_path: Path) -> bytes:
    """A small poster-like notice, for image-file ingestion (OCR)."""
    width, height = 1000, 560
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, width, 120), fill="#1F4E79")
    draw.text((width // 2, 60), notice.title, font=_font(font_path, 52), fill="white", anchor="mm")
    body_font = _font(font_path, 36)
    y = 170
    for line in notice.lines:
        draw.text((70, y), line, font=body_font, fill="#111111")
        y += 84
    draw.rectangle((8, 8, width - 9, height - 9), outline="#1F4E79", width=4)
    return _png_bytes(image)


def render_scanned_page(notice: c.Notice, font_path: Path, dpi: int = 200) -> Image.Image:
    """An A4 page of text as pixels only, like the output of an office scanner."""
    width, height = round(8.27 * dpi), round(11.69 * dpi)
    margin = round(0.9 * dpi)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    title_font = _font(font_path, round(dpi * 0.26))
    body_font = _font(font_path, round(dpi * 0.19))
    line_height = round(body_font.size * 1.75)

    y = margin
    for line in _wrap(notice.title, title_font, width - 2 * margin):
        draw.text((width // 2, y), line, font=title_font, fill=20, anchor="mt")
        y += round(title_font.size * 1.6)
    if notice.reference:
        draw.text((width // 2, y), notice.reference, font=body_font, fill=25, anchor="mt")
        y += line_height
    y += line_height // 2
    for paragraph in notice.lines:
        # Chinese paragraphs open with a two-character indent; the salutation ("各部门：") does not.
        is_salutation = paragraph.endswith("：") and len(paragraph) <= 8
        first_indent = 0 if is_salutation else body_font.size * 2
        wrapped = _wrap(paragraph, body_font, width - 2 * margin - first_indent)
        for line_index, line in enumerate(wrapped):
            x = margin + (first_indent if line_index == 0 else 0)
            draw.text((x, y), line, font=body_font, fill=25)
            y += line_height
    y += line_height
    for line in notice.signoff:
        draw.text((width - margin, y), line, font=body_font, fill=25, anchor="ra")
        y += line_height

    # Sparse, seeded speckles: enough to look scanned, too few to trouble OCR.
    rng = random.Random(2024)
    for _ in range(900):
        x, y = rng.randrange(width), rng.randrange(height)
        draw.point((x, y), fill=rng.randrange(120, 220))
    return image


def _wrap(text: str, font: ImageFont.FreeTypeFont, max_width: int) -> list[str]:
    """Character-level wrapping (Chinese has no spaces), keeping closing punctuation attached."""
    no_line_start = set("，。；：、！？）》」』”,.;:!?)")
    lines: list[str] = []
    current = ""
    for char in text:
        if current and font.getlength(current + char) > max_width and char not in no_line_start:
            lines.append(current)
            current = char
        else:
            current += char
    if current:
        lines.append(current)
    return lines


def _png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# PDF (reportlab)
# ---------------------------------------------------------------------------------------------

def register_pdf_font(font_path: Path) -> str:
    from reportlab.lib.fonts import addMapping
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    if PDF_FONT_NAME not in pdfmetrics.getRegisteredFontNames():
        pdfmetrics.registerFont(TTFont(PDF_FONT_NAME, str(font_path), subfontIndex=0))
        # The face has no bold/italic: map them to itself so <b> cannot fall back to Helvetica.
        for bold in (0, 1):
            for italic in (0, 1):
                addMapping(PDF_FONT_NAME, bold, italic, PDF_FONT_NAME)
    return PDF_FONT_NAME


def write_manual_pdf(path: Path, font_path: Path) -> None:
    from reportlab.lib import colors
    from reportlab.lib.enums import TA_CENTER
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.lib.units import cm
    from reportlab.platypus import (
        Image as PdfImage,
        KeepTogether,
        Paragraph,
        SimpleDocTemplate,
        Spacer,
        Table as PdfTable,
        TableStyle,
    )

    font = register_pdf_font(font_path)
    doc_data = c.PRODUCT_MANUAL
    base = ParagraphStyle("body", fontName=font, bulletFontName=font, fontSize=10.5, leading=17,
                          wordWrap="CJK", spaceAfter=6)
    styles = {
        "title": ParagraphStyle("title", parent=base, fontSize=22, leading=30, alignment=TA_CENTER,
                                spaceAfter=8, textColor=colors.HexColor("#1F4E79")),
        "subtitle": ParagraphStyle("subtitle", parent=base, fontSize=9.5, alignment=TA_CENTER,
                                   textColor=colors.HexColor("#555555"), spaceAfter=18),
        1: ParagraphStyle("h1", parent=base, fontSize=16, leading=24, spaceBefore=12, spaceAfter=8,
                          textColor=colors.HexColor("#1F4E79")),
        2: ParagraphStyle("h2", parent=base, fontSize=12.5, leading=19, spaceBefore=8,
                          spaceAfter=4),
        "body": base,
        "bullet": ParagraphStyle("bullet", parent=base, leftIndent=16, bulletIndent=4,
                                 spaceAfter=3),
        "cell": ParagraphStyle("cell", parent=base, fontSize=9, leading=13, spaceAfter=0),
        "caption": ParagraphStyle("caption", parent=base, fontSize=9.5, alignment=TA_CENTER,
                                  textColor=colors.HexColor("#555555")),
    }
    frame_width = A4[0] - 4 * cm

    def para(text: str, style: str | int) -> Paragraph:
        return Paragraph(xml_escape(text), styles[style])

    def table(block: c.Table) -> list[Flowable]:
        data = [[para(text, "cell") for text in row] for row in [block.header, *block.rows]]
        first = 3.0 * cm
        rest = len(block.header) - 1
        widths = [first] + [(frame_width - first) / rest] * rest
        pdf_table = PdfTable(data, colWidths=widths, repeatRows=1, hAlign="CENTER")
        pdf_table.setStyle(TableStyle([
            ("GRID", (0, 0), (-1, -1), 0.5, colors.HexColor("#8EA9C1")),
            ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#DCE6F1")),
            ("VALIGN", (0, 0), (-1, -1), "MIDDLE"),
            ("TOPPADDING", (0, 0), (-1, -1), 3),
            ("BOTTOMPADDING", (0, 0), (-1, -1), 3),
        ]))
        caption = [para(block.caption, "caption"), Spacer(1, 4)] if block.caption else []
        return [*caption, pdf_table, Spacer(1, 10)]

    def figure(block: c.Figure) -> list[Flowable]:
        png = render_router_diagram(font_path)
        with Image.open(io.BytesIO(png)) as probe:
            pixel_width, pixel_height = probe.size
        draw_width = frame_width * 0.92
        image = PdfImage(io.BytesIO(png), width=draw_width,
                         height=draw_width * pixel_height / pixel_width)
        return [KeepTogether([image, Spacer(1, 4), para(block.caption, "caption")]), Spacer(1, 10)]

    def blocks(block: c.Block) -> list[Flowable]:
        if isinstance(block, str):
            return [para(block, "body")]
        if isinstance(block, c.Bullets):
            return [
                Paragraph(xml_escape(item), styles["bullet"],
                          bulletText=f"{index}." if block.ordered else "•")
                for index, item in enumerate(block.items, start=1)
            ]
        if isinstance(block, c.Table):
            return table(block)
        if isinstance(block, c.Figure):
            return figure(block)
        raise TypeError(f"PDF cannot render {type(block).__name__}")

    story: list[Flowable] = [para(doc_data.title, "title"), para(doc_data.subtitle, "subtitle")]
    bookmark_keys = iter(range(1, 1000))
    for block in doc_data.intro:
        story += blocks(block)
    for level, section in walk(doc_data.sections):
        heading = para(section.heading, level)
        heading._outline = (section.heading, level)  # picked up by after_flowable below
        story.append(heading)
        for block in section.blocks:
            story += blocks(block)

    def after_flowable(flowable: Flowable) -> None:
        # PDF bookmarks give parsers and viewers the section structure, not just big fonts.
        outline = getattr(flowable, "_outline", None)
        if outline:
            title, level = outline
            key = f"section-{next(bookmark_keys)}"
            pdf.canv.bookmarkPage(key)
            pdf.canv.addOutlineEntry(title, key, level=level - 1)

    def page_footer(canvas: PdfCanvas, _doc: SimpleDocTemplate) -> None:
        canvas.saveState()
        canvas.setFont(font, 8.5)
        canvas.setFillColor(colors.HexColor("#777777"))
        footer = f"{doc_data.title} · 第 {canvas.getPageNumber()} 页"
        canvas.drawCentredString(A4[0] / 2, 1.2 * cm, footer)
        canvas.restoreState()

    pdf = SimpleDocTemplate(
        str(path), pagesize=A4, leftMargin=2 * cm, rightMargin=2 * cm, topMargin=2 * cm,
        bottomMargin=2 * cm, title=doc_data.title, author=AUTHOR, subject="星河 X 系列用户手册",
        creator="ragsite demo builder", invariant=1, lang="zh-CN", initialFontName=font,
    )
    pdf.afterFlowable = after_flowable
    pdf.build(story, onFirstPage=page_footer, onLaterPages=page_footer)


def write_scanned_pdf(path: Path, font_path: Path) -> None:
    """One A4 page holding only a JPEG scan and no text operators, so only OCR can read it."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen.canvas import Canvas

    page = render_scanned_page(c.SCANNED_NOTICE, font_path)
    jpeg = io.BytesIO()
    page.save(jpeg, format="JPEG", quality=80)
    jpeg.seek(0)
    canvas = Canvas(str(path), pagesize=A4, invariant=1)
    canvas.setTitle(c.SCANNED_NOTICE.title)
    canvas.setAuthor(AUTHOR)
    canvas.drawImage(ImageReader(jpeg), 0, 0, width=A4[0], height=A4[1])
    canvas.showPage()
    canvas.save()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m demo.build OUT_DIR", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        paths = build_demo_corpus(Path(argv[0]))
    except CJKFontMissing as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for path in paths:
        print(f"{path.stat().st_size:>9,}  {path}")
    print(f"built {len(paths)} files in {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
