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

Past ``MAX_FRAMES`` frames the cache folds, in steps that cost what recent batches appended rather than the whole
cached table (``_fold_when_long``): the appended frames fold among themselves, and a frame holding whole states (the
load, a compaction's rewrite, a backfill) is left alone. Each frame knows which states it may hold (``held``), so
one that a later compaction rewrote entirely is let go without a fold. Only past ``MAX_FRAMES`` whole frames are
they folded together.

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
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession

from delta_tables.table_snapshot import table_file_count, table_version

log = logging.getLogger(__name__)
MAX_FRAMES = 12
"""More frames than this are folded (the union's plan and scan grow with each): see ``TableCache._fold_when_long``."""
WHOLE = 1 << 62
"""The weight of a frame that holds whole states (loaded from Delta, a compaction's rewrite, a backfill, a fold of
such frames): never folded with the appended frames. An appended frame weighs 1, a fold of appended frames the sum."""
HeldAt = Callable[[SparkSession, int], frozenset[str] | None]
"""The states (values of the table's partition column) a version of the table holds; None where not known."""


@dataclass
class _Frame:
    """One frame of the cache: its rows, which of them still belong to the table, its weight, its states."""

    rows: DataFrame  # materialized, with at least the cache's columns
    weight: int
    held: frozenset[str] | None  # the states it may hold (None: any)
    gone: frozenset[str] = frozenset()  # states a later commit rewrote: their rows here no longer belong to the table
    kept: Column | None = None  # the rows that still belong to the table (None: all); gone's rows filtered out
    view: DataFrame | None = None  # ``part``'s frame, built once (a batch's plan names it again: no round trips)

    @property
    def dead(self) -> bool:
        """Whether none of its rows belongs to the table any more."""
        return self.held is not None and self.held <= self.gone

    def part(self, columns: Sequence[str]) -> DataFrame:
        """Its rows that still belong to the table, ``columns`` of them."""
        if self.view is None:
            rows = self.rows if self.kept is None else self.rows.where(self.kept)
            self.view = rows.select(*columns)
        return self.view

    def drop(self, rewritten: Column, states: frozenset[str] | None) -> None:
        """Its rows matching ``rewritten`` (of ``states``, if known) no longer belong to the table: filtered out."""
        self.kept = ~rewritten if self.kept is None else self.kept & ~rewritten
        self.view = None  # built again, with the filter, when next asked
        if states is not None:
            self.gone |= states

    def remaining(self) -> frozenset[str] | None:
        """The states whose rows it still holds for the table (None: not known)."""
        return None if self.held is None else self.held - self.gone


def _union_of(sets: Sequence[frozenset[str] | None]) -> frozenset[str] | None:
    return None if any(s is None for s in sets) else frozenset().union(*[s for s in sets if s is not None])


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
        held_at: HeldAt | None = None,
    ) -> None:
        """``fold``: rows -> one row per key (keeps the rows' partitioning); ``layout``: how the rows read from
        Delta are laid out before they are folded (e.g. ``buckets.co_partitioned``), so that every frame the cache
        holds has the layout of the frames appended to it; ``held_at``: the states a version of the table holds
        (the frame loaded from Delta then knows its states, and a later compaction of all of them lets it go)."""
        self.path = path
        self._fold = fold
        self._layout = layout or (lambda rows: rows)
        self._columns = tuple(columns)
        self._held_at = held_at
        self.version: int | None = None
        self._frames: list[_Frame] = []
        self._whole: DataFrame | None = None  # the union of the frames' parts, built once per set of frames

    def frame(self) -> DataFrame:
        """The table's rows at ``version`` (not folded: a key may have a row per batch)."""
        if self.version is None or not self._frames:
            raise RuntimeError(f"the cache of {self.path} is not loaded")
        if self._whole is None:
            self._whole = self._union(self._frames)
        return self._whole

    def _union(self, frames: Sequence[_Frame]) -> DataFrame:
        """The rows of ``frames`` that still belong to the table (each part has the cache's columns, in order)."""
        return functools.reduce(DataFrame.union, [f.part(self._columns) for f in frames])

    @property
    def frame_weights(self) -> tuple[int, ...]:
        """Per frame held, oldest first, how many appended frames it folds (``WHOLE``: whole states)."""
        return tuple(f.weight for f in self._frames)

    def ensure(self, spark: SparkSession, version: int) -> None:
        """Make the cache hold the table at ``version`` (a reload from Delta unless it already does)."""
        if self.version == version and self._frames:
            return
        rows = spark.read.format("delta").option("versionAsOf", version).load(self.path)
        empty = table_file_count(spark, self.path, version) == 0
        if empty:
            # A fresh lakehouse's first batch: no Delta scan of a table known to be empty (its snapshot's files are
            # a state reconstruction, two jobs: ~0.5 s a table warm, over 1 s in a fresh JVM).
            rows = empty_like(rows)
        loaded = materialize(self._fold(self._layout(rows)).select(*self._columns))
        if empty:
            self._replace([_Frame(loaded, 0, frozenset())], version)
        else:
            held = self._held_at(spark, version) if self._held_at is not None else None
            self._replace([_Frame(loaded, WHOLE, held)], version)
        log.info("cache of %s loaded at version %s", self.path, version)

    def appended(
        self, spark: SparkSession, frame: DataFrame, *, read_version: int, held: Collection[str] | None = None
    ) -> None:
        """Take ``frame`` (materialized; the rows just appended, of the states ``held`` if given) if the append is
        the version after ``read_version``; otherwise forget everything (someone else committed in between: the
        next ``ensure`` reloads)."""
        self._take(spark, _Frame(frame, 1, None if held is None else frozenset(held)), read_version=read_version)

    def _take(self, spark: SparkSession, frame: _Frame, *, read_version: int) -> None:
        if not self._next(spark, read_version):
            self._replace([], None, dropped=[frame.rows])
            return
        self._push(frame)

    def _next(self, spark: SparkSession, read_version: int) -> bool:
        """Whether the cache holds ``read_version`` and the table's newest version is the one after it."""
        return self.version == read_version and table_version(spark, self.path) == read_version + 1

    def _push(self, frame: _Frame) -> None:
        """Hold ``frame`` too, at the version after the one held (checked by ``_next``)."""
        assert self.version is not None
        self._frames.append(frame)
        self.version += 1
        if self._whole is not None:  # one more part: the union so far is not built again
            self._whole = self._whole.union(frame.part(self._columns))
        self._fold_when_long()

    def replaced(
        self,
        spark: SparkSession,
        frame: DataFrame,
        *,
        rewritten: Column,
        read_version: int,
        states: Collection[str] | None = None,
    ) -> None:
        """After a commit that rewrote the rows matching ``rewritten`` (a condition on partition columns; the rows of
        ``states`` when given) as ``frame`` (materialized): the cached rows matching it are dropped (a filter,
        nothing copied; a frame whose states were all rewritten is let go) and ``frame`` taken, if the commit is the
        version after ``read_version``; otherwise forget everything (the next ``ensure`` reloads)."""
        if not self._next(spark, read_version):
            self._replace([], None, dropped=[frame])
            return
        rewritten_states = frozenset(states) if states is not None else None
        for older in self._frames:
            if rewritten_states is not None and older.held is not None and not older.held & rewritten_states:
                continue  # none of its states rewritten: no filter (the generated code of its scan stays the same)
            older.drop(rewritten, rewritten_states)
        self._replace([f for f in self._frames if not f.dead], self.version)  # the dead ones are released
        self._push(_Frame(frame, WHOLE, rewritten_states))  # the version was checked above: one log listing

    def appended_rows(
        self, spark: SparkSession, rows: DataFrame, *, read_version: int, states: Collection[str] | None = None
    ) -> None:
        """Like ``appended``, for rows in the table's own format (laid out and folded here, as ``ensure`` would; of
        the ``states`` given): a write outside the batch's hot path (a backfill) that the cache takes instead of
        reloading the table. Whole states' history: a frame of whole states."""
        if self.version != read_version:
            self.invalidate()
            return
        frame = materialize(self._fold(self._layout(rows)).select(*self._columns))
        held = None if states is None else frozenset(states)
        self._take(spark, _Frame(frame, WHOLE, held), read_version=read_version)

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
        held = _union_of([f.remaining() for f in self._frames])
        self._replace([_Frame(materialize(self._fold(kept).select(*self._columns)), WHOLE, held)], version)

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
        self._replace([_Frame(materialize(kept.unionByName(taken)), WHOLE, None)], read_version + 1)

    def _fold_when_long(self) -> None:
        """Past MAX_FRAMES appended frames, fold the newest together with each older appended (or folded) one that
        weighs no more than those so far: a row is folded again only when its frame joins a heavier one
        (O(log batches) times), so a fold costs about what recent batches appended, not the whole cached table.
        Frames of whole states (``WHOLE``) are not folded with them: a compaction's rewrite of a state lets the
        older frames of that state go instead (``replaced``). Past MAX_FRAMES frames of whole states (more states
        than that, each rewritten apart), those are folded into one."""
        light = [f for f in self._frames if f.weight < WHOLE]
        if len(light) > MAX_FRAMES:
            chosen: list[_Frame] = []
            weight = 0
            for candidate in reversed(light):
                if chosen and candidate.weight > weight:
                    break
                chosen.append(candidate)
                weight += candidate.weight
            if len(chosen) > 1:  # else the newest frame is lighter than the one before: the next append folds
                self._fold_frames(chosen, weight)
        whole = [f for f in self._frames if f.weight >= WHOLE]
        if len(whole) > MAX_FRAMES:
            self._fold_frames(whole, WHOLE)

    def _fold_frames(self, chosen: Sequence[_Frame], weight: int) -> None:
        """Replace ``chosen`` by the fold of their rows that still belong to the table, as the newest frame."""
        ids = {id(f) for f in chosen}
        rows = materialize(self._fold(self._union(chosen)).select(*self._columns))
        folded = _Frame(rows, min(weight, WHOLE), _union_of([f.remaining() for f in chosen]))
        self._replace([*(f for f in self._frames if id(f) not in ids), folded], self.version)

    def reset(self, spark: SparkSession, folded: DataFrame, *, written_version: int | None) -> None:
        """After a compaction wrote ``folded`` (materialized) as the whole table: hold it at ``written_version``."""
        if written_version is None or table_version(spark, self.path) != written_version:
            self._replace([], None, dropped=[folded])
            return
        self._replace([_Frame(folded, WHOLE, None)], written_version)

    def invalidate(self) -> None:
        """Forget the cached content (its frames are released)."""
        self._replace([], None)

    def _replace(self, frames: list[_Frame], version: int | None, *, dropped: Sequence[DataFrame] = ()) -> None:
        """Hold ``frames`` at ``version``; release the frames let go, and ``dropped``."""
        old, self._frames, self.version = self._frames, frames, version
        self._whole = None
        held = {id(f.rows) for f in frames}
        for rows in [*(f.rows for f in old), *dropped]:
            if id(rows) not in held:
                release(rows)


def materialize(frame: DataFrame) -> DataFrame:
    """``frame`` computed now and stored on the executors, its lineage cut (a local checkpoint)."""
    return frame.localCheckpoint(eager=True)


_STORING = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fraudlake-store")


def storing(frame: DataFrame) -> tuple[DataFrame, Future[int]]:
    """``frame`` as ``materialize`` makes it, and the job storing it started on a thread of its own: the caller builds
    (and plans) what reads it while the job runs, and waits on the future (its row count) before any job reads it.
    A micro-batch's next plan is hundreds of steps, each analysed by the driver (0.2-0.3 s a batch): built beside
    the job that stores its input, not after it."""
    stored = kept(frame)
    rows = stored._jdf.queryExecution().analyzed().rdd()  # what Spark's eager local checkpoint counts to store it
    return stored, _STORING.submit(lambda: int(rows.count()))


def planned(frame: DataFrame) -> DataFrame:
    """``frame``, its physical plan made now (optimized, planned, prepared; kept with it for its first action)."""
    frame._jdf.queryExecution().executedPlan()
    return frame


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
