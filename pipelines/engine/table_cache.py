"""The engine's own append-only tables (bucket state, cooldown memory), kept persisted on the executors.

The engine is the only writer of ``bucket_state`` and ``alert_cooldown`` (one engine per lakehouse), and each
micro-batch only *appends* to them. So after its append commits as the table's very next version, the table's
content is exactly the cached content plus the frame it appended: the cache takes that frame (already persisted
for the write) and moves to the new version, and no micro-batch has to read the table back from Delta. Reading
it back costs a snapshot reconstruction of the table's log after every commit plus a Parquet scan (about 0.5 s per
table per batch on 2 cores); the cache costs memory on the executors: the folded rows plus the batches since.

The cache is only ever trusted at a version it knows: ``ensure(version)`` reloads from Delta (time travel,
folded) whenever the pinned version is not the cached one — the first batch of a run, a replay, state
maintenance, or a version written by someone else in between (``fraudlake state clear``; an OPTIMIZE too, which
costs one harmless reload). Its frames are *local checkpoints* (``materialize``): computed once, stored on the
executors, with their lineage cut, so that the plans that read them stay small however many batches the cache
has seen (a persisted frame would carry every earlier batch's plan along). A lost block (an executor gone) fails
the batch that reads it; the handler then forgets its caches and the replay reloads them from Delta.

Example::

    cache = TableCache(path, fold=fold_tiles, columns=STATE_CACHE_COLUMNS)
    cache.ensure(spark, pinned_version)
    prior = cache.frame()
    ...  # append batch_tiles to the table, then
    cache.appended(spark, batch_tiles, read_version=pinned_version)
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame, SparkSession

from delta_tables.table_snapshot import table_file_count, table_version

log = logging.getLogger(__name__)
MAX_FRAMES = 12
"""More appended frames than this are folded into one (the union's plan and scan grow with each)."""


class TableCache:
    """The content of one append-only Delta table at one version, as persisted frames (their union).

    The cache owns the frames it is given (``appended``, ``reset``; made by ``materialize``): it releases them when
    it lets them go.
    """

    def __init__(
        self,
        path: str,
        *,
        fold: Callable[[DataFrame], DataFrame],
        columns: Sequence[str],
        layout: Callable[[DataFrame], DataFrame] | None = None,
    ) -> None:
        """``fold``: rows -> one row per key (keeps the rows' partitioning); ``layout``: how the rows read from
        Delta are laid out before they are folded (e.g. ``buckets.co_partitioned``), so that every frame the cache
        holds has the layout of the frames appended to it."""
        self.path = path
        self._fold = fold
        self._layout = layout or (lambda rows: rows)
        self._columns = tuple(columns)
        self.version: int | None = None
        self._frames: list[DataFrame] = []  # persisted, each with at least ``columns``
        # Per frame, which of its rows still belong to the table (None: all): a compaction of some states rewrote
        # theirs, which the newer frame holds (``replaced``).
        self._kept: list[Column | None] = []

    def frame(self) -> DataFrame:
        """The table's rows at ``version`` (not folded: a key may have a row per batch)."""
        if self.version is None or not self._frames:
            raise RuntimeError(f"the cache of {self.path} is not loaded")
        frames = [f if kept is None else f.where(kept) for f, kept in zip(self._frames, self._kept, strict=True)]
        return functools.reduce(DataFrame.unionByName, [f.select(*self._columns) for f in frames])

    def ensure(self, spark: SparkSession, version: int) -> None:
        """Make the cache hold the table at ``version`` (a reload from Delta unless it already does)."""
        if self.version == version and self._frames:
            return
        rows = spark.read.format("delta").option("versionAsOf", version).load(self.path)
        if table_file_count(spark, self.path, version) == 0:
            # A fresh lakehouse's first batch: no Delta scan of a table known to be empty (its snapshot's files are
            # a state reconstruction, two jobs: ~0.5 s a table warm, over 1 s in a fresh JVM).
            rows = empty_like(rows)
        self._replace([materialize(self._fold(self._layout(rows)).select(*self._columns))], version)
        log.info("cache of %s loaded at version %s", self.path, version)

    def appended(self, spark: SparkSession, frame: DataFrame, *, read_version: int) -> None:
        """Take ``frame`` (materialized; the rows just appended) if the append is the version after ``read_version``;
        otherwise forget everything (someone else committed in between: the next ``ensure`` reloads)."""
        if self.version != read_version or table_version(spark, self.path) != read_version + 1:
            self._replace([], None, dropped=[frame])
            return
        self._frames.append(frame)
        self._kept.append(None)
        self.version = read_version + 1
        self._fold_when_long()

    def replaced(self, spark: SparkSession, frame: DataFrame, *, rewritten: Column, read_version: int) -> None:
        """After a commit that rewrote the rows matching ``rewritten`` (a condition on partition columns) as ``frame``
        (materialized): the cached rows matching it are dropped (a filter, nothing copied) and ``frame`` taken, if the
        commit is the version after ``read_version``; otherwise forget everything (the next ``ensure`` reloads)."""
        if self.version != read_version or table_version(spark, self.path) != read_version + 1:
            self._replace([], None, dropped=[frame])
            return
        self._kept = [~rewritten if kept is None else kept & ~rewritten for kept in self._kept]
        self._frames.append(frame)
        self._kept.append(None)
        self.version = read_version + 1
        self._fold_when_long()

    def appended_rows(self, spark: SparkSession, rows: DataFrame, *, read_version: int) -> None:
        """Like ``appended``, for rows in the table's own format (laid out and folded here, as ``ensure`` would):
        a write outside the batch's hot path (a backfill) that the cache takes instead of reloading the table."""
        if self.version != read_version:
            self.invalidate()
            return
        frame = materialize(self._fold(self._layout(rows)).select(*self._columns))
        self.appended(spark, frame, read_version=read_version)

    def deleted(self, spark: SparkSession, *, removed: Column, read_version: int) -> None:
        """After a DELETE of the rows matching ``removed`` (a condition on the cached columns, never null): the cache
        keeps the other rows, folded into one frame on the executors (no Delta read), if the DELETE committed the
        version after ``read_version``; a DELETE that matched nothing commits nothing and leaves the cache as it is;
        otherwise forget everything (the next ``ensure`` reloads). Folded now rather than kept as a filter: a filter
        on every frame would change the generated code of every later batch's plans (compiled again)."""
        version = table_version(spark, self.path)
        if self.version == read_version == version:
            return
        if self.version != read_version or version != read_version + 1:
            self.invalidate()
            return
        kept = self.frame().where(~removed)
        self._replace([materialize(self._fold(kept).select(*self._columns))], version)

    def rewritten_rows(self, spark: SparkSession, rows: DataFrame, *, removed: Column, read_version: int) -> None:
        """After one commit that replaced the rows matching ``removed`` (a condition on partition columns) with
        ``rows`` (in the table's own format, as ``appended_rows``; only rows matching ``removed``): the cache keeps
        its other rows and takes ``rows``, both folded, as one frame on the executors (no Delta read), if the commit
        is the version after ``read_version``; otherwise forget everything (the next ``ensure`` reloads). One
        materialization where a drop and a backfill apart (``deleted``, ``appended_rows``) cost two; the union keeps
        the frames' hash layout (both folds are laid out by ``layout``'s keys)."""
        if self.version != read_version or table_version(spark, self.path) != read_version + 1:
            self.invalidate()
            return
        kept = self._fold(self.frame().where(~removed)).select(*self._columns)
        taken = self._fold(self._layout(rows)).select(*self._columns)
        self._replace([materialize(kept.unionByName(taken))], read_version + 1)

    def _fold_when_long(self) -> None:
        if len(self._frames) > MAX_FRAMES:
            self._replace([materialize(self._fold(self.frame()).select(*self._columns))], self.version)

    def reset(self, spark: SparkSession, folded: DataFrame, *, written_version: int | None) -> None:
        """After a compaction wrote ``folded`` (materialized) as the whole table: hold it at ``written_version``."""
        if written_version is None or table_version(spark, self.path) != written_version:
            self._replace([], None, dropped=[folded])
            return
        self._replace([folded], written_version)

    def invalidate(self) -> None:
        """Forget the cached content (its frames are released)."""
        self._replace([], None)

    def _replace(self, frames: list[DataFrame], version: int | None, *, dropped: Sequence[DataFrame] = ()) -> None:
        old, self._frames, self.version = self._frames, frames, version
        self._kept = [None] * len(frames)
        kept = {id(f) for f in frames}
        for frame in [*old, *dropped]:
            if id(frame) not in kept:
                release(frame)


def materialize(frame: DataFrame) -> DataFrame:
    """``frame`` computed now and stored on the executors, its lineage cut (a local checkpoint)."""
    return frame.localCheckpoint(eager=True)


def empty_like(frame: DataFrame) -> DataFrame:
    """No rows, ``frame``'s columns: an empty RDD in the JVM (no Delta scan; PySpark's ``createDataFrame([])`` costs
    ~0.15 s more a call). The layout put over it holds: the cached frame is hash-partitioned as the frames later
    unioned with it (tests/test_engine_fresh_lakehouse.py)."""
    spark = frame.sparkSession
    return DataFrame(spark._jsparkSession.createDataFrame(spark._jsc.emptyRDD(), frame._jdf.schema()), spark)


def kept(frame: DataFrame) -> DataFrame:
    """``frame``, stored on the executors when an action first computes it (a lazy local checkpoint): later
    actions read the stored rows. Cheaper than ``persist`` for a micro-batch's intermediate frames: no columnar
    encoding and compression on the way in, no decoding on the way out; the layout (partitioning) is kept."""
    return frame.localCheckpoint(eager=False)


def release(frame: DataFrame) -> None:
    """Free the executor storage of a ``materialize``-d (or persisted) frame."""
    try:
        frame._jdf.queryExecution().analyzed().rdd().unpersist(False)
    except Exception:  # not a local checkpoint (no LogicalRDD at the root): a persisted frame
        frame.unpersist()
