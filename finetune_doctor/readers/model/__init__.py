"""Reading a model's architecture: config.json files, caches, the catalog, the hub and the meta-device build.

Data flow inside: ``configjson`` (one file, validated) → ``generic`` (field names of every family onto
`ModelArch`, vision towers from ``vision``) ; ``locate`` finds the file (local, ``--model-config``, HF /
ModelScope / openMind caches), ``catalog`` the bundled fallback, ``hub`` the opt-in JSON download, ``meta`` the
exact transformers build; ``byname`` what a name may decide when no config.json is at hand (family, size class,
MoE-ness, narrowed by the template), ``weights`` the stored dtype from a safetensors header.
``finetune_doctor.readers.model.modelcfg.load_arch`` runs the search order.
"""
