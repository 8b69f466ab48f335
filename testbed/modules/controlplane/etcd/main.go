// Command etcd is a thin wrapper that builds the upstream etcd server
// (go.etcd.io/etcd/server/v3) at the version pinned in go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
