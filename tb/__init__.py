"""cocotb testbenches; each is launched from tests/ through netreduce.sim.runner.run_cocotb."""
