"""Offline OCR with RapidOCR (PP-OCR Chinese/English models shipped in the wheel).

Time bound: inference runs on one dedicated worker thread and the caller waits at most
`timeout` seconds for it. ONNX inference cannot be interrupted, so a timed-out call keeps
running in the background until it finishes; later calls queue behind it and their wait counts
against their own timeout. The caller is therefore never blocked longer than its budget, and at
most one inference runs per process, which also keeps memory flat. Parsers add a second bound on
top: a maximum number of OCR'd pages per document (`ParseLimits.max_ocr_pages`).
"""

from __future__ import annotations

import io
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

_engine = None
_engine_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()

# RapidOCR resizes to this anyway; shrinking first saves the conversion cost of huge scans.
MAX_OCR_SIDE = 2500


@dataclass(frozen=True)
class OcrLine:
    text: str
    # Axis-aligned box in pixels of the image given to `recognize`: x0, y0, x1, y1 (top-left).
    box: tuple[float, float, float, float]
    score: float


class OcrTimeout(Exception):
    """OCR did not finish within its time budget."""


def _get_engine():
    global _engine
    with _engine_lock:
        if _engine is None:
            from rapidocr_onnxruntime import RapidOCR

            _engine = RapidOCR()
        return _engine


def _get_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ocr")
        return _executor


def _run(image: Image.Image) -> list[OcrLine]:
    import numpy as np

    engine = _get_engine()
    # RapidOCR expects BGR like OpenCV.
    array = np.asarray(image.convert("RGB"))[:, :, ::-1]
    result, _elapsed = engine(array)
    lines: list[OcrLine] = []
    for points, text, score in result or ():
        text = str(text).strip()
        if not text:
            continue
        xs = [float(point[0]) for point in points]
        ys = [float(point[1]) for point in points]
        lines.append(
            OcrLine(text=text, box=(min(xs), min(ys), max(xs), max(ys)), score=float(score))
        )
    return lines


def recognize(image: Image.Image, *, timeout: float) -> list[OcrLine]:
    """Text lines found in `image`, in the image's pixel coordinates; raises `OcrTimeout`."""
    scale = 1.0
    if max(image.size) > MAX_OCR_SIDE:
        scale = MAX_OCR_SIDE / max(image.size)
        image = image.resize(
            (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        )
    future: Future[list[OcrLine]] = _get_executor().submit(_run, image)
    try:
        lines = future.result(timeout=timeout)
    except FutureTimeout as exc:
        future.cancel()
        raise OcrTimeout(f"OCR exceeded {timeout:.1f}s") from exc
    if scale == 1.0:
        return lines
    return [
        OcrLine(line.text, tuple(value / scale for value in line.box), line.score)  # type: ignore[arg-type]
        for line in lines
    ]


def ocr_image_text(jpeg: bytes, *, seconds: float) -> str:
    """Best-effort text of an image for captions: empty on timeout or an undecodable image."""
    try:
        with Image.open(io.BytesIO(jpeg)) as image:
            image.load()
            lines = recognize(image, timeout=seconds)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError, OcrTimeout):
        return ""
    return "\n".join(" ".join(line.text for line in row) for row in group_rows(lines))


def group_rows(lines: list[OcrLine]) -> list[list[OcrLine]]:
    """Lines on the same visual row (vertical centres within half a line height), left to right."""
    rows: list[list[OcrLine]] = []
    for line in sorted(lines, key=lambda item: ((item.box[1] + item.box[3]) / 2, item.box[0])):
        centre = (line.box[1] + line.box[3]) / 2
        if rows:
            last = rows[-1]
            last_centre = sum((item.box[1] + item.box[3]) / 2 for item in last) / len(last)
            height = max(item.box[3] - item.box[1] for item in last)
            if abs(centre - last_centre) < height / 2:
                last.append(line)
                continue
        rows.append([line])
    return [sorted(row, key=lambda item: item.box[0]) for row in rows]


def group_paragraphs(lines: list[OcrLine]) -> list[list[list[OcrLine]]]:
    """Rows grouped into paragraphs: a vertical gap over ~one line height starts a new one."""
    paragraphs: list[list[list[OcrLine]]] = []
    previous_bottom: float | None = None
    for row in group_rows(lines):
        top = min(item.box[1] for item in row)
        bottom = max(item.box[3] for item in row)
        height = bottom - top
        if paragraphs and previous_bottom is not None and top - previous_bottom <= height * 0.9:
            paragraphs[-1].append(row)
        else:
            paragraphs.append([row])
        previous_bottom = bottom
    return paragraphs
