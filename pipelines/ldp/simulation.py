"""``privlake simulate-ldp``: play the clients of an ldp release, for demos, tests and benchmarks.

Reads raw secrets (one integer column on a line, or ``row``/``col`` cells of a grid), builds the
configured mix of mechanisms (families of one type with ε spread evenly over a range), assigns
every user a mechanism and privatizes their secret through the mechanism's own ``sanitize`` —
the clients' code path (``transforms.ldp.simulation.simulate_reports``, keyed randomness) — and
writes the reports table, the mechanism catalog, and optionally the true distribution for the
release's evaluation. The raw secrets file is only read.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.ldp.pipeline import estimate_frame
from pipelines.platform.errors import ConfigError, InputError
from pipelines.platform.release import release_secret
from schemas.ldp.config import LdpConfig, SecretLayout, SimulatedMechanisms, SimulationSource
from transforms.ldp.mechanisms import (
    BasicRappor,
    Mechanism,
    PlanarGeometric,
    RandomizedResponse,
    TruncatedGeometric,
)
from transforms.ldp.simulation import simulate_reports


def family_mechanisms(family: SimulatedMechanisms, secrets: SecretLayout) -> list[Mechanism]:
    """The ``count`` mechanisms of a family, ε evenly spaced over its range (``count: 1``: the low end)."""
    size = secrets.size
    if size is None:
        raise ConfigError("simulation needs the secrets' size: set secrets.values (line) or rows and columns (grid)")
    low, high = family.epsilon
    epsilons = np.linspace(low, high, family.count) if family.count > 1 else np.array([low])
    mechanisms: list[Mechanism] = []
    for epsilon in epsilons.tolist():
        if family.type == "krr":
            mechanisms.append(RandomizedResponse(epsilon, size))
        elif family.type == "rappor":
            mechanisms.append(BasicRappor(epsilon, size))
        elif family.type == "truncated_geometric":
            if secrets.layout != "line":
                raise ConfigError("simulation: truncated_geometric is a mechanism on a line (secrets.layout: line)")
            mechanisms.append(TruncatedGeometric(epsilon, secrets.first_value, secrets.first_value + size - 1))
        else:
            if secrets.layout != "grid":
                raise ConfigError("simulation: planar_geometric is a mechanism on a grid (secrets.layout: grid)")
            assert secrets.rows is not None and secrets.columns is not None
            mechanisms.append(PlanarGeometric(epsilon, secrets.rows, secrets.columns, secrets.cell_side))
    return mechanisms


def simulation_catalog(config: LdpConfig) -> tuple[dict[str, Mechanism], np.ndarray]:
    """Named mechanisms (``<type>_eps<ε>``) and each one's share of the users."""
    assert config.simulation is not None
    named: dict[str, Mechanism] = {}
    shares: list[float] = []
    for family in config.simulation.mechanisms:
        members = family_mechanisms(family, config.secrets)
        for mechanism in members:
            base = f"{family.type}_eps{float(mechanism.epsilon):.4g}"
            name, suffix = base, 2
            while name in named:
                name, suffix = f"{base}_{suffix}", suffix + 1
            named[name] = mechanism
            shares.append(family.share / len(members))
    weights = np.asarray(shares)
    return named, weights / weights.sum()


def read_simulation_secrets(source: SimulationSource, secrets: SecretLayout) -> np.ndarray:
    """The secrets' indices ``0..k-1`` from the source file, with the row of any bad value."""
    name = str(source.path)
    if not source.path.is_file():
        raise InputError(name, "file not found")
    expected = 2 if secrets.layout == "grid" else 1
    if len(source.columns) != expected:
        raise ConfigError(
            f"simulation.source.columns: layout {secrets.layout!r} needs {expected} column(s), got {source.columns}"
        )
    try:
        if source.format == "parquet":
            frame = pd.read_parquet(source.path, columns=source.columns)
        elif source.header:
            frame = pd.read_csv(source.path, usecols=source.columns)
        else:
            frame = pd.read_csv(source.path, header=None, names=source.columns)
    except (ValueError, OSError) as error:
        raise InputError(name, f"cannot be read: {str(error).splitlines()[0]}") from None
    if len(frame) == 0:
        raise InputError(name, "no rows (empty input)")
    parts = []
    for column in source.columns:
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)
        bad = ~np.isfinite(values) | (values != np.floor(values))
        if bad.any():
            row = int(np.flatnonzero(bad)[0]) + 1
            raise InputError(name, "not an integer secret", row=row, column=column)
        parts.append(values.astype(np.int64))
    size = secrets.size
    assert size is not None
    if secrets.layout == "grid":
        assert secrets.rows is not None and secrets.columns is not None
        rows, columns = parts
        outside = (rows < 0) | (rows >= secrets.rows) | (columns < 0) | (columns >= secrets.columns)
        index = rows * secrets.columns + columns
    else:
        index = parts[0] - secrets.first_value
        outside = (index < 0) | (index >= size)
    if outside.any():
        row = int(np.flatnonzero(outside)[0]) + 1
        raise InputError(name, f"secret outside the configured alphabet ({secrets.layout}, {size} secrets)", row=row,
                         column=source.columns[0])
    return index


def bit_vector_text(bits: np.ndarray) -> np.ndarray:
    """(n, k) booleans to n strings of ``0``/``1`` characters (character ``x`` is bit ``x``)."""
    width = bits.shape[1]
    characters = np.ascontiguousarray(bits.astype(np.uint8) + ord("0"))
    return characters.view(f"S{width}").ravel().astype(str).astype(object)


def simulate_ldp_reports(config: LdpConfig, source_config: str | Path = "config") -> dict[str, Path]:
    """Write the simulated reports (``config.input.path``), the catalog (``config.input.catalog``)
    and, when configured, the true distribution (``simulation.truth_out``)."""
    simulation = config.simulation
    if simulation is None:
        raise ConfigError(f"{source_config}: simulate-ldp needs a 'simulation' section")
    settings = config.input
    if settings.path is None or any(character in settings.path for character in "*?[") or "://" in settings.path \
            or Path(settings.path).is_dir():
        raise ConfigError(f"{source_config}: simulate-ldp writes one local reports file: input.path must name a file")
    reports_path = Path(settings.path)
    if reports_path.resolve() == simulation.source.path.resolve():
        raise ConfigError(f"{source_config}: input.path would overwrite the simulation's source file")
    named, shares = simulation_catalog(config)
    secrets_index = read_simulation_secrets(simulation.source, config.secrets)
    secret, _ = release_secret()
    simulated = simulate_reports(secrets_index, list(named.values()), shares, secret, f"simulate-{config.dataset}")
    names = np.array(list(named), dtype=object)
    reports = bit_vector_text(simulated.reports) if simulated.is_rappor else simulated.reports
    columns = settings.columns
    frame = pd.DataFrame(
        {
            columns.user_id: np.arange(simulated.n, dtype=np.int64),
            columns.mechanism: names[simulated.user_mechanism],
            columns.report: reports,
        }
    )
    reports_path.parent.mkdir(parents=True, exist_ok=True)
    if settings.file_format(reports_path.name) == "parquet":
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), reports_path)
    else:
        frame.to_csv(reports_path, index=False)
    settings.catalog.parent.mkdir(parents=True, exist_ok=True)
    catalog = {name: mechanism.to_spec() for name, mechanism in named.items()}
    settings.catalog.write_text(json.dumps({"mechanisms": catalog}, indent=2) + "\n", encoding="utf-8")
    written = {"reports": reports_path, "catalog": settings.catalog}
    if simulation.truth_out is not None:
        size = config.secrets.size
        assert size is not None
        truth = np.bincount(secrets_index, minlength=size) / len(secrets_index)
        simulation.truth_out.parent.mkdir(parents=True, exist_ok=True)
        estimate_frame(truth, config.secrets).to_parquet(simulation.truth_out, index=False)
        written["truth"] = simulation.truth_out
    return written
