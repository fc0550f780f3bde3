"""stram.agent.engine.inbox: a queue bounded by tuples, whose blocked producer waits for the low-water mark."""

import threading
import time

import pytest

from stram.agent.engine.inbox import Full, Inbox


def test_messages_come_out_in_order_with_their_weights_counted():
    box = Inbox(100)
    box.put("a", 10)
    box.put("b")
    box.put("c", 30)
    assert (box.qsize(), box.weight(), box.empty()) == (3, 41, False)
    assert [box.get(), box.get_nowait(), box.get()] == ["a", "b", "c"]
    assert (box.qsize(), box.weight(), box.empty()) == (0, 0, True)
    with pytest.raises(IndexError):
        box.get_nowait()


def test_the_bound_is_in_weight_not_messages():
    box = Inbox(10)
    for _ in range(9):
        box.put_nowait("x", 1)
    box.put_nowait("heavy", 5)  # 9 < 10: taken, even though it overshoots
    with pytest.raises(Full):
        box.put_nowait("y", 1)
    assert box.weight() == 14


def test_a_blocked_producer_resumes_only_at_the_low_water_mark():
    box = Inbox(8)
    for i in range(8):
        box.put(i)
    done = threading.Event()

    def produce():
        box.put("late")
        done.set()

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    time.sleep(0.05)
    assert not done.is_set()
    for want in range(3):  # 7, 6, 5 left: still above the mark of 4
        assert box.get() == want
        assert not done.wait(0.05)
    with pytest.raises(Full):  # nobody else slips in while the producer waits
        box.put_nowait("other")
    assert box.get() == 3  # 4 left: the mark
    assert done.wait(5)
    thread.join(5)
    assert [box.get() for _ in range(5)] == [4, 5, 6, 7, "late"]


def test_put_anyway_gets_through_a_full_inbox():
    box = Inbox(2)
    box.put("a", 2)
    box.put_anyway("stop")
    assert [box.get(), box.get()] == ["a", "stop"]


def test_a_consumer_waits_for_a_message():
    box = Inbox(4)
    got = []
    thread = threading.Thread(target=lambda: got.append(box.get()), daemon=True)
    thread.start()
    time.sleep(0.05)
    assert got == []
    box.put("m")
    thread.join(5)
    assert got == ["m"]


def test_many_producers_and_a_consumer_lose_and_duplicate_nothing():
    box = Inbox(64)
    n, producers = 5000, 4

    def produce(p):
        for i in range(n):
            box.put((p, i), 1 + i % 7)

    threads = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(producers)]
    for t in threads:
        t.start()
    seen = [box.get() for _ in range(n * producers)]
    for t in threads:
        t.join(5)
    for p in range(producers):
        assert [i for q, i in seen if q == p] == list(range(n))  # each producer's order kept
    assert box.empty() and box.weight() == 0


def test_a_capacity_below_two_is_refused():
    with pytest.raises(ValueError, match="at least 2"):
        Inbox(1)


@pytest.mark.parametrize("attributes, want", [({}, 32768), ({"QUEUE_CAPACITY": "4096"}, 4096)],
                         ids=["default", "set"])
def test_the_queue_capacity_attribute_bounds_a_deployed_operators_queue(tmp_path, attributes, want):
    from stram import wire as proto
    from stram.agent.agent import Agent
    agent = Agent("container_000002", str(tmp_path), "credential", host="127.0.0.1", work_dir=str(tmp_path))
    agent.context = proto.StreamingContainerContext(
        container_id="container_000002", start_window_millis=int(time.time() * 1000),
        streaming_window_size_millis=500, checkpoint_window_count=60, app_id="app")
    info = proto.OperatorDeployInfo(id=3, type=proto.OperatorDeployInfo.GENERIC, name="count",
                                    class_name="stram.operators.aggregate:KeyCounter",
                                    context_attributes=attributes)
    node = agent._create(info)
    assert node.queue.capacity == want and node.queue.low_water == want // 2


def test_a_message_weighs_its_tuples_and_an_arrow_batch_its_rows():
    import pyarrow as pa

    from stram.agent.engine.messages import BEGIN_WINDOW, DATA, message_weight
    batch = pa.RecordBatch.from_pydict({"v": list(range(1000))})
    assert message_weight(DATA, ["a", "b", "c"]) == 3
    assert message_weight(DATA, [batch, batch.slice(0, 10)]) == 1010
    assert message_weight(DATA, [pa.Table.from_batches([batch])]) == 1000
    assert message_weight(DATA, [batch.slice(0, 0)]) == 1  # never weightless
    assert message_weight(DATA, []) == 1
    assert message_weight(BEGIN_WINDOW, 12345) == 1
