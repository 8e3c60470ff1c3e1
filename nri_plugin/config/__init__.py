"""The node policy file, ``/etc/nri-sla/config.yaml``, as a frozen `NodeConfig`
(docs/config.md): its values, their defaults and each key's declaration (`values`), what
each key accepts (`convert`), the tables of keys derived from the declarations (`schema`),
reading and checking a file (`loader`: `load_config`, `ConfigError`), the docs' table of
keys (`doctable`).
"""

# Re-exports resolved on first use: the OCI hook's cold run passes through this package.
from nri_plugin.lazyexports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(globals(), {
    "cap": ("Cap",),
    "values": ("NodeConfig", "Permissions", "PodCaps", "CpuConfig", "GpuConfig",
               "DevicePluginConfig", "CgroupConfig", "NriConfig", "HookConfig",
               "MetricsConfig", "WatchConfig", "StatusConfig", "EventsConfig", "LogConfig",
               "DEFAULT_STATE_DIR", "PERMISSIONS", "DEFAULT_GRANT_CDI_KINDS",
               "DEFAULT_GRANT_RESOURCES", "DEFAULT_PODRESOURCES_SOCKET"),
    "convert": ("GPU_INJECTIONS", "MIG_STRATEGIES", "GPU_INVENTORIES", "CGROUP_DRIVERS",
                "MAX_LISTED", "LOG_FORMATS", "LOG_LEVELS"),
    "schema": ("TOP_KEYS", "KEY_ATTRIBUTES", "KEYS", "LIVE_KEYS", "REMOVED_KEYS", "key_value",
               "file_value"),
    "loader": ("ConfigError", "check_config", "parse_config", "read_config_text",
               "load_config", "DEFAULT_PATH", "MAX_CONFIG_BYTES"),
})
