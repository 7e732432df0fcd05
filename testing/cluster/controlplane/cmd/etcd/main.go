// Command etcd is the etcd server, built from the same go.etcd.io/etcd/server/v3
// release that k8s.io/kubernetes v1.37.2 depends on.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
