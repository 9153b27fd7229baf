"""benchmarks/quality_sweep.py: both trainers run the strategy asked for (issue #16 item 6:
ADC against gsplat's DefaultStrategy, as MCMC against its MCMCStrategy)."""

import pytest
from conftest import load_benchmark


def _sweep():
    return load_benchmark("quality_sweep")


def _option(cmd, name):
    return cmd[cmd.index(name) + 1]


@pytest.mark.parametrize("strategy", ["mcmc", "adc"])
def test_both_trainers_run_the_strategy_asked_for(tmp_path, strategy):
    sweep = _sweep()
    args = sweep.parse_args(["scene", "--gsplat", "gsplat_train.py", "--iterations", "7000", "--strategy", strategy])
    ours = sweep.spirula_command(args, ["opacity_reset=true"], 0, tmp_path)
    peer = sweep.gsplat_command(args, 0, tmp_path)
    # gsplat_train.py --strategy: mcmc (MCMCStrategy) | adc (DefaultStrategy)
    assert _option(ours, "--strategy") == strategy == _option(peer, "--strategy")
    assert _option(ours, "--iterations") == "7000" == _option(peer, "--steps")
    assert (_option(ours, "--seed"), _option(peer, "--seed")) == ("0", "42")
    assert _option(ours, "--set") == "opacity_reset=true"


def test_mcmc_stays_the_default():
    assert _sweep().parse_args(["scene"]).strategy == "mcmc"
