"""The engines behind the engine interface (``base.py``) and the factory that picks one.

``make_engine`` imports an engine's library only when that engine is asked for, so the local
engine never pays for starting PySpark or Beam.
"""

from __future__ import annotations

from typing import Any

from pipelines.engines.base import Collection, Engine, EngineError, EngineRefused

ENGINE_NAMES = ("local", "spark", "beam")

__all__ = ["ENGINE_NAMES", "Collection", "Engine", "EngineError", "EngineRefused", "check_protection", "make_engine"]


def _beam_module() -> Any:
    """``pipelines.engines.beam``, or one line naming the extra when Apache Beam is not installed
    (it is the ``beam`` extra, not part of the core install)."""
    try:
        from pipelines.engines import beam
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith("apache_beam"):
            raise
        raise EngineError("the beam engine needs Apache Beam, which is not installed: pip install 'privlake[beam]'") \
            from None
    return beam


def check_protection(
    name: str,
    *,
    master: str | None = None,
    spark_conf: dict[str, Any] | None = None,
    beam_options: list[str] | None = None,
    allow_unencrypted: bool = False,
    **_other_options: Any,
) -> None:
    """Raise ``EngineRefused`` when ``make_engine`` with these options would refuse to start (a
    Spark cluster session without authentication and encryption, a Beam runner outside this
    process, not opted out) — without starting anything, so a release can be refused before it
    reads its input. ``make_engine`` checks the same again."""
    if name == "spark":
        from pipelines.engines.spark import check_protection as check_spark
        from pipelines.engines.spark import session_settings

        chosen = master or "local[*]"
        check_spark(chosen, session_settings(chosen, spark_conf or {}, None), allow_unencrypted)
    elif name == "beam":
        _beam_module().check_runner(beam_options or [], allow_unencrypted)


def make_engine(
    name: str,
    *,
    master: str | None = None,
    spark_conf: dict[str, Any] | None = None,
    beam_options: list[str] | None = None,
    spark_session: Any = None,
    parallelism: int | None = None,
    allow_unencrypted: bool = False,
    auth_secret_file: str | None = None,
) -> Engine:
    """The engine called ``name`` (local, spark or beam), ready to use.

    ``master`` and ``spark_conf`` apply to Spark only (an unreachable master fails within a
    few seconds with ``EngineError``), ``spark_session`` makes Spark use an existing session,
    ``beam_options`` are Beam pipeline flags, ``parallelism`` the number of partitions or
    shards of a key shuffle. ``allow_unencrypted`` lets Spark run on a cluster without
    authentication and encryption, and Beam on a runner outside this process (otherwise both are
    refused with ``EngineRefused``); ``auth_secret_file`` names the file holding a standalone Spark
    cluster's shared secret.
    """
    if name not in ENGINE_NAMES:
        raise EngineError(f"unknown engine {name!r}: choose one of {', '.join(ENGINE_NAMES)}")
    if name != "spark" and (master is not None or spark_conf or spark_session is not None or auth_secret_file):
        raise EngineError(f"a Spark master, configuration or session does not apply to the {name} engine")
    if name != "beam" and beam_options:
        raise EngineError(f"Beam pipeline options do not apply to the {name} engine")
    if name == "local":
        from pipelines.engines.local import LocalEngine

        return LocalEngine(parallelism=parallelism)
    if name == "spark":
        from pipelines.engines.spark import SparkEngine

        if spark_session is not None and master is not None:
            raise EngineError("give either a Spark master or an existing Spark session, not both")
        conf = {key: str(value) for key, value in (spark_conf or {}).items()}
        return SparkEngine(
            session=spark_session,
            master=master or "local[*]",
            conf=conf,
            parallelism=parallelism,
            allow_unencrypted=allow_unencrypted,
            auth_secret_file=auth_secret_file,
        )
    return _beam_module().BeamEngine(options=beam_options, parallelism=parallelism, allow_unencrypted=allow_unencrypted)
