"""Smoke test of the in-process demo: it runs and its figures are what the closed form predicts."""

import pytest

from pipelines import demo

# no module-wide mark: the in-process demo tests are fast; the marks sit on the tests below
pytestmark: list[pytest.MarkDecorator] = []


@pytest.mark.statistical
def test_demo_runs_and_matches_theory(capsys):
    argv = ["--users", "200000", "--domain_size", "256", "--epsilon", "1", "--mechanism", "olh"]
    argv += ["--seed", "3"]
    out = demo.run(argv)
    text = capsys.readouterr().out
    assert "full-domain MSE" in text and "95% CI" in text
    # One trial over d = 256 values: the MSE / variance ratio has relative SE ~ sqrt(2/256) = 0.09 (plus the
    # f-dependence of the variance, already in the closed form); 5 SE -> [0.55, 1.45].
    assert 0.55 < out["mse_base"] / out["theory_variance"] < 1.45
    assert out["mse_post"] < out["mse_base"]
    # coverage of the 95% CI over 256 values: binomial SE ~ 0.014; 5 SE band
    assert 0.88 < out["coverage"] <= 1.0


@pytest.mark.parametrize(
    ("flags", "words"),
    [(["--users", "0"], "--users must be >= 1"), (["--top", "-1"], "--top must be >= 0"),
     (["--domain_size", "1"], "domain_size must be"), (["--epsilon", "nan"], "epsilon must be")],
)
def test_demo_refuses_a_bad_flag_in_one_line(flags, words, capsys):
    with pytest.raises(SystemExit) as exc:
        demo.run(["--users", "100", *flags])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


@pytest.mark.integration  # two whole Beam jobs on the DirectRunner: seconds each
def test_demo_beam_reruns_in_its_workdir_without_mixing(tmp_path, capsys):
    """The Beam demo replaces its own reports/ and out-*/ on every run: a second run with fewer files and
    users reads exactly its own reports (an earlier run's files would inflate the counts)."""
    from pipelines import demo_beam

    base = ["--domain_size", "16", "--workdir", str(tmp_path), "--top", "2", "--compare", "none"]
    first = demo_beam.run([*base, "--users", "3000", "--files", "3", "--inject_bad", "1"])
    assert first["counts"]["accepted"] == 3000
    second = demo_beam.run([*base, "--users", "1000", "--files", "1", "--inject_bad", "0"])
    c = second["counts"]
    assert c["read"] == c["accepted"] == 1000 and c["rejected"] == 0
    names = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert names == ["reports-00000-of-00001.avro", "truth.json"]
    assert "full-domain MSE (base)" in capsys.readouterr().out


@pytest.mark.integration
@pytest.mark.statistical
def test_demo_beam_top_k_claims_hold_after_selection(tmp_path, capsys):
    """The batch demo's printout on the README's apps setting (OLH, epsilon 1, d = 1024, Zipf 1.5,
    200,000 users, seed 1): no value of true frequency 0 is flagged (Bonferroni over the domain) and the
    top 20 by estimate are covered by their simultaneous intervals, while the per-value ones miss some."""
    from pipelines import demo_beam

    out = demo_beam.run(["--users", "200000", "--mechanism", "olh", "--dataset", "zipf:1.5", "--seed", "1",
                         "--workdir", str(tmp_path), "--top", "20", "--files", "1", "--inject_bad", "0",
                         "--compare", "none"])  # fmt: skip
    text = capsys.readouterr().out
    assert "flagged above 0 (Bonferroni over d = 1,024 at 5%)" in text
    assert out["flagged_true_zero"] == 0 and out["flagged"] >= 5
    assert out["top_covered_simultaneous"] == 20 > out["top_covered_per_value"]
