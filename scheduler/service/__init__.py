"""The running scheduler: queue, scheduling loop, binding, leader lease, probes, metrics, shutdown.

Data flows one way: watch events -> ClusterState snapshot -> core decision -> store reservation
-> bind. Nothing here makes a scheduling decision; the core does.
"""
