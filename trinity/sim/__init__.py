"""Event simulator of one training step of a placed OpGraph.

Semantics (the paper's, made exact; `reference.py` is their plain statement
and `fast.py` the compiled one the search uses):

* Each device runs one op at a time, non-preemptively, taking ops from a FIFO
  of ops that became runnable on it (a stack with a cluster's ``ready_order:
  lifo``: the newest first; with ``lifo-arrivals-last`` an op made runnable
  by an arriving tensor goes to the stack's bottom instead, taken after
  every op the device itself readied). An op is runnable when every in-edge is
  satisfied: a control edge or a same-device data edge when its producer
  ends, a cross-device data edge when the tensor has arrived.
* When an op ends, each of its output tensors that some op on another device
  reads is queued once per consuming device (a tensor goes once to each
  consuming device) on the producer device's outgoing FIFO. Each device
  sends one tensor at a time (or up to a cluster's ``link_streams`` k at
  once, each taking its full time: the runtime serves several ``RecvTensor``
  calls concurrently), overlapping its compute; a transfer of b bytes
  from s to d takes ``latency[s, d] + b / bandwidth[s, d]`` microseconds
  (with a cluster's ``latency_overlaps`` the stream is free once the bytes
  are on it, and the tensor arrives after the rest, its latency, in flight).
  With a cluster ``send_cpu_share`` f > 0 (CPU workers, whose processors also
  move the data), a tensor is first queued on the sender's run queue like an
  op and occupies its processor for f of that time, then spends the rest
  (1 - f) on the sender's outgoing FIFO; the transfer starts (and the
  receiver's copy is allocated) when the processor takes it up. With a
  ``receive_cpu_share`` g > 0, an arrived tensor next occupies the
  receiver's processor for g of that time (taken before any other ready
  work there) and only then counts as arrived for its readers. With
  ``cpu_share_of: bytes`` both shares are of the bytes' time b / bandwidth
  alone: the latency is spent on the outgoing FIFO's side (the wire), and
  an empty tensor takes no processor time. A cluster's ``transfer_cpu_us``
  c adds c to what both shares are of, for every tensor with bytes.
* Control edges between devices (a cluster's ``control_transfers``): each
  producer of control edges sends an empty tensor once to each device its
  control edges reach, queued with its outputs' transfers in the order of
  their first edges, as TensorFlow's runtime does; it takes the link's
  latency (and the sender's CPU share of it). Without the flag a control
  edge is satisfied when its producer ends, wherever its consumer runs.
  Transfer records give such a tensor output index -1 and 0 bytes.
* Ties: completions are handled in time order, and at equal times in the
  order they started; after each completion every idle device (in device
  order) starts its next op, then every idle sender its next tensor.
* Co-running processors (a cluster's ``corun_slowdown`` c > 0: workers that
  share one machine's caches and memory bandwidth): while k processors are
  busy (with ops or the CPU share of transfers), each progresses at
  1 / (1 + c (k - 1)) of its speed, so a running item's end moves whenever k
  changes; an op's end is when its work is done. ``busy_us`` stays the
  uncontended work.
* Step synchronisation (a cluster's ``step_sync_us`` s): a placement that
  uses m devices ends s (m - 1) after its last op (the master's step
  protocol with each extra worker); op times are unchanged.
* Memory per device = persistent bytes of its ops + the peak over time of
  live buffers, each live over [alloc, free): an op's scratch bytes while it
  runs; its outputs from its start until the last local reader ends and
  every transfer of them has arrived (or its end, if nobody reads them); a
  received copy from the transfer's start until its last reader ends. The
  outputs of an op that holds persistent bytes (a variable, a parameter)
  are that storage, so they add nothing on its own device.
* Peak communication = the largest per-device sent + received bytes.
  A device is out of memory when its peak exceeds its capacity.
"""

from trinity.costs import op_times
from trinity.sim.fast import Simulator
from trinity.sim.reference import simulate_reference
from trinity.sim.result import SimResult, lower_bound

__all__ = ["SimResult", "Simulator", "lower_bound", "op_times", "simulate_reference"]
