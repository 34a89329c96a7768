"""TEE hooks: evidence providers, evidence parsers, the KBS client and encrypted models.

Modules, one job each: ``evidence`` (the :class:`Evidence` record and the
:class:`EvidenceProvider` protocol), ``configfs_tsm`` (Linux configfs-tsm reports: TDX, SEV-SNP,
Arm CCA), ``csv_guest`` (Hygon CSV ``/dev/csv-guest``), ``none_provider`` and ``recorded``
(no TEE; replayed evidence for demos and tests), ``providers`` (choose one from settings),
``parsers`` (read report data and measurements out of recorded evidence, never verify it),
``binding`` (what report data binds: a KBS key, a TLS channel), ``kbs_client`` (the Trustee KBS
protocol), ``model_encryption`` (SM4-GCM encrypted model directories), ``private_dir`` (tmpfs
directories for decrypted models), ``config`` (the ``tee`` settings). Specification: docs/tee.md.
"""
