module hybridmq.local/k8sbin/etcd

go 1.24

require go.etcd.io/etcd/server/v3 v3.6.6
