"""A Spark task's Python worker readied for rafka's work: Spark's Python-free jars are off its
import path (PySpark would read their directories again before every task), and a jar with
Python in it stays."""

from __future__ import annotations

import os
import sys
import zipfile
from functools import partial
from pathlib import Path

import pyarrow as pa
import ray

from rafka.pipelines.spark_worker import drop_python_free_jars, prepare_task


def make_jar(path: Path, names: list[str]) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name, "x = 1\n")
    return str(path)


def test_only_jars_without_python_leave_the_path(tmp_path: Path) -> None:
    java_only = make_jar(tmp_path / "core.jar", ["org/apache/spark/A.class", "META-INF/x"])
    with_python = make_jar(tmp_path / "graphs.jar", ["graphs/__init__.py", "org/B.class"])
    missing = str(tmp_path / "gone.jar")
    path = ["/usr/lib/python3.11", java_only, with_python, missing, str(tmp_path)]
    cache: dict[str, object] = {java_only: object(), java_only + "/org": object(),
                                with_python: object(), str(tmp_path): object()}

    assert drop_python_free_jars(path, cache) == [java_only]
    assert path == ["/usr/lib/python3.11", with_python, missing, str(tmp_path)]
    assert set(cache) == {with_python, str(tmp_path)}
    assert drop_python_free_jars(path, cache) == []


def prepared_worker_jars(ray_address, namespace, batches):
    """In a Spark worker: what rafka's tasks do first, then the jars Spark gave the worker's
    PYTHONPATH and those on its sys.path now."""
    prepare_task(ray_address, namespace)
    given = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if entry.endswith(".jar")]
    on_path = [entry for entry in sys.path if entry.endswith(".jar")]
    yield pa.RecordBatch.from_pydict({"given": [given], "on_path": [on_path]})


def test_a_spark_worker_readied_for_rafka_has_no_spark_core_jar_on_its_path(spark) -> None:
    context = ray.get_runtime_context()
    probe = partial(prepared_worker_jars, context.gcs_address, context.namespace)
    workers = spark.range(2).mapInArrow(
        probe, "given array<string>, on_path array<string>").collect()

    assert workers
    for jars in workers:
        # Spark gave it its core jar, and it is off the path.
        assert any("spark-core" in jar for jar in jars["given"])
        assert not any("spark-core" in jar for jar in jars["on_path"])
