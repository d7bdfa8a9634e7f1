"""Writing a synthetic data set as parquet parts plus ``_schema.json``, one part in memory at a time."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from tabloader.synthetic.world import file_seed, split_rows

ROW_GROUP_SIZE = 131_072


def _arrow_schema(schema: Any) -> Any:
    """The arrow schema files of ``schema`` are written with (explicit, so an empty part
    still has the right types)."""
    import pyarrow as pa

    fields = []
    for col in schema:
        typ = pa.string() if col.dtype == "string" else pa.from_numpy_dtype(np.dtype(col.dtype))
        fields.append(pa.field(col.name, pa.list_(typ) if col.is_list else typ))
    return pa.schema(fields)


def write_parts(path: str, rows: int, num_files: int, seed: Any, overwrite: bool,
                 generate: Callable[[int, Any], pd.DataFrame], schema: Any) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tabloader.atomic_files import atomic_directory
    from tabloader.filesystems import filesystem, join
    from tabloader.schema import SCHEMA_FILE_NAME

    sizes = split_rows(rows, num_files)
    arrow_schema = _arrow_schema(schema)
    with atomic_directory(path, overwrite=overwrite) as tmp:
        fs, _ = filesystem(tmp)
        for index, n in enumerate(sizes):
            frame = generate(n, file_seed(seed, index))
            table = pa.Table.from_pandas(frame, schema=arrow_schema, preserve_index=False)
            del frame
            _, target = filesystem(join(tmp, f"part_{index:05d}.parquet"))
            pq.write_table(table, target, filesystem=fs, row_group_size=ROW_GROUP_SIZE,
                           compression="snappy")
            del table
        schema.save(join(tmp, SCHEMA_FILE_NAME))
    return str(path)
