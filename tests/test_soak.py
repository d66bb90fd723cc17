"""The soak's verdicts (``benchmarks/soak_checks.py``), its loopback guard (``soak_server.py``) and its
table (``benchmarks/soak_table.py`` over the committed runs)."""

import random
import subprocess
import sys
import time

import pytest

from tests.script_module import ROOT, load_siblings

soak_checks, soak_server = load_siblings("benchmarks", "soak_checks", "soak_server")


def test_soak_table_is_current():
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak_table.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("url", ["http://10.0.0.7:30000", "http://example.com:30000", "https://127.0.0.1:30000",
                                 "http://127.0.0.1", "http://0.0.0.0:30000", "ftp://localhost:21"])
def test_non_loopback_servers_are_refused(url):
    with pytest.raises(soak_server.SoakError, match="this machine only"):
        soak_server.loopback_base_url(url)


@pytest.mark.parametrize("url, expected", [("http://127.0.0.1:30000/", "http://127.0.0.1:30000"),
                                           ("http://localhost:8/v1", "http://localhost:8"),
                                           ("http://[::1]:9", "http://[::1]:9"),
                                           ("http://127.0.0.2:10", "http://127.0.0.2:10")])
def test_loopback_servers_are_taken(url, expected):
    assert soak_server.loopback_base_url(url) == expected


@pytest.mark.parametrize("seed", range(5))
def test_first_difference_is_the_first_token_not_reproduced(seed):
    """Against a brute force: the shortest token prefix whose text ``text`` does not start with."""
    rng = random.Random(seed)
    tokens = ["".join(rng.choice("ab ") for _ in range(rng.randint(1, 3))) for _ in range(12)]
    reference = "".join(tokens)
    cut = rng.randint(0, len(reference))
    text = reference[:cut] + rng.choice(["", "x", "ab", reference[cut:]])
    expected = next((i for i in range(len(tokens)) if not text.startswith("".join(tokens[:i + 1]))), len(tokens))
    assert soak_checks.first_difference(tokens, text) == expected


def test_greedy_classes_follow_the_reference_margin():
    reference = {"text": " a b c", "tokens": [" a", " b", " c"], "margins": [3.0, 0.4, None]}
    assert soak_checks.classify_greedy(reference, " a b c") == "exact"
    assert soak_checks.classify_greedy(reference, " a x c") == "near-tie"  # second token, margin 0.4
    assert soak_checks.classify_greedy(reference, " z b c") == "mismatch"  # first token, margin 3
    assert soak_checks.classify_greedy(reference, " a b q") == "mismatch"  # margin unknown: not a tie
    assert soak_checks.greedy_check({"exact": 4, "near-tie": 1}, "exact")["pass"] is False
    assert soak_checks.greedy_check({"exact": 4, "near-tie": 1}, "near-tie")["pass"] is True
    assert soak_checks.greedy_check({"exact": 4, "mismatch": 1}, "near-tie")["pass"] is False
    assert soak_checks.greedy_check({}, "exact")["pass"] is False  # nothing compared proves nothing


def samples(rng, count, level, slope, noise):
    return [(float(t), level + slope * t + rng.gauss(0, noise)) for t in range(count)]


@pytest.mark.parametrize("seed", range(3))
def test_memory_check_tells_noise_from_a_leak(seed):
    rng = random.Random(seed)
    flat = samples(rng, 200, 2000.0, 0.0, 10.0)
    assert soak_checks.memory_check(flat, 0.0, 199.0, "rss")["pass"]
    # one MiB per sample: about 135 MiB between the quarters' medians, over the 5 % (about 100 MiB) allowed
    leaking = samples(rng, 200, 2000.0, 1.0, 10.0)
    verdict = soak_checks.memory_check(leaking, 0.0, 199.0, "rss")
    assert not verdict["pass"] and verdict["growth_mib"] > verdict["tolerance_mib"]
    assert verdict["tolerance_mib"] == pytest.approx(0.05 * verdict["first_quarter_mib"], abs=0.1)
    # growth inside the warm-up (pools filling) does not count
    warming = [(t, mib + (0.0 if t < 15 else 500.0)) for t, mib in flat]
    assert soak_checks.memory_check(warming, 0.0, 199.0, "rss")["pass"]
    too_few = soak_checks.memory_check(flat[:8], 0.0, 7.0, "rss")
    assert not too_few["pass"] and "fewer than" in too_few["reason"]


def test_tracebacks_are_found():
    log = "INFO ready\nTraceback (most recent call last):\n  File \"x.py\", line 1\nIndexError: boom\n"
    verdict = soak_checks.traceback_check(log)
    assert not verdict["pass"] and verdict["tracebacks"] == 1 and "IndexError: boom" in verdict["first"]
    assert soak_checks.traceback_check("INFO ready\nINFO 200 OK\n")["pass"]


@pytest.mark.parametrize("arguments, message", [
    (["--base-url", "http://192.0.2.1:30000", "--server-log", __file__], "this machine only"),
    (["--base-url", "http://127.0.0.1:30000"], "--base-url needs --server-log"),
    (["--base-url", "http://127.0.0.1:30000", "--server-log", "/nonexistent/server.log"], "no such file"),
    (["--clients", "0"], "--clients must be positive"),
])
def test_bad_soak_options_get_one_line_and_status_2(arguments, message, tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--out", str(tmp_path / "r.json"),
                             *arguments], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "r.json").exists()


def test_a_restart_is_an_sglang_component_ending_not_a_worker_pool():
    """A GPU soak counted 16 ended pool workers (plain ``python3`` children) as restarts while the server
    served throughout: only the processes SGLang titles ``sglang::...`` count."""
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "component = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', 'sglang::scheduler'])\n"
        "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(2)'])\n"
        "print(component.pid, flush=True)\n"
        "helper.wait()\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        component = int(parent.stdout.readline())
        time.sleep(0.5)
        watch = soak_server.ServerWatch(parent.pid, port=1, every=1.0, gpu=False)
        time.sleep(3)  # the helper has ended
        watch.sample()
        assert (watch.events, watch.helpers_ended) == ([], 1)
        subprocess.run(["kill", str(component)], check=True)
        time.sleep(1)
        watch.sample()
        assert watch.events == [f"server component {component} (sglang::scheduler) ended"]
    finally:
        parent.kill()
