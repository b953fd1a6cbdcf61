"""Bin-packing of an append-only table's small files with delta-rs, where it rewrites what Spark's OPTIMIZE would.

Retention's file steps (``pipelines.engine.retention``) bin-pack the engine's append-only tables (bronze, alerts,
quarantine, the batch log) once a table holds ``compact_min_files`` data files. Spark's OPTIMIZE reconstructs the
table's state from the log, plans the bins in a job and rewrites them in another, then commits: 0.6-0.9 s on a tiny
table in a warm JVM, 3.5-4.9 s for bronze at 50,000-row batches and for the batch log (whose delta-rs appends leave
no checksum, so its state is always reconstructed from the JSON). delta-rs' ``optimize.compact`` reads the same log
(no Spark job), rewrites each partition's small files into as few as its target size allows (the table's
``delta.targetFileSize``, else 100 MB; Spark's OPTIMIZE aims at 1 GB) and commits the removes and adds with
``dataChange: false``, as OPTIMIZE does: streaming readers and the change data feed skip the commit, and every
row keeps its values. The version's checksum is then carried forward (``version_checksum.carry_checksum``), so
Spark's next commit does not reconstruct the state to make its own.

delta-rs compacts only a local table (``arrow_reads.delta_rs_folder``) with reader version 1 (no deletion vectors,
no column mapping) and writer features within ``COMPACTION_FEATURES`` (legacy writer versions up to 4 imply only
those and constraints a rewrite of the same rows cannot break). Anything else, or an error before delta-rs
commits, and the caller runs Spark's OPTIMIZE.

Example::

    done = compact_files_at(path, min_files=50)
    if done is None:  # delta-rs does not apply
        optimize_table(spark, path)
"""

from __future__ import annotations

import logging

from delta_tables.arrow_reads import delta_rs_folder
from delta_tables.version_checksum import carry_checksum

log = logging.getLogger(__name__)

COMPACTION_FEATURES = frozenset({"appendOnly", "invariants", "changeDataFeed", "checkConstraints"})
"""Writer features of a table delta-rs bin-packs: none changes what a rewrite of the same rows must write."""

LEGACY_WRITER = 4
"""Writer versions up to this one (before table features) imply at most ``COMPACTION_FEATURES`` and generated
columns, whose values a rewrite keeps."""


def compact_files_at(path: str, *, min_files: int) -> bool | None:
    """Bin-pack the small files of the Delta table at ``path`` with delta-rs if it holds at least ``min_files`` data
    files (counted in its newest version's log): True when compacted, False when it holds fewer (nothing done),
    None where delta-rs does not apply or failed before committing (the caller runs Spark's OPTIMIZE)."""
    folder = delta_rs_folder(path)
    if folder is None:
        return None
    from deltalake import DeltaTable

    try:
        table = DeltaTable(folder)
        protocol = table.protocol()
        features = set(protocol.writer_features or []) | set(protocol.reader_features or [])
        if protocol.min_reader_version > 1 or not (
            protocol.min_writer_version <= LEGACY_WRITER
            or (protocol.min_writer_version == 7 and features <= COMPACTION_FEATURES)
        ):
            return None
        if len(table.file_uris()) < min_files:
            return False
        read = table.version()
        table.optimize.compact()
    except Exception as error:
        log.debug("delta-rs did not compact %s: %s", path, error)
        return None
    committed = table.version()
    if committed == read + 1:
        carry_checksum(folder, version=committed)  # else Spark reconstructs the table's state to make one
    return True
