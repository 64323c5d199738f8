"""PySpark connector: the ``disque`` Python data source (batch and streaming
reads and writes).  Needs the ``spark`` extra (``pip install '.[spark]'``); see docs/spark.md.

    from disque.spark import DisqueDataSource
    spark.dataSource.register(DisqueDataSource)
"""

from .source import DisqueDataSource

__all__ = ["DisqueDataSource"]
