"""What the operator of `nri-sla run` sees and touches: Prometheus metrics (`metrics`, the
registry of series; `metrics_http`, its bounded threaded HTTP server), the probe listener
(`health`), the status socket `nri-sla status` reads (`statussocket`), the `nri_sla` log
set-up (`logsetup`), the rate-limited line for peers' connection errors (`peerlog`) and
the SIGHUP reload of the node config (`config_reload`).

Kept empty: importing one of them loads nothing else.
"""
