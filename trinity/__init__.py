"""Trinity: RL search for operator-level model-parallel placement, with baselines, a simulator and real runs."""

import os

# TensorFlow's C++ INFO/WARNING lines (oneDNN notices, profiler sessions) drown the output of
# export and profiling; users can still ask for them by setting the variable themselves.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
