"""Print how many jobs each queue holds, and a few results, with a batch
read (which does not consume anything).

    python examples/spark/check.py --nodes 127.0.0.1:7711
"""

import argparse
import os
import sys

from pyspark.sql import SparkSession

from disque.spark import DisqueDataSource


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="127.0.0.1:7711")
    parser.add_argument("--queues", default="orders,totals")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.master("local[2]").appName("disque-check").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(DisqueDataSource)
    jobs = spark.read.format("disque").option("nodes", args.nodes).option("queue", args.queues).load()
    jobs.groupBy("queue", "state").count().orderBy("queue", "state").show()
    jobs.where("queue = 'totals'").selectExpr("cast(body as string) as result").show(5, truncate=False)


if __name__ == "__main__":
    main()
