"""What the operator of `nri-sla run` sees: Prometheus metrics (`metrics`, the registry of
series and the null sinks; `metrics_http`, their bounded threaded HTTP server;
`listenaddress`, the address it and the probe listener parse), the probe listener
(`health`), the status socket `nri-sla status` reads (`statussocket`), the `nri_sla` log
set-up and its structured lines (`logsetup`), the loggers of the modules an OCI hook's
cold run loads, which import `logging` only to log a line (`corelog`), the
rate-limited line for peers' connection errors (`peerlog`), and Kubernetes Events about
pods: the objects and the kubelet's correlation of them (`kube_events`), sent by a
background thread (`kube_sender`).

A low layer: these modules know no SLA, plan or node (the plugin hands them what they
show), so any package may log or count through them. Kept empty: importing one of them
loads nothing else.
"""
