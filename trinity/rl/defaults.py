"""The search loop's budget defaults, apart from the loop so that what only reads them (the report)
need not import torch."""

ITERATIONS = 1000  #: the paper's budget
BATCH = 8  #: strategies sampled per iteration
TRINITY_SCRATCH_BATCH = 64  #: Trinity from scratch (conf/method/trinity.yaml): one pass scores a whole batch
