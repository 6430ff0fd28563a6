"""PySpark data source and sink for Headwater (and any Kafka broker), named ``headwater``.

Register it once per SparkSession, then use it like Spark's Kafka connector::

    import headwater.spark
    headwater.spark.register(spark)

    df = (spark.readStream.format("headwater")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "page-views")
          .option("maxOffsetsPerTrigger", 10000)
          .load())
    # key, value, topic, partition, offset, timestamp, timestampType [, headers]

    (df.selectExpr("key", "upper(cast(value as string)) as value")
       .writeStream.format("headwater")
       .option("kafka.bootstrap.servers", "127.0.0.1:9092")
       .option("topic", "shouting")
       .option("checkpointLocation", "/tmp/ckpt")
       .start())

Source options (names and defaults as in Spark's Kafka source, case-insensitive):

=================================  ==========================================
``kafka.bootstrap.servers``        required (alias ``headwater.bootstrap.servers``)
``subscribe``                      comma-separated topics; or
``subscribePattern``               a regex over topic names; or
``assign``                         JSON ``{"topic":[0,1]}``
``startingOffsets``                ``earliest`` / ``latest`` / JSON
                                   ``{"topic":{"0":23,"1":-2}}`` (-2 earliest,
                                   -1 latest); streaming default ``latest``,
                                   batch default ``earliest``
``endingOffsets``                  batch only: ``latest`` (default) or JSON
``maxOffsetsPerTrigger``           offsets per micro-batch, shared over
                                   partitions by backlog; honoured by
                                   ``trigger(availableNow=True)`` too
``minPartitions``                  split offset ranges into at least this
                                   many tasks
``failOnDataLoss``                 ``true`` (default): fail when offsets to
                                   read are gone; ``false``: skip them
``includeHeaders``                 add ``headers array<struct<key, value>>``
``kafka.isolation.level``          ``read_uncommitted`` (default, as Spark's
                                   Kafka source) / ``read_committed``: skip
                                   aborted transactions, read up to the last
                                   stable offset
``kafkaConsumer.pollTimeoutMs``    how long a task waits for records
                                   (120000)
``kafka.client.rack``              the executors' rack (zone): with a broker
                                   ``replica.selector.class`` set, tasks read
                                   from an in-sync replica in that rack
                                   instead of the leader (KIP-392); an
                                   executor's ``HEADWATER_CLIENT_RACK``
                                   environment variable wins over it
``kafka.*``                        other client settings, e.g.
                                   ``kafka.max.partition.fetch.bytes``
=================================  ==========================================

Schema: ``key binary, value binary, topic string, partition int, offset
long, timestamp timestamp, timestampType int`` (+ ``headers``). Offsets are
checkpointed as JSON ``{"topic":{"partition":offset}}`` with sorted keys.

Sink (``write`` with ``mode("append")``, or ``writeStream``): columns
``value`` (binary or string), optional ``key``, ``topic`` (or the option
``topic``, which wins), ``partition`` and ``headers``; producer settings as
``kafka.*`` options (``kafka.compression.type``, default ``lz4``;
``kafka.linger.ms``, ``kafka.batch.size``, ``kafka.acks``). Like Spark's
Kafka sink it is at-least-once, unless ``exactlyOnce`` is ``true``: then each
task writes in a Kafka transaction the driver commits with the micro-batch,
with the sink's progress committed in the same transaction, so a replayed
batch is written exactly once for ``read_committed`` readers
(``transactionalIdPrefix``, default ``headwater-sink``, starts the task
transactional ids; ``kafka.transaction.timeout.ms``, default 300000, must
cover a whole micro-batch). See ``headwater.spark.exactly_once``.

Executors in several zones: ``kafka.client.rack`` is one value per query,
set on the driver, but each executor reads best from the replica in *its own*
zone, so an executor's ``HEADWATER_CLIENT_RACK`` (e.g. set from its node's
zone label via ``spark.executorEnv.HEADWATER_CLIENT_RACK`` or the pod spec)
replaces the option in that executor's consumers.

Executors need the ``headwater`` package importable by ``PYSPARK_PYTHON``
(the demo ships it with ``addPyFile`` to remote clusters).
"""

from __future__ import annotations

from typing import Any

from headwater.spark.source import HeadwaterDataSource

__all__ = ["HeadwaterDataSource", "register"]


def register(spark: Any) -> None:
    """Make ``format("headwater")`` available in ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(HeadwaterDataSource)
