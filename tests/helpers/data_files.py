"""The held-out digits as the files people keep data sets in (tables, an ImageFolder of
PNGs) and the --preprocess file that reads the PNGs: what tests/test_data_uris.py and
tests/test_data_ray.py put on disk and in a bucket."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from tests.helpers.digits import Digits


def table_files(digits: Digits, n: int, folder: Path) -> dict[str, Path]:
    """The first `n` held-out digits with a label column as a parquet (row groups of 40),
    a .jsonl (a broken line, a blank one, CRLF endings) and an Arrow IPC stream."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"x": image.tolist(), "label": int(v)}
            for image, v in zip(digits.x_test[:n], digits.y_test[:n], strict=True)]  # fmt: skip
    table = pa.Table.from_pylist(rows)
    folder.mkdir(parents=True, exist_ok=True)
    parquet, jsonl, arrow = folder / "digits.parquet", folder / "digits.jsonl", folder / "d.arrow"
    pq.write_table(table, parquet, row_group_size=40)
    lines = [json.dumps(r) for r in rows]
    lines[3], lines[7] = "{not json", ""
    jsonl.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    with pa.ipc.new_stream(arrow, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=16):
            writer.write_batch(batch)
    return {"parquet": parquet, "jsonl": jsonl, "arrow": arrow}


def image_folder(digits: Digits, n: int) -> dict[str, bytes]:
    """An ImageFolder of `n` PNGs and a broken one (the last sample), by relative path."""
    from PIL import Image

    found = {}
    for k, (image, label) in enumerate(zip(digits.x_test[:n], digits.y_test[:n], strict=True)):
        out = io.BytesIO()
        Image.fromarray(np.round(image[0] * 240).astype(np.uint8)).save(out, format="PNG")
        found[f"digit{label}/{k:03d}.png"] = out.getvalue()
    found["digit9/zz_broken.png"] = b"not a png"
    found[".cache/ignored.png"] = b"hidden: not a sample"
    return found


PREPROCESS = (
    "import numpy as np\nfrom PIL import Image\n\n"
    "def load(path):\n"
    "    image = np.asarray(Image.open(path), dtype=np.float32) / 240\n"
    "    return {'x': image[None]}\n"
)
