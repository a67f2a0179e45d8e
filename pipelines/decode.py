"""Decoding record keys and values into typed columns, given a schema."""

from __future__ import annotations

from typing import Any

import msgpack
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import StructType


def utf8(df: DataFrame, *columns: str) -> DataFrame:
    """Binary columns (default: key and value) as UTF-8 strings."""
    for name in columns or ("key", "value"):
        df = df.withColumn(name, F.col(name).cast("string"))
    return df


def json_values(df: DataFrame, schema: StructType | str, column: str = "value",
                into: str | None = None) -> DataFrame:
    """Parse a column of JSON documents into a struct column of `schema` (a StructType or DDL
    like "user string, clicks int"); malformed documents give nulls, as Spark's from_json."""
    return df.withColumn(into or column, F.from_json(F.col(column).cast("string"), schema))


def _msgpack_decoder(schema: StructType) -> Any:
    names = schema.fieldNames()

    @pandas_udf(schema)  # type: ignore[call-overload]
    def decode(values: pd.Series) -> pd.DataFrame:
        rows = []
        for value in values:
            document = None
            if value is not None:
                try:
                    document = msgpack.unpackb(bytes(value), raw=False)
                except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
                    document = None  # malformed: nulls, as from_json does
            if isinstance(document, dict):
                rows.append({name: document.get(name) for name in names})
            else:
                rows.append(dict.fromkeys(names))
        return pd.DataFrame(rows, columns=names)

    return decode


def msgpack_values(df: DataFrame, schema: StructType | str, column: str = "value",
                   into: str | None = None) -> DataFrame:
    """Parse a column of msgpack maps into a struct column of `schema`; malformed or non-map
    values give nulls. Only msgpack is decoded: nothing is ever unpickled."""
    if isinstance(schema, str):  # DDL, parsed by Spark itself
        schema = df.sparkSession.createDataFrame([], schema).schema
    decoder: Column = _msgpack_decoder(schema)(F.col(column))
    return df.withColumn(into or column, decoder)
