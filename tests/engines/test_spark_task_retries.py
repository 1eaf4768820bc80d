"""Fault suite: Spark task retries redraw exactly the same values.

Every random draw is keyed by (secret, release, purpose, object), so a task that fails and is
re-executed produces the same synthetic claims: no release can be biased by which attempt won,
and an attacker who could force retries learns nothing from them (no averaging attack).
Here the first attempt of half of the synthesis and global-weights tasks fails on purpose, on a
``local[2,4]`` master (two cores, up to four attempts per task), in a child driver process; the
published release must equal the one of a run without failures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipelines.engines import make_engine
from tests.cluster.test_standalone_cluster import run_on_cluster
from tests.e2e.crowd_cases import (
    assert_same_release,
    conformance_claims,
    conformance_config,
    release_on_engine,
)

pytestmark = pytest.mark.spark

INJECTED = "injected failure of a first task attempt"


def fail_first_attempt_of_even_partitions() -> None:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None and context.attemptNumber() == 0 and context.partitionId() % 2 == 0:
        raise RuntimeError(INJECTED)


def flaky_global_pass_file(task: Any, side: Any) -> Any:
    from pipelines.crowd.engine_input import global_pass_file

    fail_first_attempt_of_even_partitions()
    return global_pass_file(task, side)


def flaky_synthesize_group_file(task: Any, side: Any) -> Any:
    from pipelines.crowd.engine_input import synthesize_group_file

    fail_first_attempt_of_even_partitions()
    return synthesize_group_file(task, side)


def release_with_failing_first_attempts(engine: Any, config: dict[str, Any], release_id: str) -> dict[str, Any]:
    """Runs in the child driver: the pipeline's task functions (the later global-weights
    iterations' and the synthesis's, which write files as they go) replaced by flaky ones."""
    import pipelines.crowd.pipeline as crowd_pipeline

    crowd_pipeline.global_pass_file = flaky_global_pass_file
    crowd_pipeline.synthesize_group_file = flaky_synthesize_group_file
    result = release_on_engine(engine, config, release_id)
    result["failed_attempts_seen"] = _failed_task_attempts(engine)
    return result


def _failed_task_attempts(engine: Any) -> int:
    """Failed task attempts of every job this application ran (Spark's status tracker)."""
    tracker = engine.session.sparkContext.statusTracker()
    total = 0
    for job_id in tracker.getJobIdsForGroup():
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else ():
            stage = tracker.getStageInfo(stage_id)
            total += stage.numFailedTasks if stage else 0
    return total


def test_task_retries_publish_the_same_release(tmp_path: Path, spark_session: Any) -> None:
    claims = tmp_path / "claims.csv"
    conformance_claims().to_csv(claims, index=False)
    flaky = run_on_cluster(
        "local[2,4]",
        release_with_failing_first_attempts,
        conformance_config(claims, tmp_path / "flaky-lake"),
        "retries-1",
    )
    assert flaky["failed_attempts_seen"] > 0, "no task failed: the fault was not injected"
    with make_engine("spark", spark_session=spark_session) as engine:
        clean = release_on_engine(engine, conformance_config(claims, tmp_path / "clean-lake"), "retries-1")
    assert len(clean["rows"]) > 0
    flaky.pop("failed_attempts_seen")
    assert_same_release(flaky, clean)
