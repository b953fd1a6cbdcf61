"""The version checksum (``<version>.crc``, Delta protocol: "Version Checksum File") of a commit delta-rs made,
carried forward from the checksum of the version before it.

delta-rs writes no checksum. Spark's Delta then loads such a version by reconstructing the table's state from the
log, and computes the checksum of its own next commit the same way (it derives a commit's checksum incrementally,
from the previous version's, only where that one exists): on the state table, 1-2 s added to the batch after
retention's fold, which the fold's delta-rs write had saved. A commit of adds and removes changes a checksum in a
few fields: the size and file count, the file-size histogram, the deleted-record-count histogram (files without
deletion vectors: its first bin) and, where the previous checksum lists every file (``allFiles``, a small table), the
list; where it does not and the commit brings the table back to 50 files or fewer (a fold, a bin-packing), the list
is read from the log (``live_files``), else Spark's next commit would reconstruct the state to make one. Anything
else in the commit (metadata, protocol, transactions, domain metadata, deletion vectors), or a field this module does
not know, and no checksum is written (Spark then reconstructs, as before).

Example::

    carry_checksum(folder, version=read + 1)  # after delta-rs committed version read + 1
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

log = logging.getLogger(__name__)

KNOWN_FIELDS = {
    "txnId",
    "tableSizeBytes",
    "numFiles",
    "numDeletedRecordsOpt",
    "numDeletionVectorsOpt",
    "numMetadata",
    "numProtocol",
    "setTransactions",
    "domainMetadata",
    "metadata",
    "protocol",
    "fileSizeHistogram",
    "histogramOpt",
    "deletedRecordCountsHistogramOpt",
    "allFiles",
}
ALL_FILES_AT_MOST = 50
"""Delta lists every file in a checksum up to this many (``allFilesInCrc.thresholdNumFiles``)."""


def checksum_file(log_dir: Path, version: int) -> Path:
    return log_dir / f"{version:020d}.crc"


def carry_checksum(folder: str, *, version: int) -> bool:
    """Write the checksum of ``version`` (a commit of adds and removes only) from that of ``version - 1``. False
    (nothing written) where the previous one is missing or the commit or checksum holds what this does not carry."""
    log_dir = Path(folder) / "_delta_log"
    target = checksum_file(log_dir, version)
    try:
        previous = json.loads(checksum_file(log_dir, version - 1).read_text())
        carried = next_checksum(previous, commit_actions(log_dir, version))
        if carried is None or target.exists():
            return False
        if "allFiles" not in carried and carried["numFiles"] <= ALL_FILES_AT_MOST:
            # Back under the threshold (a fold or a bin-packing of a larger table): Spark's next commit would
            # otherwise reconstruct this version's state to list its files (``incrementallyComputeAddFiles``).
            try:
                files = live_files(log_dir, version)
            except (OSError, ValueError, KeyError, TypeError) as error:  # the checksum goes without the list
                log.debug("no file list for version %s of %s: %s", version, folder, error)
                files = None
            # The count and size must agree with the carried ones (a remove that names its file otherwise than
            # the add did would leave a file listed).
            if (
                files is not None
                and len(files) == carried["numFiles"]
                and sum(f["size"] for f in files) == carried["tableSizeBytes"]
            ):
                carried["allFiles"] = files
        _write_atomically(target, json.dumps(carried, separators=(",", ":")))
        return True
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.debug("no checksum carried to version %s of %s: %s", version, folder, error)
        return False


ADD_FIELDS = (
    "path",
    "partitionValues",
    "size",
    "modificationTime",
    "dataChange",
    "stats",
    "tags",
    "baseRowId",
    "defaultRowCommitVersion",
    "clusteringProvider",
)
"""The fields of an add action a checksum lists (``AddFile``; deletion vectors are never carried)."""
CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")


def live_files(log_dir: Path, version: int) -> list[dict[str, Any]] | None:
    """The add actions of the files in the table at ``version``, as a checksum lists them (``dataChange`` false,
    no null field): the newest single-file checkpoint at or before it (else none), then the commits after it,
    replayed. None with a deletion vector; a commit no longer in the log raises (``OSError``)."""
    checkpoints = (int(m.group(1)) for name in os.listdir(log_dir) if (m := CHECKPOINT.match(name)))
    start = max((v for v in checkpoints if v <= version), default=-1)
    adds: list[dict[str, Any]] = []
    if start >= 0:
        table = pq.read_table(log_dir / f"{start:020d}.checkpoint.parquet", columns=["add"])
        adds = [{"add": add} for add in table.column("add").to_pylist() if add is not None]
    files: dict[str, dict[str, Any]] = {}
    for action in [*adds, *(a for commit in range(start + 1, version + 1) for a in commit_actions(log_dir, commit))]:
        if "add" in action:
            if (kept := _listed(action["add"])) is None:
                return None
            files[kept["path"]] = kept
        elif "remove" in action:
            files.pop(action["remove"]["path"], None)
    return list(files.values())


def commit_actions(log_dir: Path, version: int) -> list[dict[str, Any]]:
    """The actions of commit ``version`` (its JSON lines)."""
    return [json.loads(line) for line in (log_dir / f"{version:020d}.json").read_text().splitlines() if line]


def _listed(add: dict[str, Any]) -> dict[str, Any] | None:
    """An add action as a checksum lists it; None with a deletion vector."""
    if add.get("deletionVector"):
        return None
    listed = {}
    for name in ADD_FIELDS:
        value = add.get(name)
        if isinstance(value, list):  # a map read from Parquet: key-value pairs
            value = dict(value)
        if value is not None:
            listed[name] = value
    listed["dataChange"] = False
    return listed


def next_checksum(previous: dict[str, Any], actions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The checksum after a commit of ``actions`` (its log lines) on top of ``previous``; None where the commit or the
    checksum holds anything but what this carries (see the module)."""
    if not set(previous) <= KNOWN_FIELDS or previous.get("numDeletionVectorsOpt", 0) != 0:
        return None
    adds: list[dict[str, Any]] = []
    removes: list[dict[str, Any]] = []
    for action in actions:
        (kind, body), *rest = action.items()
        if rest or kind not in ("add", "remove", "commitInfo"):
            return None
        if kind != "commitInfo":
            if body.get("deletionVector") or "size" not in body:
                return None
            (adds if kind == "add" else removes).append(body)
    carried = {k: v for k, v in previous.items() if k != "txnId"}
    added, removed = sum(a["size"] for a in adds), sum(r["size"] for r in removes)
    carried["tableSizeBytes"] = previous["tableSizeBytes"] + added - removed
    carried["numFiles"] = previous["numFiles"] + len(adds) - len(removes)
    for name in ("fileSizeHistogram", "histogramOpt"):
        if name in previous:
            carried[name] = _histogram(previous[name], adds, removes)
    if "deletedRecordCountsHistogramOpt" in previous:  # every file here has no deleted record: the first bin
        counts = list(previous["deletedRecordCountsHistogramOpt"]["deletedRecordCounts"])
        counts[0] += len(adds) - len(removes)
        carried["deletedRecordCountsHistogramOpt"] = {"deletedRecordCounts": counts}
    if "allFiles" in previous:
        carried.pop("allFiles")
        gone = {r["path"] for r in removes}
        kept = [f for f in previous["allFiles"] if f["path"] not in gone]
        if len(kept) == len(previous["allFiles"]) - len(gone) and carried["numFiles"] <= ALL_FILES_AT_MOST:
            carried["allFiles"] = kept + [{**a, "dataChange": False} for a in adds]
    if carried["numFiles"] < 0 or carried["tableSizeBytes"] < 0:
        return None
    return carried


def _histogram(previous: dict[str, Any], adds: list[dict[str, Any]], removes: list[dict[str, Any]]) -> dict[str, Any]:
    bounds = previous["sortedBinBoundaries"]
    counts, totals = list(previous["fileCounts"]), list(previous["totalBytes"])
    for files, sign in ((adds, 1), (removes, -1)):
        for f in files:
            i = bisect.bisect_right(bounds, f["size"]) - 1
            counts[i] += sign
            totals[i] += sign * f["size"]
    if min(counts) < 0 or min(totals) < 0:
        raise ValueError("a removed file is not in the previous checksum's histogram")
    return {"sortedBinBoundaries": bounds, "fileCounts": counts, "totalBytes": totals}


def _write_atomically(target: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.link(temporary, target)  # fails if it exists: never over a checksum someone else wrote
    finally:
        os.unlink(temporary)
