"""The search loop's budget defaults, apart from the loop so that what only reads them (the report)
need not import torch."""

ITERATIONS = 1000  #: the paper's budget
BATCH = 8  #: strategies sampled per iteration
