"""Trust layer: SM2/SM3/SM4, signing and verification of models and images, the trust store.

Modules, one job each: ``sm3``, ``sm4``, ``sm2`` (keys, signatures), ``dsse`` (envelopes),
``manifest`` (canonical file lists), ``model_signing``, ``image_signing``, ``trust_store``, ``demo``
(the embedded default's local key), ``cli`` (``xinserve keys|sign|verify``). ``trust`` imports nothing
else of xinserve's. Specification: docs/signing.md.
"""
