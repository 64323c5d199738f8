"""The ``disque`` PySpark data source.

    from disque.spark import DisqueDataSource
    spark.dataSource.register(DisqueDataSource)
    spark.read.format("disque").option("queue", "q").load()

Options are validated for the operation when Spark asks for a reader or a
writer (:mod:`.options`); writers also discover the nodes there, on the
driver, so a bad node list or password fails the query before any task
runs.  Schemas: :mod:`.schema`.  Registering the source checks that
Spark's Python workers can import it (:mod:`.workers`).
"""

from pyspark.sql.datasource import DataSource

from .batch_read import BatchReader
from .connection import discover
from .options import READ, STREAM_READ_MODE, WRITE_MODE, OptionError, parse_options
from .schema import DDL
from .stream_read import StreamReader
from .workers import check_workers
from .write import BatchWriter, StreamWriter, check_schema


class DisqueDataSource(DataSource):
    """Reads jobs from and writes jobs to a Disque cluster."""

    @classmethod
    def name(cls):
        # The one method Spark calls in the driver's own Python process
        # (spark.dataSource.register); the others run in Python workers
        # started with PYSPARK_PYTHON.  So the check that those workers can
        # import this package is made here, once per SparkContext (.workers).
        check_workers()
        return "disque"

    def schema(self):
        # One schema for batch and streaming reads: Spark asks for it before
        # it says which one it is (see .schema).
        return DDL

    def reader(self, schema):
        return BatchReader(parse_options(self.options, READ))

    def streamReader(self, schema):
        options = parse_options(self.options, STREAM_READ_MODE)
        return StreamReader(options)

    def _writer_setup(self, schema, overwrite):
        options = parse_options(self.options, WRITE_MODE)
        if overwrite:
            raise OptionError("disque: only append mode is supported (a queue cannot be overwritten)")
        check_schema(options, schema)
        nodes = [addr for addr, _ in discover(options.nodes, options.password, options.username)]
        return options, nodes

    def writer(self, schema, overwrite):
        return BatchWriter(*self._writer_setup(schema, overwrite))

    def streamWriter(self, schema, overwrite):
        return StreamWriter(*self._writer_setup(schema, overwrite))
