"""Concurrency that follows the model server: how many episodes may be in flight at once.

``controller``: the rules, pure (no I/O, no clock), tested from recorded scrapes; ``start``: where
``--concurrency auto`` starts (the memory plan, ``--max-num-seqs``, the sandboxes the host holds);
``gate``: the limit the executors' workers pass, following the server's scraper.
"""

from harness.admission.controller import AdmissionController, AdmissionPolicy, Decision, LoadSample
from harness.admission.start import AutoStart, auto_start, sandbox_capacity

__all__ = [
    "AdmissionController",
    "AdmissionPolicy",
    "AutoStart",
    "Decision",
    "LoadSample",
    "auto_start",
    "sandbox_capacity",
]
