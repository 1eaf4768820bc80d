"""Table contracts every release kind shares. Each kind's own Arrow schemas live in its package
(``schemas/crowd/tables.py``, ``schemas/ldp/tables.py``)."""

from __future__ import annotations

ROW_NUMBER = "row_number"
"""The 1-based row of an input record in its file (header excluded), kept beside the record so an
error can name the row."""
