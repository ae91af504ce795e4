"""A real API server for tests and benches: kube-apiserver + etcd built from the Go module proxy
(build_apiserver.sh), started on loopback, plus the small stand-ins for what a cluster adds
around it (a kubelet that starts bound pods, KAI's binder) and a fault-injecting proxy."""
