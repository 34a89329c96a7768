"""Verification of a stored audit log against trusted SM2 public keys.

What is checked, per chain (docs/audit.md has the full list):

* checkpoints (:mod:`audit.verify.checkpoints`): canonical payload, SM2 signature by a trusted
  key, contiguous numbering, ``prev`` links, monotonic time and size, no gap longer than the
  tolerance between two checkpoints of a running writer, nothing but an open/recovery
  checkpoint after a close;
* records (:mod:`audit.verify.records`): contiguous sequence numbers from genesis (or from the
  last signed purge), ``h[seq] = SM3(h[seq-1] || body)`` equal to the stored hash, the head at
  every checkpoint's ``tree_size`` equal to the signed head, no checkpoint beyond the last
  record (truncation), indexed columns equal to the body;
* the unsigned tail after the last checkpoint is younger than the tolerance and (unless
  ``now_ms`` is ``None``) the last checkpoint of a running writer is recent
  (:mod:`audit.verify.chains`, which runs all of it: :func:`verify_store`);
* anchors kept off the host (:mod:`audit.verify.anchors`) and purges with their archives
  (:mod:`audit.verify.purges`).

A crash is not tampering: the writer that reopens a crashed chain re-verifies its tail and
seals it with a ``recovery`` checkpoint, which the report lists as a recovery. The result types
are in :mod:`audit.verify.report`.
"""

from audit.verify.anchors import gone_chain_report, missing_store_report, split_anchors
from audit.verify.chains import verify_store
from audit.verify.records import MAX_RECORD_PROBLEMS, verify_archive_records
from audit.verify.report import DAY_MS, ChainReport, Problem, ProblemKind, VerifyReport, default_tolerance_ms

__all__ = [
    "DAY_MS",
    "MAX_RECORD_PROBLEMS",
    "ChainReport",
    "Problem",
    "ProblemKind",
    "VerifyReport",
    "default_tolerance_ms",
    "gone_chain_report",
    "missing_store_report",
    "split_anchors",
    "verify_archive_records",
    "verify_store",
]
