"""The filter's training records from any input the platform reads (issue 15): ``training`` takes
the forms ``input`` takes (``schemas/filter/config.py``: ``FilterTrainingInput``, a
``SourceSpec``) — a file, a folder of files (hive partition folders become columns), a glob, or an
Iceberg table at a snapshot with a row filter.

The training records are a bounded sample read on the driver (``training.max_records``, keyed by the
stream ``filter-training-records``: ``rng.choice(n, max_records)`` over the records' positions in
``ROW_ID`` order, a file's rows in order), for ``train-encoder``, ``train-filters`` and a release
that trains its filters; they never go to the engine.

* A single local file is read as it always was (``input.read_training_records``: whole when it has
  at most ``max_records`` rows, else counted — Parquet by its footer — then sampled in chunks), so a config that names
  a file gives the same records, the same encoder and the same filters as before; its data
  fingerprint stays the file's SHA-256 (``file_sha256``).
* Any other input is listed (``sources.list_fragments``: metadata) and read fragment by fragment
  (``sources.read_text_fragment``, as the release's input is read): counted (a Parquet file by its
  footer), then the sampled positions kept — the driver holds one fragment and the sample. Its
  data fingerprint is ``input_sha256`` (``sources.input_fingerprint`` over each file's SHA-256, an
  Iceberg data file's bytes with its deletes and the row filter). A bad value is one line naming its file, row and column.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipelines.engines import storage
from pipelines.filter.input import FilterRecords, encoded_records, read_training_records
from pipelines.platform.errors import InputError
from pipelines.platform.input import file_fingerprint
from pipelines.platform.sources import (
    SUFFIX_FORMATS,
    Fragment,
    TextReading,
    fingerprint_fragments,
    input_fingerprint,
    list_fragments,
    read_text_fragment,
    row_error,
)
from schemas.base import LakeLocation
from schemas.filter.config import FilterTableReading, FilterTrainingInput, LabelDefinition
from schemas.filter.features import FeatureSpec


def single_file(settings: FilterTrainingInput) -> FilterTableReading | None:
    """The reading of a training input that is one local file (its format from the config, else
    its suffix, else CSV); ``None`` for a folder, a glob, a URI or a table."""
    path = settings.path
    if path is None or any(character in path for character in "*?[") or "://" in path or not os.path.isfile(path):
        return None
    file_format = settings.format or SUFFIX_FORMATS.get(os.path.splitext(path)[1].lower(), "csv")
    return FilterTableReading(path=Path(path), format=file_format, header=settings.header, recode=settings.recode,
                              columns=settings.columns, max_records=settings.max_records)


def training_fragments(settings: FilterTrainingInput, lake: Any = None) -> list[Fragment]:
    """The training input's fragments (metadata only)."""
    properties = lake.properties if isinstance(lake, LakeLocation) else None
    return list_fragments(settings, properties=properties)


def _rows_of(fragment: Fragment, reading: TextReading) -> int:
    if fragment.format == "parquet" and fragment.iceberg is None:
        return int(storage.parquet_file(fragment.where).metadata.num_rows)
    return len(read_text_fragment(fragment, reading)[1])


def read_training_input(settings: FilterTrainingInput, spec: FeatureSpec, labels: dict[str, LabelDefinition],
                        rng: np.random.Generator, lake: Any = None,
                        fingerprint: bool = True) -> tuple[FilterRecords, dict[str, str]]:
    """The training records (module docstring) and their data fingerprint (``{}`` without
    ``fingerprint``: a release that trains its filters records none, and hashing every training
    file would cost the driver a read of the whole training input)."""
    reading = single_file(settings)
    if reading is not None:
        records = read_training_records(reading, spec, labels, rng)
        if not fingerprint:
            return records, {}
        return records, {"file_sha256": file_fingerprint(reading.path).removeprefix("sha256:")}
    fragments = training_fragments(settings, lake)
    name = settings.path if settings.path is not None else f"table {settings.table}"
    text = TextReading.of(settings.header, settings.columns or (), settings.recode)
    counts = [_rows_of(fragment, text) for fragment in fragments]
    total = sum(counts)
    if total == 0:
        raise InputError(name, "no rows (empty table)")
    cap = settings.max_records
    chosen = (np.arange(total, dtype=np.int64) if total <= cap
              else np.sort(rng.choice(total, size=cap, replace=False)).astype(np.int64))
    pieces, row_ids, start = [], [], 0
    for fragment, count in zip(fragments, counts, strict=True):
        inside = chosen[(chosen >= start) & (chosen < start + count)] - start
        start += count
        if not inside.size:
            continue
        frame, ids = read_text_fragment(fragment, text)
        pieces.append(frame.iloc[inside].reset_index(drop=True))
        row_ids.append(ids[inside])
    frame = pd.concat(pieces, ignore_index=True)
    identifiers = np.concatenate(row_ids)
    records = encoded_records(frame, name, settings.format or fragments[0].format, settings.header, spec, labels,
                              locate=lambda row, message, column: row_error(fragments, int(identifiers[row]), message,
                                                                           column=column))
    if not fingerprint:
        return records, {}
    combined = input_fingerprint(fragments, fingerprint_fragments(fragments))
    return records, {"input_sha256": combined.removeprefix("sha256:")}

