"""hybridmq_demo: `make demo` — watch a HybridMQ failover on the local Kubernetes cluster.

    python -m hybridmq_demo [--headless] [--dir .localcluster] [--keep]

Brings the local control plane up (``localcluster``), ``helm install``s the chart, applies a sample
``BrokerCluster``, runs producers and consumers through ``hybridmq.client``, deletes the primary MM
pod of a fixed partition, shows the failover as it happens (pods, partitions, rates and a timeline
relative to the kill), audits the run with ``hybridmq.spark.audit`` and tears everything down. The
last line printed is the verdict: ``verdict=PASS ...`` or ``verdict=FAIL <reason>``; the exit status
is 0 only on PASS.

Modules, one job each: ``cluster`` (local cluster up/down), ``install`` (chart + BrokerCluster),
``watch`` (Kubernetes watches into ``state``), ``load`` (producers, consumers, send logs),
``timeline`` (the failover story), ``view`` (rich Live or headless lines), ``audit_step`` (the Spark
audit), ``main`` (the steps in order).
"""
