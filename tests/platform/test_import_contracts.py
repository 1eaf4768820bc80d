"""The layer and room rules of ``docs/ARCHITECTURE.md`` hold, and the contracts that state them
(``[tool.importlinter]`` in ``pyproject.toml``) can fail: one wrong import per rule, planted in a
copy of the tree, breaks exactly the contract it should."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root, env=environment, capture_output=True, text=True, timeout=300,
    )


def test_the_tree_keeps_every_contract() -> None:
    completed = lint_imports(PROJECT)
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "0 broken" in completed.stdout


PLANTED = [
    ("transforms/crowd/bandwidth.py", "import pipelines.platform.lake", "layers: pipelines over transforms over schemas"),
    ("transforms/tabular/encoding.py", "import pyspark", "transforms and schemas import no engine"),
    ("schemas/ldp/config.py", "import schemas.crowd.config", "no schemas kind imports another"),
    ("transforms/filter/vae.py", "import transforms.tabular.encoding", "no transforms kind imports another"),
    ("pipelines/ldp/input.py", "import pipelines.crowd.input", "no pipelines kind imports another"),
    ("pipelines/platform/ledger.py", "import pipelines.crowd.pipeline",
     "shared code imports no kind (platform, engines, core, shared schemas)"),
    ("pipelines/engines/local.py", "import transforms.core.keyed_randomness",
     "engines hold no mathematics and no release logic"),
]


@pytest.mark.parametrize(("path", "line", "contract"), PLANTED, ids=[planted[2] for planted in PLANTED])
def test_a_planted_wrong_import_breaks_its_contract(tmp_path: Path, path: str, line: str, contract: str) -> None:
    for package in ("schemas", "transforms", "pipelines"):
        shutil.copytree(PROJECT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / path
    target.write_text(target.read_text() + f"\n{line}  # planted by the test\n")
    completed = lint_imports(tmp_path)
    assert completed.returncode != 0
    broken = [text.strip() for text in completed.stdout.splitlines() if text.strip().endswith("BROKEN")]
    assert f"{contract} BROKEN" in broken, completed.stdout[-3000:]
