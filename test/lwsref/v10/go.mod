module lws-rollout.local/lwsref10

go 1.26.0

require sigs.k8s.io/lws v0.10.0
