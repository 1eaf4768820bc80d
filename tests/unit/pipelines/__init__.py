"""Unit tests of ``pipelines/``: input readers, worker-side blocks, the Arrow helpers and the evaluation
reports, on small hand-built inputs and without an engine."""
