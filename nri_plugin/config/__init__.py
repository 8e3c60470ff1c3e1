"""The node policy file, ``/etc/nri-sla/config.yaml``, as a frozen `NodeConfig`
(docs/config.md): its values, their defaults and each key's declaration (`values`), what
each key accepts (`convert`), the tables of keys derived from the declarations (`schema`),
reading and checking a file (`loader`: `load_config`, `ConfigError`), the docs' table of
keys (`doctable`). The package imports nothing: the OCI hook's cold run passes through it.
"""
