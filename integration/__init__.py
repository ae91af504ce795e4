"""kai-cp in a cluster: list+watch cache, the scheduling loop, applying decisions (BindRequests,
bindings, evictions), status, leader election, metrics and the snapshot endpoint.

Imports flow models <- kai_cp <- integration; nothing in kai_cp imports this package."""
