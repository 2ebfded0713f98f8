"""The hearth binary's top-level behaviour."""


def test_version(run_hearth):
    r = run_hearth("--version")
    assert r.returncode == 0
    assert r.stdout.startswith("hearth ")


def test_info_reports_build(run_hearth):
    r = run_hearth("info")
    assert r.returncode == 0, r.stderr
    assert "cuda:" in r.stdout


def test_unknown_subcommand_fails_cleanly(run_hearth):
    r = run_hearth("no-such-command")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr


def test_info_tune_lists_every_key_with_its_value(run_hearth):
    r = run_hearth("info", "--tune")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("kill switches")
    for line in ("  cuda.graph=true ", "  pool.spin_us=200 ", "  cpu.moe=fused ", "  cuda.op_timing=off "):
        assert line in r.stdout, line
    assert "[default" not in r.stdout
    r = run_hearth("info", "--tune", "cuda.graph=0,cpu.moe=generic")
    assert r.returncode == 0, r.stderr
    assert "  cuda.graph=false " in r.stdout and "[default true]" in r.stdout
    assert "  cpu.moe=generic " in r.stdout and "[default fused]" in r.stdout


def test_tune_refuses_bad_keys_and_values_in_one_line(run_hearth):
    for args, text in [(("info", "--tune", "cuda.grahp=0"), "unknown key 'cuda.grahp'"),
                       (("run", "--tune", "pool.spin_us=-1", "-p", "hi"), "pool.spin_us takes a whole number from 0"),
                       (("serve", "--tune", "cpu.moe=fast"), "cpu.moe takes one of fused, generic"),
                       (("run", "--tune", "cuda.graph", "-p", "hi"), "key=value")]:
        r = run_hearth(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert text in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)


def test_run_applies_tune_before_the_back_end_starts(run_hearth, default_model):
    # cpu.op_timing is read when the back-end is created: its table shows the option got there.
    base = ("run", "-m", default_model, "--device", "cpu", "--raw", "-p", "The capital of France is", "-n", "4",
            "--threads", "2")
    plain = run_hearth(*base)
    assert plain.returncode == 0, plain.stderr
    assert "CPU op timing" not in plain.stderr
    timed = run_hearth(*base, "--tune", "cpu.op_timing=1", "--tune", "pool.spin_us=0,cpu.repack=0")
    assert timed.returncode == 0, timed.stderr
    assert "hearth: CPU op timing" in timed.stderr
    assert timed.stdout == plain.stdout  # the same greedy text (the packed kernels keep the bits)
