"""Read an ldp release's mechanism catalog on the driver, with one-line errors.

The catalog is a JSON mapping of mechanism name to spec (``transforms.ldp.mechanisms``
``to_spec()``), optionally under a top-level ``"mechanisms"`` key. Problems name the file: an
invalid spec (e.g. ε ≤ 0), mechanisms over different secret alphabets, and a mix the chosen
estimator cannot take (INV_M and IBU_M need one output alphabet; RAP_M needs RAPPOR). Sizes are
bounded before any work: the catalog file (16 MiB), its mechanisms (10,000), each one's secrets
(``MAX_SECRETS``) and their channel matrices together (2^28 cells).

The reports — one row per user, ``(user_id, mechanism, report)``, ``mechanism`` a catalog name and
``report`` an index into that mechanism's output alphabet, or for RAPPOR the bit vector written as
a string of ``0``/``1`` characters (character ``x`` is bit ``x``) — are never read here: the engine
reads, checks and counts them where they live (``pipelines/ldp/engine_input.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.platform.errors import ConfigError, InputError, one_line
from schemas.ldp.config import MAX_SECRETS, ReportColumns, SecretLayout
from transforms.ldp.mechanisms import BASIC_RAPPOR, BasicRappor, Mechanism, mechanism_from_spec

MAX_CATALOG_BYTES = 16 << 20
"""A mechanism catalog is a few specs: a larger file is refused before it is parsed."""
MAX_MECHANISMS = 10_000
MAX_CHANNEL_CELLS = 1 << 28
"""The estimators' channel matrices (secrets x reports per mechanism, float64) hold at most this
many cells in all (2 GiB), checked before any report is read."""


def private_columns(columns: ReportColumns) -> dict[str, str]:
    """The input columns an ldp release protects, for the input-selection check
    (``pipelines/platform/selection.py``): the report (each user's privatized secret). The estimate
    takes the reports as independent draws of the users' mechanisms; a selection on the report
    would make it an estimate of something else. The user id and the mechanism (each listed with
    its count in the manifest) are public."""
    return {columns.report: "the users' privatized reports"}


@dataclass(frozen=True)
class MechanismCatalog:
    """The catalog's mechanisms in sorted name order; a mechanism's code is its position."""

    names: tuple[str, ...]
    mechanisms: tuple[Mechanism, ...]
    specs: tuple[dict[str, Any], ...]

    @property
    def bit_vectors(self) -> bool:
        return isinstance(self.mechanisms[0], BasicRappor)

    @property
    def input_size(self) -> int:
        return int(self.mechanisms[0].input_size)

    @property
    def output_sizes(self) -> np.ndarray:
        if self.bit_vectors:
            return np.full(len(self.names), self.input_size, dtype=np.int64)
        return np.array([int(mechanism.output_size) for mechanism in self.mechanisms], dtype=np.int64)

    def to_json(self) -> dict[str, Any]:
        return dict(zip(self.names, self.specs, strict=True))


def read_mechanism_catalog(path: Path, secrets: SecretLayout) -> MechanismCatalog:
    """The catalog at ``path``, checked: valid specs, one secret alphabet (matching ``secrets``
    when its size is given), and RAPPOR not mixed with matrix mechanisms."""
    name = str(path)
    if not path.is_file():
        raise InputError(name, "mechanism catalog not found")
    if path.stat().st_size > MAX_CATALOG_BYTES:
        raise InputError(name, f"the mechanism catalog is larger than {MAX_CATALOG_BYTES >> 20} MiB")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else one_line(str(error))
        raise InputError(name, f"the mechanism catalog is not valid JSON: {reason}") from None
    if isinstance(document, dict) and isinstance(document.get("mechanisms"), dict):
        document = document["mechanisms"]
    if not isinstance(document, dict) or not document:
        raise InputError(name, "the mechanism catalog must be a non-empty JSON mapping of name to spec")
    names = tuple(sorted(document))
    mechanisms, specs = [], []
    for mechanism_name in names:
        spec = document[mechanism_name]
        try:
            mechanism = mechanism_from_spec(spec)
        except (ValueError, TypeError, OverflowError) as error:
            raise InputError(name, one_line(f"mechanism {mechanism_name!r}: {error}")) from None
        if int(mechanism.input_size) > MAX_SECRETS:
            raise InputError(name, f"mechanism {mechanism_name!r} takes {int(mechanism.input_size)} secrets; "
                                   f"at most {MAX_SECRETS} (the estimators hold secrets x reports matrices)")
        mechanisms.append(mechanism)
        specs.append(mechanism.to_spec())
    if len(names) > MAX_MECHANISMS:
        raise InputError(name, f"the catalog has {len(names)} mechanisms; at most {MAX_MECHANISMS}")
    cells = sum(int(m.input_size) * int(m.output_size) for m in mechanisms if m.name != BASIC_RAPPOR)
    if cells > MAX_CHANNEL_CELLS:
        raise InputError(name, f"the mechanisms' channel matrices would hold {cells} cells; at most "
                               f"{MAX_CHANNEL_CELLS} ({MAX_CHANNEL_CELLS * 8 >> 30} GiB): use fewer or smaller mechanisms")
    sizes = {mechanism_name: int(m.input_size) for mechanism_name, m in zip(names, mechanisms, strict=True)}
    if len(set(sizes.values())) > 1:
        first, other = names[0], next(n for n in names if sizes[n] != sizes[names[0]])
        raise InputError(
            name,
            f"mechanisms take different secret alphabets: {first!r} has {sizes[first]} secrets, "
            f"{other!r} has {sizes[other]}",
        )
    kinds = {mechanism.name == BASIC_RAPPOR for mechanism in mechanisms}
    if len(kinds) > 1:
        raise InputError(name, "RAPPOR (bit-vector reports) cannot be mixed with integer-report mechanisms in one catalog")
    expected = secrets.size
    if expected is not None and expected != sizes[names[0]]:
        raise InputError(
            name, f"the mechanisms take {sizes[names[0]]} secrets but the config's secrets layout has {expected}"
        )
    if secrets.layout == "grid":
        for mechanism_name, mechanism in zip(names, mechanisms, strict=True):
            shape = (getattr(mechanism, "rows", None), getattr(mechanism, "columns", None))
            if shape != (None, None) and shape != (secrets.rows, secrets.columns):
                raise InputError(
                    name,
                    f"mechanism {mechanism_name!r} is over a {shape[0]} x {shape[1]} grid, "
                    f"the config's secrets are {secrets.rows} x {secrets.columns}",
                )
    return MechanismCatalog(names, tuple(mechanisms), tuple(specs))


def check_estimator_fits(catalog: MechanismCatalog, method: str, catalog_path: Path) -> None:
    """Refuse, with the reason and the way out, a mix of mechanisms the estimator cannot take."""
    if method == "rap_m" and not catalog.bit_vectors:
        raise ConfigError(f"{catalog_path}: estimator rap_m needs RAPPOR reports; these mechanisms are not RAPPOR (use gibu)")
    if method in ("inv_m", "ibu_m"):
        if catalog.bit_vectors:
            raise ConfigError(
                f"{catalog_path}: estimator {method} needs one output alphabet of integer reports; RAPPOR's "
                "has 2^k bit vectors (use rap_m or gibu)"
            )
        sizes = catalog.output_sizes
        if len(set(sizes.tolist())) > 1:
            first = catalog.names[0]
            other = catalog.names[int(np.flatnonzero(sizes != sizes[0])[0])]
            raise ConfigError(
                f"{catalog_path}: estimator {method} needs one output alphabet, but mechanism {first!r} reports "
                f"0..{sizes[0] - 1} and {other!r} reports 0..{sizes[catalog.names.index(other)] - 1}; "
                "use estimator.method: gibu, which takes any mix"
            )
