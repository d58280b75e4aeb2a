"""Smoke test of the in-process demo: it runs and its figures are what the closed form predicts."""

from pipelines import demo


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
