"""benchmarks/real_target's device-call scripts on a CPU: what install_and_start.sh gives each phase (its
RT_DRY_RUN line: deadline, GPU, CPU list, arms) for the phase plans its README names, that every default arm is
one the benchmarks know, and that run_gpu.sh runs a phase on the CPU list RT_CPUS_<PHASE> names.

A GPU lease is lost with an arm name mistyped or a deadline past its end; these are checked here instead."""

import os
import subprocess

import pytest

from tests.script_module import ROOT, load_siblings

engines, serve_bench = load_siblings("benchmarks/real_target", "engines", "serve_bench")
(vllm_bench,) = load_siblings("benchmarks/real_target", "vllm_bench")
KIT = ROOT / "benchmarks" / "real_target"
DRAFTERS = ["specforge", "speculators"]
LEFT, TAIL = 1700, 45


def planned(phases: str, **environment: str) -> subprocess.CompletedProcess:
    """``install_and_start.sh``'s dry run for ``phases``."""
    return subprocess.run(["bash", str(KIT / "install_and_start.sh"), str(LEFT), "abc1234"],
                          env={**os.environ, "RT_DRY_RUN": "1", "RT_PHASES": phases, **environment},
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def dry_run(phases: str, **environment: str) -> dict[str, dict[str, str]]:
    """``install_and_start.sh``'s dry run: {phase: {deadline, gpu, cpus, arms}} and {"run": {phases, drafters}}."""
    result = planned(phases, **environment)
    assert result.returncode == 0, result.stderr
    phases_out = {}
    for line in result.stdout.splitlines():
        phase, *fields = line.split(" ")
        phases_out[phase] = dict(field.split("=", 1) for field in fields)
    return phases_out


def cpu_set(text: str) -> set[int]:
    """A taskset CPU list ("0-15", "3", "0-1,4") as a set."""
    cpus = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def test_one_gpu_runs_the_engines_one_after_the_other_sglang_first_with_vllms_share_left():
    plan = dry_run("setup serve vllm")
    assert set(plan) == {"run", "serve", "vllm"}
    # the deadlines count from the call's start (no RT_LEASE_START): within a second of LEFT - TAIL
    assert abs(int(plan["vllm"]["deadline"]) - (LEFT - TAIL)) <= 1
    assert int(plan["vllm"]["deadline"]) - int(plan["serve"]["deadline"]) == 690
    assert plan["serve"]["cpus"] == plan["vllm"]["cpus"] == ""
    # vLLM's share is kept after SGLang's arms: the other order is refused, not given the wrong deadlines
    refused = planned("setup vllm serve")
    assert refused.returncode == 2 and "serve must come before vllm" in refused.stderr


def test_two_gpus_run_the_engines_side_by_side_on_disjoint_cores_then_the_diagnostics():
    plan = dry_run("setup vllm+serve adaptive", RT_GPUS="2")
    assert plan["run"]["turns"] == "none"  # a GPU each: no turns to take
    serve, vllm, adaptive = plan["serve"], plan["vllm"], plan["adaptive"]
    assert serve["deadline"] == vllm["deadline"]  # side by side: neither waits for the other
    assert int(adaptive["deadline"]) - int(serve["deadline"]) == 480
    assert (serve["gpu"], vllm["gpu"]) == ("0", "1")
    # the CPUs this process may use, halved (a container's need not start at 0 nor be all the host's)
    assert cpu_set(serve["cpus"]).isdisjoint(cpu_set(vllm["cpus"]))
    assert cpu_set(serve["cpus"]) | cpu_set(vllm["cpus"]) == os.sched_getaffinity(0)
    assert adaptive["cpus"] == ""  # the engines have ended: the whole host
    # a share given is taken from the engines' deadline, not added past the lease
    shifted = dry_run("setup vllm+serve adaptive", RT_ADAPTIVE_SHARE="300")
    assert int(shifted["adaptive"]["deadline"]) - int(shifted["serve"]["deadline"]) == 300
    assert abs(int(shifted["adaptive"]["deadline"]) - int(adaptive["deadline"])) <= 1


def test_one_gpu_runs_the_engines_side_by_side_on_it_taking_turns():
    """Where one GPU is lent, "vllm+serve" puts both engines on it, on disjoint cores as on two GPUs, with a lock
    file to take turns by (turns.py) and KV pools of a set size, given to both benchmarks."""
    plan = dry_run("setup vllm+serve adaptive", RT_GPUS="1")
    serve, vllm = plan["serve"], plan["vllm"]
    assert (serve["gpu"], vllm["gpu"]) == ("0", "0") and serve["deadline"] == vllm["deadline"]
    assert cpu_set(serve["cpus"]).isdisjoint(cpu_set(vllm["cpus"]))
    assert plan["run"]["turns"] == "/tmp/rt/turns.lock"
    assert plan["run"]["serve_kv"] == "--kv-tokens=262144"
    # what the plan gives vLLM's benchmark, as it parses it (serve_bench shares --turns; --kv-tokens is its own)
    parsed = vllm_bench.parse_args(["/out", "--target", "T", "--prompts", "P", "--turns", plan["run"]["turns"],
                                    *plan["run"]["vllm_kv"].split("=")])
    kwargs = vllm_bench.engine_kwargs("T", None, None, (1,), 2048, memory=parsed.memory,
                                      kv_cache_bytes=parsed.kv_cache_bytes)
    assert (kwargs["kv_cache_memory_bytes"], kwargs["gpu_memory_utilization"]) == (8 << 30, 0.3)
    assert parsed.turns == "/tmp/rt/turns.lock"
    # the engines one after the other on one GPU take no turns and keep their engines' own pool sizing
    alone = dry_run("setup serve vllm", RT_GPUS="1")["run"]
    assert (alone["turns"], alone["serve_kv"], alone["vllm_kv"]) == ("none", "", "")
    script = (KIT / "install_and_start.sh").read_text()
    for variable in ("RT_SERVE_ARGS", "RT_VLLM_ARGS"):  # the plan's options reach both benchmarks
        line = next(line for line in script.splitlines() if line.strip().startswith(variable + "="))
        assert "$TURN_ARGS" in line and f"$KV_ARGS_{variable[3:-5]}" in line, line


def test_the_adaptive_arms_in_two_halves_take_turns_on_gpu_0_on_disjoint_cores():
    """"adaptive+adaptive2": every other arm of the list to a second serve_bench on the same GPU, each on half of
    the cores, taking turns by their own lock file with KV pools of a set size; the arms alone keep their phase's
    whole list and no turns."""
    plan = dry_run("setup adaptive+adaptive2", RT_GPUS="1")
    first, second = plan["adaptive"], plan["adaptive2"]
    whole = dry_run("setup adaptive", RT_GPUS="1")
    assert "adaptive2" not in whole and whole["run"]["adaptive_turns"] == "none" and whole["run"]["adaptive_kv"] == ""
    arms = whole["adaptive"]["arms"].split(",")
    assert first["arms"].split(",") == arms[0::2] and second["arms"].split(",") == arms[1::2]
    assert (first["gpu"], second["gpu"]) == ("0", "0") and first["deadline"] == second["deadline"]
    assert cpu_set(first["cpus"]).isdisjoint(cpu_set(second["cpus"]))
    assert cpu_set(first["cpus"]) | cpu_set(second["cpus"]) == os.sched_getaffinity(0)
    assert plan["run"]["adaptive_turns"] == "/tmp/rt/adaptive_turns.lock"
    assert plan["run"]["adaptive_kv"] == "--kv-tokens=262144"
    script = (KIT / "install_and_start.sh").read_text()
    for variable in ("RT_ADAPTIVE_ARGS", "RT_ADAPTIVE2_ARGS"):  # the plan's options reach both halves
        line = next(line for line in script.splitlines() if line.strip().startswith(variable + "="))
        assert "$ADAPTIVE_TURNS" in line and "$KV_ARGS_ADAPTIVE" in line, line


def test_the_lease_counts_from_its_first_call_when_told():
    import time

    earlier = int(time.time()) - 200
    plan = dry_run("setup serve", RT_LEASE_START=str(earlier))
    assert abs(int(plan["serve"]["deadline"]) - (LEFT - TAIL - 200)) <= 1


def test_a_machine_without_the_drafters_trains_them_after_setup_and_one_with_them_does_not(tmp_path):
    trained = dry_run("setup serve adaptive", RT_BACK=str(tmp_path))["run"]
    assert trained == {"phases": "setup,regen,specforge+speculators,serve,adaptive", "drafters": "trained",
                       "turns": "none", "adaptive_turns": "none", "serve_kv": "", "vllm_kv": "", "adaptive_kv": ""}
    (tmp_path / "SHA256SUMS").write_text("0" * 64 + "  data.jsonl.gz\n")
    carried = dry_run("setup serve adaptive", RT_BACK=str(tmp_path))["run"]
    assert carried == {"phases": "setup,serve,adaptive", "drafters": "carried", "turns": "none",
                       "adaptive_turns": "none", "serve_kv": "", "vllm_kv": "", "adaptive_kv": ""}


def test_every_default_arm_is_one_the_benchmarks_know():
    plan = dry_run("setup vllm+serve adaptive")
    known = set(serve_bench.arm_names(DRAFTERS, list(serve_bench.ALL_SHAPES)))
    for phase in ("serve", "adaptive"):
        arms = plan[phase]["arms"].split(",")
        assert set(arms) <= known, set(arms) - known
        assert len(arms) == len(set(arms))
    vllm_arms = plan["vllm"]["arms"].split(",")
    for name in vllm_arms:
        drafter, _ = vllm_bench.parse_arm(name)
        assert drafter in (None, *DRAFTERS)
    # issue 38's arms: each engine's plain decoding, chains 1 and 3 of both drafters, SGLang's wide tree of each
    assert set(plan["serve"]["arms"].split(",")) == {"plain"} | {
        f"{drafter}/{shape}/plugin" for drafter in DRAFTERS for shape in ("chain1", "chain", "wide")}
    assert set(vllm_arms) == {"plain"} | {f"{drafter}/k{k}/vllm" for drafter in DRAFTERS for k in (1, 3)}
    # section 17's diagnostics: every off path, the graphed one first and plain decoding, their reference, next
    adaptive = plan["adaptive"]["arms"].split(",")
    assert adaptive[:2] == ["speculators/off-graph/plugin", "plain"] and "speculators/adaptive/plugin" in adaptive
    assert {f"speculators/{name}/plugin" for name in serve_bench.DIAGNOSTICS if name.startswith("off-")} <= set(
        adaptive)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux CPU affinity")
def test_a_phase_runs_on_its_cpu_list_and_reads_its_own_arguments(tmp_path):
    """run_gpu.sh's run_phase, sourced (its functions only), with a phase command that reports where it runs
    and the phase's arguments as the real command would expand them."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("one CPU allowed: a pinned phase would run where an unpinned one does")
    cpu = allowed[-1]

    def run_phase(cpus: str) -> int:
        script = f"""
            set -- run {tmp_path}
            source {KIT / 'run_gpu.sh'}
            echo "$(phase_command adaptive)" > {tmp_path}/command.txt
            phase_command() {{
              echo 'python3 -c "import os; print(sorted(os.sched_getaffinity(0)))"; echo "$RT_ADAPTIVE_ARGS"'; }}
            RT_CPUS_ADAPTIVE={cpus} RT_ADAPTIVE_ARGS="--arms plain" run_phase adaptive
        """
        # into a file, not a pipe: the phase's watchdog (a sleep of RT_LIMIT_ADAPTIVE seconds) outlives the call
        with open(tmp_path / "bash.out", "w") as out:
            return subprocess.run(["bash", "-c", script], stdout=out, stderr=subprocess.STDOUT, timeout=60,
                                  cwd=ROOT, env={**os.environ, "RT_LIMIT_ADAPTIVE": "30"}).returncode

    assert run_phase(str(cpu)) == 0, (tmp_path / "bash.out").read_text()
    log = (tmp_path / "adaptive.log").read_text().splitlines()
    assert log == [f"[{cpu}]", "--arms plain"]
    assert (tmp_path / "adaptive.done").exists()
    # the real phase: serve_bench into ROOT/adaptive, its arguments from RT_ADAPTIVE_ARGS, not serve's
    command = (tmp_path / "command.txt").read_text()
    assert f"serve_bench.py {tmp_path}/adaptive " in command and command.strip().endswith("${RT_ADAPTIVE_ARGS:-}")
    # a CPU list the phase cannot have stops it: its engine never runs unpinned, nor on every GPU
    (tmp_path / "adaptive.done").unlink()
    assert run_phase("99999") == 97
    assert (tmp_path / "adaptive.log").read_text().strip().endswith("not pinned to CPUs 99999")
    assert not (tmp_path / "adaptive.done").exists()
    # a wait where no run was started returns at once (a failed install call must not spend the lease waiting)
    waited = subprocess.run(["bash", str(KIT / "run_gpu.sh"), "wait", str(tmp_path / "none"), "30"],
                            capture_output=True, text=True, timeout=20, cwd=ROOT)
    assert waited.returncode == 1 and "no run in" in waited.stdout


def test_host_probe_names_each_paths_file_system_and_reads_real_bytecode(tmp_path):
    """host_probe.py, which run_gpu.sh runs once per run: the file system of a path is its longest mount point's
    (/proc/self under /proc, not /), and the bytecode it times reading is a package's own, found by its spec."""
    (host_probe,) = load_siblings("benchmarks/real_target", "host_probe")
    found = host_probe.mounts({"proc": "/proc/self", "root": "/"})
    assert found["proc"] == "proc" and found["root"] not in (None, "proc")
    table = tmp_path / "mounts"  # /tmp mounted twice, the later on top; a path written with ".." in it
    table.write_text("root / ext4 rw 0 0\nfirst /tmp overlay rw 0 0\nlater /tmp tmpfs rw 0 0\n"
                     "shm /dev/shm tmpfs rw 0 0\n")
    assert host_probe.mounts({"t": "/tmp/../tmp/x", "r": "/usr", "s": "/dev/shm"}, str(table)) == {
        "t": "tmpfs", "r": "ext4", "s": "tmpfs"}
    import json as package
    files = host_probe.bytecode_files("json")
    assert files and all(path.endswith(".pyc") and os.path.isfile(path) for path in files)
    assert all(path.startswith(os.path.dirname(package.__file__)) for path in files)


def test_host_probe_profiles_an_import_by_pythons_own_importtime_lines():
    """The import profile of ``email.mime.text`` in a fresh interpreter: the module itself and its package are among
    the modules counted, the top list is ordered by own time and no longer than asked, and the own times' sum is at
    most the wall time of the whole interpreter."""
    (host_probe,) = load_siblings("benchmarks/real_target", "host_probe")
    profile = host_probe.import_profile("email.mime.text", top=3)
    assert profile["exit"] == 0 and profile["modules"] >= 5, profile
    assert len(profile["top_own_ms"]) == 3
    own = [ms for _, ms in profile["top_own_ms"]]
    assert own == sorted(own, reverse=True) and all(ms >= 0 for ms in own)
    assert 0 < profile["own_s_sum"] <= profile["seconds"]
    everything = host_probe.import_profile("email.mime.text", top=1000)
    assert {"email.mime.text", "email.mime"} <= {name for name, _ in everything["top_own_ms"]}
    assert host_probe.import_profile("no_such_module_here")["exit"] != 0


def test_host_probe_stops_an_import_past_its_limit(tmp_path, monkeypatch):
    """A module whose body sleeps 30 s, profiled with a 1 s limit: stopped, its exit said to be the timeout, the
    probe back within seconds. The bytecode writer writes a package's bytecode where the import system finds it."""
    (host_probe,) = load_siblings("benchmarks/real_target", "host_probe")
    (tmp_path / "slow_body.py").write_text("import time\ntime.sleep(30)\n")
    monkeypatch.chdir(tmp_path)  # python -c puts the working directory first on its path
    profile = host_probe.import_profile("slow_body", limit=1)
    assert profile["exit"] == "timeout" and 1 <= profile["seconds"] < 10, profile
    package = tmp_path / "probed_package"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    (package / "part.py").write_text("def twice(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert host_probe.bytecode_files("probed_package") == []
    assert host_probe.write_bytecode("probed_package")["exit"] == 0
    assert sorted(os.path.basename(path).split(".")[0] for path in host_probe.bytecode_files("probed_package")) == [
        "__init__", "part"]
