"""Paths and URIs of the job's inputs and outputs.

A path is kept as the text given (``s3a://bucket/x``, ``hdfs://nn/x``, ``file:///tmp/x``,
``out/``) until Spark or Hadoop reads it: ``pathlib.Path`` folds the ``//`` after a
scheme (``s3a:/bucket/x``). Only a local one (no scheme, or ``file:``) is looked at
with Python's own file functions; any other goes through Hadoop's ``FileSystem`` of the
running session, as Spark itself would reach it. Under spark-submit the job first
qualifies an output without a scheme on the cluster's default file system
(:func:`on_default_fs`): it is local only if that file system is.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pyspark.sql import SparkSession

#: A path or URI as the job accepts one: text, or a local ``Path``.
Target = str | os.PathLike[str]
#: A local ``Path``, or text (a local path or any URI), kept as given.
PathOrUri = TypeVar("PathOrUri", str, Path)

#: (name, is a directory) of each entry of a directory.
Entry = tuple[str, bool]
#: The entries of the directory a path names; None when it names no directory.
Lister = Callable[[str], list[Entry] | None]


def text(target: Target) -> str:
    return os.fspath(target)


def local_path(target: Target) -> Path | None:
    """The local file ``target`` names, or None for another file system's URI (Hadoop's
    rule: a colon before the first slash starts a scheme; ``file:`` is local)."""
    if isinstance(target, Path):
        return target
    given = text(target)
    scheme = _scheme(given)
    if scheme is None:
        return Path(given)
    if scheme == "file":
        # Hadoop's reading: all after the authority is the path, `#` and `?` included
        # (a qualified local path keeps them as they are; urlsplit cut them off).
        rest = given[len(scheme) + 1 :]
        if rest.startswith("//"):
            end = rest.find("/", 2)
            rest = rest[end:] if end != -1 else "/"
        return Path(rest)
    return None


def _scheme(given: str) -> str | None:
    """The scheme of ``given`` in lower case, None for a path without one."""
    colon, slash = given.find(":"), given.find("/")
    if colon == -1 or (slash != -1 and slash < colon):
        return None
    return given[:colon].lower()


def child(base: PathOrUri, name: str) -> PathOrUri:
    """``base/name``, of the type given: a URI stays text with its ``//`` intact."""
    if isinstance(base, Path):
        return base / name
    return f"{base.rstrip('/')}/{name}" if base.rstrip("/") else f"/{name}"


def list_local(target: str) -> list[Entry] | None:
    path = local_path(target)
    if path is None:
        raise ValueError(f"not a local path: {target}")
    try:
        with os.scandir(path) as entries:
            return [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    except (FileNotFoundError, NotADirectoryError):
        return None


def _hadoop_path(spark: SparkSession, target: str) -> Any:
    """Hadoop's ``Path`` for ``target`` (PySpark reaches Hadoop only through py4j)."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001 - PySpark's only way to the JVM
    assert jvm is not None
    return jvm.org.apache.hadoop.fs.Path(target)


def _hadoop(spark: SparkSession, target: str) -> tuple[Any, Any]:
    """(Hadoop ``FileSystem``, ``Path``) for ``target`` in ``spark``'s configuration."""
    path = _hadoop_path(spark, target)
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001 - as above
    return path.getFileSystem(conf), path


def on_default_fs(spark: SparkSession, target: str) -> str:
    """``target`` as Spark resolves it: a path without a scheme on ``spark``'s default
    file system (``fs.defaultFS``), a relative one against that file system's working
    directory (``out`` is ``hdfs://nn:8020/user/me/out`` on YARN, ``file:/cwd/out`` when
    the default is local). Any other is returned as given."""
    if _scheme(target) is not None:
        return target
    fs, path = _hadoop(spark, target)
    return str(fs.makeQualified(path).toString())


def hadoop_lister(spark: SparkSession) -> Lister:
    """A :data:`Lister` through Hadoop (any scheme Spark can read)."""

    def entries(target: str) -> list[Entry] | None:
        fs, path = _hadoop(spark, target)
        if not fs.exists(path) or not fs.getFileStatus(path).isDirectory():
            return None
        return [(str(s.getPath().getName()), bool(s.isDirectory())) for s in fs.listStatus(path)]

    return entries


def write_text(spark: SparkSession, target: str, content: str) -> None:
    """Write ``content`` to ``target`` through Hadoop, whole: into ``target.partial``
    first, then renamed over ``target`` (HDFS renames atomically but will not replace,
    so an older file is deleted just before; object stores copy)."""
    fs, path = _hadoop(spark, target)
    partial = _hadoop_path(spark, f"{target}.partial")
    stream = fs.create(partial, True)
    try:
        stream.write(bytearray(content.encode("utf-8")))
    finally:
        stream.close()
    fs.delete(path, False)
    if not fs.rename(partial, path):
        raise OSError(f"could not rename {partial} to {target}")
