"""Starting and stopping Spark on Ray through RayDP, with the settings Java 17 needs."""

from __future__ import annotations

import logging
import os
import sys
import threading
from functools import partial
from typing import TYPE_CHECKING

import ray
import raydp

from rafka.actors.logs import jvm_stderr_to_file, quiet, quiet_ray_data, spark_log4j_config
from rafka.actors.runtime import JAVA17_OPTIONS, init_ray
from rafka.pipelines.spark_worker import ready_worker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def start_spark(
    app_name: str = "rafka",
    *,
    num_executors: int = 1,
    executor_cores: int = 1,
    executor_memory: str = "1g",
    configs: dict[str, str] | None = None,
) -> SparkSession:
    """A Spark session whose executors are Ray actors; starts local Ray first if needed.

    Defaults fit a 2-core machine: one executor of one core beside the driver.
    """
    init_ray()
    quiet_ray_data()
    # Executors start Python workers with PYSPARK_PYTHON; without it they pick the system
    # python3, which does not have pyspark.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    java_options = " ".join(JAVA17_OPTIONS)
    log4j = spark_log4j_config()  # RAFKA_LOG_LEVEL: see actors/logs.py
    settings = {
        "spark.driver.extraJavaOptions": java_options,
        "spark.executor.extraJavaOptions": java_options,
        "spark.ray.raydp_app_master.extraJavaOptions": java_options,
        "spark.pyspark.python": sys.executable,
        "spark.sql.shuffle.partitions": str(max(2, num_executors * executor_cores)),
        "spark.sql.session.timeZone": "UTC",
        "spark.log4j.config.file.name": log4j,
        "spark.ray.log4j.config.file.name": log4j,
    }
    if quiet():
        settings["spark.ui.showConsoleProgress"] = "false"  # Spark's stage bars
    settings.update(configs or {})
    with jvm_stderr_to_file("spark-driver"):
        return raydp.init_spark(
            app_name,
            num_executors=num_executors,
            executor_cores=executor_cores,
            executor_memory=executor_memory,
            configs=settings,
        )


def warm_up_spark(spark: SparkSession) -> threading.Thread:
    """Warm Spark up for a first query, in a thread of its own (returned, started): start a
    Python worker on every executor core, joined to Ray, then run a small query of the shape
    a pipeline's first one has (JSON values parsed, grouped, counted, averaged, ordered, and
    turned back into JSON), so that the JVM has loaded and compiled what it needs.

    A first query pays for both: a Spark task that reads from rafka runs in a Python worker
    that must import pyarrow and Ray and join Ray first, and Spark's planner, code generator
    and shuffle run for the first time. The demo's first aggregation took seconds more than
    the same one run again (docs/pipelines.md, "How fast"). Spark keeps its Python workers,
    and the JVM what it loaded, for what follows, so warming up while the caller does
    something else (the demo produces and consumes meanwhile) takes that out of the first
    query. `join()` the thread to wait for it."""
    cores = spark.sparkContext.defaultParallelism
    context = ray.get_runtime_context()
    job = partial(ready_worker, context.gcs_address, context.namespace)

    def ready() -> None:
        try:
            spark.range(cores, numPartitions=cores).mapInArrow(job, "id long").collect()
            _first_query(spark, cores)
        except Exception:  # not fatal: the first query warms up instead
            log.info("warming Spark up failed", exc_info=True)

    thread = threading.Thread(target=ready, name="rafka-warm-up-spark", daemon=True)
    thread.start()
    return thread


def _first_query(spark: SparkSession, cores: int) -> None:
    """A few rows through what a first aggregation runs: JSON parsed, a shuffle, counts,
    a distinct count, an average, a sort, and JSON again, collected and made a DataFrame."""
    from pyspark.sql import functions as F

    rows = spark.range(cores * 8, numPartitions=cores).select(
        F.to_json(F.struct((F.col("id") % 3).cast("string").alias("key"),
                           F.col("id").alias("amount"))).cast("binary").alias("value"))
    parsed = rows.select(F.from_json(F.col("value").cast("string"),
                                     "key string, amount long").alias("row")).select("row.*")
    summary = (parsed.groupBy("key")
               .agg(F.count("*").alias("count"), F.countDistinct("amount").alias("distinct"),
                    F.round(F.avg("amount")).cast("long").alias("mean"))
               .orderBy(F.desc("count")))
    collected = summary.collect()
    spark.createDataFrame(collected, summary.schema).select(
        F.to_json(F.struct("key", "count")).alias("value")).collect()


def stop_spark() -> None:
    """Stop the Spark session and its executor actors; Ray itself keeps running."""
    raydp.stop_spark()
