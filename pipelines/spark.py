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


def ready_python_workers(spark: SparkSession) -> threading.Thread:
    """Start a Python worker on every executor core, joined to Ray, in a job run by a thread
    of its own (returned, started); the first read of a topic then finds them ready.

    A Spark task that reads from rafka runs in a Python worker that must import pyarrow and
    Ray and join Ray first, which made the first read of the demo's pipeline take seconds more
    than the next ones (docs/pipelines.md, "How fast"). Spark keeps its Python workers for the
    tasks that follow, so readying them while the caller does something else (the demo
    produces and consumes meanwhile) takes that out of the first read."""
    cores = spark.sparkContext.defaultParallelism
    context = ray.get_runtime_context()
    job = partial(ready_worker, context.gcs_address, context.namespace)

    def ready() -> None:
        try:
            spark.range(cores, numPartitions=cores).mapInArrow(job, "id long").collect()
        except Exception:  # not fatal: the first read readies them instead
            log.info("readying Spark's Python workers failed", exc_info=True)

    thread = threading.Thread(target=ready, name="rafka-ready-python-workers", daemon=True)
    thread.start()
    return thread


def stop_spark() -> None:
    """Stop the Spark session and its executor actors; Ray itself keeps running."""
    raydp.stop_spark()
