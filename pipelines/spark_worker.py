"""What a Spark task's Python worker does before rafka's work in it: join Ray, and take off its
import path the jars that hold no Python.

PySpark puts Spark's core jar on every Python worker's ``sys.path`` (``PythonUtils``'
``sparkPythonPath``), and before every task it calls ``importlib.invalidate_caches()``, which
makes Python's zip importer read that jar's directory again: thousands of entries, tens of ms
a task (bench/results/pipelines-history.md). The jar holds no Python module, so nothing can
be imported from it. Spark reuses a worker for the tasks that follow, so dropping such jars
from its path once spares every later task of that worker, rafka's or not. A jar with Python
in it (a package shipped with ``--py-files`` or ``--packages``) stays.
"""

from __future__ import annotations

import logging
import sys
import zipfile
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import ray

_PYTHON_SUFFIXES = (".py", ".pyc", ".so")


def prepare_task(ray_address: str, driver_namespace: str) -> None:
    """Ready this worker for a rafka task: see the module docstring."""
    join_driver_ray(ray_address, driver_namespace)
    drop_python_free_jars(sys.path, sys.path_importer_cache)


def ready_worker(ray_address: str, driver_namespace: str,
                 batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A `mapInArrow` function that only readies its worker (`pipelines.spark.
    warm_up_spark`) and passes its input through."""
    prepare_task(ray_address, driver_namespace)
    yield from batches


def join_driver_ray(ray_address: str, driver_namespace: str) -> None:
    """Join Ray from a Spark task's Python worker, once per worker (Spark reuses them)."""
    if not ray.is_initialized():
        ray.init(address=ray_address, namespace=driver_namespace,
                 logging_level=logging.WARNING, log_to_driver=False)


def drop_python_free_jars(path: list[str], importer_cache: dict[str, Any]) -> list[str]:
    """Remove from `path` (and its importers from `importer_cache`) every ``.jar`` in which no
    file is Python; returns what was removed."""
    dropped = [entry for entry in path if entry.endswith(".jar") and not _holds_python(entry)]
    for jar in dropped:
        path.remove(jar)
        for key in [key for key in importer_cache if key == jar or key.startswith(jar + "/")]:
            del importer_cache[key]
    return dropped


def _holds_python(jar: str) -> bool:
    try:
        with zipfile.ZipFile(jar) as archive:
            return any(name.endswith(_PYTHON_SUFFIXES) for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return True  # not ours to judge: leave it where it is
