"""Data parallelism for heterogeneous clusters: DDP, a plain parameter server, DASO and H-PS.

Each method is one synchronisation strategy (`trinity.data_parallel.strategies`). Run for real on local
torch.distributed processes in node groups, with slowed workers and kernel-shaped links between the
nodes (`train`), and predicted on a `Cluster` (`step_cost`), as the other families are.
"""

from trinity.data_parallel.config import DasoConfig, DataParallelError, HpsConfig, TrainConfig
from trinity.data_parallel.cost import DataParallelWork, compare_methods, step_cost
from trinity.data_parallel.daso import BatchPlan, DasoSchedule, Plateau, blend, epoch_plan
from trinity.data_parallel.hps import SpeedMeter, batch_shares, check_shares
from trinity.data_parallel.quantize import dequantize, error_bound, precision_for, quantize
from trinity.data_parallel.strategies import METHODS, SyncStrategy, strategy_class
from trinity.data_parallel.train import time_to_target, train
from trinity.runtime.links import LinkSpec

__all__ = ["METHODS", "BatchPlan", "DasoConfig", "DasoSchedule", "DataParallelError", "DataParallelWork",
           "HpsConfig", "LinkSpec", "Plateau", "SpeedMeter", "SyncStrategy", "TrainConfig", "batch_shares", "blend",
           "check_shares", "compare_methods", "dequantize", "epoch_plan", "error_bound", "precision_for",
           "quantize", "step_cost", "strategy_class", "time_to_target", "train"]
