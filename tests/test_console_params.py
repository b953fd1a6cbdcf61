"""The console's boundary, without a server: parameter parsing (property-based: any text is a value or a
``BadParameter``, never another exception), the bounded pools' admission and deadlines, the backtest range."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.console import params
from pipelines.console.backtest_jobs import backtest_range
from pipelines.console.blocking import BlockingPool, PoolBusy, PoolTimeout

UTC = dt.UTC


@given(st.one_of(st.text(), st.from_regex(r"-?[0-9]{1,30}", fullmatch=True)))
def test_a_rule_id_is_a_number_in_the_models_range_or_a_bad_parameter(text: str) -> None:
    try:
        value = params.rule_id(text)
    except params.BadParameter as error:
        assert str(error).startswith("rule ")
    else:
        assert params.RULE_ID_MIN <= value <= params.RULE_ID_MAX and value == int(text.strip())


INSTANTISH = st.from_regex(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?",
    fullmatch=True,
)


@given(st.one_of(st.text(), INSTANTISH))
def test_an_instant_is_an_aware_utc_time_in_bounds_or_a_bad_parameter(text: str) -> None:
    try:
        value = params.instant(text, "from")
    except params.BadParameter as error:
        assert str(error).startswith("from ")
    else:
        assert value is None or (value.tzinfo == UTC and params.EARLIEST <= value < params.LATEST)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-06-01", dt.datetime(2024, 6, 1, tzinfo=UTC)),
        ("2024-06-01T12:30", dt.datetime(2024, 6, 1, 12, 30, tzinfo=UTC)),
        ("2024-06-01 12:30:15.25", dt.datetime(2024, 6, 1, 12, 30, 15, 250_000, tzinfo=UTC)),
        ("2024-06-01T14:30+02:00", dt.datetime(2024, 6, 1, 12, 30, tzinfo=UTC)),
        ("2024-06-01T12:30Z", dt.datetime(2024, 6, 1, 12, 30, tzinfo=UTC)),
        ("  ", None),
    ],
)
def test_the_documented_instant_forms(text: str, expected: dt.datetime | None) -> None:
    assert params.instant(text, "from") == expected


@pytest.mark.parametrize(
    "text",
    [
        "1717200000000",
        "2024",
        "20240601",
        "2024-W22",
        "2024-06-01T12",
        "\uff12\uff10\uff12\uff14-06-01",
        "2024-06-01T25:00",
    ],
)
def test_undocumented_instant_forms_are_refused(text: str) -> None:
    with pytest.raises(params.BadParameter, match="from "):
        params.instant(text, "from")


def test_ids_and_text() -> None:
    assert params.alert_id(" 7:tx-1 ") == (7, "tx-1")
    assert params.token("0123456789ab", "an edit") == "0123456789ab"
    for bad in ("", "7", "7:", ":tx", "\u00b2:tx", "-1:tx", f"7:{'t' * 257}"):
        with pytest.raises(params.BadParameter):
            params.alert_id(bad)
    for bad in (
        "nope",
        "0123456789AB",
        "0123456789abc",
        "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669ab",
    ):
        with pytest.raises(params.BadParameter, match="is not an edit id"):
            params.token(bad, "an edit")
    assert params.text("  k  ", "key") == "k" and params.text("", "key") is None
    with pytest.raises(params.BadParameter, match="at most 1000"):
        params.text("x" * 1001, "key")
    with pytest.raises(params.BadParameter, match="from 0 to 19"):
        params.bounded_int("20", "n", low=0, high=19)


def test_a_backtest_range_defaults_and_bounds() -> None:
    now = dt.datetime(2024, 6, 30, tzinfo=UTC)
    assert backtest_range(None, None, now=now) == (now - dt.timedelta(days=92), now)
    start = dt.datetime(2024, 6, 1, tzinfo=UTC)
    assert backtest_range(start, None, now=now) == (start, now)
    with pytest.raises(params.BadParameter, match="at most 92 days"):
        backtest_range(dt.datetime(2024, 1, 1, tzinfo=UTC), None, now=now)
    with pytest.raises(params.BadParameter, match="from must be before to"):
        backtest_range(now, start, now=now)


def test_a_pool_bounds_admission_and_time_and_keeps_the_slot_of_a_call_still_running() -> None:
    """Two threads and one waiting place; a call past its deadline answers PoolTimeout but keeps its slot until it
    returns; a call given up on before it started never runs."""
    pool = BlockingPool("the test backend", name="test", workers=1, queue=1, timeout_s=0.2)
    release = threading.Event()
    ran: list[str] = []

    def blocked(name: str) -> str:
        release.wait(10)
        ran.append(name)
        return name

    async def scenario() -> None:
        first = asyncio.create_task(pool.run(blocked, "first"))  # runs, blocked
        await asyncio.sleep(0.05)
        second = asyncio.create_task(pool.run(blocked, "second"))  # waits for the one thread
        await asyncio.sleep(0.05)
        assert pool.admitted == 2
        with pytest.raises(PoolBusy, match="the test backend is busy: 2 call"):
            await pool.run(blocked, "third")
        with pytest.raises(PoolTimeout, match=r"did not answer within 0\.2 s$"):
            await first
        with pytest.raises(PoolTimeout):
            await second  # cancelled before it started
        assert pool.admitted == 1  # the first still runs, and still counts
        release.set()
        deadline = time.monotonic() + 10
        while pool.admitted and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert pool.admitted == 0 and ran == ["first"]
        assert await pool.run(str.upper, "fine") == "FINE"

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        pool.shutdown()


def test_a_write_past_its_deadline_says_it_may_still_be_made() -> None:
    pool = BlockingPool("the rules database", name="w", workers=1, queue=0, timeout_s=0.1, writes=True)
    release = threading.Event()
    try:
        with pytest.raises(PoolTimeout, match="may still be made when it answers"):
            asyncio.run(pool.run(release.wait, 5))
    finally:
        release.set()
        pool.shutdown()
