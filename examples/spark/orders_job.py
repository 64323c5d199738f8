"""A Structured Streaming job: consume the ``orders`` queue, compute each
order's total, write the results to the ``totals`` queue.

Reading is at least once (a job is acknowledged only after the batch that
holds it has been written to ``totals``); writing adds no duplicate when a
task or the whole micro-batch is run again (DEDUP keys).  Jobs delivered
twice after a failure can still reach ``totals`` twice: give the result a
key of its own (``dedupColumn``) to drop those too, as done here with the
order number.

    python examples/spark/orders_job.py --nodes 127.0.0.1:7711 --checkpoint /tmp/orders-ckpt
"""

import argparse
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from disque.spark import DisqueDataSource


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="127.0.0.1:7711")
    parser.add_argument("--source", default="orders")
    parser.add_argument("--target", default="totals")
    parser.add_argument("--checkpoint", default="/tmp/disque-orders-checkpoint")
    parser.add_argument("--available-now", action="store_true",
                        help="process what is queued now, then stop")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("disque-orders")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(DisqueDataSource)

    orders = (spark.readStream.format("disque").option("nodes", args.nodes)
              .option("queue", args.source).option("maxJobsPerTrigger", 2000).load())
    order = F.from_json(F.col("body").cast("string"),
                        "order long, item string, quantity int, price double")
    totals = (orders.select(order.alias("o"))
              .select(F.col("o.order").cast("string").alias("key"),
                      F.to_json(F.struct(F.col("o.order").alias("order"), F.col("o.item").alias("item"),
                                         F.round(F.col("o.quantity") * F.col("o.price"), 2).alias("total")))
                      .alias("body")))
    writer = (totals.writeStream.format("disque").option("nodes", args.nodes)
              .option("queue", args.target).option("dedupColumn", "key")
              .option("checkpointLocation", args.checkpoint))
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="1 second")
    query = writer.start()
    print("streaming %s -> %s (Ctrl-C to stop)" % (args.source, args.target), flush=True)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()


if __name__ == "__main__":
    main()
