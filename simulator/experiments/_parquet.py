"""`Results` to and from Parquet, every value coming back as it went.

Parquet wants one type per column, and parameters are any JSON values: a
list (``["a", "b"]``), or an int in one setting and a string in another
(``cap: [48, "none"]``). Such a column goes as JSON text and the file's
metadata says which columns are JSON, so `Results.load` decodes exactly
those (a string parameter that happens to look like JSON stays a string).
The experiment's record goes into the metadata too, so an export describes
itself as the SQLite file does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._results import Results

__all__ = ["read", "write"]

_KEY = b"coreagent.experiments"


def _arrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ImportError(
            "experiments: Parquet files need pyarrow: pip install 'coreagent-sdk[experiments]'"
        ) from None
    return pyarrow


def _native(values: list[Any]) -> bool:
    # One Python type for the whole column (bool is not int here: True must not become 1).
    kinds = {type(v) for v in values}
    return len(kinds) == 1 and kinds <= {str, bool, int, float}


def write(results: Results, path: Path) -> Path:
    pa = _arrow()
    columns: dict[str, list[Any]] = {}
    for row in results.rows:
        for name in row:
            columns.setdefault(name, [])
    for name, values in columns.items():
        values.extend(row.get(name) for row in results.rows)
    params = set(results.params)
    encoded = []
    for name, values in columns.items():
        present = [v for v in values if v is not None]
        # A parameter's None goes as JSON too: a null in an int column comes back a float.
        if present and (not _native(present) or (name in params and len(present) < len(values))):
            columns[name] = [json.dumps(v, sort_keys=True, ensure_ascii=False) for v in values]
            encoded.append(name)
    table = pa.table(columns)
    meta = {"json_columns": encoded, "experiment": results.experiment}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           _KEY: json.dumps(meta).encode()})  # fmt: skip
    pa.parquet.write_table(table, path)
    return path


def _cell(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def read(cls: type[Results], path: Path) -> Results:
    pa = _arrow()
    try:
        table = pa.parquet.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(
            f"Results.load: {str(path)!r} is not a Parquet file ({exc}); give a file "
            "results.to_parquet(...) wrote, or a run's .sqlite file"
        ) from None
    found = (table.schema.metadata or {}).get(_KEY)
    meta = json.loads(found) if found else {"json_columns": [], "experiment": None}
    encoded = set(meta["json_columns"])
    rows = table.to_pylist()
    for row in rows:
        for name, value in row.items():
            row[name] = json.loads(value) if name in encoded and value is not None else (
                _cell(value)
            )  # fmt: skip
    return cls(rows, path=path, experiment=meta["experiment"])
