"""Data parallelism for heterogeneous clusters: DDP, a plain parameter server, DASO and H-PS.

Run for real on local torch.distributed processes in node groups, with slow workers and a slow
inter-node link (`train`), and predicted on a `Cluster` (`step_cost`), as the other families are.
"""

from trinity.data_parallel.config import (METHODS, DasoConfig, DataParallelError, HpsConfig, LinkConfig,
                                          TrainConfig)
from trinity.data_parallel.cost import DataParallelWork, compare_methods, step_cost
from trinity.data_parallel.daso import BatchPlan, DasoSchedule, Plateau, blend, epoch_plan
from trinity.data_parallel.hps import SpeedMeter, batch_shares, check_shares
from trinity.data_parallel.quantize import dequantize, error_bound, precision_for, quantize
from trinity.data_parallel.train import time_to_target, train

__all__ = ["METHODS", "BatchPlan", "DasoConfig", "DasoSchedule", "DataParallelError", "DataParallelWork",
           "HpsConfig", "LinkConfig", "Plateau", "SpeedMeter", "TrainConfig", "batch_shares", "blend",
           "check_shares", "compare_methods", "dequantize", "epoch_plan", "error_bound", "precision_for",
           "quantize", "step_cost", "time_to_target", "train"]
