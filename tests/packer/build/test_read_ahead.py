"""The reader thread of a compressed build (``packer.build.read_ahead``): results in item order whatever the
timing, never more held than its count and byte budget, an exception raised at its item's place, and no thread
left once closed, whether the consumer finished, failed or stopped early."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from speechpack.packer.build.read_ahead import ReadAhead, result_bytes

pytestmark = pytest.mark.fast


def jittery(seed: int):
    rng = random.Random(seed)

    def fn(item):
        time.sleep(rng.random() * 0.002)
        return item * item
    return fn


@pytest.mark.parametrize("items_ahead", [1, 2, 4])
def test_results_come_in_item_order_whatever_the_timing(items_ahead):
    consumer = random.Random(7)
    got = []
    with ReadAhead(jittery(items_ahead), range(60), items_ahead=items_ahead) as ahead:
        for result in ahead:
            time.sleep(consumer.random() * 0.002)
            got.append(result)
    assert got == [i * i for i in range(60)]


def test_the_reader_holds_at_most_its_count_of_results_ahead():
    started = []

    def fn(item):
        started.append(item)
        return item

    with ReadAhead(fn, range(100), items_ahead=3) as ahead:
        for consumed, _result in enumerate(ahead, start=1):
            time.sleep(0.003)  # a slow consumer: the reader waits for room
            # what was read, less what was taken: at most the three waiting and the one being read
            assert len(started) - consumed <= 3 + 1
    assert started == list(range(100))


def test_the_reader_holds_at_most_its_byte_budget_but_always_one_result():
    started = []

    def fn(item):
        started.append(item)
        return np.zeros(1000, dtype=np.uint8)  # 1000 bytes each

    with ReadAhead(fn, range(30), items_ahead=100, bytes_ahead=2500) as ahead:
        for consumed, result in enumerate(ahead, start=1):
            assert result_bytes(result) == 1000
            time.sleep(0.003)
            # three results reach the 2500-byte budget; one more may be in reading
            assert len(started) - consumed <= 3 + 1
    with ReadAhead(fn, range(3), bytes_ahead=10) as ahead:  # each result alone exceeds the budget
        assert len(list(ahead)) == 3


def test_an_exception_of_the_reader_is_raised_at_its_items_place():
    class Corrupt(Exception):
        pass

    def fn(item):
        if item == 5:
            raise Corrupt(f"line {item}: corrupt.wav: cannot decode audio")
        return item

    got = []
    with pytest.raises(Corrupt, match=r"^line 5: corrupt.wav: cannot decode audio$"):
        with ReadAhead(fn, range(10)) as ahead:
            for result in ahead:
                got.append(result)
    assert got == [0, 1, 2, 3, 4]
    assert not ahead.alive


def test_a_consumer_that_fails_stops_the_reader_thread():
    reads = []

    def fn(item):
        reads.append(item)
        return item

    def endless():
        n = 0
        while True:
            yield n
            n += 1

    with pytest.raises(RuntimeError, match="the writer failed"):
        with ReadAhead(fn, endless(), items_ahead=2) as ahead:
            for result in ahead:
                if result == 3:
                    raise RuntimeError("the writer failed")
    assert not ahead.alive
    assert len(reads) <= 4 + 2 + 1  # what was consumed, the two ahead and one in reading: then it stopped
    assert not [t for t in threading.enumerate() if t.name == "speechpack-reader"]


def test_closing_waits_for_the_item_being_read():
    entered, release = threading.Event(), threading.Event()

    def fn(item):
        entered.set()
        release.wait(5)
        return item

    ahead = ReadAhead(fn, range(10))
    assert entered.wait(5)
    threading.Timer(0.05, release.set).start()
    ahead.close()  # returns only once the read in progress has ended
    assert release.is_set() and not ahead.alive


def test_items_ahead_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        ReadAhead(lambda item: item, [], items_ahead=0)
