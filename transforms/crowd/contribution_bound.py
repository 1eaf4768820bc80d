"""Contribution bounding for the source-level privacy unit.

To state a guarantee for a whole source (user), each source may influence at most ``L``
objects. A source with more claims keeps ``L`` of them chosen uniformly at random: each claim
gets a keyed priority ``U(source, object)`` and the ``L`` smallest priorities are kept — the
same choice on every engine and on every retry (DESIGN.md, keyed randomness).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from transforms.core.keyed_randomness import keyed_uniform

CONTRIBUTION_BOUND_PURPOSE = "crowd/contribution-bound"


def bound_source_contributions(
    claims: pd.DataFrame, max_objects_per_source: int, secret: bytes, release_id: str
) -> pd.DataFrame:
    """Keep at most ``max_objects_per_source`` claims per source (whole sources in ``claims``).

    ``claims`` has one claim per (object, source) (duplicates were resolved before), so
    keeping ``L`` claims of a source keeps ``L`` objects.
    """
    if len(claims) == 0:
        return claims
    priorities = np.fromiter(
        (
            keyed_uniform(secret, release_id, CONTRIBUTION_BOUND_PURPOSE, (source, obj))
            for source, obj in zip(claims["source_id"].tolist(), claims["object_id"].tolist(), strict=True)
        ),
        dtype=np.float64,
        count=len(claims),
    )
    ranked = claims.assign(_priority=priorities)
    rank = ranked.groupby("source_id", sort=False)["_priority"].rank(method="first")
    return claims[(rank <= max_objects_per_source).to_numpy()].reset_index(drop=True)
