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
