"""The ``headwater`` data source: Spark's entry point to the readers and writers.

Spark pickles this object to every Python process it starts for the
source, so it holds only the raw options; each reader or writer parses
them (and fails the query with a clear message) when Spark asks for it.

The readers and writers are imported when Spark asks for one, not with
this module: Spark unpickles the source in a fresh Python process for
every streaming query (and in its planning workers), and a reader has no
use for the sink's producer stack, nor a writer for the consumer's.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from headwater.spark.options import bool_option, parse_sink_options, parse_source_options
from headwater.spark.schema import source_schema


class HeadwaterDataSource(DataSource):  # type: ignore[misc]
    """Read and write Headwater (or Kafka) topics with the Kafka connector's options."""

    @classmethod
    def name(cls) -> str:
        return "headwater"

    def schema(self) -> StructType:
        opts = {str(k).lower(): str(v) for k, v in self.options.items()}
        return source_schema(bool_option(opts, "includeheaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        from headwater.spark.reader import HeadwaterBatchReader

        return HeadwaterBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from headwater.spark.reader import HeadwaterStreamReader

        return HeadwaterStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from headwater.spark.sink import HeadwaterBatchWriter, check_sink_schema

        if overwrite:
            raise ValueError("the headwater sink only appends: use mode('append')")
        options = parse_sink_options(self.options)
        return HeadwaterBatchWriter(options, check_sink_schema(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from headwater.spark.sink import HeadwaterStreamWriter, check_sink_schema

        options = parse_sink_options(self.options)
        return HeadwaterStreamWriter(options, check_sink_schema(schema, options))
