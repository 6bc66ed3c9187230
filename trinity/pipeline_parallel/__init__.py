"""Pipeline parallelism (issue 11): plans, their cost model, partitioners, TAPP's search and real runs.

* `PipelinePlan` (plan.py): contiguous stages of layers, one device each, micro-batches, schedule.
* `predict`, `predict_data_parallel`, `require_fits` (cost.py): `StepCost` of a plan / of BSP data
  parallelism on a `Cluster`, from a `trinity.profile.layers.LayerProfile`.
* `pipedream_partition`, `even_split`, `exhaustive_search`, `random_search` (partition.py).
* `pipedream_plan`, `ReplicatedPlan`, `predict_replicated` (pipedream.py): PipeDream's planner as published.
* `tapp_search`, `TappConfig` (tapp.py).
* `measure`, `measure_data_parallel`, `local_cluster` (measure.py): run a plan for real on local
  torch.distributed processes (``python -m trinity.pipeline_parallel.run``, launched by
  `trinity.runtime.ranks.run_ranks` over kernel-shaped links).
"""

from trinity.pipeline_parallel.cost import (WEIGHT_COPIES, StageCost, lower_bound_us, predict,
                                            predict_data_parallel, require_fits, simulate, stage_costs)
from trinity.pipeline_parallel.measure import local_cluster, measure, measure_data_parallel
from trinity.pipeline_parallel.partition import (bottleneck_us, count_plans, enumerate_plans, even_split,
                                                 exhaustive_search, pipedream_partition, random_search)
from trinity.pipeline_parallel.pipedream import ReplicatedPlan, pipedream_plan, predict_replicated
from trinity.pipeline_parallel.plan import PipelineError, PipelinePlan, plan_from_sizes
from trinity.pipeline_parallel.tapp import TappConfig, TappResult, tapp_search

__all__ = ["PipelineError", "PipelinePlan", "plan_from_sizes", "predict", "predict_data_parallel", "require_fits",
           "simulate", "stage_costs", "lower_bound_us", "StageCost", "WEIGHT_COPIES", "pipedream_partition",
           "even_split", "exhaustive_search", "random_search", "enumerate_plans", "count_plans", "bottleneck_us", "tapp_search",
           "TappConfig", "TappResult", "measure", "measure_data_parallel", "local_cluster", "ReplicatedPlan",
           "pipedream_plan", "predict_replicated"]
