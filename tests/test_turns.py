"""benchmarks/real_target/turns.py: two engines' benchmarks on one GPU start side by side and measure alone.

Each check runs the turns in two real processes on one lock file and reads, from the times each process held a
turn, what overlapped: two starts do; a start and a measurement, or two measurements, never do."""

import multiprocessing
import time

import pytest

from tests.script_module import load_siblings

(turns,) = load_siblings("benchmarks/real_target", "turns")
HOLD_S = 1.0


def hold(path: str, kind: str, ready, holding, queue) -> None:
    """Take ``kind``'s turn once ``ready`` is set, say so (``holding``), hold it HOLD_S, and report (kind, got,
    released, waited, asked)."""
    ready.wait()
    asked = time.monotonic()
    with turns.turn(kind, path) as waited:
        got = time.monotonic()
        holding.set()
        time.sleep(HOLD_S)
        released = time.monotonic()
    queue.put((kind, got, released, waited, asked))


def held(path: str, first: str, second: str) -> list[tuple]:
    """``first`` takes its turn, then (while it holds it) ``second`` asks for its own: both reports, in order."""
    context = multiprocessing.get_context("spawn")
    queue, go_first, go_second = context.Queue(), context.Event(), context.Event()
    holding = [context.Event(), context.Event()]
    processes = [context.Process(target=hold, args=(path, first, go_first, holding[0], queue)),
                 context.Process(target=hold, args=(path, second, go_second, holding[1], queue))]
    for process in processes:
        process.start()
    go_first.set()
    assert holding[0].wait(timeout=30)  # the first holds its turn
    go_second.set()
    reports = sorted((queue.get(timeout=30) for _ in processes), key=lambda report: report[1])
    for process in processes:
        process.join(timeout=30)
    return reports


@pytest.mark.parametrize("first, second, overlap", [("start", "start", True), ("start", "measure", False),
                                                    ("measure", "start", False), ("measure", "measure", False)])
def test_starts_overlap_and_a_measurement_holds_the_gpu_alone(tmp_path, first, second, overlap):
    (kind_a, _, released_a, _, _), (kind_b, got_b, _, waited_b, asked_b) = held(str(tmp_path / "turns.lock"),
                                                                                 first, second)
    assert (kind_a, kind_b) == (first, second)
    assert asked_b < released_a  # the second asked while the first held its turn: the case the check is about
    assert (got_b < released_a) == overlap
    assert abs(waited_b - (got_b - asked_b)) < 0.2  # what the turn says it waited: from asking to holding it


def test_without_a_lock_file_there_are_no_turns():
    with turns.turn("measure", None) as waited:
        assert waited is None
    with pytest.raises(KeyError):
        with turns.turn("wait", None):
            pass
