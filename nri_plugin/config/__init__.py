"""The node policy file, ``/etc/nri-sla/config.yaml``, as a frozen `NodeConfig`
(docs/config.md): its values and their defaults (`values`), what each key accepts and the
table of keys (`schema`), reading and checking a file (`loader`: `load_config`,
`ConfigError`).
"""

# Re-exports resolved on first use: the OCI hook's cold run passes through this package.
from nri_plugin.lazyexports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(globals(), {
    "values": ("NodeConfig", "Permissions", "Cap", "PodCaps", "CpuConfig", "GpuConfig",
               "DevicePluginConfig", "CgroupConfig", "NriConfig", "HookConfig",
               "MetricsConfig", "WatchConfig", "StatusConfig", "EventsConfig", "LogConfig",
               "DEFAULT_STATE_DIR", "PERMISSIONS", "DEFAULT_GRANT_CDI_KINDS",
               "DEFAULT_GRANT_RESOURCES", "DEFAULT_PODRESOURCES_SOCKET"),
    "schema": ("TOP_KEYS", "KEY_ATTRIBUTES", "REMOVED_KEYS", "GPU_INJECTIONS", "MIG_STRATEGIES",
               "GPU_INVENTORIES", "CGROUP_DRIVERS", "MAX_LISTED", "LOG_FORMATS",
               "LOG_LEVELS"),
    "loader": ("ConfigError", "check_config", "parse_config", "read_config_text",
               "load_config", "DEFAULT_PATH", "MAX_CONFIG_BYTES"),
})
