"""Layer 4: coded inference on worker processes (local) or Ray actors.

``CodedInference(model_factory, code, backend="local", devices=None,
stragglers=None, deadline=None)`` starts ``code.N`` workers that each build the
model once; ``ci(X)`` encodes X (B*K inputs, B groups of K), sends every worker
its coded inputs, waits for the first answers under the straggler model's rule
and decodes. See ``letcc.runtime.coded_inference`` for the data flow and
``letcc.runtime.backend`` for what a backend must do.
"""
from letcc.runtime.coded_inference import CodedInference
from letcc.runtime.quarantine import Quarantine
from letcc.runtime.round_info import RoundInfo
from letcc.runtime.virtual_time import Decision, RoundWaiter
from letcc.runtime.worker_main import worker_rank

__all__ = ["CodedInference", "Quarantine", "RoundInfo", "RoundWaiter", "Decision", "worker_rank"]
