"""The runtime simulator: what upstream's Runtime controller and runtimed do, for any API server.

``decide`` holds every decision (which pods a fleet wants, what status a pod or a Run gets next
and when) as functions of plain JSON values and the time, with no I/O and no clock. Two drivers
carry them out: the dev cluster's in-process one (``kruntimes.devcluster.simulator``, through its
object service) and the API client here (``client``, over HTTP, for the dev cluster or a real
kube-apiserver), which ``kruntimes runtime-sim`` runs.
"""
