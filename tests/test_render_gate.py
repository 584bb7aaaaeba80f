"""The batch gate lets threads in in the order they came: a thread that asks while others wait
takes its place behind them, even at the moment a permit is released."""

import _thread
import threading
import time

import pytest

from pipeline.renderer import FairGate


def wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_a_released_permit_goes_to_the_oldest_waiter_not_to_a_newcomer():
    gate = FairGate(1)
    order: list[str] = []
    gate.acquire()

    def enter(name: str) -> None:
        with gate:
            order.append(name)

    threads = []
    for name in ("first", "second", "third"):
        t = threading.Thread(target=enter, args=(name,))
        t.start()
        threads.append(t)
        wait_for(lambda n=len(threads): gate.waiting == n)  # each queued before the next asks
    gate.release()
    gate.acquire()  # asks at the moment it released: it must come after the three
    order.append("newcomer")
    gate.release()
    for t in threads:
        t.join(5)
    assert order == ["first", "second", "third", "newcomer"]


def test_no_more_threads_hold_it_than_it_has_permits():
    gate = FairGate(2)
    inside, most = 0, 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        for _ in range(50):
            with gate:
                with lock:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.0005)
                with lock:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most == 2 and inside == 0 and gate.waiting == 0
    # every permit came back: two threads get in at once without waiting
    gate.acquire()
    gate.acquire()
    assert gate.waiting == 0


def test_a_thread_interrupted_while_it_waits_leaves_the_line_and_loses_no_permit():
    gate = FairGate(1)
    gate.acquire()

    class Interrupted(BaseException):
        pass

    class Turn:
        """A waiter's lock whose wait is interrupted, as a signal's exception would."""

        def __init__(self):
            self.lock = _thread.allocate_lock()

        def acquire(self, *args):
            if args or not self.lock.locked():
                return self.lock.acquire(*args)
            raise Interrupted

        def release(self):
            self.lock.release()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(threading, "Lock", Turn)  # the waiter's lock only: the gate's was made above
        with pytest.raises(Interrupted):
            gate.acquire()
    assert gate.waiting == 0  # it left the line
    gate.release()
    gate.acquire()  # the permit came back to the gate, not to the thread that left
    assert gate.waiting == 0


def test_a_gate_needs_a_permit():
    with pytest.raises(ValueError, match="at least one permit"):
        FairGate(0)
