"""The checks of ``--input`` and ``--output`` paths before any Spark session starts
(``sidecar.analytics.arguments``): an input must exist and be readable, an output must
be, or be able to become, a directory this process may write in, and without
``--overwrite`` an existing output must look like an earlier output of the same command.
Paths without a scheme are on this machine; ``check_replaceable`` also reaches Hadoop's
file systems through a ``Lister``. A refusal is a ``UsageError`` (one line, exit 2).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import stat
from pathlib import Path

from .errors import UsageError
from .output import REPORT_NAME
from .paths import Lister, child, local_path
from .streaming import CHECKPOINT_DIR, EVENTS_DIR
from .tables import TABLE_NAMES

# Hadoop's glob characters; Python's glob knows all but the {a,b} alternatives.
_GLOB = re.compile(r"[*?\[{]")


def local_matches(text: str) -> list[Path]:
    path = local_path(text)
    if path is None:
        return []
    if _GLOB.search(str(path)):
        return [Path(match).resolve() for match in glob.glob(str(path))]
    return [path.resolve()]


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def check_input(text: str) -> None:
    path = local_path(text)
    if path is None:
        return
    if _GLOB.search(str(path)):
        if "{" not in str(path) and not glob.glob(str(path)):
            raise UsageError(f"--input {text}: no file matches")
        return
    try:
        mode = path.stat().st_mode
    except OSError as error:
        raise UsageError(f"--input {text}: {_reason(error)}") from None
    wanted = os.R_OK | os.X_OK if stat.S_ISDIR(mode) else os.R_OK
    if not os.access(path, wanted):
        raise UsageError(f"--input {text}: permission denied")


def check_output(option: str, given: str) -> None:
    """``given`` is, or can be made, a directory this process may write in."""
    path = local_path(given)
    if path is None:
        return
    path = path.absolute()
    for existing in (path, *path.parents):
        try:
            mode = existing.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as error:
            raise UsageError(f"{option} {given}: {_reason(error)}") from None
        if not stat.S_ISDIR(mode):
            where = "" if existing == path else f"{existing} "
            raise UsageError(f"{option} {given}: {where}is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {given}: permission denied")
        return


def check_replaceable(args: argparse.Namespace, lister: Lister, *, convert: bool) -> None:
    """Without ``--overwrite``, an existing ``--output`` must be empty or look like an
    earlier output of the same command: ``convert`` replaces the whole directory, the job
    its tables, ``report.html`` (and, streaming, ``_events``) in it. ``lister`` reaches
    the output's file system (this machine's, or Hadoop's for a URI)."""
    if args.overwrite:
        return
    entries = lister(args.output)
    if not entries:  # missing, or empty (not a directory: refused elsewhere)
        return
    if convert and not _converted(lister, args.output, entries):
        raise UsageError(
            f"--output {args.output}: not empty and not a Parquet dataset convert wrote "
            "(convert replaces the whole directory); pass --overwrite to replace it"
        )
    if not convert and not _job_output(lister, args.output, entries):
        raise UsageError(
            f"--output {args.output}: not empty and not an earlier output of the job "
            "(it replaces its tables and report.html there); pass --overwrite to write there"
        )


#: Files Spark writes into a Parquet dataset besides its parts: the job's marker and the
#: summary files of ``parquet.summary.metadata.level``.
_DATASET_FILES = {"_SUCCESS", "_metadata", "_common_metadata"}


def _hidden(name: str) -> bool:
    """A dot-file: Hadoop's ``.crc`` checksums, ``.DS_Store``, an editor's or NFS's."""
    return name.startswith(".")


def _parquet_dataset(lister: Lister, where: str, entries: list[tuple[str, bool]] | None) -> bool:
    """Only what Spark writes for a Parquet dataset: ``part-*`` files, ``_SUCCESS``, the
    summary files ``_metadata`` and ``_common_metadata``, a failed write's ``_temporary``
    or ``.spark-staging-*``, the S3A magic committer's ``__magic*``, ``key=value``
    partition directories holding the same, and hidden files (``.crc`` checksums,
    ``.DS_Store``)."""
    if entries is None:
        return False
    for name, is_dir in entries:
        if not is_dir:
            if not (name in _DATASET_FILES or name.startswith("part-") or _hidden(name)):
                return False
        elif not (
            name == "_temporary"
            or name.startswith(("__magic", ".spark-staging-"))
            or (
                "=" in name
                and not name.startswith(("_", "."))
                and _parquet_dataset(lister, child(where, name), lister(child(where, name)))
            )
        ):
            return False
    return True


def _converted(lister: Lister, where: str, entries: list[tuple[str, bool]]) -> bool:
    """A dataset convert wrote: as :func:`_parquet_dataset`, and not hidden files only
    (convert deletes the whole directory: a new account's home holds only those)."""
    return _parquet_dataset(lister, where, entries) and not all(
        _hidden(name) and not is_dir for name, is_dir in entries
    )


def _job_output(lister: Lister, where: str, entries: list[tuple[str, bool]]) -> bool:
    """Only what the job (batch or streaming) writes under its ``--output``, and hidden
    files (which it leaves alone)."""
    for name, is_dir in entries:
        if name in {*TABLE_NAMES, EVENTS_DIR}:
            ok = is_dir and _parquet_dataset(lister, child(where, name), lister(child(where, name)))
        elif name == CHECKPOINT_DIR:
            ok = is_dir
        elif is_dir:
            ok = False
        else:
            ok = name in {REPORT_NAME, f"{REPORT_NAME}.partial"} or _hidden(name)
        if not ok:
            return False
    return True
